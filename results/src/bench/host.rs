//! The host a benchmark ran on, recorded in its report: a launch-bound run measures the
//! host's CPU as much as the GPU, so figures of two hosts are compared only with that
//! said ([`differences`]).

use serde::{Deserialize, Serialize};

/// Where a benchmark ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// Host name.
    pub hostname: Option<String>,
    /// Kernel release.
    pub kernel: Option<String>,
    /// CPU model, as `/proc/cpuinfo` names it.
    pub cpu_model: Option<String>,
    /// CPUs online on the host.
    pub cpus_online: Option<usize>,
    /// CPUs this process may run on (its affinity: a Slurm job's allocation).
    pub cpus_usable: Option<usize>,
    /// GPU model, from NVML.
    pub gpu: Option<String>,
    /// GPU UUID, from NVML.
    pub gpu_uuid: Option<String>,
    /// NVIDIA driver version, from NVML.
    pub driver: Option<String>,
}

impl Host {
    /// This host, with the GPU's name, UUID and driver where NVML gave them.
    pub fn here(gpu: Option<(&str, &str)>, driver: Option<&str>) -> Host {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
        Host {
            hostname: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
            cpu_model: cpu_model(&cpuinfo),
            cpus_online: Some(cpu_count(&cpuinfo)).filter(|&n| n > 0),
            cpus_usable: std::thread::available_parallelism().ok().map(|n| n.get()),
            gpu: gpu.map(|g| g.0.to_string()),
            gpu_uuid: gpu.map(|g| g.1.to_string()),
            driver: driver.map(str::to_string),
        }
    }

    /// One line: `node7: Intel Xeon … (16 of 32 CPUs), NVIDIA H200, driver 580.1`.
    pub fn describe(&self) -> String {
        let unknown = || "?".to_string();
        let cpus = match (self.cpus_usable, self.cpus_online) {
            (Some(u), Some(o)) if u != o => format!("{u} of {o} CPUs"),
            (Some(u), _) => format!("{u} CPUs"),
            (None, Some(o)) => format!("{o} CPUs"),
            (None, None) => "? CPUs".into(),
        };
        let mut s = format!(
            "{}: {} ({cpus})",
            self.hostname.clone().unwrap_or_else(unknown),
            self.cpu_model.clone().unwrap_or_else(|| "CPU ?".into())
        );
        if let Some(g) = &self.gpu {
            s.push_str(&format!(", {g}"));
        }
        if let Some(d) = &self.driver {
            s.push_str(&format!(", driver {d}"));
        }
        s
    }
}

/// The CPU model of a `/proc/cpuinfo` text: `model name` (x86), else `Model` or
/// `Hardware` (ARM).
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    for key in ["model name", "Model", "Hardware", "cpu model"] {
        let found = cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.split_whitespace().collect::<Vec<_>>().join(" "))
        });
        if let Some(v) = found.filter(|v| !v.is_empty()) {
            return Some(v);
        }
    }
    None
}

/// The number of `processor` entries of a `/proc/cpuinfo` text.
pub fn cpu_count(cpuinfo: &str) -> usize {
    cpuinfo
        .lines()
        .filter(|l| {
            l.split_once(':')
                .is_some_and(|(k, _)| k.trim() == "processor")
        })
        .count()
}

/// What differs between two hosts that bears on throughput, one phrase each (`CPU
/// "A" vs "B"`); empty when nothing known differs. Facts one side lacks are not
/// differences.
pub fn differences(old: &Host, new: &Host) -> Vec<String> {
    let mut out = Vec::new();
    let mut cmp = |what: &str, a: &Option<String>, b: &Option<String>| {
        if let (Some(a), Some(b)) = (a, b) {
            if a != b {
                out.push(format!("{what} {a:?} vs {b:?}"));
            }
        }
    };
    cmp("host", &old.hostname, &new.hostname);
    cmp("CPU", &old.cpu_model, &new.cpu_model);
    let n = |v: Option<usize>| v.map(|v| v.to_string());
    cmp("usable CPUs", &n(old.cpus_usable), &n(new.cpus_usable));
    cmp("GPU", &old.gpu, &new.gpu);
    cmp("GPU UUID", &old.gpu_uuid, &new.gpu_uuid);
    cmp("driver", &old.driver, &new.driver);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)   Processor @ 2.1GHz\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R)   Processor @ 2.1GHz\n";
    const ARM: &str =
        "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd4f\n\nHardware\t: NVIDIA Grace\n";

    #[test]
    fn cpuinfo_is_read_on_x86_and_arm() {
        assert_eq!(
            cpu_model(X86).as_deref(),
            Some("Intel(R) Xeon(R) Processor @ 2.1GHz")
        );
        assert_eq!(cpu_count(X86), 2);
        assert_eq!(cpu_model(ARM).as_deref(), Some("NVIDIA Grace"));
        assert_eq!(cpu_count(ARM), 1);
        assert_eq!(cpu_model(""), None);
    }

    #[test]
    fn hosts_differ_only_in_what_both_know() {
        let a = Host {
            hostname: Some("n1".into()),
            cpu_model: Some("Xeon".into()),
            cpus_usable: Some(16),
            gpu: Some("NVIDIA H200".into()),
            driver: Some("580.1".into()),
            ..Host::default()
        };
        assert!(differences(&a, &a).is_empty());
        let b = Host {
            hostname: Some("n2".into()),
            cpu_model: Some("EPYC".into()),
            cpus_usable: Some(32),
            driver: None,
            ..a.clone()
        };
        let d = differences(&a, &b);
        assert_eq!(
            d,
            [
                "host \"n1\" vs \"n2\"",
                "CPU \"Xeon\" vs \"EPYC\"",
                "usable CPUs \"16\" vs \"32\""
            ]
        );
        assert!(differences(&Host::default(), &b).is_empty());
        assert_eq!(
            a.describe(),
            "n1: Xeon (16 CPUs), NVIDIA H200, driver 580.1"
        );
        let here = Host::here(None, None);
        assert!(here.cpus_usable.is_some_and(|n| n >= 1));
    }
}
