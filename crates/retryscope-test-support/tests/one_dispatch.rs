//! Why `telemetry::set_default` exists: with tracing's own `set_default` and
//! no other dispatch in the process, a span reached first on a thread without
//! a subscriber is cached as never wanted, here included (tokio-rs/tracing#3611).
//! This binary holds one test so that no other dispatch exists. If tracing
//! fixes the bug this test fails, and the helper can go.

mod common;

#[test]
fn with_one_dispatch_a_span_reached_first_elsewhere_is_lost_to_ours() {
    let seen = common::spans_seen_after_a_thread_without_a_subscriber(tracing::subscriber::set_default);
    assert_eq!(seen, 0, "tracing-core still caches the other thread's `never`");
}
