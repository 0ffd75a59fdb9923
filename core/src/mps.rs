//! Per-job MPS control daemons.
