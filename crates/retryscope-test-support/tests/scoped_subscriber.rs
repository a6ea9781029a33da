//! `telemetry::set_default` keeps a thread's subscriber seeing a span that a
//! sibling test, running without a subscriber on another thread, reached first:
//! the order `cargo test` runs tests in is not ours to choose.

mod common;

#[test]
fn a_span_first_reached_on_a_thread_without_a_subscriber_still_reaches_ours() {
    let seen = common::spans_seen_after_a_thread_without_a_subscriber(
        retryscope_test_support::telemetry::set_default,
    );
    assert_eq!(seen, 1, "the span this thread opened reached its subscriber");
}
