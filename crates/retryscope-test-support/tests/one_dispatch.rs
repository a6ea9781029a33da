//! Why `telemetry::set_default` exists: with tracing's own `set_default` and
//! no other dispatch in the process, a span reached first on a thread without
//! a subscriber is cached as never wanted, here included (tokio-rs/tracing#3611).
//! This binary holds one test so that no other dispatch exists. If tracing
//! fixes the bug this test fails, and the helper can go.

mod common;

use common::{SpanCount, reach_a_cold_span};

#[test]
fn with_one_dispatch_a_span_reached_first_elsewhere_is_lost_to_ours() {
    let count = SpanCount::default();
    let _guard = tracing::subscriber::set_default(count.subscriber());

    std::thread::spawn(reach_a_cold_span).join().expect("sibling thread");
    reach_a_cold_span();

    assert_eq!(count.get(), 0, "tracing-core still caches the sibling thread's `never`");
}
