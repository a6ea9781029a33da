//! The engine's observer: turns attempts, waits and outcomes into spans,
//! metrics and the retry log (one event per retry, one per give-up).
//!
//! By default an operation costs its attempts' spans and nothing more: each
//! attempt is a CLIENT span under the caller's span, as the OpenTelemetry HTTP
//! conventions draw retries, so a call that succeeds at once makes one span.
//! [`OtelObserver::with_operation_spans`] adds an INTERNAL span per operation
//! above its attempts.

use crate::labels::{Common, attempt_value, error_type_str};
use crate::log::{self, Correlation, LastFailure, LastFailureSlot, Subject};
use crate::metrics::RetryMetrics;
use crate::names;
use crate::outcome_slot::{OutcomeSlot, Pending};
use crate::spans::{AttemptInfo, DefaultAttemptSpan, MakeAttemptSpan, operation_span};
use opentelemetry::InstrumentationScope;
use opentelemetry::metrics::Meter;
use retryscope::observe::{
    AttemptEnd, AttemptScope, AttemptStart, Finish, HedgeOutcome, Held, Observer, OperationInfo,
    OperationObserver, Wait,
};
use retryscope::overload::Priority;
use retryscope::{ErrorType, Outcome, StopReason};
use std::sync::Arc;
use tracing::Span;

/// Instruments retries with OpenTelemetry: pass it to the engine's
/// `.observe(..)`.
///
/// It holds the [`RetryMetrics`] (an [`Arc`](std::sync::Arc) inside) and the
/// attempt-span factory, so one instance, cloned freely, serves every call.
///
/// Each attempt is a CLIENT span, a child of the span current when the
/// operation starts (siblings under the caller, as the OpenTelemetry HTTP
/// conventions show retries); a call outside any span makes each attempt the
/// root of its own trace, as those conventions do too. The retry log's events
/// are events of the failed attempt's span. For one INTERNAL span per
/// operation above its attempts, use [`with_operation_spans`](Self::with_operation_spans).
///
/// ```
/// use retryscope::{Policy, Retryable};
/// use retryscope_otel::OtelObserver;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let observer = OtelObserver::global();
/// let answer = (|| async { Ok::<_, std::io::Error>(42) })
///     .retry(Policy::interactive())
///     .observe(observer.clone())
///     .dependency("inventory")
///     .operation("reserve")
///     .await;
/// assert_eq!(answer.unwrap(), 42);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct OtelObserver<S = DefaultAttemptSpan> {
    metrics: RetryMetrics,
    spans: S,
    /// Whether the retry log is written (it is unless turned off itself).
    log: bool,
    /// Whether each operation gets an INTERNAL span above its attempts.
    operation_spans: bool,
    /// The retry log's `service`, copied when the observer is built.
    service: Option<&'static str>,
    /// `retryscope.config.hash` of a configured call (set per call).
    config_hash: Option<Arc<str>>,
    /// Where a call with a fallback parks its outcome (set per call).
    outcome_slot: Option<OutcomeSlot>,
    /// Whether its instruments are the API's no-ops: made on the global
    /// meter provider while none was installed ([`is_heard`](Self::is_heard)).
    noop_meter: bool,
}

impl OtelObserver {
    /// An observer recording into `metrics`, with the default attempt spans.
    pub fn new(metrics: RetryMetrics) -> Self {
        Self {
            metrics,
            spans: DefaultAttemptSpan,
            log: true,
            operation_spans: false,
            service: crate::service::name(),
            config_hash: None,
            outcome_slot: None,
            noop_meter: false,
        }
    }

    /// An observer whose instruments are created on `meter`.
    pub fn from_meter(meter: &Meter) -> Self {
        Self::new(RetryMetrics::new(meter))
    }

    /// An observer on the global meter provider, with the instrumentation scope
    /// `retryscope` and this crate's version.
    ///
    /// Instruments are bound to the provider that is global *when this is
    /// called*: install the provider first (e.g. with `init_otlp`), then create
    /// the observer once and clone it.
    pub fn global() -> Self {
        let (meter, noop) = global_meter();
        Self::from_meter(&meter).with_noop_meter(noop)
    }

    /// The same observer, told whether its meter is the API's no-op.
    pub(crate) fn with_noop_meter(self, noop_meter: bool) -> Self {
        Self { noop_meter, ..self }
    }
}

impl<S> OtelObserver<S> {
    /// Replaces the attempt-span factory, keeping the metrics. See
    /// [`MakeAttemptSpan`] for what a span must declare.
    pub fn with_attempt_spans<S2: MakeAttemptSpan + Clone>(self, spans: S2) -> OtelObserver<S2> {
        OtelObserver {
            metrics: self.metrics,
            spans,
            log: self.log,
            operation_spans: self.operation_spans,
            service: self.service,
            config_hash: self.config_hash,
            outcome_slot: self.outcome_slot,
            noop_meter: self.noop_meter,
        }
    }

    /// Parks the outcome of the call this observer (a per-call clone)
    /// observes in `slot` instead of recording it when the engine stops, so
    /// that the integration can record `fallback` for a call its fallback
    /// answered ([`OutcomeSlot`]); `None`: recorded at once.
    #[must_use]
    pub fn with_outcome_slot(mut self, slot: Option<OutcomeSlot>) -> Self {
        self.outcome_slot = slot;
        self
    }

    /// Marks the spans of the call this observer (a per-call clone) observes
    /// with `retryscope.config.hash`: the hash of the configuration snapshot
    /// the call started with (`None`: not configured, no attribute). The hash
    /// is shared, not copied: an `Arc` clone per call.
    #[must_use]
    pub fn with_config_hash(mut self, hash: Option<Arc<str>>) -> Self {
        self.config_hash = hash;
        self
    }

    /// Opens an INTERNAL span per operation, a child of the caller's span,
    /// with the attempts under it: the operation's name (else
    /// `retry {dependency}`), its attempts and outcome, and the retry log's
    /// events. Off by default: on a call that succeeds at once, that span
    /// repeats the attempt span and costs as much again.
    #[must_use]
    pub fn with_operation_spans(mut self) -> Self {
        self.operation_spans = true;
        self
    }

    /// Whether anything this observer does can be seen now: `false` when
    /// its metrics go to the API's no-op (it was made on the global meter
    /// provider while none was installed: see [`global`](Self::global)) and
    /// no `tracing` subscriber has ever been set in the process, so that its
    /// spans, its retry log's events and the `traceparent` they carry reach
    /// nobody. An integration skips such an observer for the call (about a
    /// thousand instructions a reqwest call); a subscriber set later is
    /// seen by the next call.
    ///
    /// ```
    /// use retryscope_otel::OtelObserver;
    ///
    /// // No provider installed, no subscriber set: nobody would hear it.
    /// assert!(!OtelObserver::global().is_heard());
    /// let _subscriber = tracing::subscriber::set_default(tracing::subscriber::NoSubscriber::default());
    /// assert!(OtelObserver::global().is_heard());
    /// ```
    pub fn is_heard(&self) -> bool {
        !self.noop_meter || tracing::dispatcher::has_been_set()
    }

    /// Turns the retry log off, keeping the spans and metrics (the log has
    /// its own switch, so that turning the rest off does not silence it).
    #[must_use]
    pub fn no_retry_log(mut self) -> Self {
        self.log = false;
        self
    }

    /// The instruments this observer records into.
    pub fn metrics(&self) -> &RetryMetrics {
        &self.metrics
    }
}

/// A meter of the global meter provider's, with this crate's scope, and
/// whether that provider is the API's no-op, as it is until a program
/// installs one. Told by its size: a provider that records keeps its
/// pipelines (the SDK's holds them), and the no-op holds nothing
/// (`NoopMeterProvider` is of size zero). A provider of size zero that
/// records into a `static` of its own would be taken for the no-op.
pub(crate) fn global_meter() -> (Meter, bool) {
    let provider = opentelemetry::global::meter_provider();
    let noop = std::mem::size_of_val(&*provider) == 0;
    (provider.meter_with_scope(scope()), noop)
}

/// The instrumentation scope of this crate's meter: `retryscope` and the
/// crate's version.
pub fn scope() -> InstrumentationScope {
    InstrumentationScope::builder(names::TARGET).with_version(env!("CARGO_PKG_VERSION")).build()
}

impl<S: MakeAttemptSpan + Clone> Observer for OtelObserver<S> {
    type Operation = OtelOperation<S>;

    fn start(&self, info: &OperationInfo<'_>) -> OtelOperation<S> {
        let common = Common::new(info.dependency, info.operation);
        self.metrics.request_started(&common);
        // A hedged call's copies overlap: without a span of their own to
        // group them, they would be siblings of everything else the caller
        // does, so a hedged call always gets its operation span.
        let parent = if self.operation_spans || info.hedged {
            Parent::Operation(operation_span(info, self.config_hash.as_deref()))
        } else {
            Parent::caller()
        };
        OtelOperation {
            metrics: self.metrics.clone(),
            spans: self.spans.clone(),
            parent,
            failed: None,
            common,
            max_attempts: info.max_attempts,
            priority: info.priority,
            last_failure: LastFailureSlot::default(),
            log: self.log,
            service: self.service,
            config_hash: self.config_hash.clone(),
            outcome_slot: self.outcome_slot.clone(),
        }
    }
}

/// The span an operation's attempts hang under.
#[derive(Debug)]
enum Parent {
    /// The span current when the operation started (`Span::none()` outside any).
    Caller(Span),
    /// The operation's own INTERNAL span ([`OtelObserver::with_operation_spans`]).
    Operation(Span),
}

impl Parent {
    fn caller() -> Self {
        Self::Caller(Span::current())
    }

    fn span(&self) -> &Span {
        match self {
            Self::Caller(span) | Self::Operation(span) => span,
        }
    }
}

/// One logical operation being observed: the span its attempts hang under,
/// and its labels.
#[derive(Debug)]
pub struct OtelOperation<S = DefaultAttemptSpan> {
    metrics: RetryMetrics,
    spans: S,
    parent: Parent,
    /// The span of the attempt that just failed, kept open until the retry
    /// log has written what follows it (the engine reports the wait or the
    /// stop right after the attempt ends), so that those events belong to it.
    /// `None` with the log off or with operation spans.
    failed: Option<Span>,
    common: Common,
    max_attempts: u32,
    /// Labels the refusals: sheddable calls are refused first.
    priority: Priority,
    last_failure: LastFailureSlot,
    log: bool,
    service: Option<&'static str>,
    config_hash: Option<Arc<str>>,
    outcome_slot: Option<OutcomeSlot>,
}

impl<S> OtelOperation<S> {
    /// The span the attempts are children of: the operation's own span with
    /// [`OtelObserver::with_operation_spans`], else the span that was current
    /// when the operation started (possibly [`Span::none`]).
    pub fn parent(&self) -> &Span {
        self.parent.span()
    }

    /// Where an event of the retry log goes: the attempt that just failed, if
    /// its span is still open, else the attempts' parent.
    fn event_parent(&self) -> &Span {
        self.failed.as_ref().unwrap_or_else(|| self.parent.span())
    }
}

impl<S: MakeAttemptSpan> OtelOperation<S> {
    /// The log's `service` and `request_id`: the request's id is looked up
    /// only now, for a line that is written.
    fn subject(&self) -> Subject<'_> {
        Subject { service: self.service, request_id: self.spans.request_id() }
    }
}

/// One attempt being observed: the attempt's span, entered for every poll of
/// the attempt's future and ended when the attempt ends.
#[derive(Debug)]
pub struct OtelAttempt {
    span: Span,
    /// [`MakeAttemptSpan::BUILDS_IN_SPAN`] of the spans' maker.
    builds_in_span: bool,
}

impl OtelAttempt {
    /// The attempt's span.
    pub fn span(&self) -> &Span {
        &self.span
    }
}

impl AttemptScope for OtelAttempt {
    fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        self.span.in_scope(f)
    }

    fn in_build_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        if self.builds_in_span { self.span.in_scope(f) } else { f() }
    }
}

impl<S: MakeAttemptSpan> OperationObserver for OtelOperation<S> {
    type Attempt = OtelAttempt;

    fn attempt_started(&mut self, attempt: &AttemptStart) -> OtelAttempt {
        // The engine reports the wait (or the stop) before another attempt
        // starts; should it ever not, the failed attempt's span ends here.
        self.failed = None;
        if attempt.number > 1 {
            if attempt.hedge {
                self.metrics.hedge_sent(&self.common);
            } else {
                let reason = error_type_str(attempt.retry_of.unwrap_or(ErrorType::OTHER));
                self.metrics.retry_started(&self.common, reason);
            }
        }
        let info = AttemptInfo {
            parent: self.parent.span(),
            dependency: self.common.dependency(),
            operation: self.common.operation(),
            attempt: attempt.number,
            max_attempts: self.max_attempts,
            hedge: attempt.hedge,
            config_hash: self.config_hash.as_deref(),
        };
        let span = self.spans.make_span(&info);
        if attempt.hedge {
            span.record(names::HEDGE, true);
        }
        OtelAttempt { span, builds_in_span: S::BUILDS_IN_SPAN }
    }

    fn attempt_finished(&mut self, scope: OtelAttempt, attempt: &AttemptEnd) {
        let error = attempt.error.map(error_type_str);
        let number = attempt_value(attempt.number, self.max_attempts);
        match attempt.hedge {
            Some(outcome) => {
                scope.span.record(names::HEDGE_OUTCOME, outcome.as_str());
                if outcome == HedgeOutcome::Won && attempt.number > 1 {
                    self.metrics.hedge_won(&self.common);
                }
                // A cancelled copy did not finish: its duration is ours (how
                // long until another copy won), not the dependency's.
                if outcome != HedgeOutcome::Cancelled {
                    self.metrics.attempt_finished(&self.common, number, error, attempt.duration);
                }
            }
            None => self.metrics.attempt_finished(&self.common, number, error, attempt.duration),
        }
        if let Some(error) = error {
            scope.span.record(names::ERROR_TYPE, error);
            scope.span.record("otel.status_code", "ERROR");
            // Only failures are logged, so only they pay for the span's ids,
            // and only when the log is on.
            if self.log {
                self.last_failure
                    .set(LastFailure { error: attempt.error, correlation: Correlation::of(&scope.span) });
                if matches!(self.parent, Parent::Caller(_)) {
                    // Closed once the wait or the stop is logged, a moment from now.
                    self.failed = Some(scope.span);
                    return;
                }
            }
        }
        // Dropping the last handle closes the span: its end time is now.
        drop(scope);
    }

    fn waiting(&mut self, wait: &Wait) {
        let source = wait.source.as_str();
        self.metrics.waited(&self.common, source, wait.delay);
        // One event serves as the span event of the failed attempt (or of the
        // operation span) and as the structured log line of the retry.
        if self.log {
            log::retry(
                self.event_parent(),
                &self.common,
                self.max_attempts,
                wait,
                &self.last_failure.get(),
                self.subject(),
            );
        }
        // The failed attempt's span has said all it will: close it.
        self.failed = None;
    }

    fn held(&mut self, held: &Held) {
        let source = held.source.as_str();
        self.metrics.held(&self.common, source, held.wait);
        // Like the backoff event, one event serves as a span event and as a
        // line of the retry log, under the log's switch. A retry's hold comes
        // just before its wait, while the failed attempt's span is still open.
        if !self.log {
            return;
        }
        tracing::event!(
            target: names::TARGET,
            parent: self.event_parent(),
            tracing::Level::INFO,
            retryscope.dependency = self.common.dependency(),
            retryscope.attempt = i64::from(held.attempt),
            retryscope.pace.source = source,
            // `crate::`: with tracing's `log` feature on (sqlx turns it on), a
            // bare `log::` inside the macro names the `log` crate.
            retryscope.pace.held_ms = crate::log::millis(held.wait),
            "{}",
            names::HELD_EVENT,
        );
    }

    fn finished(self, finish: &Finish) {
        let reason = throttle_reason(finish.reason);
        if let Some(reason) = reason {
            self.metrics.throttled(&self.common, reason, self.priority);
        }
        // Without an operation span, the outcome and the stop reason are the
        // give-up event's: a success says nothing the attempt span does not.
        if self.log && log::gave_up(finish) {
            log::give_up(
                self.event_parent(),
                &self.common,
                self.max_attempts,
                finish,
                &self.last_failure.get(),
                self.subject(),
            );
        }
        let span = match self.parent {
            Parent::Operation(span) => Some(span),
            Parent::Caller(_) => None,
        };
        let pending = Pending {
            metrics: self.metrics,
            common: self.common,
            outcome: finish.outcome.as_str(),
            // An operation that sent nothing has no attempt figure: recorded
            // with `retryscope.attempts=0` it would read as "needed a retry"
            // (!= 1) and sit below every bucket of the attempt quantiles, so
            // it is counted as refused instead.
            attempts: if finish.attempts == 0 {
                0
            } else {
                i64::from(finish.attempts.min(self.max_attempts))
            },
            duration: finish.duration,
            throttle_reason: reason,
            priority: self.priority,
            span,
            error: is_error(finish.outcome),
            fallback: false,
        };
        // With a slot, the integration says whether a fallback answered
        // before the outcome is recorded; without one, it is recorded now.
        match &self.outcome_slot {
            Some(slot) => slot.hold(pending),
            None => drop(pending),
        }
    }
}

/// `retryscope.throttle.reason` for a refused retry, if the stop was one.
fn throttle_reason(reason: Option<StopReason>) -> Option<&'static str> {
    match reason? {
        StopReason::BudgetExhausted => Some(names::THROTTLED_BY_BUDGET),
        StopReason::CircuitOpen => Some(names::THROTTLED_BY_BREAKER),
        StopReason::RateLimited { .. } => Some(names::THROTTLED_BY_PACER),
        StopReason::UpstreamRetry => Some(names::THROTTLED_BY_UPSTREAM),
        StopReason::RejectedLocally => Some(names::THROTTLED_LOCALLY),
        StopReason::ConcurrencyLimited { .. } => Some(names::THROTTLED_BY_LIMIT),
        _ => None,
    }
}

/// Whether the operation span (with operation spans on) gets status Error. A cancelled operation did not
/// fail: the caller lost interest.
fn is_error(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::Failure | Outcome::Exhausted | Outcome::Throttled)
}
