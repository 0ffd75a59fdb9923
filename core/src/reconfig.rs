//! Apply a mode to a job's GPUs and restore them.
