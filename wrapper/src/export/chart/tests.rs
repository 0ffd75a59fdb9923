//! Unit tests of the shared chart helpers.

use super::*;

#[test]
fn one_outlier_does_not_set_the_axis() {
    let mut v: Vec<f64> = (0..1200).map(|i| 100.0 + f64::from(i % 7)).collect();
    v.push(11_000.0);
    let top = robust_top(&v, &[103.0]);
    assert!(top < 200.0, "{top}");
    // but a run whose typical level is high is shown whole
    let top = robust_top(&v, &[103.0, 900.0]);
    assert!(top > 900.0, "{top}");
    assert_eq!(robust_top(&[], &[]), 1.0);
}
