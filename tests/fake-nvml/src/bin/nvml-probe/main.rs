//! `nvml-probe`: record, as one JSON document, what a libnvidia-ml answers to every query
//! colloc makes about MIG: GPU instance profile info for every profile index (both call
//! versions), placements, remaining capacity, instance listings, MIG mode, the MIG
//! device table, processes, with each call's return code.
//!
//! It only reads: it resolves nothing but the read-only functions listed in `nvml.rs`
//! (no Set/Create/Destroy symbol is looked up at all). Run it as root and as a normal
//! user on a real GPU (the driver decides some answers by privilege); the fake's tests
//! hold `libfake_nvml.so` to the recorded answers (`tests/fake-nvml/fixtures/`).
//!
//! ```text
//! nvml-probe [--library PATH] [--out FILE] [--list-symbols]
//! ```

#[macro_use]
mod nvml;

use std::ffi::{c_char, c_uint, CString};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use nvml::{code_name, euid, zeroed, Api, Ret, SYMBOLS};
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t, nvmlComputeInstance_t,
    nvmlDevice_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t, nvmlGpuInstanceProfileInfo_t,
    nvmlGpuInstanceProfileInfo_v2_t, nvmlGpuInstance_t, nvmlMemory_t, nvmlProcessInfo_t,
};
use serde_json::{json, Map, Value};

/// GPU instance profile indexes asked about: well past every driver's
/// `NVML_GPU_INSTANCE_PROFILE_COUNT` (17 in NVML API 13).
const GI_PROFILE_INDEXES: u32 = 32;
/// Compute instance profile indexes asked about per GPU instance.
const CI_PROFILE_INDEXES: u32 = 16;
/// GPU instance ids asked about by id (7g→0 … 1g at slot 7→14).
const GI_IDS: u32 = 16;
const MIB: u64 = 1024 * 1024;

#[derive(Parser)]
#[command(
    name = "nvml-probe",
    about = "Record what libnvidia-ml answers to colloc's MIG queries, as JSON (reads only)"
)]
struct Cli {
    /// The library (default: libnvidia-ml.so.1, then /usr/local/nvidia/lib64/…).
    #[arg(long)]
    library: Option<String>,
    /// Write the JSON here instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the NVML functions the probe resolves (all of them read-only) and exit.
    #[arg(long)]
    list_symbols: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.list_symbols {
        println!("{}", SYMBOLS.join("\n"));
        return ExitCode::SUCCESS;
    }
    let candidates = match &cli.library {
        Some(l) => vec![l.clone()],
        None => vec![
            "libnvidia-ml.so.1".to_string(),
            "/usr/local/nvidia/lib64/libnvidia-ml.so.1".to_string(),
        ],
    };
    let mut errors = Vec::new();
    let Some((library, api)) = candidates.iter().find_map(|l| match Api::load(l) {
        Ok(a) => Some((l.clone(), a)),
        Err(e) => {
            errors.push(e);
            None
        }
    }) else {
        eprintln!("Error: cannot load NVML: {}", errors.join("; "));
        return ExitCode::from(1);
    };
    let doc = probe(&api, &library);
    let text = match serde_json::to_string_pretty(&doc) {
        Ok(t) => t + "\n",
        Err(e) => {
            eprintln!("Error: cannot encode the record: {e}");
            return ExitCode::from(1);
        }
    };
    let written = match &cli.out {
        Some(p) => std::fs::write(p, text).map_err(|e| format!("{}: {e}", p.display())),
        None => {
            use std::io::Write;
            std::io::stdout()
                .write_all(text.as_bytes())
                .map_err(|e| e.to_string())
        }
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: cannot write the record: {e}");
            ExitCode::from(1)
        }
    }
}

fn ret(r: Ret) -> Value {
    Value::String(code_name(r))
}

/// The NUL-terminated string NVML wrote into a (zeroed) buffer.
fn c_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn string_query(r: Ret, buf: &[c_char]) -> Value {
    let mut v = json!({"ret": ret(r)});
    if r == 0 {
        v["value"] = json!(c_string(buf));
    }
    v
}

fn probe(api: &Api, library: &str) -> Value {
    let euid = euid();
    let init = call!(api, nvmlInit_v2());
    let mut doc = json!({
        "schema": 1,
        "probe": "nvml-probe",
        "euid": euid,
        "library": library,
        "init": ret(init),
    });
    if init != 0 {
        return doc;
    }
    let mut buf = [0 as c_char; 96];
    let r = call!(
        api,
        nvmlSystemGetDriverVersion(buf.as_mut_ptr(), buf.len() as c_uint)
    );
    doc["driver_version"] = string_query(r, &buf);
    let mut buf = [0 as c_char; 96];
    let r = call!(
        api,
        nvmlSystemGetNVMLVersion(buf.as_mut_ptr(), buf.len() as c_uint)
    );
    doc["nvml_version"] = string_query(r, &buf);
    let mut count: c_uint = 0;
    let r = call!(api, nvmlDeviceGetCount_v2(&mut count));
    doc["device_count"] = json!({"ret": ret(r), "value": count});
    let mut devices = Vec::new();
    for index in 0..if r == 0 { count } else { 0 } {
        devices.push(probe_device(api, index));
    }
    doc["devices"] = Value::Array(devices);
    let r = call!(api, nvmlShutdown());
    doc["shutdown"] = ret(r);
    doc
}

fn probe_device(api: &Api, index: u32) -> Value {
    let mut dev: nvmlDevice_t = std::ptr::null_mut();
    let r = call!(api, nvmlDeviceGetHandleByIndex_v2(index, &mut dev));
    let mut d = json!({"index": index, "handle": ret(r)});
    if r != 0 {
        return d;
    }
    let mut buf = [0 as c_char; 96];
    let r = call!(
        api,
        nvmlDeviceGetName(dev, buf.as_mut_ptr(), buf.len() as c_uint)
    );
    d["name"] = string_query(r, &buf);
    let mut buf = [0 as c_char; 96];
    let r = call!(
        api,
        nvmlDeviceGetUUID(dev, buf.as_mut_ptr(), buf.len() as c_uint)
    );
    d["uuid"] = string_query(r, &buf);
    if r == 0 {
        // The lookup colloc's MIG UUIDs go through, tried on the GPU's own UUID.
        let uuid = CString::new(c_string(&buf)).unwrap_or_default();
        let mut back: nvmlDevice_t = std::ptr::null_mut();
        let r = call!(api, nvmlDeviceGetHandleByUUID(uuid.as_ptr(), &mut back));
        d["handle_by_uuid"] = json!({"ret": ret(r), "same": r == 0 && back == dev});
    }
    let mut mem: nvmlMemory_t = zeroed();
    let r = call!(api, nvmlDeviceGetMemoryInfo(dev, &mut mem));
    d["memory_total_mib"] = json!({"ret": ret(r), "value": (r == 0).then_some(mem.total / MIB)});
    let (mut cur, mut pend): (c_uint, c_uint) = (0, 0);
    let r = call!(api, nvmlDeviceGetMigMode(dev, &mut cur, &mut pend));
    d["mig_mode"] = if r == 0 {
        json!({"ret": ret(r), "current": cur, "pending": pend})
    } else {
        json!({"ret": ret(r)})
    };
    let mut max: c_uint = 0;
    let r = call!(api, nvmlDeviceGetMaxMigDeviceCount(dev, &mut max));
    d["max_mig_device_count"] = json!({"ret": ret(r), "value": max});
    let (profiles, ids) = gi_profiles(api, dev);
    d["gpu_instance_profiles"] = Value::Array(profiles);
    let mut placements = Map::new();
    let mut remaining = Map::new();
    let mut listed = Map::new();
    for &(id, instances) in &ids {
        placements.insert(id.to_string(), gi_placements(api, dev, id));
        let mut n: c_uint = 0;
        let r = call!(
            api,
            nvmlDeviceGetGpuInstanceRemainingCapacity(dev, id, &mut n)
        );
        remaining.insert(id.to_string(), json!({"ret": ret(r), "value": n}));
        listed.insert(id.to_string(), gpu_instances(api, dev, id, instances));
    }
    d["placements"] = Value::Object(placements);
    d["remaining_capacity"] = Value::Object(remaining);
    d["gpu_instances"] = Value::Object(listed);
    let by_id: Vec<Value> = (0..GI_IDS)
        .map(|id| {
            let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
            let r = call!(api, nvmlDeviceGetGpuInstanceById(dev, id, &mut gi));
            json!({"id": id, "ret": ret(r)})
        })
        .collect();
    d["gpu_instance_by_id"] = Value::Array(by_id);
    d["mig_devices"] = Value::Array(mig_devices(api, dev, max));
    let mut n: c_uint = 0;
    let r = call!(
        api,
        nvmlDeviceGetComputeRunningProcesses_v3(dev, &mut n, std::ptr::null_mut())
    );
    d["processes"] = json!({"ret": ret(r), "count": n});
    let mut energy = 0;
    let r = call!(api, nvmlDeviceGetTotalEnergyConsumption(dev, &mut energy));
    d["energy"] = json!({"ret": ret(r)});
    d
}

/// Both profile-info calls for every index; the profiles found as (id, instance count).
fn gi_profiles(api: &Api, dev: nvmlDevice_t) -> (Vec<Value>, Vec<(u32, u32)>) {
    let mut out = Vec::new();
    let mut ids = Vec::new();
    for index in 0..GI_PROFILE_INDEXES {
        let mut v1: nvmlGpuInstanceProfileInfo_t = zeroed();
        let r1 = call!(
            api,
            nvmlDeviceGetGpuInstanceProfileInfo(dev, index, &mut v1)
        );
        let mut p = json!({"index": index, "v1": {"ret": ret(r1)}});
        if r1 == 0 {
            p["v1"] = json!({
                "ret": ret(r1), "id": v1.id, "slices": v1.sliceCount,
                "instances": v1.instanceCount, "memory_mib": v1.memorySizeMB,
                "sms": v1.multiprocessorCount, "copy_engines": v1.copyEngineCount,
                "decoders": v1.decoderCount, "encoders": v1.encoderCount,
                "jpegs": v1.jpegCount, "ofas": v1.ofaCount, "p2p": v1.isP2pSupported,
            });
            ids.push((v1.id, v1.instanceCount));
        }
        let mut v2: nvmlGpuInstanceProfileInfo_v2_t = zeroed();
        // NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2).
        v2.version = std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as u32 | (2 << 24);
        let r2 = call!(
            api,
            nvmlDeviceGetGpuInstanceProfileInfoV(dev, index, &mut v2)
        );
        p["v2"] = if r2 == 0 {
            json!({"ret": ret(r2), "id": v2.id, "name": c_string(&v2.name)})
        } else {
            json!({"ret": ret(r2)})
        };
        if r2 == 0 && r1 != 0 {
            ids.push((v2.id, v2.instanceCount));
        }
        out.push(p);
    }
    (out, ids)
}

fn gi_placements(api: &Api, dev: nvmlDevice_t, id: u32) -> Value {
    let mut n: c_uint = 0;
    let r = call!(
        api,
        nvmlDeviceGetGpuInstancePossiblePlacements_v2(dev, id, std::ptr::null_mut(), &mut n)
    );
    if r != 0 {
        return json!({"ret": ret(r)});
    }
    let mut buf = vec![nvmlGpuInstancePlacement_t { start: 0, size: 0 }; n as usize];
    let r = if buf.is_empty() {
        0
    } else {
        call!(
            api,
            nvmlDeviceGetGpuInstancePossiblePlacements_v2(dev, id, buf.as_mut_ptr(), &mut n)
        )
    };
    buf.truncate(n as usize);
    let list: Vec<[u32; 2]> = buf.iter().map(|p| [p.start, p.size]).collect();
    json!({"ret": ret(r), "list": list})
}

fn gpu_instances(api: &Api, dev: nvmlDevice_t, id: u32, instances: u32) -> Value {
    // nvml.h: the buffer must hold the profile's instance count.
    let mut buf: Vec<nvmlGpuInstance_t> = vec![std::ptr::null_mut(); instances.max(1) as usize];
    let mut n = buf.len() as c_uint;
    let r = call!(
        api,
        nvmlDeviceGetGpuInstances(dev, id, buf.as_mut_ptr(), &mut n)
    );
    if r != 0 {
        return json!({"ret": ret(r)});
    }
    let gis: Vec<Value> = buf
        .iter()
        .take((n as usize).min(buf.len()))
        .map(|&gi| gpu_instance(api, gi))
        .collect();
    json!({"ret": ret(r), "instances": gis})
}

fn gpu_instance(api: &Api, gi: nvmlGpuInstance_t) -> Value {
    let mut info: nvmlGpuInstanceInfo_t = zeroed();
    let r = call!(api, nvmlGpuInstanceGetInfo(gi, &mut info));
    if r != 0 {
        return json!({"ret": ret(r)});
    }
    let mut cis = Vec::new();
    for index in 0..CI_PROFILE_INDEXES {
        let mut p: nvmlComputeInstanceProfileInfo_t = zeroed();
        let r = call!(
            api,
            nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, index, 0, &mut p)
        );
        if r != 0 {
            cis.push(json!({"profile_index": index, "ret": ret(r)}));
            continue;
        }
        let mut buf: Vec<nvmlComputeInstance_t> =
            vec![std::ptr::null_mut(); p.instanceCount.max(1) as usize];
        let mut n = buf.len() as c_uint;
        let r = call!(
            api,
            nvmlGpuInstanceGetComputeInstances(gi, p.id, buf.as_mut_ptr(), &mut n)
        );
        let ids: Vec<Value> = buf
            .iter()
            .take(if r == 0 {
                (n as usize).min(buf.len())
            } else {
                0
            })
            .map(|&ci| {
                let mut ci_info: nvmlComputeInstanceInfo_t = zeroed();
                let r = call!(api, nvmlComputeInstanceGetInfo_v2(ci, &mut ci_info));
                json!({"ret": ret(r), "id": ci_info.id})
            })
            .collect();
        cis.push(json!({
            "profile_index": index, "ret": "NVML_SUCCESS", "id": p.id,
            "slices": p.sliceCount, "instances": p.instanceCount,
            "listed": {"ret": ret(r), "compute_instances": ids},
        }));
    }
    json!({
        "ret": ret(r), "id": info.id, "profile_id": info.profileId,
        "placement": [info.placement.start, info.placement.size],
        "compute_instance_profiles": cis,
    })
}

fn mig_devices(api: &Api, dev: nvmlDevice_t, max: u32) -> Vec<Value> {
    // One index past the maximum too (also with MIG off), for the code it answers.
    (0..=max)
        .map(|index| {
            let mut mig: nvmlDevice_t = std::ptr::null_mut();
            let r = call!(
                api,
                nvmlDeviceGetMigDeviceHandleByIndex(dev, index, &mut mig)
            );
            let mut v = json!({"index": index, "ret": ret(r)});
            if r == 0 {
                let mut buf = [0 as c_char; 96];
                let r = call!(
                    api,
                    nvmlDeviceGetUUID(mig, buf.as_mut_ptr(), buf.len() as c_uint)
                );
                v["uuid"] = string_query(r, &buf);
                let (mut gi, mut ci): (c_uint, c_uint) = (0, 0);
                let r1 = call!(api, nvmlDeviceGetGpuInstanceId(mig, &mut gi));
                let r2 = call!(api, nvmlDeviceGetComputeInstanceId(mig, &mut ci));
                v["gi_id"] = json!({"ret": ret(r1), "value": gi});
                v["ci_id"] = json!({"ret": ret(r2), "value": ci});
                let mut n: c_uint = 0;
                let r = call!(
                    api,
                    nvmlDeviceGetComputeRunningProcesses_v3(
                        mig,
                        &mut n,
                        std::ptr::null_mut::<nvmlProcessInfo_t>()
                    )
                );
                v["processes"] = json!({"ret": ret(r), "count": n});
            }
            v
        })
        .collect()
}
