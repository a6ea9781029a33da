//! The published metastable retry case: one of two servers down from 5 s to
//! 10 s under 70 requests per second; what each client does after it.

use retryscope_lab::sim::metastable::{
    MetastableConfig, MetastableRow, MetastableStrategy, recovered_at, simulate,
};
use std::time::Duration;

fn run(strategy: MetastableStrategy) -> Vec<MetastableRow> {
    simulate(&MetastableConfig::new(strategy, 42)).expect("the published case is a valid configuration")
}

/// Goodput and attempts sent per second over the last 20 s of the 60 s run.
fn last_20_s(rows: &[MetastableRow]) -> (f64, f64, f64) {
    let last: Vec<&MetastableRow> = rows.iter().filter(|r| r.t >= 40).collect();
    let mean =
        |f: fn(&MetastableRow) -> u64| last.iter().map(|r| f(r) as f64).sum::<f64>() / last.len() as f64;
    (mean(|r| r.offered), mean(|r| r.goodput), mean(|r| r.sent))
}

#[test]
fn before_the_crash_every_client_serves_the_offered_load_without_retries() {
    for strategy in MetastableStrategy::ALL {
        let rows = run(strategy);
        assert_eq!(rows.len(), 60);
        for row in &rows[1..5] {
            assert_eq!(row.retries, 0, "{}: {row:?}", strategy.name());
            assert!(row.goodput as f64 >= 0.8 * row.offered as f64, "{}: {row:?}", strategy.name());
        }
    }
}

#[test]
fn naive_retries_stay_overloaded_long_after_the_crash_ends() {
    let rows = run(MetastableStrategy::Naive);
    let (offered, goodput, sent) = last_20_s(&rows);
    assert_eq!(recovered_at(&rows, 10), None, "naive retries never recover");
    assert!(goodput < 0.05 * offered, "goodput {goodput}/s of {offered}/s offered");
    // Every request makes its four attempts: four times the offered load, against
    // a capacity of about 100 calls per second.
    assert!(sent > 3.8 * offered, "{sent} attempts/s for {offered} requests/s");
    assert!(rows[59].queued > rows[30].queued, "the queues keep growing: {:?} → {:?}", rows[30], rows[59]);
}

#[test]
fn the_retry_budget_recovers_within_a_few_seconds_of_the_crash_end() {
    let rows = run(MetastableStrategy::Budget);
    let at = recovered_at(&rows, 10).expect("the budget recovers");
    assert!(at <= 15, "recovered at {at} s");
    let (offered, goodput, _) = last_20_s(&rows);
    assert!(goodput >= 0.95 * offered, "goodput {goodput}/s of {offered}/s offered");
}

/// An AIMD concurrency limit never lets more than its limit in flight: the
/// queues never pass a second, and the clients recover as the budget does.
#[test]
fn an_aimd_concurrency_limit_recovers_within_a_few_seconds_of_the_crash_end() {
    let rows = run(MetastableStrategy::Limited);
    let at = recovered_at(&rows, 10).expect("the limit recovers");
    assert!(at <= 15, "recovered at {at} s");
    let (offered, goodput, _) = last_20_s(&rows);
    assert!(goodput >= 0.95 * offered, "goodput {goodput}/s of {offered}/s offered");
    assert!(rows.iter().map(|r| r.rejected).sum::<u64>() > 0, "the limit refused some attempts locally");
}

/// The SRE book's throttle counts its own rejections as requests: after a
/// crash that filled its two-minute window with failures, it keeps rejecting
/// about half of the requests until accepted ones outweigh that history.
#[test]
fn the_sre_throttle_with_its_two_minute_window_drains_the_queues_but_keeps_rejecting() {
    let rows = run(MetastableStrategy::Throttled);
    assert_eq!(recovered_at(&rows, 10), None);
    let (offered, goodput, sent) = last_20_s(&rows);
    assert!(rows[59].queued == 0, "the queues drained: {:?}", rows[59]);
    assert!(goodput > 0.3 * offered && goodput < 0.6 * offered, "goodput {goodput}/s of {offered}/s");
    assert!((sent - goodput).abs() < 2.0, "whatever is sent is answered in time: {sent} vs {goodput}");
    assert!(rows.iter().map(|r| r.rejected).sum::<u64>() > 1_000);
}

#[test]
fn the_sre_throttle_with_a_window_shorter_than_the_crash_recovers_at_once() {
    let config = MetastableConfig {
        throttle_window: Duration::from_secs(5),
        ..MetastableConfig::new(MetastableStrategy::Throttled, 42)
    };
    let rows = simulate(&config).expect("valid configuration");
    let at = recovered_at(&rows, 10).expect("recovers");
    assert!(at <= 12, "recovered at {at} s");
}

#[test]
fn the_same_seed_gives_the_same_rows_and_another_seed_others() {
    for strategy in MetastableStrategy::ALL {
        assert_eq!(run(strategy), run(strategy));
        let other = simulate(&MetastableConfig::new(strategy, 43)).expect("valid configuration");
        assert_ne!(run(strategy), other);
    }
}

#[test]
fn a_crash_that_outlasts_the_run_is_refused() {
    let config = MetastableConfig { crash_start: 58, ..MetastableConfig::new(MetastableStrategy::Naive, 42) };
    let error = simulate(&config).expect_err("the crash ends after the run");
    assert!(error.to_string().contains("--duration"), "{error}");
}
