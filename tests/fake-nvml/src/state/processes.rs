//! Fake processes on the GPUs and the holders that keep instances busy.

use super::{Holder, MpsRole, Process, State};

impl State {
    /// Attach a fake process, on a GPU instance (its first compute instance) or the
    /// whole GPU.
    ///
    /// # Errors
    /// One line saying what is wrong.
    pub fn attach(
        &mut self,
        gpu: u32,
        gi: Option<u32>,
        pid: u32,
        mem_mib: u64,
        sm_util: u32,
    ) -> Result<(), String> {
        let n = self.gpus.len();
        let g = self
            .gpus
            .get_mut(gpu as usize)
            .ok_or_else(|| format!("no fake GPU {gpu}; there are {n}"))?;
        if g.processes.iter().any(|p| p.pid == pid) {
            return Err(format!("pid {pid} is already attached to GPU {gpu}"));
        }
        let ci = match gi {
            Some(id) => {
                let inst = g
                    .gis
                    .iter()
                    .find(|x| x.id == id)
                    .ok_or_else(|| format!("GPU {gpu} has no GPU instance {id}"))?;
                let ci = inst
                    .cis
                    .first()
                    .ok_or_else(|| format!("GPU instance {id} has no compute instance"))?;
                Some(ci.id)
            }
            None if g.mig_current && !g.gis.is_empty() => {
                return Err(format!(
                    "GPU {gpu} is in MIG mode with instances: name one with --gi"
                ))
            }
            None => None,
        };
        g.processes.push(Process {
            pid,
            gi,
            ci,
            mem_mib,
            sm_util,
            mps: None,
        });
        Ok(())
    }

    /// Mark an attached process as an MPS server or client (`None`: no part in MPS).
    ///
    /// # Errors
    /// The pid is not attached to any fake GPU.
    pub fn set_mps_role(&mut self, pid: u32, role: Option<MpsRole>) -> Result<(), String> {
        let mut found = false;
        for p in self.gpus.iter_mut().flat_map(|g| g.processes.iter_mut()) {
            if p.pid == pid {
                p.mps = role;
                found = true;
            }
        }
        if found {
            Ok(())
        } else {
            Err(format!("pid {pid} is not attached to any fake GPU"))
        }
    }

    /// Detach a fake process from every GPU. Returns whether it was attached.
    pub fn detach(&mut self, pid: u32) -> bool {
        let mut found = false;
        for g in &mut self.gpus {
            let before = g.processes.len();
            g.processes.retain(|p| p.pid != pid);
            found |= g.processes.len() != before;
        }
        found
    }

    /// Hold a GPU instance (or, with `gi` None, the whole GPU) as something NVML does not
    /// list as a process would: DCGM or dcgm-exporter profiling it, a leaked NVML handle
    /// (issue 16, point 1), nvidia-persistenced.
    ///
    /// # Errors
    /// One line saying what is wrong.
    pub fn hold(
        &mut self,
        gpu: u32,
        gi: Option<u32>,
        name: &str,
        release_after: Option<u32>,
    ) -> Result<(), String> {
        self.add_holder(
            gpu,
            Holder {
                gi,
                name: name.to_string(),
                release_after,
                pid: None,
            },
        )
    }

    /// Hold as [`State::hold`], for as long as the real process `pid` runs.
    ///
    /// # Errors
    /// As [`State::hold`].
    pub fn hold_while(
        &mut self,
        gpu: u32,
        gi: Option<u32>,
        name: &str,
        pid: u32,
    ) -> Result<(), String> {
        self.add_holder(
            gpu,
            Holder {
                gi,
                name: name.to_string(),
                release_after: None,
                pid: Some(pid),
            },
        )
    }

    fn add_holder(&mut self, gpu: u32, holder: Holder) -> Result<(), String> {
        let gi = holder.gi;
        let n = self.gpus.len();
        let g = self
            .gpus
            .get_mut(gpu as usize)
            .ok_or_else(|| format!("no fake GPU {gpu}; there are {n}"))?;
        if let Some(id) = gi {
            if g.gis.iter().all(|x| x.id != id) {
                let ids: Vec<String> = g.gis.iter().map(|x| x.id.to_string()).collect();
                return Err(format!(
                    "GPU {gpu} has no GPU instance {id}; it has {}",
                    if ids.is_empty() {
                        "none".to_string()
                    } else {
                        ids.join(", ")
                    }
                ));
            }
        }
        g.holders.push(holder);
        Ok(())
    }

    /// Let go of holders on a GPU (of one GPU instance, or all). Returns how many went.
    pub fn release(&mut self, gpu: u32, gi: Option<u32>) -> usize {
        let Some(g) = self.gpus.get_mut(gpu as usize) else {
            return 0;
        };
        let before = g.holders.len();
        g.holders.retain(|h| gi.is_some() && h.gi != gi);
        before - g.holders.len()
    }
}
