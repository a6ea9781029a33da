//! What a worker reports, through the OpenTelemetry API (no SDK here): a
//! span per delivery attempt in the messaging conventions, linked to the
//! producer's span, and the job metrics (see docs/telemetry.md, *Jobs*).

use crate::broker::Delivery;
use crate::dead::{DeadLetter, DeadReason, TRACEPARENT};
use crate::job::{Job, JobOutcome};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, ObservableGauge};
use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use retryscope::dependency::NameTable;
use retryscope_otel::tracing_opentelemetry::OpenTelemetrySpanExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Weak};
use std::time::Duration;

/// Deliveries by how they ended (`retryscope.job.outcome`).
pub const DELIVERIES: &str = "retryscope.job.deliveries";
/// Attempts a job took, recorded when it succeeds.
pub const ATTEMPTS: &str = "retryscope.job.attempts";
/// Time from a job's first attempt to its success, in seconds.
pub const AGE: &str = "retryscope.job.age";
/// Jobs sent to the dead letters, by `retryscope.job.dead_reason`.
pub const DEAD_LETTERS: &str = "retryscope.job.dead_letters";
/// Job key claims taken over from a worker that stopped renewing them
/// (crashed or stalled), counted by the worker that took them.
pub const CLAIMS_TAKEN_OVER: &str = "retryscope.job.claims_taken_over";
/// Dead letters kept, as the worker last read it from the dead-letter store.
pub const DEAD_LETTER_DEPTH: &str = "retryscope.job.dead_letter.depth";
/// The outcome attribute.
pub const OUTCOME_ATTR: &str = "retryscope.job.outcome";
/// The dead-letter reason attribute.
pub const DEAD_REASON_ATTR: &str = "retryscope.job.dead_reason";
/// The OpenTelemetry messaging destination attribute: on metrics, the
/// subject bounded (at most [`MAX_DESTINATIONS`] values, then `_OTHER`); on
/// spans, the subject itself.
pub const DESTINATION_ATTR: &str = "messaging.destination.name";
/// The messaging system, as the conventions name NATS.
pub const SYSTEM: &str = "nats";

/// How many distinct messaging destinations (job subjects) one process
/// reports; further ones are reported as `_OTHER`
/// ([`OVERFLOW`](retryscope::dependency::OVERFLOW)). Lower than
/// [`MAX_DEPENDENCIES`](retryscope::dependency::MAX_DEPENDENCIES): each
/// destination carries a counter per outcome and two histograms, and a stream
/// whose subjects carry ids (`orders.<id>`) would otherwise make one series set
/// per id.
pub const MAX_DESTINATIONS: usize = 100;

/// The job instruments, from the global meter provider.
pub(crate) struct JobTelemetry {
    deliveries: Counter<u64>,
    attempts: Histogram<u64>,
    age: Histogram<f64>,
    dead: Counter<u64>,
    taken_over: Counter<u64>,
}

impl JobTelemetry {
    pub(crate) fn global() -> Self {
        let meter = opentelemetry::global::meter("retryscope-jobs");
        Self {
            deliveries: meter
                .u64_counter(DELIVERIES)
                .with_description("Job deliveries by how they ended")
                .build(),
            attempts: meter
                .u64_histogram(ATTEMPTS)
                .with_description("Attempts a job took, at its success")
                .with_boundaries(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0])
                .build(),
            age: meter
                .f64_histogram(AGE)
                .with_unit("s")
                .with_description("Time from a job's first attempt to its success")
                .with_boundaries(vec![
                    0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0,
                ])
                .build(),
            dead: meter.u64_counter(DEAD_LETTERS).with_description("Jobs sent to the dead letters").build(),
            taken_over: meter
                .u64_counter(CLAIMS_TAKEN_OVER)
                .with_description("Job key claims taken over from a worker that stopped renewing them")
                .build(),
        }
    }

    pub(crate) fn outcome(&self, outcome: JobOutcome, subject: &str) {
        self.deliveries.add(1, &[KeyValue::new(OUTCOME_ATTR, outcome.as_str()), destination(subject)]);
    }

    pub(crate) fn completed(&self, subject: &str, attempts: u32, age: Duration) {
        let attrs = [destination(subject)];
        self.attempts.record(u64::from(attempts), &attrs);
        self.age.record(age.as_secs_f64(), &attrs);
    }

    /// A claim taken over: counted, and logged once, here, with its age.
    pub(crate) fn taken_over(&self, subject: &str, key: &str, age: Duration) {
        self.taken_over.add(1, &[destination(subject)]);
        tracing::warn!(target: retryscope_otel::names::TARGET,
            subject, key, dead_claim_age = ?age,
            "a job's claim ran out without being renewed (its worker crashed or stalled): taken over, the job runs again here"
        );
    }

    pub(crate) fn dead_lettered(&self, subject: &str, reason: DeadReason) {
        self.dead.add(1, &[KeyValue::new(DEAD_REASON_ATTR, reason.as_str()), destination(subject)]);
    }

    /// A CONSUMER span for one attempt, `process <subject>`, linked to the
    /// producer's span when the job carries its `traceparent`.
    /// On a worker built with `config`, `config_hash` is the hash of the
    /// configuration the execution was resolved from (`retryscope.config.hash`).
    pub(crate) fn attempt_span<D: Delivery>(
        &self,
        delivery: &D,
        job: &Job,
        config_hash: Option<&str>,
    ) -> AttemptSpan {
        let span = tracing::info_span!(
            target: retryscope_otel::names::TARGET,
            "process",
            otel.name = format!("process {}", job.subject),
            otel.kind = "consumer",
            messaging.system = SYSTEM,
            messaging.destination.name = %job.subject,
            messaging.message.id = %delivery.message_id(),
            messaging.operation.type = "process",
            messaging.operation.name = "process",
            retryscope.attempt = job.attempt,
            retryscope.job.key = job.key.as_deref().unwrap_or(""),
            retryscope.job.outcome = tracing::field::Empty,
            retryscope.config.hash = config_hash,
            error.type = tracing::field::Empty,
        );
        if let Some(context) = delivery.header(TRACEPARENT).and_then(parse_traceparent) {
            span.add_link(context);
        }
        AttemptSpan(span)
    }
}

/// A metric's `messaging.destination.name`: the subject, bounded.
fn destination(subject: &str) -> KeyValue {
    KeyValue::new(DESTINATION_ATTR, bounded_destination(subject))
}

/// `subject` as a `messaging.destination.name` metric label, bounded by a
/// process-wide table of its own to [`MAX_DESTINATIONS`] names (then `_OTHER`).
/// Spans keep the full subject: only metric series multiply.
fn bounded_destination(subject: &str) -> &'static str {
    static DESTINATIONS: LazyLock<NameTable> = LazyLock::new(|| NameTable::new(MAX_DESTINATIONS));
    DESTINATIONS.intern(subject)
}

/// The dead-letter depth as the worker last read it: written by the worker's
/// refresh task, read by the gauge's callback, which therefore never waits on
/// the broker.
#[derive(Debug, Default)]
pub(crate) struct DeadLetterDepth {
    value: AtomicU64,
    known: AtomicBool,
}

impl DeadLetterDepth {
    pub(crate) fn set(&self, depth: u64) {
        self.value.store(depth, Ordering::Relaxed);
        self.known.store(true, Ordering::Release);
    }

    fn get(&self) -> Option<u64> {
        self.known.load(Ordering::Acquire).then(|| self.value.load(Ordering::Relaxed))
    }
}

/// Registers `retryscope.job.dead_letter.depth` for the dead-letter store
/// `name`. The callback holds `depth` weakly: once the worker stops, it
/// reports nothing rather than a stale value forever.
pub(crate) fn register_depth(name: &str, depth: Weak<DeadLetterDepth>) -> ObservableGauge<u64> {
    let attrs = [KeyValue::new(DESTINATION_ATTR, name.to_owned())];
    opentelemetry::global::meter("retryscope-jobs")
        .u64_observable_gauge(DEAD_LETTER_DEPTH)
        .with_description("Dead letters kept, as the worker last read it from the dead-letter store")
        .with_callback(move |observer| {
            if let Some(value) = depth.upgrade().and_then(|d| d.get()) {
                observer.observe(value, &attrs);
            }
        })
        .build()
}

/// A PRODUCER span for a replay from the dead letters, `replay <subject>`,
/// linked to the job's producer when the letter kept its `traceparent`.
pub(crate) fn replay_span(id: u64, letter: &DeadLetter, replays: u32) -> tracing::Span {
    let span = tracing::info_span!(
        target: retryscope_otel::names::TARGET,
        "replay",
        otel.name = format!("replay {}", letter.subject),
        otel.kind = "producer",
        messaging.system = SYSTEM,
        messaging.destination.name = %letter.subject,
        messaging.message.id = tracing::field::Empty,
        messaging.operation.type = "send",
        messaging.operation.name = "replay",
        retryscope.job.key = letter.meta.key.as_deref().unwrap_or(""),
        retryscope.job.replays = replays,
        retryscope.job.dead_reason = letter.reason.as_str(),
        retryscope.job.dead_letter.id = id,
        retryscope.job.outcome = tracing::field::Empty,
    );
    if let Some(context) = letter.traceparent.as_deref().and_then(parse_traceparent) {
        span.add_link(context);
    }
    span
}

/// Counts a replay in `retryscope.job.deliveries` (outcome `replayed`).
pub(crate) fn replayed(subject: &str) {
    JobTelemetry::global().outcome(JobOutcome::Replayed, subject);
}

/// A delivery attempt's span, ended with its outcome.
pub(crate) struct AttemptSpan(tracing::Span);

impl AttemptSpan {
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.0
    }

    pub(crate) fn end(self, outcome: &'static str, error_type: Option<&str>) {
        self.0.record("retryscope.job.outcome", outcome);
        if let Some(kind) = error_type {
            self.0.record("error.type", kind);
        }
    }
}

/// The span context a W3C `traceparent` names (`00-<trace>-<span>-<flags>`).
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    if trace == TraceId::INVALID || span == SpanId::INVALID {
        return None;
    }
    Some(SpanContext::new(trace, span, TraceFlags::new(flags), true, TraceState::default()))
}

#[cfg(test)]
mod tests {
    /// What `bounded_destination`'s doc example showed when it was the engine's.
    #[test]
    fn a_subject_is_its_own_label_while_the_table_has_room() {
        assert_eq!(super::bounded_destination("orders.created"), "orders.created");
    }
}
