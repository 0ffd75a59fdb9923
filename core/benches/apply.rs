//! apply + restore of `mig:1g` (7 instances) against the fake libnvidia-ml
//! (target: under 50 ms; the figure includes the fake's own file locking and JSON I/O on
//! every NVML call, so colloc's own share is smaller).
//! Run: `cargo bench -p colloc-core --bench apply`.

use colloc_core::config::Config;
use colloc_core::gpu::GpuControl;
use colloc_core::nvml::NvmlGpus;
use colloc_core::reconfig::{self, JobSpec, Outcome};
use criterion::{criterion_group, criterion_main, Criterion};

fn apply_restore(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    std::env::set_var("COLLOC_FAKE_NVML_STATE", tmp.path().join("state.json"));
    std::env::set_var("COLLOC_FAKE_NVML_GPUS", "A100-40GB");
    let cfg = Config {
        state_dir: tmp.path().join("state"),
        run_dir: tmp.path().join("run"),
        ..Config::default()
    };
    let gpus = NvmlGpus::open(&fake_nvml::locate::library().display().to_string()).unwrap();
    let spec = JobSpec {
        job: 7,
        uid: 0,
        gid: 0,
        gpus: vec![0],
        mode: "mig:1g".parse().unwrap(),
    };
    // The fake's share: the same NVML calls (list, 7 creations, list, 7 destructions)
    // without colloc's checks, journal and locks.
    c.bench_function("fake NVML alone: the same create/destroy calls", |b| {
        let cat = gpus.catalog(0).unwrap();
        let plan = cat
            .plan(&colloc_core::mode::MigRequest::Fill(
                colloc_core::mode::ProfileSel::Short(1),
            ))
            .unwrap();
        b.iter(|| {
            let _ = gpus.gpus().unwrap();
            let _ = gpus.processes(0).unwrap();
            let _ = gpus.instances(0).unwrap();
            let made: Vec<_> = plan
                .iter()
                .map(|p| gpus.create_instance(0, p.profile_id, p.placement).unwrap())
                .collect();
            let _ = gpus.instances(0).unwrap();
            let _ = gpus.processes(0).unwrap();
            for i in made {
                gpus.destroy_instance(0, i.gi_id).unwrap();
            }
        })
    });
    c.bench_function("apply+restore mig:1g (7 instances, fake NVML)", |b| {
        b.iter(|| {
            let out = reconfig::prolog(&cfg, &gpus, &spec).unwrap();
            assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
            let r = reconfig::restore(&cfg, Some(&gpus), 7).unwrap();
            assert_eq!(r.destroyed, 7);
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = apply_restore
}
criterion_main!(benches);
