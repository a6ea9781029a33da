//! Simulated attempts per second: the simulator should sustain at least a
//! million on one core. Each benchmark reports its throughput in attempts
//! (writes for `herd`, server calls for `amplify`).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use retryscope_lab::sim::amplify::{self, AmplifyConfig, AmplifyStrategy};
use retryscope_lab::sim::herd::{self, DEFAULT_MAX_ATTEMPTS, HerdConfig, HerdStrategy};
use std::hint::black_box;

fn herd_config(strategy: HerdStrategy) -> HerdConfig {
    HerdConfig { strategy, clients: 100, trials: 10, seed: 42, max_attempts: DEFAULT_MAX_ATTEMPTS }
}

fn bench_herd(c: &mut Criterion) {
    let mut group = c.benchmark_group("herd");
    for strategy in [HerdStrategy::None, HerdStrategy::Full] {
        let config = herd_config(strategy);
        // The same seed always makes the same number of attempts.
        group.throughput(Throughput::Elements(herd::simulate(&config).writes));
        group.bench_function(strategy.name(), |b| b.iter(|| herd::simulate(black_box(&config))));
    }
    group.finish();
}

fn bench_amplify(c: &mut Criterion) {
    let mut group = c.benchmark_group("amplify");
    for strategy in [AmplifyStrategy::Retries3, AmplifyStrategy::Budget] {
        let config = AmplifyConfig::new(strategy, 0.5, 42);
        let Ok(outcome) = amplify::simulate(&config) else { panic!("valid configuration") };
        group.throughput(Throughput::Elements(outcome.calls));
        group.bench_function(strategy.name(), |b| b.iter(|| amplify::simulate(black_box(&config))));
    }
    group.finish();
}

criterion_group!(benches, bench_herd, bench_amplify);
criterion_main!(benches);
