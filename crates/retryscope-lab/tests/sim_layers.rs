//! `retryscope simulate layers` against its closed form, and the binary's output.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use retryscope_lab::sim::layers::{Chain, LayersStrategy};
use std::process::Command;

const REQUESTS: u32 = 20_000;

fn strategy() -> impl Strategy<Value = LayersStrategy> {
    prop_oneof![Just(LayersStrategy::EveryLayer), Just(LayersStrategy::OneLayer)]
}

proptest! {
    // A fixed seed: the same cases on every run, so the statistical bound below
    // either holds or fails for good.
    #![proptest_config(Config { cases: 48, rng_seed: RngSeed::Fixed(7), ..Config::default() })]

    #[test]
    fn simulated_calls_match_the_closed_form(
        depth in 1u32..=4,
        attempts in 1u32..=4,
        failure_rate in prop_oneof![Just(0.0), Just(1.0), 0.0f64..=1.0],
        strategy in strategy(),
        seed in any::<u64>(),
    ) {
        let chain = Chain { depth, attempts, failure_rate, strategy };
        prop_assert!(chain.validate().is_ok());
        let expected = chain.expected();
        let received = chain.simulate(REQUESTS, seed);
        prop_assert_eq!(received.len(), depth as usize + 1);
        prop_assert_eq!(received[0], u64::from(REQUESTS), "layer 1 gets each user request once");
        let most = f64::from(attempts).powi(depth as i32);
        for (layer, (&calls, &exp)) in received.iter().zip(&expected).enumerate() {
            let mean = calls as f64 / f64::from(REQUESTS);
            if failure_rate == 0.0 || failure_rate == 1.0 {
                // Nothing random happens: the counts are exact.
                prop_assert_eq!(mean, exp, "layer {}", layer + 1);
            } else {
                // A count per request lies in 0..=most, so its variance is at most
                // most × mean: four standard errors of the mean.
                let tolerance = 4.0 * (most * exp / f64::from(REQUESTS)).sqrt() + 1e-9;
                prop_assert!((mean - exp).abs() <= tolerance, "layer {}: {} vs {} ± {}", layer + 1, mean, exp, tolerance);
            }
        }
    }
}

#[test]
fn retries_multiply_per_layer_and_stay_flat_at_one_layer() {
    for depth in 1..=4 {
        let every = Chain { depth, attempts: 4, failure_rate: 1.0, strategy: LayersStrategy::EveryLayer };
        let one = Chain { strategy: LayersStrategy::OneLayer, ..every };
        assert_eq!(every.simulate(1, 0).last().copied(), Some(4u64.pow(depth)), "every layer, depth {depth}");
        assert_eq!(one.simulate(1, 0).last().copied(), Some(4), "one layer, depth {depth}");
    }
}

#[test]
fn the_binary_prints_calls_per_layer() {
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args([
            "simulate",
            "layers",
            "--depth",
            "3",
            "--attempts",
            "4",
            "--failure-rate",
            "1",
            "--format",
            "json",
        ])
        .output()
        .expect("binary runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON rows");
    let bottom = |strategy: &str| {
        rows.as_array()
            .and_then(|rows| rows.iter().find(|r| r["strategy"] == strategy && r["layer"] == 4))
            .map(|r| (r["calls_per_request"].clone(), r["expected"].clone()))
    };
    assert_eq!(bottom("every-layer"), Some((64.0.into(), 64.0.into())));
    assert_eq!(bottom("one-layer"), Some((4.0.into(), 4.0.into())));

    let refused = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["simulate", "layers", "--depth", "9"])
        .output()
        .expect("binary runs");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--depth must be 1..=8"));
}
