//! The retry log: one INFO event per retry, one WARN event per operation that
//! gave up, each leading to its trace.
//!
//! The events are `tracing` events with target `retryscope`, so they reach
//! whatever the service logs with (a `fmt` layer, an OpenTelemetry log bridge)
//! and, under tracing-opentelemetry, become span events of the span they are
//! about: the failed attempt's (the operation span's, with operation spans on),
//! else the caller's.
//! Every field is listed in docs/telemetry.md ("The retry log").

use crate::labels::{Common, error_type_str};
use crate::names;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceId};
use retryscope::observe::{
    AttemptEnd, AttemptStart, Finish, Observer, OperationInfo, OperationObserver, Wait,
};
use retryscope::{ErrorType, Outcome, StopReason};
use std::time::Duration;
use tracing::Span;
use tracing::field::DisplayValue;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The trace and span of the attempt a log line is about, when there is one
/// (an OpenTelemetry layer records the spans), else of the caller's span.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Correlation {
    context: Option<(TraceId, SpanId)>,
}

impl Correlation {
    /// The ids of `span`; if no tracing-opentelemetry layer gave it any, those
    /// of the current OpenTelemetry context (a program or a framework that
    /// attaches contexts itself, without the layer), else nothing.
    pub(crate) fn of(span: &Span) -> Self {
        let context = span.context();
        let of_span = Self::from_context(context.span().span_context());
        match of_span.context {
            Some(_) => of_span,
            None => Self::from_context(opentelemetry::Context::current().span().span_context()),
        }
    }

    /// The ids of the span the caller is in.
    pub(crate) fn current() -> Self {
        Self::of(&Span::current())
    }

    fn from_context(context: &SpanContext) -> Self {
        Self { context: context.is_valid().then(|| (context.trace_id(), context.span_id())) }
    }

    /// The trace id as a field value: formatted (W3C hex) by whichever layer
    /// records it, with no `String` of ours per event.
    fn trace_id(&self) -> Option<DisplayValue<TraceId>> {
        self.context.map(|(trace, _)| tracing::field::display(trace))
    }

    fn span_id(&self) -> Option<DisplayValue<SpanId>> {
        self.context.map(|(_, span)| tracing::field::display(span))
    }
}

/// Who retries, and for which request: the `service` and `request_id` fields.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Subject<'a> {
    /// The service's name, copied when the observer was built.
    pub(crate) service: Option<&'static str>,
    /// The request's id, as the attempt-span maker read it from the request:
    /// recorded only when [`request_id`] accepts it.
    pub(crate) request_id: Option<&'a str>,
}

impl Subject<'_> {
    fn request_id(&self) -> Option<&str> {
        self.request_id.and_then(request_id)
    }
}

/// The header the HTTP integrations read the retry log's `request_id` from
/// unless told another (`request_id_header` on their builders): the most
/// common name (Heroku, Envoy, nginx's `$request_id`, many frameworks).
pub const REQUEST_ID_HEADER: http::HeaderName = http::HeaderName::from_static("x-request-id");

/// A request id as the retry log records it: 1 to
/// [`MAX_REQUEST_ID_LEN`](names::MAX_REQUEST_ID_LEN) bytes of visible ASCII
/// (`!` to `~`), else `None`: what a caller sends is not written to the log
/// unbounded, nor with control characters that would forge log lines.
///
/// ```
/// assert_eq!(retryscope_otel::request_id("f3c1-42"), Some("f3c1-42"));
/// assert_eq!(retryscope_otel::request_id("two words"), None);
/// assert_eq!(retryscope_otel::request_id(&"x".repeat(129)), None);
/// ```
pub fn request_id(value: &str) -> Option<&str> {
    let visible = value.bytes().all(|b| b.is_ascii_graphic());
    (visible && !value.is_empty() && value.len() <= names::MAX_REQUEST_ID_LEN).then_some(value)
}

/// What the log says about one logical operation: its names and, once an
/// attempt has failed, which failure and which attempt span.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LastFailure {
    pub(crate) error: Option<ErrorType>,
    pub(crate) correlation: Correlation,
}

/// An operation's [`LastFailure`], boxed once an attempt has failed: most
/// operations never fail, and the observer's operation state, which the
/// engine moves by value many times a call, is 72 bytes smaller without it
/// (80 with its alignment).
#[derive(Debug, Default)]
pub(crate) struct LastFailureSlot(Option<Box<LastFailure>>);

impl LastFailureSlot {
    /// Keeps `failure` as the last one, in the box of the one before if any.
    pub(crate) fn set(&mut self, failure: LastFailure) {
        match &mut self.0 {
            Some(last) => **last = failure,
            None => self.0 = Some(Box::new(failure)),
        }
    }

    /// The last failure: none yet is the default.
    pub(crate) fn get(&self) -> LastFailure {
        self.0.as_deref().copied().unwrap_or_default()
    }
}

/// The retry log alone, without spans or metrics: pass it to the engine's
/// `.observe(..)` where the telemetry is off but the log should stay.
///
/// [`OtelObserver`](crate::OtelObserver) writes the same events; combine
/// neither with the other. Without attempt spans, each event carries the trace
/// and span ids of the caller's span, if an OpenTelemetry layer gave it any
/// (else of the current OpenTelemetry context). `service` is the name known
/// when the log is built ([`RetryLog::new`]); `request_id`, the value the
/// integration gave it for the call ([`RetryLog::with_request_id`]).
///
/// ```
/// use retryscope::{Policy, Retryable};
/// use retryscope_otel::RetryLog;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let answer = (|| async { Ok::<_, std::io::Error>(42) })
///     .retry(Policy::interactive())
///     .observe(RetryLog::new())
///     .dependency("inventory")
///     .await;
/// assert_eq!(answer.unwrap(), 42);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryLog {
    service: Option<&'static str>,
    /// The call's request id, as its request-id header carried it.
    request_id: Option<http::HeaderValue>,
}

impl RetryLog {
    /// The retry log, its `service` field the service's name as known now:
    /// the one an [`OtlpConfig`](crate::OtlpConfig) built its resource with,
    /// else `OTEL_SERVICE_NAME`, else `service.name` in
    /// `OTEL_RESOURCE_ATTRIBUTES`; none if none is set.
    pub fn new() -> Self {
        Self { service: crate::service::name(), request_id: None }
    }

    /// The same log for one call whose request carries `value` in its
    /// request-id header: what the HTTP integrations do with the log alone
    /// (telemetry off), where no attempt span reads the request. Recorded as
    /// `request_id` when [`request_id`](crate::request_id) accepts it.
    #[must_use]
    pub fn with_request_id(mut self, value: Option<&http::HeaderValue>) -> Self {
        // A clone of the header's bytes, shared with the request: no copy.
        self.request_id = value.cloned();
        self
    }
}

impl Default for RetryLog {
    fn default() -> Self {
        Self::new()
    }
}

impl Observer for RetryLog {
    type Operation = RetryLogOperation;

    fn start(&self, info: &OperationInfo<'_>) -> RetryLogOperation {
        RetryLogOperation {
            common: Common::new(info.dependency, info.operation),
            max_attempts: info.max_attempts,
            last_failure: LastFailureSlot::default(),
            service: self.service,
            request_id: self.request_id.clone(),
        }
    }
}

/// One logical operation whose retries are logged.
#[derive(Debug)]
pub struct RetryLogOperation {
    common: Common,
    max_attempts: u32,
    last_failure: LastFailureSlot,
    service: Option<&'static str>,
    request_id: Option<http::HeaderValue>,
}

impl RetryLogOperation {
    fn subject(&self) -> Subject<'_> {
        let request_id = self.request_id.as_ref().and_then(|value| value.to_str().ok());
        Subject { service: self.service, request_id }
    }
}

impl OperationObserver for RetryLogOperation {
    type Attempt = ();

    fn attempt_started(&mut self, _: &AttemptStart) {}

    fn attempt_finished(&mut self, (): (), attempt: &AttemptEnd) {
        if attempt.error.is_some() {
            self.last_failure.set(LastFailure { error: attempt.error, correlation: Correlation::current() });
        }
    }

    fn waiting(&mut self, wait: &Wait) {
        retry(
            &Span::current(),
            &self.common,
            self.max_attempts,
            wait,
            &self.last_failure.get(),
            self.subject(),
        );
    }

    fn finished(self, finish: &Finish) {
        if gave_up(finish) {
            give_up(
                &Span::current(),
                &self.common,
                self.max_attempts,
                finish,
                &self.last_failure.get(),
                self.subject(),
            );
        }
    }
}

/// One retry is about to wait: INFO `retryscope.backoff`.
pub(crate) fn retry(
    parent: &Span,
    common: &Common,
    max_attempts: u32,
    wait: &Wait,
    failed: &LastFailure,
    subject: Subject<'_>,
) {
    tracing::event!(
        target: names::TARGET,
        parent: parent,
        tracing::Level::INFO,
        service = subject.service,
        request_id = subject.request_id(),
        retryscope.dependency = common.dependency(),
        retryscope.operation = common.operation(),
        retryscope.attempt = i64::from(wait.next_attempt.min(max_attempts)),
        retryscope.max_attempts = i64::from(max_attempts),
        retryscope.retry.reason = error_type_str(wait.error),
        http.response.status_code = http_status(wait.error),
        rpc.grpc.status_code = grpc_code(wait.error),
        delay_ms = millis(wait.delay),
        retryscope.delay.source = wait.source.as_str(),
        trace_id = failed.correlation.trace_id(),
        span_id = failed.correlation.span_id(),
        message = names::BACKOFF_EVENT,
    );
}

/// Whether an operation that ended as `finish` gave up: its retries ran out or
/// were refused, or it was retried and then failed for good. A first attempt
/// that fails permanently (a 404, a validation error) is an answer, not a
/// give-up, and is left to the caller to log.
pub(crate) fn gave_up(finish: &Finish) -> bool {
    match finish.outcome {
        Outcome::Exhausted | Outcome::Throttled => true,
        Outcome::Failure => finish.attempts > 1,
        _ => false,
    }
}

/// The operation gave up: WARN `retryscope.gave_up`.
pub(crate) fn give_up(
    parent: &Span,
    common: &Common,
    max_attempts: u32,
    finish: &Finish,
    last: &LastFailure,
    subject: Subject<'_>,
) {
    let error = last.error.map(error_type_str);
    tracing::event!(
        target: names::TARGET,
        parent: parent,
        tracing::Level::WARN,
        service = subject.service,
        request_id = subject.request_id(),
        retryscope.dependency = common.dependency(),
        retryscope.operation = common.operation(),
        retryscope.attempts = i64::from(finish.attempts),
        retryscope.max_attempts = i64::from(max_attempts),
        retryscope.outcome = finish.outcome.as_str(),
        retryscope.stop_reason = finish.reason.map(stop_reason_str),
        error.r#type = error,
        http.response.status_code = last.error.and_then(http_status),
        rpc.grpc.status_code = last.error.and_then(grpc_code),
        duration_ms = millis(finish.duration),
        trace_id = last.correlation.trace_id(),
        span_id = last.correlation.span_id(),
        message = names::GAVE_UP_EVENT,
    );
}

/// `retryscope.stop_reason`: why the engine stopped, one of
/// [`names::STOP_REASONS`] (`_OTHER` for a reason this crate does not know).
///
/// ```
/// use retryscope::StopReason;
///
/// assert_eq!(retryscope_otel::stop_reason_str(StopReason::CircuitOpen), "circuit_open");
/// ```
pub fn stop_reason_str(reason: StopReason) -> &'static str {
    match reason {
        StopReason::Permanent => names::STOP_PERMANENT,
        StopReason::Unrepeatable => names::STOP_UNREPEATABLE,
        StopReason::AttemptsExhausted => names::STOP_ATTEMPTS_EXHAUSTED,
        StopReason::DeadlineExceeded => names::STOP_DEADLINE_EXCEEDED,
        StopReason::HintTooLong { .. } => names::STOP_HINT_TOO_LONG,
        StopReason::BudgetExhausted => names::STOP_BUDGET_EXHAUSTED,
        StopReason::CircuitOpen => names::STOP_CIRCUIT_OPEN,
        StopReason::RateLimited { .. } => names::STOP_RATE_LIMITED,
        StopReason::UpstreamRetry => names::STOP_UPSTREAM_RETRY,
        StopReason::RejectedLocally => names::STOP_REJECTED_LOCALLY,
        StopReason::ConcurrencyLimited { .. } => names::STOP_CONCURRENCY_LIMITED,
        // A reason this crate does not know yet: bounded, never a new value.
        _ => crate::labels::OTHER,
    }
}

/// The HTTP status of a failure, as its own field.
fn http_status(error: ErrorType) -> Option<i64> {
    match error {
        ErrorType::Status(code) => Some(i64::from(code)),
        _ => None,
    }
}

/// The gRPC status code of a failure, as its own field (`rpc.grpc.status_code`).
fn grpc_code(error: ErrorType) -> Option<i64> {
    match error {
        ErrorType::Kind(kind) => retryscope::classify::GRPC_CODE_NAMES
            .iter()
            .position(|name| *name == kind)
            .and_then(|i| i64::try_from(i).ok()),
        _ => None,
    }
}

/// Signed, because OpenTelemetry attributes are `i64` and tracing-opentelemetry
/// turns event fields recorded as `u64` into strings.
pub(crate) fn millis(delay: Duration) -> i64 {
    i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_codes_are_numbered_as_grpc_numbers_them() {
        assert_eq!(grpc_code(ErrorType::Kind("UNAVAILABLE")), Some(14));
        assert_eq!(grpc_code(ErrorType::Kind("RESOURCE_EXHAUSTED")), Some(8));
        assert_eq!(grpc_code(ErrorType::Kind("connect")), None);
        assert_eq!(grpc_code(ErrorType::Status(503)), None);
    }

    #[test]
    fn every_stop_reason_has_a_listed_name() {
        let reasons = [
            StopReason::Permanent,
            StopReason::Unrepeatable,
            StopReason::AttemptsExhausted,
            StopReason::DeadlineExceeded,
            StopReason::HintTooLong {
                hint: retryscope::Hint::retry_after(Duration::ZERO),
                limit: Duration::ZERO,
            },
            StopReason::BudgetExhausted,
            StopReason::CircuitOpen,
            StopReason::RateLimited {
                source: retryscope::pace::HoldSource::RateLimit,
                wait: Duration::ZERO,
                limit: Duration::ZERO,
            },
            StopReason::UpstreamRetry,
            StopReason::RejectedLocally,
            StopReason::ConcurrencyLimited { limit: 1, waited: Duration::ZERO },
        ];
        let names: Vec<_> = reasons.into_iter().map(stop_reason_str).collect();
        assert_eq!(names, names::STOP_REASONS);
    }
}
