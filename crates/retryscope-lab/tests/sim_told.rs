//! The herd's server-told scenario: clients one server told `Retry-After: 1 s`
//! at the same moment come back spread over the hint's spread, never early,
//! where clients that wait exactly as told come back as one spike.

use retryscope_lab::sim::told::{ToldConfig, ToldOutcome, ToldStrategy, parse_duration, peak, simulate};
use std::time::Duration;

fn told(strategy: ToldStrategy, clients: u32, retry_after: Duration) -> ToldOutcome {
    let config = ToldConfig { strategy, clients, retry_after, seed: 42 };
    simulate(&config).expect("valid configuration")
}

#[test]
fn clients_told_one_second_come_back_spread_over_at_least_100_ms_and_never_early() {
    for clients in [20, 100] {
        let as_told = told(ToldStrategy::AsTold, clients, Duration::from_secs(1)).row;
        let spread = told(ToldStrategy::Retryscope, clients, Duration::from_secs(1));
        let row = &spread.row;
        assert_eq!(spread.gave_up, 0, "{row:?}");
        assert_eq!(spread.returns.len(), clients as usize, "{row:?}");
        assert!(row.first_ms >= 1_000.0, "{clients} clients: a return before the hint: {row:?}");
        assert!(row.spread_ms >= 100.0, "{clients} clients: {row:?}");
        // Never beyond the spread the hint allows: a fifth of it.
        assert!(row.last_ms <= 1_200.0, "{clients} clients: {row:?}");
        // Waiting exactly as told: every client in one window, the spike.
        assert_eq!((as_told.first_ms, as_told.spread_ms, as_told.peak_10ms), (1_000.0, 0.0, clients));
        assert!(row.peak_10ms * 3 <= as_told.peak_10ms, "{clients} clients: {row:?} vs {as_told:?}");
    }
}

#[test]
fn retry_after_zero_keeps_the_backoff() {
    let row = told(ToldStrategy::Retryscope, 100, Duration::ZERO).row;
    // Policy::interactive()'s first backoff: full jitter below 200 ms, spread.
    assert!(row.last_ms < 200.0 && row.spread_ms >= 100.0, "{row:?}");
    assert!(row.peak_10ms * 3 <= 100, "{row:?}");
}

#[test]
fn the_peak_counts_the_busiest_half_open_window() {
    let ms = 1_000_000;
    assert_eq!(peak(&[], 10 * ms), 0);
    assert_eq!(peak(&[0, 9 * ms, 10 * ms, 11 * ms, 30 * ms], 10 * ms), 3);
    assert_eq!(peak(&[5, 5, 5], 10 * ms), 3);
}

#[test]
fn bad_settings_are_clear_errors() {
    let zero = ToldConfig { clients: 0, ..ToldConfig::new(ToldStrategy::Retryscope, 42) };
    let message = simulate(&zero).expect_err("0 clients").to_string();
    assert!(message.contains("--clients"), "{message}");
    // A hint the engine would not wait on (Policy::interactive() gives up
    // beyond its 15 s deadline) leaves nothing to simulate.
    for strategy in ToldStrategy::ALL {
        let absurd = ToldConfig { retry_after: Duration::from_secs(3_600), ..ToldConfig::new(strategy, 42) };
        let message = simulate(&absurd).expect_err("an hour").to_string();
        assert!(message.contains("--retry-after") && message.contains("15s"), "{message}");
    }
    for bad in ["-1", "-1s", "NaN", "inf", "1e30", "soon", ""] {
        assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
    }
    assert_eq!(parse_duration("1"), Ok(Duration::from_secs(1)));
    assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1_500)));
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
}
