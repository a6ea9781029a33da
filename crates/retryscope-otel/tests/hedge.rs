//! Hedged calls through the observer, against an in-memory SDK: one
//! operation span, a CLIENT span per copy marked as a hedge and ended with its
//! outcome, and the hedge counters. tokio's clock is paused: durations are exact.

mod common;

use common::{Telemetry, attrs, span_attr};
use opentelemetry::trace::{SpanKind, Status};
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope::{ErrorType, Retryable, Verdict};
use retryscope_otel::names;
use std::cell::Cell;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;
use tracing::Instrument;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn policy() -> HedgePolicy {
    HedgePolicy::builder()
        .max_copies(3)
        .delay(HedgeDelay::Fixed(ms(50)))
        .no_deadline()
        .no_attempt_timeout()
        .build()
        .expect("valid policy")
}

/// Copy `n` answers `script(n)`: after how long, and with what.
fn copies(
    sent: &Cell<u32>,
    script: fn(u32) -> (Duration, Result<u32, u16>),
) -> impl FnMut() -> Pin<Box<dyn Future<Output = Result<u32, u16>>>> + '_ {
    move || {
        sent.set(sent.get() + 1);
        let (took, answer) = script(sent.get());
        Box::pin(async move {
            tokio::time::sleep(took).await;
            answer
        })
    }
}

fn by_status(result: &Result<u32, u16>) -> Verdict {
    match result {
        Ok(_) => Verdict::Success,
        Err(code) if *code >= 500 => Verdict::retryable(ErrorType::Status(*code)),
        Err(code) => Verdict::permanent(ErrorType::Status(*code)),
    }
}

#[tokio::test(start_paused = true)]
async fn every_copy_is_a_client_span_under_the_operation_span_with_its_outcome() {
    let t = Telemetry::new();
    let sent = Cell::new(0);
    // Copy 1 stalls; copy 2 (at 50 ms) fails with 503 after 10 ms, which sends
    // copy 3 at once (60 ms); it answers at 80 ms and wins.
    let answer = copies(&sent, |n| match n {
        1 => (Duration::from_secs(3_600), Ok(1)),
        2 => (ms(10), Err(503)),
        _ => (ms(20), Ok(n)),
    })
    .hedge(policy())
    .classify(by_status)
    .observe(t.observer.clone())
    .dependency("inventory")
    .operation("get_item")
    .into_future()
    .instrument(tracing::info_span!("caller"))
    .await;
    assert_eq!(answer, Ok(3));

    let caller = t.span("caller");
    // Named like its copies (the operation's name), told apart by its kind.
    let operation = t
        .finished_spans()
        .into_iter()
        .find(|s| s.span_kind == SpanKind::Internal && s.name == "get_item")
        .expect("the operation span");
    // The operation span is the caller's child, INTERNAL, and groups the copies.
    assert_eq!(operation.parent_span_id, caller.span_context.span_id());
    assert_eq!(operation.span_kind, SpanKind::Internal);
    assert_eq!(span_attr(&operation, names::ATTEMPTS).as_deref(), Some("3"));
    assert_eq!(span_attr(&operation, names::OUTCOME).as_deref(), Some("success"));
    assert_eq!(operation.status, Status::Unset);
    let mut spans = t.children(operation.span_context.span_id());
    spans.sort_by_key(|s| span_attr(s, names::ATTEMPT));
    let summary: Vec<_> = spans
        .iter()
        .map(|s| {
            assert_eq!(s.span_kind, SpanKind::Client);
            assert_eq!(s.name, "get_item");
            (
                span_attr(s, names::ATTEMPT).expect("attempt"),
                span_attr(s, names::HEDGE).expect("hedge marker"),
                span_attr(s, names::HEDGE_OUTCOME).expect("hedge outcome"),
                span_attr(s, names::ERROR_TYPE),
                s.status.clone(),
            )
        })
        .collect();
    let row = |n: &str, outcome: &str, error: Option<&str>, status: Status| {
        (n.to_owned(), "true".to_owned(), outcome.to_owned(), error.map(str::to_owned), status)
    };
    assert_eq!(
        summary,
        [
            // Cancelled, not failed: no error status.
            row("1", names::HEDGE_CANCELLED, None, Status::Unset),
            row("2", names::HEDGE_FAILED, Some("503"), Status::error("")),
            row("3", names::HEDGE_WON, None, Status::Unset),
        ]
    );

    let common = [(names::DEPENDENCY, "inventory"), (names::OPERATION, "get_item")];
    assert_eq!(t.counter(names::REQUESTS), [(attrs(&common), 1)].into());
    assert_eq!(t.counter(names::HEDGES), [(attrs(&common), 2)].into(), "copies 2 and 3");
    assert_eq!(t.counter(names::HEDGE_WINS), [(attrs(&common), 1)].into());
    assert!(t.counter(names::RETRIES).is_empty(), "hedges are not retries");
    // Every copy that finished has its duration; the cancelled one has none.
    let attempt = |n: &'static str| attrs(&[common[0], common[1], (names::ATTEMPT, n)]);
    let mut failed = attempt("2");
    failed.insert(names::ERROR_TYPE.to_owned(), "503".to_owned());
    assert_eq!(t.histogram(names::ATTEMPT_DURATION), [(failed, (1, 0.01)), (attempt("3"), (1, 0.02))].into());
    let request = attrs(&[common[0], common[1], (names::OUTCOME, "success"), (names::ATTEMPTS, "3")]);
    assert_eq!(t.histogram(names::REQUEST_DURATION), [(request, (1, 0.08))].into());
    let units = t.units();
    assert_eq!(units.get(names::HEDGES).map(String::as_str), Some(names::UNIT_HEDGE));
    assert_eq!(units.get(names::HEDGE_WINS).map(String::as_str), Some(names::UNIT_HEDGE));
}

#[tokio::test(start_paused = true)]
async fn a_call_the_first_copy_answers_counts_no_hedge_and_no_win() {
    let t = Telemetry::new();
    let sent = Cell::new(0);
    let answer = copies(&sent, |n| (ms(5), Ok(n)))
        .hedge(policy())
        .classify(by_status)
        .observe(t.observer.clone())
        .dependency("inventory")
        .await;
    assert_eq!(answer, Ok(1));
    // Without an operation name, the operation span says it is a hedge.
    let operation = t.span("hedge inventory");
    let spans = t.children(operation.span_context.span_id());
    assert_eq!(spans.len(), 1);
    assert_eq!(span_attr(&spans[0], names::HEDGE_OUTCOME).as_deref(), Some(names::HEDGE_WON));
    assert!(t.counter(names::HEDGES).is_empty());
    assert!(t.counter(names::HEDGE_WINS).is_empty(), "the first copy's win is no hedge's");
    assert_eq!(t.counter(names::REQUESTS).values().sum::<u64>(), 1);
}
