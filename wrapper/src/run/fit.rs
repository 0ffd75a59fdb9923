//! Right-sized slots: which run goes onto which slot by the GPU memory it declared
//! (`gpu_memory` in runs.toml).
//!
//! What a slot holds:
//! - a MIG instance: its own memory (NVML's total for the instance);
//! - `mps:N`: each client's pinned memory limit, the GPU's memory / N (what colloc sets
//!   as `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`); `mig:…:mps:N`: its instance's memory / N;
//! - `mig:…:mps`: the slots of one instance share its memory, as those of a GPU under
//!   plain `mps`;
//! - plain `mps` and `naive`: the slots of one GPU share its memory; a run is admitted
//!   while the declared memory of the runs on that GPU, its own included, fits
//!   [`USABLE_PERCENT`] % of the GPU's memory (the rest is headroom for the driver and
//!   the runs that declared nothing).
//!
//! Placement: free slots are offered smallest first, and each takes the queued run with
//! the largest declared need that fits it (ties: manifest order), so big runs keep the
//! big slots. Runs that declared nothing need 0 and keep their manifest order after the
//! declared ones; a manifest without any declaration is packed exactly as before.
//! A run that no slot could ever hold is refused before anything starts.

use std::collections::{HashMap, VecDeque};

use colloc_core::mig::{layout_mode_string, Catalog, PlannedInstance, Profile};
use colloc_core::mode::Mode;

use super::memsize::{self, MIB};

/// Share of a shared GPU's memory that declared runs may take together (plain `mps`,
/// `naive`).
pub const USABLE_PERCENT: u64 = 95;

/// What one slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// A slot of its own size: a MIG instance, or an `mps:N` client limit (bytes).
    Own(u64),
    /// One of the slots sharing shared GPU `pool` (index into [`Fit::pools`]).
    Shared { pool: usize },
    /// Unknown size (no NVML, no GPU): declarations cannot be checked here.
    Unknown,
}

/// The slots' sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fit {
    /// Per slot.
    pub rooms: Vec<Room>,
    /// Usable bytes of each shared GPU.
    pub pools: Vec<u64>,
}

impl Fit {
    /// The slots' sizes from the mode and each slot's device and its memory (MiB, from
    /// NVML: a MIG instance's own, else its GPU's).
    pub fn new(mode: &Mode, devices: &[Option<String>], memory_mib: &[Option<u64>]) -> Fit {
        let mut pools: Vec<u64> = Vec::new();
        let mut pool_of: HashMap<&str, usize> = HashMap::new();
        let rooms = devices
            .iter()
            .enumerate()
            .map(|(i, dev)| {
                let mem = memory_mib.get(i).copied().flatten().map(|m| m * MIB);
                match (dev.as_deref(), mem) {
                    (Some(d), Some(bytes)) => match mode {
                        Mode::Mig(_) => Room::Own(bytes),
                        // The device is the GPU, or the MIG instance of `mig:…:mps:N`.
                        Mode::Mps { clients: Some(n) }
                        | Mode::MigMps {
                            clients: Some(n), ..
                        } => Room::Own(bytes / u64::from(*n).max(1)),
                        // `mig:…:mps`: the instance's slots share its memory.
                        Mode::MigMps { clients: None, .. } => {
                            let pool = *pool_of.entry(d).or_insert_with(|| {
                                pools.push(bytes / 100 * USABLE_PERCENT);
                                pools.len() - 1
                            });
                            Room::Shared { pool }
                        }
                        _ if d.starts_with("MIG-") => Room::Own(bytes),
                        _ => {
                            let d = dev.as_deref().unwrap_or_default();
                            let pool = *pool_of.entry(d).or_insert_with(|| {
                                pools.push(bytes / 100 * USABLE_PERCENT);
                                pools.len() - 1
                            });
                            Room::Shared { pool }
                        }
                    },
                    _ => Room::Unknown,
                }
            })
            .collect();
        Fit { rooms, pools }
    }

    /// Whether any slot's size is known.
    pub fn known(&self) -> bool {
        self.rooms.iter().any(|r| *r != Room::Unknown)
    }

    /// The most one slot can ever hold, bytes (`None`: no size known).
    pub fn largest(&self) -> Option<u64> {
        self.rooms.iter().filter_map(|r| self.capacity(*r)).max()
    }

    fn capacity(&self, r: Room) -> Option<u64> {
        match r {
            Room::Own(b) => Some(b),
            Room::Shared { pool } => self.pools.get(pool).copied(),
            Room::Unknown => None,
        }
    }

    /// A slot's size in MiB for the record (shared: the GPU's usable memory).
    pub fn slot_mib(&self, slot: usize) -> Option<u64> {
        self.rooms
            .get(slot)
            .and_then(|r| self.capacity(*r))
            .map(|b| b / MIB)
    }

    /// Refuse runs that no slot could ever hold: one line naming the first such run, its
    /// need and the largest slot. Nothing to check where no slot's size is known.
    ///
    /// # Errors
    /// The refusal (bad input, exit 2).
    pub fn check(&self, needs: &[(&str, Option<u64>)]) -> Result<(), String> {
        let Some(largest) = self.largest() else {
            return Ok(());
        };
        let too_big: Vec<&(&str, Option<u64>)> = needs
            .iter()
            .filter(|(_, n)| n.is_some_and(|n| n > largest))
            .collect();
        if let Some((name, Some(need))) = too_big.first() {
            let shared = self.rooms.iter().any(|r| matches!(r, Room::Shared { .. }));
            return Err(format!(
                "run {name:?} needs {} of GPU memory (gpu_memory) but the largest slot here holds {}{}{}: \
                 lower gpu_memory, or ask for a larger slot (a larger MIG profile, fewer mps:N clients)",
                memsize::show(*need),
                memsize::show(largest),
                if shared {
                    format!(" ({USABLE_PERCENT} % of the GPU's memory)")
                } else {
                    String::new()
                },
                if too_big.len() > 1 {
                    format!("; {} runs are too big in all", too_big.len())
                } else {
                    String::new()
                },
            ));
        }
        Ok(())
    }
}

/// Placement state: what the running attempts took.
#[derive(Debug, Clone)]
pub struct Placer {
    fit: Fit,
    /// Bytes declared by the runs running on each shared GPU.
    in_use: Vec<u64>,
    /// Per running attempt (engine id): its shared GPU and need.
    taken: HashMap<u64, (usize, u64)>,
}

impl Placer {
    /// Nothing running yet.
    pub fn new(fit: Fit) -> Placer {
        Placer {
            in_use: vec![0; fit.pools.len()],
            fit,
            taken: HashMap::new(),
        }
    }

    /// Order in which free slots are offered: smallest first; shared and unknown slots
    /// after every slot of its own size.
    pub fn rank(&self, slot: usize) -> u64 {
        match self.fit.rooms.get(slot) {
            Some(Room::Own(b)) => *b,
            _ => u64::MAX,
        }
    }

    /// Bytes slot `slot` can take now (`None`: unknown, anything goes).
    fn room_now(&self, slot: usize) -> Option<u64> {
        match self.fit.rooms.get(slot).copied().unwrap_or(Room::Unknown) {
            Room::Own(b) => Some(b),
            Room::Shared { pool } => Some(self.fit.pools[pool].saturating_sub(self.in_use[pool])),
            Room::Unknown => None,
        }
    }

    /// Which queued run (its position in `queue`) slot `slot` takes now: the largest
    /// declared need that fits, then the runs that declared nothing in queue order.
    /// `needs` is indexed by run. `None`: nothing queued fits this slot now.
    pub fn choose(
        &self,
        slot: usize,
        queue: &VecDeque<usize>,
        needs: &[Option<u64>],
    ) -> Option<usize> {
        if queue
            .iter()
            .all(|&r| needs.get(r).copied().flatten().is_none())
        {
            return (!queue.is_empty()).then_some(0);
        }
        let room = self.room_now(slot);
        let mut best: Option<(usize, u64)> = None;
        for (pos, &run) in queue.iter().enumerate() {
            let need = needs.get(run).copied().flatten().unwrap_or(0);
            if room.is_some_and(|r| need > r) {
                continue;
            }
            match best {
                Some((_, b)) if b >= need => {}
                _ => best = Some((pos, need)),
            }
        }
        best.map(|(pos, _)| pos)
    }

    /// Attempt `id` started on `slot` with `need` declared bytes.
    pub fn started(&mut self, id: u64, slot: usize, need: Option<u64>) {
        if let (Some(Room::Shared { pool }), Some(n)) = (self.fit.rooms.get(slot).copied(), need) {
            self.in_use[pool] += n;
            self.taken.insert(id, (pool, n));
        }
    }

    /// Attempt `id` ended.
    pub fn ended(&mut self, id: u64) {
        if let Some((pool, n)) = self.taken.remove(&id) {
            self.in_use[pool] = self.in_use[pool].saturating_sub(n);
        }
    }
}

/// Up to `k` names, then how many more: `a, b, c and 4 more`.
pub fn shorten(names: &[&str], k: usize) -> String {
    if names.len() <= k {
        return names.join(", ");
    }
    format!("{} and {} more", names[..k].join(", "), names.len() - k)
}

/// A MIG layout proposed for a manifest's declared memory (`colloc plan --fit`).
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The normalized mode to submit with (`--colloc=...`).
    pub mode: String,
    /// The instances, with where each sits.
    pub instances: Vec<PlannedInstance>,
    /// Per run (manifest order): its name, need (MiB) and the smallest profile that holds
    /// it.
    pub runs: Vec<(String, u64, String)>,
}

/// Propose a MIG layout for runs that declared their GPU memory (MiB): every run gets a
/// profile that holds it (the smallest by memory, then by compute), the layout takes one
/// instance of each profile needed first (biggest first), then one per further run,
/// smallest needs first, while it still has a valid placement on this GPU. So every run
/// can run, no size class waits behind another, and then as many run at once as fit.
///
/// # Errors
/// A run that no profile of this GPU holds (one line naming it and the largest profile),
/// or no run to plan for.
pub fn propose(catalog: &Catalog, runs: &[(String, u64)]) -> Result<Proposal, String> {
    if runs.is_empty() {
        return Err(
            "no run in the manifest declares gpu_memory: nothing to fit a layout to".into(),
        );
    }
    let mut profiles: Vec<&Profile> = catalog
        .profiles
        .iter()
        .filter(|p| !p.is_variant())
        .collect();
    profiles.sort_by_key(|p| (p.memory_mib, p.slices));
    let largest = profiles
        .last()
        .ok_or_else(|| format!("{} has no MIG profiles", catalog.model))?;
    let mut picked = Vec::new();
    for (name, need) in runs {
        let p = profiles
            .iter()
            .find(|p| p.memory_mib >= *need)
            .ok_or_else(|| {
                format!(
                    "run {name:?} needs {} but the largest MIG profile of {} ({}) holds {}",
                    memsize::show(need * MIB),
                    catalog.model,
                    largest.name,
                    memsize::show(largest.memory_mib * MIB)
                )
            })?;
        picked.push((name.clone(), *need, p.name.clone()));
    }
    // One instance for each profile the runs need, biggest first, so no size class
    // waits behind another; then one per further run, smallest needs first.
    let mut by_need: Vec<usize> = (0..picked.len()).collect();
    by_need.sort_by_key(|&i| (std::cmp::Reverse(picked[i].1), i));
    let mut order: Vec<usize> = Vec::new();
    for &i in &by_need {
        if !order.iter().any(|&o| picked[o].2 == picked[i].2) {
            order.push(i);
        }
    }
    let rest: Vec<usize> = by_need
        .iter()
        .rev()
        .copied()
        .filter(|i| !order.contains(i))
        .collect();
    order.extend(rest);
    let mut chosen: Vec<String> = Vec::new();
    let mut instances = Vec::new();
    for i in order {
        let mut trial = chosen.clone();
        trial.push(picked[i].2.clone());
        let Ok(Mode::Mig(req)) = format!("mig:{}", trial.join(",")).parse::<Mode>() else {
            continue;
        };
        if let Ok(planned) = catalog.plan(&req) {
            chosen = trial;
            instances = planned;
        }
    }
    Ok(Proposal {
        mode: layout_mode_string(&instances),
        instances,
        runs: picked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    #[test]
    fn mps_inside_mig_slots_are_the_instance_or_its_share() {
        let devs: Vec<Option<String>> = ["MIG-a", "MIG-b", "MIG-a", "MIG-b"]
            .iter()
            .map(|d| Some(d.to_string()))
            .collect();
        let mem = [
            Some(20 * 1024),
            Some(10 * 1024),
            Some(20 * 1024),
            Some(10 * 1024),
        ];
        let f = Fit::new(&"mig:3g,2g:mps:2".parse().unwrap(), &devs, &mem);
        assert_eq!(f.slot_mib(0), Some(10 * 1024));
        assert_eq!(f.slot_mib(1), Some(5 * 1024));
        assert_eq!(f.largest(), Some(10 * G));
        // Without :N the slots of one instance share it.
        let f = Fit::new(&"mig:3g,2g:mps".parse().unwrap(), &devs, &mem);
        assert_eq!(f.rooms[0], f.rooms[2]);
        assert_ne!(f.rooms[0], f.rooms[1]);
        assert!(matches!(f.rooms[1], Room::Shared { .. }));
        assert_eq!(f.pools.len(), 2);
        assert_eq!(f.largest(), Some(20 * G / 100 * USABLE_PERCENT));
    }

    fn mig_fit(sizes_gib: &[u64]) -> Fit {
        let devs: Vec<Option<String>> = (0..sizes_gib.len())
            .map(|i| Some(format!("MIG-{i}")))
            .collect();
        let mem: Vec<Option<u64>> = sizes_gib.iter().map(|g| Some(g * 1024)).collect();
        Fit::new(&"mig:4g,2g,1g".parse().unwrap(), &devs, &mem)
    }

    #[test]
    fn sizes_by_mode() {
        let f = mig_fit(&[20, 10, 5]);
        assert_eq!(
            f.rooms,
            vec![Room::Own(20 * G), Room::Own(10 * G), Room::Own(5 * G)]
        );
        let gpu = Some("GPU-a".to_string());
        let f = Fit::new(
            &"mps:4".parse().unwrap(),
            &[gpu.clone(), gpu.clone()],
            &[Some(40960), Some(40960)],
        );
        assert_eq!(f.rooms, vec![Room::Own(10 * G); 2]);
        let f = Fit::new(
            &"naive".parse().unwrap(),
            &[gpu.clone(), gpu.clone(), Some("GPU-b".into())],
            &[Some(40960); 3],
        );
        assert_eq!(
            f.rooms,
            vec![
                Room::Shared { pool: 0 },
                Room::Shared { pool: 0 },
                Room::Shared { pool: 1 }
            ]
        );
        assert_eq!(f.pools, vec![40 * G / 100 * 95; 2]);
        let f = Fit::new(&"naive".parse().unwrap(), &[None, None], &[None, None]);
        assert!(!f.known());
        assert_eq!(f.largest(), None);
    }

    #[test]
    fn a_run_no_slot_holds_is_refused_naming_need_and_largest_slot() {
        let f = mig_fit(&[20, 10, 5]);
        assert!(f.check(&[("a", Some(19 * G)), ("b", None)]).is_ok());
        let e = f
            .check(&[
                ("a", Some(19 * G)),
                ("big", Some(30 * G)),
                ("huge", Some(50 * G)),
            ])
            .unwrap_err();
        assert!(e.contains("\"big\" needs 30.0 GiB"), "{e}");
        assert!(e.contains("largest slot here holds 20.0 GiB"), "{e}");
        assert!(e.contains("2 runs are too big"), "{e}");
        // Unknown sizes: nothing to check against.
        let f = Fit::new(&"naive".parse().unwrap(), &[None], &[None]);
        assert!(f.check(&[("big", Some(500 * G))]).is_ok());
    }

    /// Offer the free slots smallest first, as the engine does, and start what each takes.
    fn fill(
        p: &mut Placer,
        free: &[usize],
        queue: &mut VecDeque<usize>,
        needs: &[Option<u64>],
        next_id: &mut u64,
    ) -> Vec<(usize, usize)> {
        let mut free = free.to_vec();
        free.sort_by_key(|&s| p.rank(s));
        let mut out = Vec::new();
        for s in free {
            if let Some(pos) = p.choose(s, queue, needs) {
                let run = queue.remove(pos).unwrap();
                p.started(*next_id, s, needs[run]);
                *next_id += 1;
                out.push((s, run));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn biggest_needs_go_to_the_smallest_slot_that_holds_them() {
        // Slots 4g (20 GiB), 2g (10), 1g (5); runs: 3, 8, 18, 4 GiB.
        let mut p = Placer::new(mig_fit(&[20, 10, 5]));
        let needs = [Some(3 * G), Some(8 * G), Some(18 * G), Some(4 * G)];
        let mut q: VecDeque<usize> = (0..4).collect();
        let mut id = 0;
        let placed = fill(&mut p, &[0, 1, 2], &mut q, &needs, &mut id);
        // 1g takes the 4 GiB run (largest that fits), 2g the 8, 4g the 18; 3 GiB waits.
        assert_eq!(placed, vec![(0, 2), (1, 1), (2, 3)]);
        assert_eq!(q, VecDeque::from(vec![0]));
    }

    #[test]
    fn a_big_run_waits_for_a_big_slot_while_small_ones_take_small_slots() {
        let mut p = Placer::new(mig_fit(&[20, 5, 5]));
        let needs = [Some(15 * G), Some(15 * G), Some(2 * G)];
        let mut q: VecDeque<usize> = (0..3).collect();
        let mut id = 0;
        // Only the 1g slots are free: the 2 GiB run takes one, the others wait.
        assert_eq!(fill(&mut p, &[1, 2], &mut q, &needs, &mut id), vec![(1, 2)]);
        assert_eq!(fill(&mut p, &[0, 2], &mut q, &needs, &mut id), vec![(0, 0)]);
        assert_eq!(q, VecDeque::from(vec![1]));
    }

    #[test]
    fn shared_gpus_admit_runs_while_their_declared_memory_fits() {
        // One 40 GiB GPU (38 GiB usable), four naive slots; runs 20, 15, 10, 5 GiB.
        let gpu = Some("GPU-a".to_string());
        let f = Fit::new(&"naive".parse().unwrap(), &vec![gpu; 4], &[Some(40960); 4]);
        let mut p = Placer::new(f);
        let needs = [Some(20 * G), Some(15 * G), Some(10 * G), Some(5 * G)];
        let mut q: VecDeque<usize> = (0..4).collect();
        let mut id = 0;
        let placed = fill(&mut p, &[0, 1, 2, 3], &mut q, &needs, &mut id);
        // 20 + 15 = 35 fits 38; 10 more would not; 5 does not fit the 3 left either.
        assert_eq!(
            placed.iter().map(|&(_, r)| r).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(q, VecDeque::from(vec![2, 3]));
        // The 20 GiB run ends: 10 and 5 go in beside the 15.
        p.ended(0);
        let placed = fill(&mut p, &[0, 2, 3], &mut q, &needs, &mut id);
        assert_eq!(
            placed.iter().map(|&(_, r)| r).collect::<Vec<_>>(),
            vec![2, 3]
        );
    }

    #[test]
    fn proposed_layouts_hold_every_run_and_as_many_at_once_as_fit() {
        let a100 = colloc_core::mig::builtin_catalog("A100-40GB").unwrap();
        let runs = |v: &[u64]| -> Vec<(String, u64)> {
            v.iter()
                .enumerate()
                .map(|(i, m)| (format!("r{i}"), m * 1024))
                .collect()
        };
        // Three sizes of a student's sweep: 15 GiB (3g.20gb), 8 GiB (1g.10gb: the least
        // compute that holds it), 3 GiB (1g.5gb).
        let p = propose(&a100, &runs(&[3, 3, 8, 15, 3, 3, 3, 8])).unwrap();
        assert_eq!(p.runs[3].2, "3g.20gb");
        assert_eq!(p.runs[2].2, "1g.10gb");
        assert_eq!(p.runs[0].2, "1g.5gb");
        // One instance per size class (3g for the biggest, 1g.10gb, 1g.5gb), then one more
        // 1g.5gb for the small runs.
        assert_eq!(p.mode, "mig:3g.20gb,1g.10gb,1g.5gbx2");
        assert!(p.instances.iter().any(|i| i.profile == "3g.20gb"));
        let slices: u32 = p
            .instances
            .iter()
            .map(|i| i.profile[..1].parse::<u32>().unwrap())
            .sum();
        assert!(slices <= 7 && p.instances.len() == 4, "{:?}", p.instances);
        // Two classes leave room for more of the smaller one.
        let p = propose(&a100, &runs(&[3, 3, 3, 15, 3])).unwrap();
        assert_eq!(p.mode, "mig:3g.20gb,1g.5gbx4");
        // What it proposes is a layout the planner accepts as a mode.
        let Ok(Mode::Mig(req)) = p.mode.parse::<Mode>() else {
            panic!("{}", p.mode)
        };
        assert_eq!(a100.plan(&req).unwrap().len(), p.instances.len());
        // Only small runs: seven 1g instances.
        let p = propose(&a100, &runs(&[2; 9])).unwrap();
        assert_eq!(p.mode, "mig:1g.5gbx7");
        // A run that no profile holds.
        let e = propose(&a100, &runs(&[3, 60])).unwrap_err();
        assert!(
            e.contains("\"r1\" needs 60.0 GiB") && e.contains("7g.40gb"),
            "{e}"
        );
        assert!(propose(&a100, &[])
            .unwrap_err()
            .contains("declares gpu_memory"));
    }

    #[test]
    fn without_declarations_the_queue_order_is_kept() {
        let p = Placer::new(mig_fit(&[20, 5]));
        let q: VecDeque<usize> = VecDeque::from(vec![2, 0, 1]);
        assert_eq!(p.choose(1, &q, &[None, None, None]), Some(0));
        assert_eq!(p.choose(1, &VecDeque::new(), &[]), None);
        // Undeclared runs come after declared ones that fit, in queue order.
        assert_eq!(p.choose(1, &q, &[None, Some(2 * G), None]), Some(2));
        assert_eq!(p.choose(1, &q, &[None, Some(8 * G), None]), Some(0));
    }
}
