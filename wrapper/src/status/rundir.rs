//! `run_dir`'s room in `colloc status` (issue 35): its free space and inodes, what is used
//! there out of sight with the processes that use it, and, with `--cluster`, the nodes
//! whose run_dir is full or holds inodes out of sight.

use std::fmt::Write as _;

use colloc_core::config::Config;
use colloc_core::publish::NodeRecord;
use colloc_core::runroom::Room;

/// This node's run_dir, a line each into `text`; where no MPS job can be served, that is
/// one of the `errors` (exit 1). `None` where run_dir cannot be opened (said elsewhere).
pub(super) fn lines(cfg: &Config, text: &mut String, errors: &mut Vec<String>) -> Option<Room> {
    let room = colloc_core::runroom::room(cfg).ok()?;
    for l in room.lines(cfg) {
        let _ = writeln!(text, "{l}");
    }
    errors.extend(room.cannot_serve.clone());
    Some(room)
}

/// A node's run_dir, where it is full or holds inodes out of sight (issue 35).
pub(super) fn note(name: &str, rec: &NodeRecord) -> Option<String> {
    let r = rec
        .run_dir
        .as_ref()
        .filter(|r| r.full || r.held_inodes > 0)?;
    Some(format!(
        "{name}: run_dir {}: {} of {} inodes, {} of {} KiB free, {} inode(s) held out of \
         sight: run `colloc status` there",
        if r.full {
            "FULL, MPS jobs refused"
        } else {
            "held"
        },
        r.free_inodes,
        r.inodes,
        r.free_kib,
        r.kib,
        r.held_inodes
    ))
}
