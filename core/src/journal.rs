//! Per-job journals and per-GPU locks.
