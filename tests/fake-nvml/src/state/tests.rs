//! Tests of the driver's rules, on the state alone.

use super::*;

fn a100() -> State {
    State::fresh(&["A100-40GB"], 0).unwrap()
}

fn fresh(models: &str, driver: u32, mig: bool) -> State {
    State::fresh_list_with(models, &Fresh { driver, mig }, 0).unwrap()
}

#[test]
fn fresh_state_has_stable_uuids_and_mig_on() {
    let a = State::fresh_from_list("A100-40GB, H200", 0).unwrap();
    let b = State::fresh_from_list("A100-40GB,H200", 5).unwrap();
    assert_eq!(a.gpus[0].uuid, b.gpus[0].uuid);
    assert_ne!(a.gpus[0].uuid, a.gpus[1].uuid);
    assert!(a.gpus[0].uuid.starts_with("GPU-") && a.gpus[0].uuid.len() == 40);
    assert!(a
        .gpus
        .iter()
        .all(|g| g.mig_current && g.mig_pending && g.gis.is_empty()));
    assert_eq!(a.driver, 580);
    assert_eq!(
        State::fresh_from_list("", 0).unwrap().gpus[0].model,
        "A100-40GB"
    );
    let err = State::fresh_from_list("V100", 0).unwrap_err();
    assert!(err.contains("V100") && err.contains("H200"), "{err}");
    let opts = Fresh {
        driver: 999,
        mig: true,
    };
    let err = State::fresh_list_with("H200", &opts, 0).unwrap_err();
    assert!(err.contains("535, 550, 570, 580"), "{err}");
    assert!(!fresh("H200", 580, false).gpus[0].mig_current);
}

#[test]
fn overlap_and_exhaustion_are_insufficient_resources() {
    let mut s = a100();
    let one = s.create_gi(0, 9, Some((0, 4))).unwrap();
    assert_eq!(
        s.create_gi(0, 9, Some((0, 4))),
        Err(code::INSUFFICIENT_RESOURCES)
    );
    assert_eq!(
        s.create_gi(0, 14, Some((2, 2))),
        Err(code::INSUFFICIENT_RESOURCES)
    );
    assert_eq!(s.create_gi(0, 9, Some((2, 4))), Err(code::INVALID_ARGUMENT));
    let two = s.create_gi(0, 9, None).unwrap();
    assert_ne!(one, two);
    assert_eq!(s.gpus[0].gi(two).unwrap().start, 4);
    assert_eq!(s.create_gi(0, 19, None), Err(code::INSUFFICIENT_RESOURCES));
    assert_eq!(s.create_gi(0, 77, None), Err(code::INVALID_ARGUMENT));
    // 1g.5gb+me: one at most.
    let mut s = a100();
    s.create_gi(0, 20, Some((0, 1))).unwrap();
    assert_eq!(
        s.create_gi(0, 20, Some((1, 1))),
        Err(code::INSUFFICIENT_RESOURCES)
    );
}

#[test]
fn gpu_instance_ids_follow_the_placement() {
    let mut s = a100();
    // 3g at 4 first, then at 0: ids 2 and 1 whatever the order.
    assert_eq!(s.create_gi(0, 9, Some((4, 4))), Ok(2));
    assert_eq!(s.create_gi(0, 9, Some((0, 4))), Ok(1));
    let mut s = a100();
    for (start, id) in [(6, 13), (0, 7), (3, 10)] {
        assert_eq!(s.create_gi(0, 19, Some((start, 1))), Ok(id));
    }
    let mut s = a100();
    assert_eq!(s.create_gi(0, 0, None), Ok(0), "7g");
    let mut s = a100();
    assert_eq!(s.create_gi(0, 5, None), Ok(1), "4g");
    assert_eq!(s.create_gi(0, 14, Some((4, 2))), Ok(5), "2g at 4");
    // A30: 4 slots.
    let mut s = fresh("A30", 580, true);
    assert_eq!(s.create_gi(0, 5, Some((2, 2))), Ok(2));
    assert_eq!(s.create_gi(0, 14, Some((1, 1))), Ok(4));
    assert_eq!(
        s.create_gi(0, 14, Some((4, 1))),
        Err(code::INVALID_ARGUMENT)
    );
}

#[test]
fn seven_small_and_mixed_layouts_fit() {
    let mut s = a100();
    for _ in 0..7 {
        s.create_gi(0, 19, None).unwrap();
    }
    assert_eq!(s.create_gi(0, 19, None), Err(code::INSUFFICIENT_RESOURCES));
    let ids: Vec<u32> = s.gpus[0].gis.iter().map(|g| g.id).collect();
    assert_eq!(ids, [7, 8, 9, 10, 11, 12, 13]);
    let mut s = a100();
    s.create_gi(0, 5, Some((0, 4))).unwrap();
    s.create_gi(0, 14, Some((4, 2))).unwrap();
    s.create_gi(0, 19, Some((6, 1))).unwrap();
    let m = tables::model_named("A100-40GB").unwrap();
    assert_eq!(s.gpus[0].remaining(m.profile_by_index(0, 580).unwrap()), 0);
}

#[test]
fn remaining_capacity_counts_what_still_fits() {
    let mut s = a100();
    let m = tables::model_named("A100-40GB").unwrap();
    let one_g = m.profile_by_index(0, 580).unwrap();
    assert_eq!(s.gpus[0].remaining(one_g), 7);
    s.create_gi(0, 9, Some((4, 4))).unwrap();
    assert_eq!(s.gpus[0].remaining(one_g), 4);
    assert_eq!(s.gpus[0].remaining(m.profile_by_index(2, 580).unwrap()), 1);
    assert_eq!(s.gpus[0].remaining(m.profile_by_index(4, 580).unwrap()), 0);
}

#[test]
fn compute_instances_uuids_and_in_use() {
    let mut s = a100();
    let gi = s.create_gi(0, 9, Some((0, 4))).unwrap();
    // A 3g instance offers 1, 2 and 3 slice CIs, not 4 or 7.
    assert_eq!(s.create_ci(0, gi, 3), Err(code::NOT_SUPPORTED));
    assert_eq!(s.create_ci(0, gi, 9), Err(code::INVALID_ARGUMENT));
    assert_eq!(s.create_ci(0, gi, 7), Err(code::NOT_SUPPORTED), "A100");
    let ci = s.create_ci(0, gi, 2).unwrap();
    assert_eq!(ci, 0);
    assert_eq!(s.create_ci(0, gi, 0), Err(code::INSUFFICIENT_RESOURCES));
    let uuid = s.gpus[0].gis[0].cis[0].uuid.clone();
    assert!(uuid.starts_with("MIG-") && uuid.len() == 40, "{uuid}");
    assert_eq!(uuid, mig_uuid(&s.gpus[0].uuid, gi, ci));
    assert_eq!(s.destroy_gi(0, gi), Err(code::IN_USE), "CIs still there");
    s.attach(0, Some(gi), 4242, 100, 0).unwrap();
    assert_eq!(s.destroy_ci(0, gi, ci), Err(code::IN_USE));
    assert_eq!(s.set_mig(0, false), Err(code::IN_USE));
    assert!(s.detach(4242));
    assert!(!s.detach(4242));
    s.destroy_ci(0, gi, ci).unwrap();
    assert_eq!(s.destroy_ci(0, gi, ci), Err(code::NOT_FOUND));
    s.destroy_gi(0, gi).unwrap();
    assert_eq!(s.destroy_gi(0, gi), Err(code::NOT_FOUND));
    // Made again at the same place: the same ids and the same UUID.
    let again = s.create_gi(0, 9, Some((0, 4))).unwrap();
    let ci2 = s.create_ci(0, again, 2).unwrap();
    assert_eq!((again, ci2), (gi, ci));
    assert_eq!(s.gpus[0].gis[0].cis[0].uuid, uuid);
    // Hopper 2g instances also offer the revised 1-slice profile; R580 a ninth.
    let mut h = fresh("H100-80GB", 570, true);
    let gi = h.create_gi(0, 14, Some((0, 2))).unwrap();
    h.create_ci(0, gi, 7).unwrap();
    assert_eq!(h.create_ci(0, gi, 8), Err(code::INVALID_ARGUMENT));
    let mut h = fresh("H100-80GB", 580, true);
    let gi = h.create_gi(0, 14, Some((0, 2))).unwrap();
    assert_eq!(h.create_ci(0, gi, 8), Ok(0));
}

#[test]
fn a_holder_standing_for_a_process_lets_go_when_it_exits() {
    let mut s = a100();
    let gi = s.create_gi(0, 19, Some((0, 1))).unwrap();
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    s.hold_while(0, Some(gi), "leftover", child.id()).unwrap();
    assert_eq!(s.destroy_gi(0, gi), Err(code::IN_USE));
    child.kill().unwrap();
    // A zombie has exited too: the hold ends before the parent reaps it.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(s.destroy_gi(0, gi), Ok(()));
    child.wait().unwrap();
}

#[test]
fn holders_refuse_destroys_until_released() {
    let mut s = a100();
    let gi = s.create_gi(0, 19, Some((0, 1))).unwrap();
    s.create_ci(0, gi, 0).unwrap();
    s.hold(0, Some(gi), "dcgm", None).unwrap();
    assert!(s.hold(0, Some(99), "dcgm", None).unwrap_err().contains("7"));
    // No process is listed, yet the destroy is refused.
    assert!(s.gpus[0].processes.is_empty());
    assert_eq!(s.destroy_ci(0, gi, 0), Err(code::IN_USE));
    assert_eq!(s.destroy_ci(0, gi, 0), Err(code::IN_USE));
    assert_eq!(s.reset(0), Err(code::IN_USE));
    assert_eq!(s.release(0, Some(gi)), 1);
    s.destroy_ci(0, gi, 0).unwrap();
    s.destroy_gi(0, gi).unwrap();
    // One that lets go by itself after refusing twice.
    let gi = s.create_gi(0, 19, Some((0, 1))).unwrap();
    s.hold(0, Some(gi), "leaked handle", Some(2)).unwrap();
    assert_eq!(s.destroy_gi(0, gi), Err(code::IN_USE));
    assert_eq!(s.destroy_gi(0, gi), Err(code::IN_USE));
    assert_eq!(s.destroy_gi(0, gi), Ok(()));
    assert!(s.gpus[0].holders.is_empty());
}

#[test]
fn quirks_linger_busy_and_delay() {
    let mut s = a100();
    s.quirks = Quirks {
        linger_listings: 2,
        busy_after_ci_destroy: 1,
        mig_device_delay_ms: 500,
        no_caps: false,
    };
    let gi = s.create_gi(0, 9, Some((0, 4))).unwrap();
    s.create_ci_at(0, gi, 2, 1000).unwrap();
    assert!(s.mig_devices(0, 1200).unwrap().is_empty(), "not listed yet");
    assert_eq!(s.mig_devices(0, 1500).unwrap(), [(gi, 0)]);
    s.destroy_ci(0, gi, 0).unwrap();
    assert_eq!(s.destroy_gi(0, gi), Err(code::IN_USE), "busy a moment");
    s.destroy_gi(0, gi).unwrap();
    // Gone, but listed twice more, and its place stays taken meanwhile.
    assert!(s.gpus[0].is_lingering(gi));
    assert_eq!(s.destroy_gi(0, gi), Err(code::NOT_FOUND));
    assert_eq!(
        s.create_gi(0, 9, Some((0, 4))),
        Err(code::INSUFFICIENT_RESOURCES)
    );
    assert_eq!(s.list_gis(0, 9).unwrap(), [gi]);
    assert_eq!(s.list_gis(0, 19).unwrap(), Vec::<u32>::new());
    assert_eq!(s.list_gis(0, 9).unwrap(), [gi]);
    assert_eq!(s.list_gis(0, 9).unwrap(), Vec::<u32>::new());
    assert_eq!(s.create_gi(0, 9, Some((0, 4))), Ok(gi));
}

#[test]
fn mig_mode_changes_per_family() {
    // Hopper: at once, whatever holds the GPU (no reset needed).
    let mut h = fresh("H100-80GB", 580, false);
    h.hold(0, None, "nvidia-persistenced", None).unwrap();
    assert_eq!(h.set_mig(0, true), Ok(code::SUCCESS));
    assert!(h.gpus[0].mig_current);
    assert_eq!(h.set_mig(0, false), Ok(code::SUCCESS));
    h.attach(0, None, 7, 10, 50).unwrap();
    assert_eq!(h.set_mig(0, true), Ok(code::IN_USE), "a process runs");
    assert!(!h.gpus[0].mig_current && h.gpus[0].mig_pending);
    // A100: at once when idle (the driver resets it), pending while held.
    let mut a = fresh("A100-80GB", 580, false);
    assert_eq!(a.set_mig(0, true), Ok(code::SUCCESS));
    assert!(a.gpus[0].mig_current);
    assert_eq!(a.set_mig(0, false), Ok(code::SUCCESS));
    a.hold(0, None, "nvidia-persistenced", None).unwrap();
    assert_eq!(a.set_mig(0, true), Ok(code::IN_USE));
    assert!(!a.gpus[0].mig_current && a.gpus[0].mig_pending);
    assert_eq!(a.reset(0), Err(code::IN_USE));
    a.release(0, None);
    a.reset(0).unwrap();
    assert!(a.gpus[0].mig_current);
    // Passthrough: a VM reboot applies it.
    let mut p = fresh("A100-40GB", 580, false);
    p.gpus[0].passthrough = true;
    assert_eq!(p.set_mig(0, true), Ok(code::RESET_REQUIRED));
    assert!(!p.gpus[0].mig_current);
    // Turning MIG off with instances is refused.
    let mut s = a100();
    s.create_gi(0, 19, None).unwrap();
    assert_eq!(s.set_mig(0, false), Err(code::IN_USE));
}

#[test]
fn reset_and_reboot_leave_no_instance() {
    let mut s = fresh("A100-40GB,H200", 580, true);
    s.create_gi(0, 9, None).unwrap();
    s.create_gi(1, 9, None).unwrap();
    s.reset(0).unwrap();
    assert!(s.gpus[0].gis.is_empty() && s.gpus[0].mig_current);
    s.gpus[0].mig_pending = false; // an A100 asked to leave MIG, pending
    s.hold(1, None, "dcgm", None).unwrap();
    s.reboot();
    assert_eq!(s.boots, 1);
    assert!(s
        .gpus
        .iter()
        .all(|g| g.gis.is_empty() && g.holders.is_empty()));
    assert!(!s.gpus[0].mig_current, "A100: the pending mode applies");
    assert!(!s.gpus[1].mig_current, "Hopper: MIG is off after a reboot");
}

#[test]
fn profile_queries_per_family_and_driver() {
    let a = fresh("A100-40GB", 580, false);
    assert_eq!(a.gi_profile_by_index(0, 0), Err(code::NOT_SUPPORTED));
    assert_eq!(a.gi_profile_by_id(0, 19), Err(code::NOT_SUPPORTED));
    let h = fresh("H200", 580, false);
    assert_eq!(h.gi_profile_by_index(0, 0).unwrap().name, "1g.18gb");
    assert_eq!(h.gi_profile_by_index(0, 13), Err(code::NOT_SUPPORTED));
    // R580 on the H200 answers NOT_SUPPORTED for the all-media profiles (the probe).
    assert_eq!(h.gi_profile_by_index(0, 15), Err(code::NOT_SUPPORTED));
    let mut h = h;
    h.all_media = true;
    assert_eq!(h.gi_profile_by_index(0, 15).unwrap().name, "1g.18gb+me.all");
    assert_eq!(h.gi_profile_by_index(0, 17), Err(code::INVALID_ARGUMENT));
    let old = fresh("H200", 535, false);
    assert_eq!(old.gi_profile_by_index(0, 10), Err(code::INVALID_ARGUMENT));
    assert_eq!(old.gi_profile_by_id(0, 65), Err(code::INVALID_ARGUMENT));
}

#[test]
fn an_all_media_instance_admits_no_other() {
    let mut s = fresh("H100-80GB", 580, true);
    s.all_media = true;
    s.create_gi(0, 65, Some((0, 1))).unwrap();
    assert_eq!(
        s.create_gi(0, 19, Some((1, 1))),
        Err(code::INSUFFICIENT_RESOURCES)
    );
    let mut s = fresh("H100-80GB", 580, true);
    s.all_media = true;
    s.create_gi(0, 19, Some((1, 1))).unwrap();
    assert_eq!(
        s.create_gi(0, 65, Some((0, 1))),
        Err(code::INSUFFICIENT_RESOURCES)
    );
}

#[test]
fn faults_fire_a_number_of_times_or_until_cleared() {
    let mut s = a100();
    let fault = |times| Fault {
        call: 1,
        code: "NVML_ERROR_IN_USE".into(),
        seen: 0,
        times,
    };
    s.faults.insert("nvmlX".into(), fault(2));
    let fail = Some(FaultAction::Fail(code::IN_USE));
    assert_eq!(s.count_call("nvmlX", 1), (true, fail));
    assert_eq!(s.count_call("nvmlX", 1), (true, fail));
    assert_eq!(s.count_call("nvmlX", 1), (false, None));
    s.faults.insert("nvmlX".into(), fault(0));
    for _ in 0..5 {
        assert_eq!(s.count_call("nvmlX", 1), (true, fail));
    }
    assert_eq!(s.fired.len(), 7);
}

#[test]
fn capability_files_follow_the_instances() {
    let dir = tempfile::tempdir().unwrap();
    let state_path = dir.path().join("state.json");
    let mut s = a100();
    s.gpus[0].mig_current = true;
    s.gpus[0].gis.push(Gi {
        id: 1,
        profile_id: 9,
        start: 0,
        size: 4,
        cis: vec![Ci {
            id: 0,
            profile_id: 2,
            slices: 3,
            start: 0,
            uuid: "MIG-x".into(),
            created_ms: 0,
        }],
    });
    crate::caps::sync(&state_path, &s).unwrap();
    let caps = dir.path().join("proc/driver/nvidia/capabilities");
    let gi = std::fs::read_to_string(caps.join("gpu0/mig/gi1/access")).unwrap();
    assert!(gi.contains("DeviceFileMinor: 12") && gi.contains("DeviceFileMode: 292"));
    let ci = std::fs::read_to_string(caps.join("gpu0/mig/gi1/ci0/access")).unwrap();
    assert!(ci.contains("DeviceFileMinor: 13"), "{ci}");
    let minors =
        std::fs::read_to_string(dir.path().join("proc/driver/nvidia-caps/mig-minors")).unwrap();
    assert!(minors.contains("config 1\n") && minors.contains("gpu0/gi1/ci0/access 13\n"));
    assert!(std::fs::read_to_string(dir.path().join("proc/devices"))
        .unwrap()
        .contains("237 nvidia-caps"));
    s.gpus[0].gis.clear();
    crate::caps::sync(&state_path, &s).unwrap();
    assert!(!caps.join("gpu0/mig/gi1").exists());
    assert!(caps.join("mig/config").exists());
}

#[test]
fn faults_fire_once_on_the_nth_call() {
    let mut s = a100();
    s.faults.insert(
        "nvmlX".into(),
        Fault {
            call: 2,
            code: "NVML_ERROR_INSUFFICIENT_RESOURCES".into(),
            seen: 0,
            times: 1,
        },
    );
    assert_eq!(s.count_call("nvmlY", 1), (false, None));
    assert_eq!(s.count_call("nvmlX", 1), (true, None));
    assert_eq!(
        s.count_call("nvmlX", 1),
        (true, Some(FaultAction::Fail(code::INSUFFICIENT_RESOURCES)))
    );
    assert_eq!(s.count_call("nvmlX", 1), (false, None));
    assert_eq!(s.fired.len(), 1);
    assert_eq!(parse_fault_code("crash"), Some(FaultAction::Crash));
    assert_eq!(parse_fault_code("stall"), Some(FaultAction::Stall));
    assert_eq!(parse_fault_code("IN_USE"), Some(FaultAction::Fail(19)));
    assert_eq!(parse_fault_code("NVML_SUCCESS"), None);
    assert_eq!(parse_fault_code("bogus"), None);
}

#[test]
fn state_round_trips_through_json() {
    let mut s = a100();
    let gi = s.create_gi(0, 14, None).unwrap();
    s.create_ci(0, gi, 1).unwrap();
    s.hold(0, Some(gi), "dcgm", Some(3)).unwrap();
    let text = serde_json::to_string_pretty(&s).unwrap();
    let back: State = serde_json::from_str(&text).unwrap();
    assert_eq!(back, s);
    // A hand-written fault without a counter parses.
    let with_fault = text.replacen(
        "\"faults\": {}",
        "\"faults\": {\"nvmlGpuInstanceCreateComputeInstance\": {\"call\": 2, \"code\": \"crash\"}}",
        1,
    );
    let back: State = serde_json::from_str(&with_fault).unwrap();
    assert_eq!(back.faults["nvmlGpuInstanceCreateComputeInstance"].seen, 0);
}
