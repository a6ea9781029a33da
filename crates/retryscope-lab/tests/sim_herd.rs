//! The claims of "Exponential Backoff And Jitter" (Marc Brooker, AWS
//! Architecture Blog, 2015) at 100 contending clients.

use retryscope_lab::sim::herd::{DEFAULT_MAX_ATTEMPTS, HerdConfig, HerdRow, HerdStrategy, simulate};

/// Fewer trials than the command's default 100: the gaps asserted below are
/// many standard errors wide even at 30.
const TRIALS: u32 = 30;

fn run(strategy: HerdStrategy) -> HerdRow {
    let config =
        HerdConfig { strategy, clients: 100, trials: TRIALS, seed: 42, max_attempts: DEFAULT_MAX_ATTEMPTS };
    let outcome = simulate(&config);
    assert_eq!(outcome.gave_up, 0, "{} hit the safety bound", strategy.name());
    outcome.row
}

#[test]
fn calls_rank_full_equal_then_decorrelated_expo_none() {
    let [none, expo, equal, full, decorrelated] = HerdStrategy::ALL.map(run);
    // Full and equal jitter do about the same work.
    let ratio = full.calls / equal.calls;
    assert!((0.85..=1.15).contains(&ratio), "full {} vs equal {}", full.calls, equal.calls);
    let jittered = full.calls.max(equal.calls);
    assert!(jittered < decorrelated.calls, "{jittered} vs decorrelated {}", decorrelated.calls);
    assert!(decorrelated.calls < expo.calls, "decorrelated {} vs expo {}", decorrelated.calls, expo.calls);
    assert!(expo.calls < none.calls, "expo {} vs none {}", expo.calls, none.calls);
}

#[test]
fn full_jitter_makes_at_least_half_fewer_calls_than_plain_exponential() {
    let (full, expo) = (run(HerdStrategy::Full), run(HerdStrategy::Expo));
    assert!(full.calls <= 0.5 * expo.calls, "full {} vs expo {}", full.calls, expo.calls);
}

#[test]
fn no_backoff_finishes_first() {
    let [none, rest @ ..] = HerdStrategy::ALL.map(run);
    for other in rest {
        assert!(
            none.time_ms < other.time_ms,
            "none {} ms vs {} {} ms",
            none.time_ms,
            other.strategy,
            other.time_ms
        );
    }
}

#[test]
fn every_client_eventually_writes_once() {
    // One successful write per client: calls ≥ clients, and with a single
    // client nothing ever conflicts.
    let config = HerdConfig {
        strategy: HerdStrategy::None,
        clients: 1,
        trials: 5,
        seed: 7,
        max_attempts: DEFAULT_MAX_ATTEMPTS,
    };
    assert_eq!(simulate(&config).row.calls, 1.0);
}

#[test]
fn the_safety_bound_is_reported() {
    let config =
        HerdConfig { strategy: HerdStrategy::None, clients: 50, trials: 1, seed: 42, max_attempts: 3 };
    assert!(simulate(&config).gave_up > 0);
}
