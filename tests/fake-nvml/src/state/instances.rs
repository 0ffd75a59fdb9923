//! GPU and compute instances: create, destroy and list them, MIG mode, GPU reset and
//! node reboot, with the driver's answers.

use super::{ci_profile_slices, code, mask, mig_uuid, Ci, Gi, Lingering, Ret, State, R};
use crate::tables::{self, Family, Media};

impl State {
    /// Create a GPU instance, at `placement` or where the driver would put it
    /// ([`tables::driver_placement`]).
    ///
    /// # Errors
    /// As the driver: NOT_SUPPORTED (MIG off), INVALID_ARGUMENT (profile, placement),
    /// INSUFFICIENT_RESOURCES (overlap, also with a destroyed instance still listed;
    /// profile exhausted; the all-media rule).
    pub fn create_gi(
        &mut self,
        gpu: u32,
        profile_id: u32,
        placement: Option<(u32, u32)>,
    ) -> R<u32> {
        let g = self.gpu(gpu)?;
        if !g.mig_current {
            return Err(code::NOT_SUPPORTED);
        }
        let model = g.model()?;
        let prof = self.gi_profile_by_id(gpu, profile_id)?;
        let possible = prof.placements();
        if let Some(pl) = placement {
            if !possible.contains(&pl) {
                return Err(code::INVALID_ARGUMENT);
            }
        }
        let same = g
            .gis
            .iter()
            .filter(|gi| gi.profile_id == profile_id)
            .count() as u32;
        if same >= prof.instances || !g.media_allows(model, prof) {
            return Err(code::INSUFFICIENT_RESOURCES);
        }
        let used = g.used_mask();
        if g.used_slices(model) + prof.slices > model.compute_slices {
            return Err(code::INSUFFICIENT_RESOURCES);
        }
        let (start, size) = match placement {
            Some(pl) => pl,
            None => {
                let listed = model
                    .listed(self.driver)
                    .filter(|p| self.all_media || p.media != Media::All)
                    .map(|p| {
                        let made = g.gis.iter().filter(|gi| gi.profile_id == p.id).count();
                        (p, made as u32)
                    });
                tables::driver_placement(prof, listed, used).ok_or(code::INSUFFICIENT_RESOURCES)?
            }
        };
        if used & mask(start, size) != 0 {
            return Err(code::INSUFFICIENT_RESOURCES);
        }
        let id = tables::gi_id_for(model.mem_slots, start, size);
        let g = self.gpu_mut(gpu)?;
        g.gis.push(Gi {
            id,
            profile_id,
            start,
            size,
            cis: Vec::new(),
        });
        g.gis.sort_by_key(|gi| gi.id);
        Ok(id)
    }

    /// Create a compute instance of CI profile `ci_profile` in a GPU instance, its MIG
    /// device listed at once.
    ///
    /// # Errors
    /// As [`State::create_ci_at`].
    pub fn create_ci(&mut self, gpu: u32, gi: u32, ci_profile: u32) -> R<u32> {
        self.create_ci_at(gpu, gi, ci_profile, 0)
    }

    /// Create a compute instance at time `now_ms` (Unix ms; its MIG device is listed
    /// [`super::Quirks::mig_device_delay_ms`] later).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (index past this driver's count), NOT_FOUND (GI gone),
    /// NOT_SUPPORTED (profile not offered), INSUFFICIENT_RESOURCES.
    pub fn create_ci_at(&mut self, gpu: u32, gi: u32, ci_profile: u32, now_ms: u64) -> R<u32> {
        let driver = self.driver;
        let g = self.gpu(gpu)?;
        let model = g.model()?;
        let inst = g.gi(gi)?;
        let gi_slices = g.gi_profile(inst, driver)?.slices;
        let ci_slices = ci_profile_slices(ci_profile, driver)?;
        if !tables::ci_offered(model.family, driver, gi_slices, ci_profile) {
            return Err(code::NOT_SUPPORTED);
        }
        let mut used = 0u64;
        for c in &inst.cis {
            used |= mask(c.start, c.slices);
        }
        let start = (0..gi_slices)
            .step_by(ci_slices as usize)
            .find(|&s| s + ci_slices <= gi_slices && used & mask(s, ci_slices) == 0)
            .ok_or(code::INSUFFICIENT_RESOURCES)?;
        let id = (0..)
            .find(|id| inst.cis.iter().all(|c| c.id != *id))
            .unwrap_or(0);
        let uuid = mig_uuid(&g.uuid, gi, id);
        let inst = self.gpu_mut(gpu)?.gi_mut(gi)?;
        inst.cis.push(Ci {
            id,
            profile_id: ci_profile,
            slices: ci_slices,
            start,
            uuid,
            created_ms: now_ms,
        });
        inst.cis.sort_by_key(|c| c.id);
        Ok(id)
    }

    /// Destroy a compute instance.
    ///
    /// # Errors
    /// NOT_FOUND; IN_USE while a process runs on it or a holder holds its GPU instance.
    pub fn destroy_ci(&mut self, gpu: u32, gi: u32, ci: u32) -> R<()> {
        let busy_after = self.quirks.busy_after_ci_destroy;
        let g = self.gpu_mut(gpu)?;
        g.gi(gi)?
            .cis
            .iter()
            .find(|c| c.id == ci)
            .ok_or(code::NOT_FOUND)?;
        if g.processes
            .iter()
            .any(|p| p.gi == Some(gi) && p.ci == Some(ci))
        {
            return Err(code::IN_USE);
        }
        if g.held(Some(gi)) {
            return Err(code::IN_USE);
        }
        let inst = g.gi_mut(gi)?;
        inst.cis.retain(|c| c.id != ci);
        if inst.cis.is_empty() && busy_after > 0 {
            g.busy.retain(|(id, _)| *id != gi);
            g.busy.push((gi, busy_after));
        }
        Ok(())
    }

    /// Destroy a GPU instance. With [`super::Quirks::linger_listings`] it stays listed a while.
    ///
    /// # Errors
    /// NOT_FOUND (also for one destroyed but still listed); IN_USE while it has compute
    /// instances, processes or holders, and for a moment after its last compute instance
    /// went ([`super::Quirks::busy_after_ci_destroy`]).
    pub fn destroy_gi(&mut self, gpu: u32, gi: u32) -> R<()> {
        let linger = self.quirks.linger_listings;
        let g = self.gpu_mut(gpu)?;
        // One destroyed but still listed is gone all the same: NOT_FOUND.
        let inst = g
            .gis
            .iter()
            .find(|x| x.id == gi)
            .cloned()
            .ok_or(code::NOT_FOUND)?;
        if !inst.cis.is_empty() || g.processes.iter().any(|p| p.gi == Some(gi)) {
            return Err(code::IN_USE);
        }
        if g.held(Some(gi)) {
            return Err(code::IN_USE);
        }
        if let Some(b) = g.busy.iter_mut().find(|(id, _)| *id == gi) {
            b.1 -= 1;
            g.busy.retain(|(_, n)| *n > 0);
            return Err(code::IN_USE);
        }
        g.gis.retain(|x| x.id != gi);
        if linger > 0 {
            g.lingering.push(Lingering {
                gi: inst,
                listings: linger,
            });
        }
        Ok(())
    }

    /// Ask for a MIG mode; returns the activation status (nvml.h nvmlDeviceSetMigMode:
    /// the call succeeds and `activationStatus` says whether the mode took effect).
    ///
    /// - Hopper: takes effect at once, no reset ([guide] "Enable MIG Mode"); only
    ///   processes on the GPU keep it pending (IN_USE).
    /// - A100/A30: the driver resets the GPU itself when it is idle, so the mode takes
    ///   effect at once; any client holding the GPU (a process, nvidia-persistenced,
    ///   nvidia_drm, DCGM) leaves it pending with IN_USE; under passthrough it stays
    ///   pending with RESET_REQUIRED (a VM reboot applies it).
    ///
    /// # Errors
    /// IN_USE when turning MIG off while GPU instances exist (nvidia-smi refuses it too).
    pub fn set_mig(&mut self, gpu: u32, on: bool) -> R<Ret> {
        let g = self.gpu_mut(gpu)?;
        g.drop_exited_holders();
        let family = g.model()?.family;
        if !on && (!g.gis.is_empty() || !g.lingering.is_empty()) {
            return Err(code::IN_USE);
        }
        g.mig_pending = on;
        if g.mig_current == on {
            return Ok(code::SUCCESS);
        }
        let status = match family {
            Family::Hopper if !g.processes.is_empty() => code::IN_USE,
            Family::Hopper => code::SUCCESS,
            Family::Ampere if g.passthrough => code::RESET_REQUIRED,
            Family::Ampere if !g.processes.is_empty() || !g.holders.is_empty() => code::IN_USE,
            Family::Ampere => code::SUCCESS,
        };
        if status == code::SUCCESS {
            g.activate();
        }
        Ok(status)
    }

    /// Reset a GPU (`nvidia-smi -r`): the pending MIG mode takes effect, and no GPU or
    /// compute instance survives it ([guide]: instances are not persistent).
    ///
    /// # Errors
    /// IN_USE while processes run or anything holds the GPU.
    pub fn reset(&mut self, gpu: u32) -> R<()> {
        let g = self.gpu_mut(gpu)?;
        g.drop_exited_holders();
        if !g.processes.is_empty() || !g.holders.is_empty() {
            return Err(code::IN_USE);
        }
        g.activate();
        Ok(())
    }

    /// Reboot the node: processes and holders are gone, no instance survives; an A100
    /// comes up in the MIG mode its InfoROM holds (the pending one), a Hopper card with
    /// MIG off ([guide] "Enable MIG Mode": not persistent across reboots on Hopper).
    pub fn reboot(&mut self) {
        for g in &mut self.gpus {
            g.processes.clear();
            g.holders.clear();
            if g.model().is_ok_and(|m| m.family == Family::Hopper) {
                g.mig_pending = false;
            }
            g.activate();
        }
        self.boots += 1;
    }

    /// GPU instances `nvmlDeviceGetGpuInstances` lists for a profile: the live ones, then
    /// destroyed ones still listed, each of which counts down one listing.
    pub fn list_gis(&mut self, gpu: u32, profile_id: u32) -> R<Vec<u32>> {
        let g = self.gpu_mut(gpu)?;
        let mut ids: Vec<u32> = g
            .gis
            .iter()
            .filter(|x| x.profile_id == profile_id)
            .map(|x| x.id)
            .collect();
        for l in &mut g.lingering {
            if l.gi.profile_id == profile_id {
                ids.push(l.gi.id);
                l.listings = l.listings.saturating_sub(1);
            }
        }
        g.lingering.retain(|l| l.listings > 0);
        Ok(ids)
    }

    /// The MIG devices of a GPU in NVML enumeration order: (gi id, ci id). A device made
    /// less than [`super::Quirks::mig_device_delay_ms`] ago is not listed yet.
    pub fn mig_devices(&self, gpu: u32, now_ms: u64) -> R<Vec<(u32, u32)>> {
        let g = self.gpu(gpu)?;
        if !g.mig_current {
            return Ok(Vec::new());
        }
        let delay = self.quirks.mig_device_delay_ms;
        Ok(g.gis
            .iter()
            .flat_map(|gi| {
                gi.cis
                    .iter()
                    .filter(move |c| c.created_ms.saturating_add(delay) <= now_ms)
                    .map(move |c| (gi.id, c.id))
            })
            .collect())
    }
}
