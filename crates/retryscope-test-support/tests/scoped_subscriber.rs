//! `telemetry::set_default` keeps a thread's subscriber seeing a span that a
//! sibling test, running without a subscriber on another thread, reached first:
//! the order `cargo test` runs tests in is not ours to choose.

mod common;

use common::{SpanCount, reach_a_cold_span};

#[test]
fn a_span_first_reached_on_a_thread_without_a_subscriber_still_reaches_ours() {
    let count = SpanCount::default();
    let _guard = retryscope_test_support::telemetry::set_default(count.subscriber());

    std::thread::spawn(reach_a_cold_span).join().expect("sibling thread");
    reach_a_cold_span();

    assert_eq!(count.get(), 1, "the span this thread opened reached its subscriber");
}
