//! The `tracing` spans: one per attempt, under the caller's span or, when the
//! observer keeps operation spans, under one span per logical operation.
//!
//! The crate only uses `tracing`; tracing-opentelemetry turns the spans into
//! OpenTelemetry spans and reads the special fields `otel.name`, `otel.kind` and
//! `otel.status_code`. Without such a layer the spans cost what any `tracing`
//! span costs, and nothing at all when no subscriber is interested.

use crate::names;
use retryscope::observe::OperationInfo;
use std::fmt;
use tracing::Span;
use tracing::field::Empty;

/// What an attempt-span factory is told about the attempt it makes a span for.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AttemptInfo<'a> {
    /// The span the attempt hangs under: the span that was current when the
    /// operation started (the caller's; [`Span::none`] outside any), or the
    /// operation's own span with
    /// [`OtelObserver::with_operation_spans`](crate::OtelObserver::with_operation_spans).
    /// Create the attempt span with `parent: info.parent`: a retry starts after a
    /// wait, where the current span need not be the caller's.
    pub parent: &'a Span,
    /// The dependency called (`retryscope.dependency`).
    pub dependency: &'a str,
    /// The logical operation's name (`retryscope.operation`), if set.
    pub operation: Option<&'a str>,
    /// The attempt number, from 1.
    pub attempt: u32,
    /// The policy's attempt limit (a hedged call's copy limit).
    pub max_attempts: u32,
    /// Whether the attempt is a copy of a hedged call: the observer records
    /// `retryscope.hedge` and, at its end, `retryscope.hedge.outcome` on it.
    pub hedge: bool,
    /// The hash of the configuration the call started with, for a call of a
    /// client configured from a file (`retryscope.config.hash`); `None` otherwise.
    pub config_hash: Option<&'a str>,
}

impl AttemptInfo<'_> {
    /// The attempt number as the `retryscope.attempt` attribute value: clamped to
    /// `1..=max_attempts` so the attribute stays bounded.
    pub fn attempt_value(&self) -> i64 {
        crate::labels::attempt_value(self.attempt, self.max_attempts)
    }
}

/// Makes the span of each attempt. Integrations replace the default to follow
/// their own conventions (the HTTP integration names attempt spans `{method}` and
/// adds the HTTP client attributes).
///
/// A span made here must:
/// - be created with `parent: info.parent`;
/// - declare the fields `error.type` and `otel.status_code` (as
///   [`tracing::field::Empty`]), which the observer records when the attempt
///   fails: `tracing` ignores a field that was not declared;
/// - declare `retryscope.hedge` and `retryscope.hedge.outcome` (as
///   [`tracing::field::Empty`]), which the observer records on the copies of
///   a hedged call ([`AttemptInfo::hedge`]);
/// - set `otel.kind = "client"` for a call to another service;
/// - carry `retryscope.config.hash` ([`AttemptInfo::config_hash`]) when
///   there is one;
/// - carry `retryscope.attempt` ([`AttemptInfo::attempt_value`]) and, so that
///   the attempts of one operation can be grouped without an operation span,
///   `retryscope.dependency` and `retryscope.operation` (`info.dependency`,
///   `info.operation`).
///
/// Fields the integration learns later (a response status, say) should also be
/// declared `Empty`; during the attempt the span is [`Span::current()`], so code
/// inside the attempt can `record` them.
///
/// Any `Fn(&AttemptInfo<'_>) -> Span + Clone` closure is an implementation.
pub trait MakeAttemptSpan {
    /// Makes the span of the attempt `info` describes.
    fn make_span(&self, info: &AttemptInfo<'_>) -> Span;

    /// The id of the request the attempts send, for the retry log's
    /// `request_id` field: an integration that sees the request reads it from
    /// a request-id header (the HTTP integrations' `request_id_header`,
    /// `x-request-id` by default). Asked only when a line is logged; a value
    /// that [`request_id`](crate::request_id) refuses (empty, over 128 bytes,
    /// not visible ASCII) is not recorded. None by default.
    fn request_id(&self) -> Option<&str> {
        None
    }

    /// Whether the call that builds an attempt's future (the operation
    /// closure) runs inside the attempt's span, as every poll of the future
    /// does. Yes by default: code in the closure before its future — a tower
    /// service's `call`, whose own layers may start spans there — sees the
    /// attempt's span as their parent. An integration whose closure only
    /// prepares the future, doing everything that reads the current span in
    /// the future's body, says no and saves entering and leaving the span
    /// once per attempt (about 2,200 instructions with tracing-opentelemetry).
    const BUILDS_IN_SPAN: bool = true;
}

impl<F: Fn(&AttemptInfo<'_>) -> Span> MakeAttemptSpan for F {
    fn make_span(&self, info: &AttemptInfo<'_>) -> Span {
        self(info)
    }
}

/// The default attempt span: see [`default_attempt_span`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultAttemptSpan;

impl MakeAttemptSpan for DefaultAttemptSpan {
    fn make_span(&self, info: &AttemptInfo<'_>) -> Span {
        default_attempt_span(info)
    }
}

/// A CLIENT span with `retryscope.attempt`, `retryscope.dependency`,
/// `retryscope.operation` (when named), and `error.type` plus status Error when
/// the attempt fails; on the copies of a hedged call, `retryscope.hedge` and
/// `retryscope.hedge.outcome`.
///
/// Its OpenTelemetry name is the operation's name when one is given (it is
/// low-cardinality by contract), else the dependency's (bounded likewise): the
/// span stands for the call, and there is no operation span to carry the name.
/// Its `tracing` name is `retryscope.attempt`.
pub fn default_attempt_span(info: &AttemptInfo<'_>) -> Span {
    tracing::info_span!(
        target: names::TARGET,
        parent: info.parent,
        "retryscope.attempt",
        otel.name = info.operation.unwrap_or(info.dependency),
        otel.kind = "client",
        retryscope.attempt = info.attempt_value(),
        retryscope.dependency = info.dependency,
        retryscope.operation = info.operation,
        retryscope.config.hash = info.config_hash,
        "error.type" = Empty,
        otel.status_code = Empty,
        retryscope.hedge = Empty,
        retryscope.hedge.outcome = Empty,
        // Recorded by a fault layer below the retry layer (fault injection).
        retryscope.fault.injected = Empty,
    )
}

/// The INTERNAL span of one logical operation, a child of the span current when
/// the operation starts (only with
/// [`OtelObserver::with_operation_spans`](crate::OtelObserver::with_operation_spans)).
///
/// Its OpenTelemetry name is the operation's name when one is given (it is
/// low-cardinality by contract), else `retry {dependency}` (`hedge {dependency}`
/// for a hedged call). Attempts and outcome are recorded when the operation
/// finishes.
pub(crate) fn operation_span(info: &OperationInfo<'_>, config_hash: Option<&str>) -> Span {
    tracing::info_span!(
        target: names::TARGET,
        "retryscope.operation",
        otel.name = %SpanName(info),
        otel.kind = "internal",
        retryscope.dependency = info.dependency,
        retryscope.operation = info.operation,
        retryscope.priority = info.priority.as_str(),
        retryscope.config.hash = config_hash,
        retryscope.attempts = Empty,
        retryscope.outcome = Empty,
        otel.status_code = Empty,
    )
}

/// Formats the operation span's name without allocating it on our side.
struct SpanName<'a, 'b>(&'a OperationInfo<'b>);

impl fmt::Display for SpanName<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.operation {
            Some(operation) => f.write_str(operation),
            None if self.0.hedged => write!(f, "hedge {}", self.0.dependency),
            None => write!(f, "retry {}", self.0.dependency),
        }
    }
}
