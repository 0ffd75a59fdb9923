//! Parse + plan of every mode on every model (target: under 50 µs each).
//! Run: `cargo bench -p colloc-core --bench plan`.

use colloc_core::mig::{builtin_catalog, known_models};
use colloc_core::mode::Mode;
use criterion::{black_box, criterion_group, criterion_main, Criterion};

const MODES: &[&str] = &[
    "mig:1g",
    "mig:2g",
    "mig:3g",
    "mig:4g",
    "mig:7g",
    "mig:4g,2g,1g",
    "mig:3g,2g,1g,1g",
    "mig:2gx2,1gx3",
    "mig:1gx7",
    "mig:4gx2",
    "mig:3gx3",
    "mps:4",
    "naive",
];

fn plan_all(c: &mut Criterion) {
    let catalogs: Vec<_> = known_models()
        .map(|(name, _)| builtin_catalog(name).unwrap())
        .collect();
    let n = catalogs.len();
    for mode in MODES {
        c.bench_function(&format!("parse+plan {mode} ({n} models)"), |b| {
            b.iter(|| {
                let m: Mode = black_box(mode).parse().unwrap();
                for cat in &catalogs {
                    if let Mode::Mig(req) = &m {
                        let _ = black_box(cat.plan(req));
                    }
                }
            })
        });
    }
    c.bench_function("parse+plan every mode on every model", |b| {
        b.iter(|| {
            for mode in MODES {
                let m: Mode = black_box(mode).parse().unwrap();
                for cat in &catalogs {
                    if let Mode::Mig(req) = &m {
                        let _ = black_box(cat.plan(req));
                    }
                }
            }
        })
    });
}

criterion_group!(benches, plan_all);
criterion_main!(benches);
