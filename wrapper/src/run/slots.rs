//! Where runs go: the slots of a colloc job (`COLLOC_MODE`, `COLLOC_DEVICES`,
//! `COLLOC_SLOTS`) or, outside one, of `--mode` and `-j` over `CUDA_VISIBLE_DEVICES`.
//! A pure function of its inputs, so every case is unit-tested.

use colloc_core::mode::Mode;

/// Most slots (runs at once) colloc keeps; more is a mistake, not a pack.
pub const MAX_SLOTS: usize = 4096;

/// Slots per GPU for `naive`/`mps` when neither `-j` nor `COLLOC_SLOTS` says.
pub const DEFAULT_PER_GPU: usize = 2;

/// Where the slot layout came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A colloc job: the plugin set the GPU up.
    Job,
    /// Outside a job: colloc sets the GPU up itself (MPS daemon for mps).
    Own,
    /// No GPU: plain process slots.
    Plain,
}

/// The slot layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The mode.
    pub mode: Mode,
    /// Where it came from.
    pub source: Source,
    /// The GPUs (CUDA device ids) slots spread over, one entry per GPU or MIG instance.
    pub devices: Vec<String>,
    /// Each slot's device (`None`: plain slot, CUDA_VISIBLE_DEVICES left alone).
    pub slots: Vec<Option<String>>,
}

/// Inputs to [`layout`].
#[derive(Debug, Default, Clone)]
pub struct Inputs {
    /// `COLLOC_MODE`.
    pub job_mode: Option<String>,
    /// `COLLOC_DEVICES`.
    pub job_devices: Option<String>,
    /// `COLLOC_SLOTS`.
    pub job_slots: Option<String>,
    /// `CUDA_VISIBLE_DEVICES`.
    pub visible: Option<String>,
    /// `--mode`.
    pub mode: Option<String>,
    /// `-j`.
    pub jobs: Option<usize>,
    /// GPUs NVML sees when `CUDA_VISIBLE_DEVICES` is unset (`None`: no NVML).
    pub nvml_gpus: Option<Vec<String>>,
    /// CPUs, the default slot count without GPUs.
    pub cpus: usize,
}

fn split(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Work out the slots. Errors are bad input (exit 2).
pub fn layout(i: &Inputs) -> Result<Layout, String> {
    let cli_mode = match &i.mode {
        Some(m) => Some(m.parse::<Mode>().map_err(|e| e.to_string())?),
        None => None,
    };
    if i.jobs == Some(0) {
        return Err("-j must be at least 1".into());
    }
    let job_mode = i
        .job_mode
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty());
    if let Some(jm) = job_mode.filter(|m| *m != "off") {
        return job_layout(i, jm, cli_mode);
    }
    own_layout(i, cli_mode)
}

/// Inside a colloc job (`COLLOC_MODE` is `jm`, not `off`): the job's mode and devices,
/// `-j`, else `COLLOC_SLOTS`, else the mode's default number of slots.
fn job_layout(i: &Inputs, jm: &str, cli_mode: Option<Mode>) -> Result<Layout, String> {
    let mode: Mode = jm
        .parse()
        .map_err(|e| format!("COLLOC_MODE from the job: {e}"))?;
    if let Some(cm) = &cli_mode {
        if *cm != mode {
            return Err(format!(
                "--mode {cm} differs from this job's mode {mode} (COLLOC_MODE); \
                 leave --mode out inside a colloc job or submit with --colloc={cm}"
            ));
        }
    }
    let devices = split(i.job_devices.as_deref().unwrap_or(""));
    if devices.is_empty() {
        return Err(format!(
            "COLLOC_MODE is {mode} but COLLOC_DEVICES is empty: the job has no colloc devices"
        ));
    }
    let job_slots = match i
        .job_slots
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        Some(s) => Some(
            s.parse::<usize>()
                .ok()
                .filter(|&n| n > 0 && n <= MAX_SLOTS)
                .ok_or_else(|| {
                    format!("COLLOC_SLOTS {s:?} is not a number from 1 to {MAX_SLOTS}")
                })?,
        ),
        None => None,
    };
    let n = match (&mode, i.jobs, job_slots) {
        (Mode::Mig(_), Some(j), _) if j > devices.len() => {
            return Err(format!(
                "-j {j} is more than the job's {} MIG instances: each run needs its own",
                devices.len()
            ))
        }
        (_, Some(j), _) => j,
        (_, None, Some(s)) => s,
        (Mode::Mig(_), None, None) => devices.len(),
        (_, None, None) => DEFAULT_PER_GPU * devices.len(),
    };
    Ok(Layout {
        slots: spread(&devices, n),
        mode,
        source: Source::Job,
        devices,
    })
}

/// Outside a colloc job: `--mode` (default naive) over `CUDA_VISIBLE_DEVICES`, else the
/// GPUs NVML sees; plain process slots without any GPU.
fn own_layout(i: &Inputs, cli_mode: Option<Mode>) -> Result<Layout, String> {
    let mode = cli_mode.unwrap_or(Mode::Naive);
    let visible = i.visible.as_deref().map(split);
    let devices = match (&visible, &i.nvml_gpus) {
        (Some(v), _) => v.clone(),
        (None, Some(g)) => g.clone(),
        (None, None) => Vec::new(),
    };
    let mig_devices = !devices.is_empty() && devices.iter().all(|d| d.starts_with("MIG-"));
    own_mode_fits(&mode, &devices, mig_devices)?;
    if devices.is_empty() {
        let n = i.jobs.unwrap_or(i.cpus.max(1));
        return Ok(Layout {
            mode,
            source: Source::Plain,
            devices,
            slots: vec![None; n],
        });
    }
    let n = match (&mode, i.jobs) {
        (_, Some(j)) => j,
        (_, None) if mig_devices => devices.len(),
        (Mode::Mps { clients: Some(c) }, None) => *c as usize * devices.len(),
        _ => DEFAULT_PER_GPU * devices.len(),
    };
    if mig_devices && n > devices.len() {
        return Err(format!(
            "-j {n} is more than the {} MIG instances in CUDA_VISIBLE_DEVICES",
            devices.len()
        ));
    }
    Ok(Layout {
        slots: spread(&devices, n),
        mode,
        source: Source::Own,
        devices,
    })
}

/// Whether `mode` can run outside a colloc job on `devices` (`mig_devices`: all of them
/// MIG instances): off, mig and mig+mps cannot, mps needs a whole GPU.
fn own_mode_fits(mode: &Mode, devices: &[String], mig_devices: bool) -> Result<(), String> {
    match mode {
        Mode::Off => Err("--mode off packs nothing; use naive or mps".into()),
        Mode::MigMps { .. } => Err(format!(
            "--mode {mode} works only inside a colloc job (sbatch --colloc={mode}), \
             whose prolog makes the MIG instances and starts an MPS daemon in each"
        )),
        Mode::Mig(_) => Err(
            "--mode mig works only inside a colloc job (sbatch --colloc=mig:...); \
             outside one, list existing MIG instances in CUDA_VISIBLE_DEVICES and use --mode naive"
                .into(),
        ),
        Mode::Mps { .. } if devices.is_empty() => Err(
            "--mode mps needs a GPU: none in CUDA_VISIBLE_DEVICES and none found through NVML"
                .into(),
        ),
        Mode::Mps { .. } if mig_devices => {
            Err("--mode mps on MIG instances is not supported; use --mode naive".into())
        }
        _ => Ok(()),
    }
}

/// `n` slots round-robin over the devices, so the lowest free slot balances the GPUs.
fn spread(devices: &[String], n: usize) -> Vec<Option<String>> {
    (0..n)
        .map(|k| Some(devices[k % devices.len()].clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs {
            cpus: 4,
            ..Inputs::default()
        }
    }

    #[test]
    fn no_gpu_gives_plain_slots() {
        let l = layout(&Inputs {
            jobs: Some(3),
            ..inputs()
        })
        .unwrap();
        assert_eq!(l.source, Source::Plain);
        assert_eq!(l.slots, vec![None, None, None]);
        assert_eq!(layout(&inputs()).unwrap().slots.len(), 4);
        assert!(layout(&Inputs {
            mode: Some("mps".into()),
            ..inputs()
        })
        .unwrap_err()
        .contains("needs a GPU"));
    }

    #[test]
    fn job_environment_wins() {
        let l = layout(&Inputs {
            job_mode: Some("mig:3g.20gbx2".into()),
            job_devices: Some("MIG-a,MIG-b".into()),
            job_slots: Some("2".into()),
            visible: Some("0".into()),
            ..inputs()
        })
        .unwrap();
        assert_eq!(l.source, Source::Job);
        assert_eq!(l.slots, vec![Some("MIG-a".into()), Some("MIG-b".into())]);
        let e = layout(&Inputs {
            job_mode: Some("mig:3g.20gbx2".into()),
            job_devices: Some("MIG-a,MIG-b".into()),
            jobs: Some(3),
            ..inputs()
        })
        .unwrap_err();
        assert!(e.contains("more than the job's 2 MIG instances"), "{e}");
        let l = layout(&Inputs {
            job_mode: Some("mps:4".into()),
            job_devices: Some("GPU-x".into()),
            job_slots: Some("4".into()),
            ..inputs()
        })
        .unwrap();
        assert_eq!(l.slots.len(), 4);
        // MPS inside MIG instances: COLLOC_SLOTS with :mps:N, two per device without.
        let l = layout(&Inputs {
            job_mode: Some("mig:3g.20gbx2:mps:2".into()),
            job_devices: Some("MIG-a,MIG-b,MIG-a,MIG-b".into()),
            job_slots: Some("4".into()),
            ..inputs()
        })
        .unwrap();
        assert_eq!(
            l.slots,
            ["MIG-a", "MIG-b", "MIG-a", "MIG-b"].map(|d| Some(d.to_string()))
        );
        let l = layout(&Inputs {
            job_mode: Some("mig:3g.20gbx2:mps".into()),
            job_devices: Some("MIG-a,MIG-b".into()),
            ..inputs()
        })
        .unwrap();
        assert_eq!(l.slots.len(), 2 * DEFAULT_PER_GPU);
        assert!(matches!(l.mode, Mode::MigMps { clients: None, .. }));
        let e = layout(&Inputs {
            mode: Some("mig:3g:mps:2".into()),
            visible: Some("0".into()),
            ..inputs()
        })
        .unwrap_err();
        assert!(
            e.contains("works only inside a colloc job (sbatch --colloc=mig:3g:mps:2)"),
            "{e}"
        );
        assert!(layout(&Inputs {
            job_mode: Some("mps:4".into()),
            job_devices: Some("GPU-x".into()),
            mode: Some("naive".into()),
            ..inputs()
        })
        .unwrap_err()
        .contains("differs from this job's mode"));
    }

    #[test]
    fn outside_a_job() {
        let l = layout(&Inputs {
            visible: Some("0,1".into()),
            mode: Some("mps:3".into()),
            ..inputs()
        })
        .unwrap();
        assert_eq!(l.source, Source::Own);
        assert_eq!(l.slots.len(), 6);
        assert_eq!(l.slots[1], Some("1".into()));
        let l = layout(&Inputs {
            nvml_gpus: Some(vec!["0".into()]),
            jobs: Some(4),
            ..inputs()
        })
        .unwrap();
        assert_eq!(l.mode, Mode::Naive);
        assert_eq!(l.slots, vec![Some("0".into()); 4]);
        assert!(layout(&Inputs {
            mode: Some("mig:3g".into()),
            visible: Some("0".into()),
            ..inputs()
        })
        .is_err());
        assert!(layout(&Inputs {
            mode: Some("bogus".into()),
            ..inputs()
        })
        .unwrap_err()
        .contains("valid modes"));
        assert!(layout(&Inputs {
            jobs: Some(0),
            ..inputs()
        })
        .is_err());
    }
}
