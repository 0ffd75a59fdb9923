//! The rules that turn a run's samples into figures, each defined once.
//!
//! - [`throughput`]: the one throughput estimator and its window rule.
//! - [`window`]: the common-window analysis of copies running side by side.
//! - [`steady`]: the steady aggregate of a pack (while every slot was producing).
//! - [`solo`]: a solo figure, `n = 1` of the copies' window, with one warm-up rule.

pub mod solo;
pub mod steady;
pub mod throughput;
pub mod window;
