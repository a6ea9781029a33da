//! Metastable collapse after a load spike, and the retry budget that cures it.

use retryscope_lab::sim::collapse::{CollapseConfig, CollapseStrategy, Phase, phase, simulate};

/// Mean offered load and goodput over the last 20 s of the 80 s run.
fn last_20_s(strategy: CollapseStrategy) -> Phase {
    let rows = simulate(&CollapseConfig::new(strategy, 42)).expect("valid configuration");
    assert_eq!(rows.len(), 80);
    phase(&rows, 60, 80)
}

#[test]
fn before_the_spike_every_strategy_serves_the_offered_load() {
    for strategy in CollapseStrategy::ALL {
        let rows = simulate(&CollapseConfig::new(strategy, 42)).expect("valid configuration");
        let before = phase(&rows, 5, 20);
        assert!(before.goodput >= 0.9 * before.offered, "{}: {before:?}", strategy.name());
        assert_eq!(before.retries, 0.0, "{}: {before:?}", strategy.name());
    }
}

#[test]
fn without_backoff_goodput_stays_collapsed_after_the_spike() {
    let after = last_20_s(CollapseStrategy::None);
    assert!(after.goodput < 0.25 * after.offered, "{after:?}");
}

#[test]
fn a_retry_budget_restores_goodput_after_the_spike() {
    let after = last_20_s(CollapseStrategy::Budget);
    assert!(after.goodput >= 0.9 * after.offered, "{after:?}");
}

/// Backoff delays retries but does not remove any: in the collapsed state each
/// request still makes three calls (120/s at 40 requests/s), more than the
/// server can ever finish (< 100/s), so backoff alone cannot recover. This
/// pins down that finding of the model.
#[test]
fn backoff_alone_does_not_restore_goodput_under_open_loop_load() {
    let after = last_20_s(CollapseStrategy::Backoff);
    assert!(after.goodput < 0.25 * after.offered, "{after:?}");
}
