//! Tests of jobsummary.rs: the report's form, the word, the comment merge, and the socket
//! between a user's `colloc run` and root's collector.

use super::*;

fn report(ok: u64, failed: u64) -> PackReport {
    PackReport {
        ok,
        failed,
        steady: Some((69_900.5, "img/s".into())),
        energy_j: Some(1_234_567.0),
    }
}

#[test]
fn a_report_reads_back_as_written() {
    let r = report(18, 2);
    assert_eq!(
        r.to_line(),
        "pack ok=18 failed=2 steady=69900.5 unit=img/s energy_j=1234567\n"
    );
    assert_eq!(PackReport::parse(r.to_line().as_bytes()), Ok(r));
    let bare = PackReport {
        ok: 0,
        failed: 3,
        steady: None,
        energy_j: None,
    };
    assert_eq!(bare.to_line(), "pack ok=0 failed=3\n");
    assert_eq!(PackReport::parse(bare.to_line().as_bytes()), Ok(bare));
}

#[test]
fn what_a_report_may_not_be() {
    let bad: &[&[u8]] = &[
        b"",
        b"pack",
        b"pack ok=1",
        b"pack failed=1 ok=1",
        b"pack ok=1 ok=1 failed=1",
        b"pack ok=1 failed=1 steady=5",
        b"pack ok=1 failed=1 unit=img/s",
        b"pack ok=1 failed=1 steady=1e9 unit=img/s",
        b"pack ok=1 failed=1 steady=-1 unit=img/s",
        b"pack ok=1 failed=1 steady=inf unit=img/s",
        b"pack ok=1 failed=1 steady=NaN unit=img/s",
        b"pack ok=1 failed=1 steady=99999999999999999999 unit=img/s",
        b"pack ok=1 failed=1 steady=1 unit=img's",
        b"pack ok=1 failed=1 steady=1 unit=a;b",
        b"pack ok=1 failed=1 steady=1 unit=",
        b"pack ok=1 failed=1 steady=1 unit=aaaaaaaaaaaaaaaaaaaaaaaaa",
        b"pack ok=+1 failed=1",
        b"pack ok=1000001 failed=1",
        b"pack ok=1 failed=1 energy_j=1 extra=2",
        b"pack ok=1 failed=1\npack ok=1 failed=1",
        b"pack ok=1 failed=1\r",
        b"pack  ok=1 failed=1",
        b"pack ok=1 failed=\xff",
        b"ok=1 failed=1",
    ];
    for b in bad {
        assert!(
            PackReport::parse(b).is_err(),
            "{:?} was taken",
            String::from_utf8_lossy(b)
        );
    }
    let long = format!("pack ok=1 failed=1{}", " ".repeat(REPORT_LIMIT));
    assert!(PackReport::parse(long.as_bytes())
        .unwrap_err()
        .contains("longer"));
}

#[test]
fn the_word_folds_the_packs_and_reads_back() {
    let s = JobSummary::new("mig:3g,2g:mps:2", 1, &[report(18, 2), report(5, 0)]);
    assert_eq!(s.packs, 2);
    assert_eq!((s.ok, s.failed), (23, 2));
    assert_eq!(s.energy_j, Some(2_469_134.0));
    let w = s.encode();
    assert_eq!(
        w,
        "colloc/1;mode=mig:3g,2g:mps:2;gpus=1;packs=2;ok=23;failed=2;steady=69900.5;\
         unit=img/s;energy_j=2469134"
    );
    assert!(word_is_clean(&w));
    assert_eq!(JobSummary::decode(&w), Some(s));
    // No pack reported: root's facts only.
    let none = JobSummary::new("mps:4", 2, &[]);
    assert_eq!(none.encode(), "colloc/1;mode=mps:4;gpus=2");
    assert_eq!(JobSummary::decode(&none.encode()), Some(none));
    assert_eq!(JobSummary::decode("colloc/2;mode=mps"), None);
    assert_eq!(JobSummary::decode("JS1:abc"), None);
}

#[test]
fn only_plain_characters_are_written() {
    for w in [
        "a b",
        "a'b",
        "a\"b",
        "a|b",
        "a\\b",
        "a\nb",
        "",
        "a\u{202e}b",
        "a$b",
    ] {
        assert!(!word_is_clean(w), "{w:?}");
    }
    let err = write(1, "colloc/1;mode=mps;unit=it's").unwrap_err();
    assert!(matches!(err, WriteError::Unclean(_)), "{err}");
    assert!(matches!(
        write(1, "other;mode=mps").unwrap_err(),
        WriteError::Unclean(_)
    ));
}

#[test]
fn the_other_text_of_the_comment_stays() {
    let current = "JS1:abc colloc/1;mode=naive;gpus=1 audited";
    let (other, old) = split_comment(current);
    assert_eq!(other, "JS1:abc audited");
    assert_eq!(old, Some("colloc/1;mode=naive;gpus=1"));
    assert_eq!(
        merge_comment(&other, "colloc/1;mode=mps;gpus=2"),
        "JS1:abc audited colloc/1;mode=mps;gpus=2"
    );
    assert_eq!(
        merge_comment("  ", "colloc/1;mode=mps;gpus=2"),
        "colloc/1;mode=mps;gpus=2"
    );
}

#[test]
fn the_comment_and_target_come_from_squeue_json_of_either_release() {
    // 22.05 (openapi v0.0.38): plain numbers; a job name that forges a line of
    // `scontrol show job` is only a name here.
    let old = r#"{"meta":{},"errors":[],"jobs":[{"job_id":41,"name":"a\n   AdminComment=EVIL","admin_comment":"ticket 7","array_job_id":0,"array_task_id":null}]}"#;
    assert_eq!(
        parse_squeue_json(old, 41),
        Ok(Queued {
            admin_comment: "ticket 7".into(),
            target: "41".into()
        })
    );
    // 24.11 (data_parser v0.0.42): numbers as {set, number}; an array task is named by
    // its array and task, not by its own id (the last task's is the array's).
    let new = r#"{"jobs":[{"job_id":{"set":true,"infinite":false,"number":40},"admin_comment":"","array_job_id":{"set":true,"number":40},"array_task_id":{"set":true,"number":3}},{"job_id":{"set":true,"number":39},"admin_comment":"x","array_job_id":{"set":true,"number":40},"array_task_id":{"set":true,"number":2}}]}"#;
    assert_eq!(
        parse_squeue_json(new, 40),
        Ok(Queued {
            admin_comment: String::new(),
            target: "40_3".into()
        })
    );
    assert_eq!(parse_squeue_json(new, 39).unwrap().target, "40_2");
    // Not an array: array_task_id unset.
    let plain = r#"{"jobs":[{"job_id":{"set":true,"number":7},"array_job_id":{"set":true,"number":0},"array_task_id":{"set":false,"number":0}}]}"#;
    assert_eq!(parse_squeue_json(plain, 7).unwrap().target, "7");
    // A heterogeneous job's leader: its own component, not every one.
    let het = r#"{"jobs":[{"job_id":50,"het_job_id":50,"het_job_offset":0,"array_job_id":0},{"job_id":51,"het_job_id":50,"het_job_offset":1,"array_job_id":0}]}"#;
    assert_eq!(parse_squeue_json(het, 50).unwrap().target, "50+0");
    assert_eq!(parse_squeue_json(het, 51).unwrap().target, "50+1");
    assert!(parse_squeue_json(new, 8)
        .unwrap_err()
        .contains("does not list job 8"));
    // Another job's comment that is not UTF-8 (an admin's or a site tool's: raw bytes, a
    // lone surrogate) stops nothing; the job's own is left as it is.
    let bytes = b"{\"jobs\":[{\"job_id\":1,\"admin_comment\":\"\xff\xfe\"},{\"job_id\":2,\"admin_comment\":\"\\udc80 x\"},{\"job_id\":3,\"admin_comment\":\"ok\"}]}";
    assert_eq!(read_squeue_json(&bytes[..], 3).unwrap().admin_comment, "ok");
    for j in [1, 2] {
        let e = read_squeue_json(&bytes[..], j).unwrap_err();
        assert!(e.contains("is not UTF-8"), "{e}");
    }
    assert!(parse_squeue_json("squeue: error", 8)
        .unwrap_err()
        .contains("not JSON"));
}

/// A `squeue --json` answer of `jobs` jobs, each with a name of `name_len` bytes, made
/// as it is read; job `target` comes last, with the comment `ticket 7`.
struct HugeQueue {
    jobs: usize,
    name_len: usize,
    target: u32,
    at: usize,
    chunk: Vec<u8>,
    pos: usize,
}

impl std::io::Read for HugeQueue {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.chunk.len() {
            self.chunk = match self.at {
                0 => br#"{"meta":{},"jobs":["#.to_vec(),
                n if n <= self.jobs => format!(
                    r#"{{"job_id":{n},"name":"{}","admin_comment":""}},"#,
                    "x".repeat(self.name_len)
                )
                .into_bytes(),
                n if n == self.jobs + 1 => format!(
                    r#"{{"job_id":{},"admin_comment":"ticket 7","array_job_id":0}}]}}"#,
                    self.target
                )
                .into_bytes(),
                _ => return Ok(0),
            };
            self.at += 1;
            self.pos = 0;
        }
        let n = buf.len().min(self.chunk.len() - self.pos);
        buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[test]
fn a_queue_answer_past_64_mib_is_read_as_it_comes() {
    // 22.05's squeue --json lists every job: 70 jobs with names of 1 MiB make 70 MiB,
    // past what a tool's answer was held to (our red team stopped every summary that
    // way with 580 held jobs whose fields were control characters).
    let q = HugeQueue {
        jobs: 70,
        name_len: 1 << 20,
        target: 4242,
        at: 0,
        chunk: Vec::new(),
        pos: 0,
    };
    let got = read_squeue_json(q, 4242).unwrap();
    assert_eq!(
        got,
        Queued {
            admin_comment: "ticket 7".into(),
            target: "4242".into()
        }
    );
    // A cut answer is no answer.
    let cut = r#"{"jobs":[{"job_id":7,"admin_comment":"x"}"#;
    assert!(read_squeue_json(cut.as_bytes(), 7)
        .unwrap_err()
        .contains("not JSON"));
    // The same through a tool's pipe: a real process writing 8 MiB (more than a pipe
    // holds: read as it comes, while the process runs).
    let sh = std::path::Path::new("/bin/sh");
    let script = r#"printf '{"jobs":['; yes '{"job_id":1,"name":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},' | head -n 60000; printf '{"job_id":9,"admin_comment":"t"}]}\n'"#;
    let got = crate::publish::run_tool_with(
        sh,
        &["-c", script],
        Duration::from_secs(60),
        None,
        |mut out| {
            let r = read_squeue_json(&mut out, 9);
            let _ = std::io::copy(&mut out, &mut std::io::sink());
            r
        },
    )
    .unwrap();
    assert_eq!(got.unwrap().admin_comment, "t");
}

#[test]
fn strangers_are_counted_in_the_word() {
    let mut s = JobSummary::new("mps", 1, &[]);
    s.strangers = 64;
    assert_eq!(s.encode(), "colloc/1;mode=mps;gpus=1;strangers=64");
    assert_eq!(JobSummary::decode(&s.encode()), Some(s));
}

/// A connection to `name` that has written `bytes` (still open: drop it to close).
fn connected(path: &Path, bytes: &[u8]) -> OwnedFd {
    let (fd, addr) = stream_socket(path).unwrap();
    rustix::net::connect(&fd, &addr).unwrap();
    rustix::io::write(&fd, bytes).unwrap();
    fd
}

/// A `run_dir` of a test's own (its parent 0755, as a node's).
fn run_dir(tmp: &tempfile::TempDir) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    tmp.path().join("run")
}

#[test]
fn socket_paths_are_recognised() {
    assert_eq!(
        socket_path(Path::new("/run/colloc"), 12),
        Path::new("/run/colloc/summary/job-12.sock")
    );
    for ok in [
        "/run/colloc/summary/job-12.sock",
        "/x/summary/job-4294967295.sock",
    ] {
        assert!(is_socket_path(ok), "{ok}");
    }
    let long = format!("/{}/summary/job-1.sock", "d".repeat(100));
    for bad in [
        "run/colloc/summary/job-12.sock",
        "/run/colloc/job-12.sock",
        "/run/colloc/summary/job-.sock",
        "/run/colloc/summary/job-12",
        "/run/colloc/summary/job-4294967296.sock",
        "/run/colloc/summary/job-12.sock/x",
        "/run/colloc/summary/job-1x.sock",
        long.as_str(),
    ] {
        assert!(!is_socket_path(bad), "{bad}");
    }
}

#[test]
fn the_socket_is_the_jobs_user_alone_and_goes_with_its_collector() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(&tmp);
    let me = crate::sys::uid();
    let user = if me == 0 { 65_534 } else { me };
    let c = Collector::bind(&run, 7, user).unwrap();
    assert_eq!(c.path(), socket_path(&run, 7));
    let m = std::fs::symlink_metadata(c.path()).unwrap();
    assert!(m.file_type().is_socket());
    assert_eq!((m.uid(), m.mode() & 0o7777), (user, 0o600));
    let d = std::fs::metadata(run.join(SOCKET_DIR)).unwrap();
    assert_eq!((d.uid(), d.mode() & 0o7777), (me, 0o755));
    // A socket a killed step left is replaced; the epilog's removal finds it gone then.
    let again = Collector::bind(&run, 7, user).unwrap();
    assert!(again.path().exists());
    drop(c);
    drop(again);
    assert!(!socket_path(&run, 7).exists());
    assert!(!remove_socket(&run, 7).unwrap());
    // A file left where the step was killed is the epilog's to remove.
    let left = Collector::bind(&run, 8, user).unwrap();
    std::mem::forget(left);
    assert!(remove_socket(&run, 8).unwrap());
    assert!(!socket_path(&run, 8).exists());
    // Nothing of colloc's stays in run_dir: the directory went with its last socket.
    assert!(!run.join(SOCKET_DIR).exists());
    // No run_dir: nothing to remove, no error.
    assert!(!remove_socket(&tmp.path().join("none"), 8).unwrap());
    // A run_dir someone else may write in is refused.
    if me == 0 {
        use std::os::unix::fs::PermissionsExt;
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(Collector::bind(&open, 9, user).is_err());
    }
}

#[test]
fn only_the_jobs_user_can_connect() {
    if crate::sys::uid() != 0 {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(&tmp);
    let (user, other) = (65_534, 65_533);
    let c = Collector::bind(&run, 11, user).unwrap();
    let path = c.path();
    let line = report(3, 1).to_line();
    let (fd, addr) = stream_socket(&path).unwrap();
    drop(fd);
    // As each user, in a child: connect and write the line; the exit code says how it went.
    let try_as = |uid: u32| {
        let end = crate::sys::run_forked_as(
            uid,
            uid,
            Instant::now() + Duration::from_secs(5),
            &mut || {
                let Ok(fd) = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None)
                else {
                    return 3;
                };
                match rustix::net::connect(&fd, &addr) {
                    Ok(()) => {}
                    Err(Errno::ACCESS) => return 13,
                    Err(_) => return 4,
                }
                match rustix::io::write(&fd, line.as_bytes()) {
                    Ok(n) if n == line.len() => 0,
                    _ => 5,
                }
            },
        )
        .unwrap();
        match end {
            crate::sys::ChildEnd::Exited(code) => code,
            other => panic!("{other:?}"),
        }
    };
    // Another user is refused by the kernel (no write permission on the socket's file)…
    assert_eq!(try_as(other), 13);
    // …the job's user is let in.
    assert_eq!(try_as(user), 0);
    let got = c.collect(user);
    assert_eq!((got.reports, got.strangers), (vec![report(3, 1)], 0));
}

#[test]
fn a_report_waits_in_the_queue_for_root_and_others_are_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(&tmp);
    let me = crate::sys::uid();
    let c = Collector::bind(&run, 12, me).unwrap();
    let job = c.path();
    assert!(is_socket_path(job.to_str().unwrap()), "{}", job.display());
    // Nothing listens: nothing is sent, and that is no error.
    assert!(!send(&socket_path(&run, 13), &report(1, 0)).unwrap());
    if me != 0 {
        // A listener that is not root's is never told.
        assert!(!send(&job, &report(1, 0)).unwrap());
        let got = c.collect(me);
        assert_eq!(got.reports, vec![]);
        return;
    }
    // As root (CI): two packs report; a malformed report is refused with why.
    assert!(send(&job, &report(18, 2)).unwrap());
    assert!(send(&job, &report(5, 0)).unwrap());
    drop(connected(&job, b"pack ok=1 failed=0 unit=x'--\n"));
    let got = c.collect(0);
    assert_eq!(got.reports, vec![report(18, 2), report(5, 0)]);
    assert_eq!(got.bad.len(), 1, "{:?}", got.bad);
    assert_eq!(got.strangers, 0);
    // The job's user is someone else: root's own reports are a stranger's.
    assert!(send(&job, &report(1, 1)).unwrap());
    let got = c.collect(12_345);
    assert_eq!((got.reports.len(), got.strangers), (0, 1));
    // A connection that never finishes its line costs READ_TIME, not more.
    let fd = connected(&job, b"pack ok=1");
    let t = Instant::now();
    let got = c.collect(0);
    assert!(t.elapsed() < READ_TIME + Duration::from_millis(200));
    assert_eq!(got.bad, vec!["not finished in time".to_string()]);
    drop(fd);
}

#[test]
fn a_flood_of_connections_is_bounded() {
    if crate::sys::uid() != 0 {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(&tmp);
    let c = Collector::bind(&run, 14, 0).unwrap();
    let job = c.path();
    let mut made = 0;
    for _ in 0..MAX_CONNECTIONS * 2 {
        let (fd, addr) = stream_socket(&job).unwrap();
        if rustix::net::connect(&fd, &addr).is_ok() {
            let _ = rustix::io::write(&fd, report(1, 0).to_line().as_bytes());
            made += 1;
        }
    }
    // The queue holds MAX_CONNECTIONS and a few (the kernel's backlog rounding); the
    // collector takes MAX_CONNECTIONS of them.
    assert!(made >= MAX_CONNECTIONS, "{made}");
    let got = c.collect(0);
    assert_eq!(got.reports.len(), MAX_CONNECTIONS);
    assert!(got.bad.is_empty(), "{:?}", got.bad);
}

#[test]
fn sockets_leave_run_dirs_last_quarter_of_inodes_and_its_mode_is_kept() {
    use std::os::unix::fs::PermissionsExt;
    if crate::sys::uid() != 0 {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(&tmp);
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
        }
    }
    std::fs::create_dir(&run).unwrap();
    crate::sys::mount_tmpfs(&run, "size=1m,nr_inodes=40,mode=0755").unwrap();
    let _run = Unmount(run.clone());
    // Every socket held (as another user's O_PATH descriptor holds one after its
    // removal): they stop where a quarter of the inodes is left.
    let mut held = Vec::new();
    let err = loop {
        match Collector::bind(&run, 100 + held.len() as u32, 65_534) {
            Ok(c) => held.push(c),
            Err(e) => break e,
        }
        assert!(held.len() < 40, "no end");
    };
    assert!(err.contains("inodes free"), "{err}");
    let space = Space::of(std::fs::File::open(&run).unwrap()).unwrap();
    assert!(space.free_inodes >= 10, "{space:?}");
    assert!(held.len() >= 20, "{}", held.len());
    // An MPS job's tree still finds room.
    let c = crate::config::Config {
        run_dir: run.clone(),
        state_dir: tmp.path().join("state"),
        ..crate::config::Config::default()
    };
    let _job = Unmount(crate::rundir::job_dir(&c, 7));
    crate::rundir::create(&c, 7, 65_534, 65_534, &[0]).unwrap();
    held.truncate(1);
    // An admin's chmod of the sockets' directory is undone.
    std::fs::set_permissions(run.join(SOCKET_DIR), std::fs::Permissions::from_mode(0o700)).unwrap();
    let c = Collector::bind(&run, 99, 65_534).unwrap();
    let mode = std::fs::metadata(run.join(SOCKET_DIR))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    drop(c);
    drop(held);
    assert!(!run.join(SOCKET_DIR).exists());
}
