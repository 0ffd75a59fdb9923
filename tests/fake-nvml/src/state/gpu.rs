//! One GPU's view: its model, instances, holders and what still fits on it.

use super::{code, mask, process_alive, Gi, Gpu, Process, R};
use crate::tables::{self, GiProfile, Media, Model};

impl Gpu {
    /// The model table of this GPU.
    ///
    /// # Errors
    /// UNKNOWN for a state file naming a model the fake lacks.
    pub fn model(&self) -> R<&'static Model> {
        tables::model_named(&self.model).ok_or(code::UNKNOWN)
    }

    /// A GPU instance by id: a live one, or a destroyed one still listed.
    ///
    /// # Errors
    /// NOT_FOUND.
    pub fn gi(&self, id: u32) -> R<&Gi> {
        self.gis
            .iter()
            .find(|g| g.id == id)
            .or_else(|| self.lingering.iter().map(|l| &l.gi).find(|g| g.id == id))
            .ok_or(code::NOT_FOUND)
    }

    /// A live GPU instance by id, mutable.
    ///
    /// # Errors
    /// NOT_FOUND.
    pub fn gi_mut(&mut self, id: u32) -> R<&mut Gi> {
        self.gis
            .iter_mut()
            .find(|g| g.id == id)
            .ok_or(code::NOT_FOUND)
    }

    /// Is this GPU instance destroyed but still listed?
    pub fn is_lingering(&self, id: u32) -> bool {
        self.gis.iter().all(|g| g.id != id) && self.lingering.iter().any(|l| l.gi.id == id)
    }

    /// Does a holder hold this GPU instance (`Some`) or the whole GPU? A holder with a
    /// release count counts this refusal and lets go when it reaches zero.
    pub(super) fn held(&mut self, gi: Option<u32>) -> bool {
        self.drop_exited_holders();
        let mut held = false;
        for h in &mut self.holders {
            if h.gi == gi {
                held = true;
                if let Some(n) = &mut h.release_after {
                    *n = n.saturating_sub(1);
                }
            }
        }
        self.holders.retain(|h| h.release_after != Some(0));
        held
    }

    /// Holders standing for a process that has exited let go.
    pub(super) fn drop_exited_holders(&mut self) {
        self.holders.retain(|h| h.pid.is_none_or(process_alive));
    }

    /// The pending MIG mode takes effect; instances do not survive it.
    pub(super) fn activate(&mut self) {
        self.mig_current = self.mig_pending;
        self.gis.clear();
        self.lingering.clear();
        self.busy.clear();
    }

    pub(super) fn used_mask(&self) -> u64 {
        self.gis
            .iter()
            .chain(self.lingering.iter().map(|l| &l.gi))
            .fold(0, |m, g| m | mask(g.start, g.size))
    }

    pub(super) fn used_slices(&self, model: &Model) -> u32 {
        self.gis
            .iter()
            .chain(self.lingering.iter().map(|l| &l.gi))
            .filter_map(|g| model.profiles.iter().find(|p| p.id == g.profile_id))
            .map(|p| p.slices)
            .sum()
    }

    /// The all-media rule: an all-media instance admits only instances without media
    /// engines beside it, and needs them to be the only kind there.
    pub(super) fn media_allows(&self, model: &Model, new: &GiProfile) -> bool {
        let media_of = |gi: &Gi| {
            model
                .profiles
                .iter()
                .find(|p| p.id == gi.profile_id)
                .map(|p| p.media)
        };
        let any_all = self.gis.iter().any(|g| media_of(g) == Some(Media::All));
        match new.media {
            Media::All => self.gis.is_empty(),
            Media::Standard => !any_all,
        }
    }

    /// How many more instances of a profile fit now.
    pub fn remaining(&self, prof: &GiProfile) -> u32 {
        if !self.mig_current {
            // With MIG off Hopper answers for an empty GPU (the H200 did: 7 x 1g).
            return prof.instances.min(prof.placements().len() as u32);
        }
        let Ok(model) = self.model() else {
            return 0;
        };
        if !self.media_allows(model, prof) {
            return 0;
        }
        let same = self.gis.iter().filter(|g| g.profile_id == prof.id).count() as u32;
        let left = prof.instances.saturating_sub(same);
        let mut used = self.used_mask();
        let mut slices = self.used_slices(model);
        let mut n = 0;
        // Placements are aligned and listed low to high, so first-fit finds the most.
        for (s, z) in prof.placements() {
            if n < left && used & mask(s, z) == 0 && slices + prof.slices <= model.compute_slices {
                used |= mask(s, z);
                slices += prof.slices;
                n += 1;
            }
        }
        n
    }

    /// Processes, optionally only those on one GPU instance.
    pub fn processes_on(&self, gi: Option<u32>) -> Vec<&Process> {
        self.processes
            .iter()
            .filter(|p| gi.is_none() || p.gi == gi)
            .collect()
    }

    /// The profile of a GPU instance.
    ///
    /// # Errors
    /// UNKNOWN for a profile id the model lacks.
    pub fn gi_profile(&self, gi: &Gi, driver: u32) -> R<&'static GiProfile> {
        self.model()?
            .profile_by_id(gi.profile_id, driver)
            .ok_or(code::UNKNOWN)
    }
}
