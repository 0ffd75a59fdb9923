//! `run_dir`'s room in `colloc status --cluster` (issue 35): the nodes whose run_dir is
//! full or holds inodes out of sight (this node's own room is `model::NodeStatus::run_dir`).

use colloc_core::publish::NodeRecord;

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
