//! Load amplification: closed forms, and the shape of "Fixing retries with
//! token buckets and circuit breakers" (Marc Brooker, 2022).

use retryscope_lab::sim::amplify::{AmplifyConfig, AmplifyOutcome, AmplifyStrategy, simulate};

fn run(strategy: AmplifyStrategy, p: f64) -> AmplifyOutcome {
    simulate(&AmplifyConfig::new(strategy, p, 42)).expect("valid configuration")
}

#[test]
fn three_retries_match_the_closed_forms() {
    for p in [0.0, 0.05, 0.1, 0.2, 0.5] {
        let row = run(AmplifyStrategy::Retries3, p).row;
        let amplification = 1.0 + p + p * p + p * p * p;
        let success = 1.0 - p.powi(4);
        let error = (row.amplification - amplification).abs() / amplification;
        assert!(error <= 0.02, "p = {p}: amplification {} vs {amplification}", row.amplification);
        assert!(
            (row.success_rate - success).abs() <= 0.01,
            "p = {p}: success {} vs {success}",
            row.success_rate
        );
    }
}

#[test]
fn no_retries_never_amplify() {
    for p in [0.0, 0.2, 0.5] {
        let row = run(AmplifyStrategy::None, p).row;
        assert_eq!(row.amplification, 1.0);
        assert!((row.success_rate - (1.0 - p)).abs() <= 0.02, "p = {p}: success {}", row.success_rate);
    }
}

#[test]
fn the_token_bucket_retries_freely_when_healthy_and_little_when_failing() {
    let healthy = run(AmplifyStrategy::Bucket, 0.05).row;
    assert!(healthy.success_rate >= 0.995, "{healthy:?}");
    // Above 10 % failures: about 0.1 retries per call, plus the initial tokens.
    let failing = run(AmplifyStrategy::Bucket, 0.5).row;
    assert!(failing.amplification <= 1.2, "{failing:?}");
    let unthrottled = run(AmplifyStrategy::Retries3, 0.5).row;
    assert!(failing.amplification < unthrottled.amplification - 0.5, "{failing:?} vs {unthrottled:?}");
}

#[test]
fn the_retry_breaker_trips_on_local_samples_and_stops_retries_under_heavy_failure() {
    // At 5 % failures each client's own sample often exceeds 10 %: the breaker
    // gives up retries the bucket would have made.
    let breaker = run(AmplifyStrategy::Breaker, 0.05).row;
    let bucket = run(AmplifyStrategy::Bucket, 0.05).row;
    assert!(breaker.success_rate < bucket.success_rate - 0.005, "{breaker:?} vs {bucket:?}");
    let failing = run(AmplifyStrategy::Breaker, 0.5).row;
    assert!(failing.amplification < 1.02, "{failing:?}");
}

#[test]
fn grpc_throttling_caps_amplification_under_heavy_failure() {
    let row = run(AmplifyStrategy::Grpc, 0.5).row;
    assert!(row.amplification < 1.2, "{row:?}");
}

#[test]
fn a_bad_failure_rate_is_an_error_not_a_panic() {
    let error = simulate(&AmplifyConfig::new(AmplifyStrategy::None, 1.5, 42)).expect_err("out of range");
    assert!(error.to_string().contains("failure rate"), "{error}");
}
