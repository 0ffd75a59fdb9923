//! `NvmlGpus` on a real NVIDIA GPU (the lent H100 or H200), read-only.
//!
//! Run there with `cargo test -p colloc-core --test nvml_gpu -- --ignored` (or the built
//! test binary with `--ignored`). `COLLOC_NVML_LIBRARY` names the library (default
//! `libnvidia-ml.so.1`, then `/usr/local/nvidia/lib64/libnvidia-ml.so.1`).
//!
//! These tests never change the card: they reach NVML only through [`ReadOnly`], whose
//! create, destroy and MIG-mode methods refuse before any NVML call.

use colloc_core::gpu::{GpuControl, GpuError, GpuResult, Instance, MigMode, MigModeChange};
use colloc_core::mig::{self, Catalog, Placement};
use colloc_core::nvml::NvmlGpus;

/// The GPU layer with every mutating call refused.
struct ReadOnly(NvmlGpus);

fn refused(what: &'static str) -> GpuError {
    GpuError::Call {
        call: what,
        gpu: "-".into(),
        message: "refused: tests on a real GPU are read-only".into(),
        code: 4, // NVML_ERROR_NO_PERMISSION
    }
}

impl GpuControl for ReadOnly {
    fn gpus(&self) -> GpuResult<Vec<colloc_core::gpu::GpuInfo>> {
        self.0.gpus()
    }
    fn catalog(&self, gpu: u32) -> GpuResult<Catalog> {
        self.0.catalog(gpu)
    }
    fn instances(&self, gpu: u32) -> GpuResult<Vec<Instance>> {
        self.0.instances(gpu)
    }
    fn processes(&self, gpu: u32) -> GpuResult<Vec<colloc_core::gpu::GpuProcess>> {
        self.0.processes(gpu)
    }
    fn create_instance(&self, _: u32, _: u32, _: Placement) -> GpuResult<Instance> {
        Err(refused("create_instance"))
    }
    fn destroy_instance(&self, _: u32, _: u32) -> GpuResult<()> {
        Err(refused("destroy_instance"))
    }
    fn set_mig_mode(&self, _: u32, _: bool) -> GpuResult<MigModeChange> {
        Err(refused("set_mig_mode"))
    }
}

fn real_gpus() -> ReadOnly {
    let candidates = match std::env::var("COLLOC_NVML_LIBRARY") {
        Ok(l) => vec![l],
        Err(_) => vec![
            "libnvidia-ml.so.1".to_string(),
            "/usr/local/nvidia/lib64/libnvidia-ml.so.1".to_string(),
        ],
    };
    let mut errors = Vec::new();
    for lib in &candidates {
        match NvmlGpus::open(lib) {
            Ok(g) => {
                let version = g.driver_version().expect("driver version");
                assert!(
                    !version.contains("fake"),
                    "{lib} is the fake NVML ({version})"
                );
                eprintln!("NVML from {lib}, driver {version}");
                return ReadOnly(g);
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    panic!("no NVML library: {}", errors.join("; "));
}

/// The lent cards and their memory as NVML reports it (MiB): an H200 (shared/gpu-facts.md)
/// or an H100 80GB HBM3 (85,520,809,984 bytes, driver 580).
const LENT: &[(&str, u64)] = &[("NVIDIA H200", 143771), ("NVIDIA H100 80GB HBM3", 81559)];

/// Index and name of the lent card.
fn lent(gpus: &ReadOnly) -> (u32, &'static str) {
    let list = gpus.gpus().expect("gpus");
    LENT.iter()
        .find_map(|(name, _)| {
            list.iter()
                .find(|g| g.name == *name)
                .map(|g| (g.index, *name))
        })
        .unwrap_or_else(|| panic!("one of the lent GPUs ({LENT:?}); NVML lists {list:?}"))
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn lists_the_gpus() {
    let gpus = real_gpus();
    let list = gpus.gpus().expect("gpus");
    assert!(!list.is_empty());
    for g in &list {
        eprintln!("{g:?}");
        assert!(g.uuid.starts_with("GPU-"), "{}", g.uuid);
        assert!(g.memory_total > 0);
    }
    let (i, name) = lent(&gpus);
    let g = &list[i as usize];
    let mib = LENT.iter().find(|(n, _)| *n == name).map(|(_, m)| *m);
    assert_eq!(Some(g.memory_total / (1024 * 1024)), mib, "{name}");
    assert!(g.mig_mode.is_some(), "an {name} supports MIG");
}

/// index, id, name, slices, instances, MiB, SMs, placements.
type Row<'a> = (u32, u32, &'a str, u32, u32, u64, u32, Vec<Placement>);

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_catalog_matches_the_built_in_one_and_on_an_h200_what_nvml_reported_before() {
    let gpus = real_gpus();
    let (i, name) = lent(&gpus);
    let cat = gpus.catalog(i).expect("catalog");
    eprintln!("{cat:#?}");
    // The built-in table agrees on what planning uses.
    let builtin = mig::builtin_catalog(name).expect("a built-in table");
    for p in &builtin.profiles {
        let q = cat.by_id(p.id).expect("same ids");
        assert_eq!(
            (&q.name, q.slices, &q.placements),
            (&p.name, p.slices, &p.placements)
        );
    }
    if name != "NVIDIA H200" {
        return;
    }
    let at = |starts: &[u32], size: u32| -> Vec<Placement> {
        starts
            .iter()
            .map(|&start| Placement { start, size })
            .collect()
    };
    // shared/gpu-facts.md: index, id, name, slices, instances, MiB, SMs, placements.
    let want: Vec<Row> = vec![
        (
            0,
            19,
            "1g.18gb",
            1,
            7,
            16384,
            16,
            at(&[0, 1, 2, 3, 4, 5, 6], 1),
        ),
        (1, 14, "2g.35gb", 2, 3, 33280, 32, at(&[0, 2, 4], 2)),
        (2, 9, "3g.71gb", 3, 2, 71424, 60, at(&[0, 4], 4)),
        (3, 5, "4g.71gb", 4, 1, 71424, 64, at(&[0], 4)),
        (4, 0, "7g.141gb", 7, 1, 143360, 132, at(&[0], 8)),
        (
            7,
            20,
            "1g.18gb+me",
            1,
            1,
            16384,
            16,
            at(&[0, 1, 2, 3, 4, 5, 6], 1),
        ),
        (9, 15, "1g.35gb", 1, 4, 33280, 26, at(&[0, 2, 4, 6], 2)),
    ];
    // gpu-facts.md recorded indexes 0-14; what the card lists past them (R580's
    // all-media profiles 15 and 16) is printed, and recorded by the nvml-probe run.
    for p in cat.profiles.iter().filter(|p| p.nvml_index >= 15) {
        eprintln!("also listed: {p:?}");
    }
    let got: Vec<_> = cat
        .profiles
        .iter()
        .filter(|p| p.nvml_index < 15)
        .map(|p| {
            (
                p.nvml_index,
                p.id,
                p.name.as_str(),
                p.slices,
                p.max_instances,
                p.memory_mib,
                p.sms,
                p.placements.clone(),
            )
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn reads_instances_processes_and_counters() {
    let gpus = real_gpus();
    let (i, _) = lent(&gpus);
    let mode = gpus.gpus().expect("gpus")[i as usize].mig_mode;
    let instances = gpus.instances(i).expect("instances");
    if !matches!(mode, Some(MigMode { current: true, .. })) {
        assert!(instances.is_empty(), "MIG off has no instances");
    }
    for p in gpus.processes(i).expect("processes") {
        eprintln!("{p:?}");
        assert!(p.pid > 0);
    }
    let dev = gpus.0.nvml().device_by_index(i).expect("device");
    let e1 = dev.total_energy_consumption().expect("energy");
    let mem = dev.memory_info().expect("memory");
    assert!(mem.used <= mem.total);
    let e2 = dev.total_energy_consumption().expect("energy");
    assert!(e2 >= e1, "energy counter goes forward");
    eprintln!(
        "MIG mode {mode:?}; MIG device slots {:?}",
        dev.mig_device_count()
    );
    if !matches!(mode, Some(MigMode { current: true, .. })) {
        let u = dev.utilization_rates().expect("utilization with MIG off");
        assert!(u.gpu <= 100);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn changes_are_refused_before_reaching_the_card() {
    let gpus = real_gpus();
    let (i, _) = lent(&gpus);
    let before = gpus.gpus().expect("gpus")[i as usize].mig_mode;
    for err in [
        gpus.create_instance(i, 19, Placement { start: 0, size: 1 })
            .map(|_| ()),
        gpus.destroy_instance(i, 1),
        gpus.set_mig_mode(i, true).map(|_| ()),
    ] {
        let err = err.expect_err("refused");
        assert!(err.to_string().contains("read-only"), "{err}");
    }
    assert_eq!(gpus.gpus().expect("gpus")[i as usize].mig_mode, before);
}
