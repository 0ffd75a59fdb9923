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

#[test]
fn an_hour_between_sessions_is_drawn_short_and_read_back_whole() {
    // Ten minutes of runs, an hour in the queue, ten minutes more.
    let axis = TimeAxis::from_spans(&[(0.0, 600.0), (4200.0, 4800.0)], 4800.0);
    // At most GAP_SHARE of the sessions' 1200 s: 72 s shown for 3600.
    assert_eq!(axis.gaps(), vec![(600.0, 672.0, 3600.0)]);
    assert_eq!(axis.x(300.0), 300.0);
    assert_eq!(axis.x(4200.0), 672.0);
    assert_eq!(axis.x(4800.0), 1272.0);
    assert!((axis.x_max() - 1272.0 * 1.02).abs() < 1e-9);
    // Inside the gap, in proportion; the inverse gives the real time back everywhere.
    assert!((axis.x(2400.0) - 636.0).abs() < 1e-9);
    for t in [
        0.0, 599.0, 600.0, 1000.0, 2400.0, 4199.0, 4200.0, 4500.0, 4800.0,
    ] {
        assert!((axis.t(axis.x(t)) - t).abs() < 1e-6, "{t}");
    }
    assert_eq!(axis.label(&672.0), "4200");
    // A short gap is drawn as it was; one session has none.
    let axis = TimeAxis::from_spans(&[(0.0, 600.0), (630.0, 1200.0)], 1200.0);
    assert_eq!(axis.gaps(), vec![(600.0, 630.0, 30.0)]);
    assert_eq!(axis.x(1200.0), 1200.0);
    let axis = TimeAxis::from_spans(&[(0.0, 600.0)], 600.0);
    assert!(axis.gaps().is_empty());
    assert_eq!(axis.x(123.0), 123.0);
    assert_eq!(axis.t(123.0), 123.0);
}
