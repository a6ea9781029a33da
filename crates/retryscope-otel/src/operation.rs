//! One operation being observed ([`OtelOperation`], which
//! [`OtelObserver`](crate::OtelObserver) starts) and each of its attempts
//! ([`OtelAttempt`]): the spans, the metric updates and the retry log's
//! events as the engine reports attempts, waits and the outcome.

use crate::labels::{Common, attempt_value, error_type_str};
use crate::log::{self, Correlation, LastFailure, LastFailureSlot, Subject};
use crate::metrics::RetryMetrics;
use crate::names;
use crate::outcome_slot::{OutcomeSlot, Pending};
use crate::spans::{AttemptInfo, DefaultAttemptSpan, MakeAttemptSpan};
use retryscope::observe::{
    AttemptEnd, AttemptScope, AttemptStart, Finish, HedgeOutcome, Held, OperationObserver, Wait,
};
use retryscope::overload::Priority;
use retryscope::{ErrorType, Outcome, StopReason};
use std::sync::Arc;
use tracing::Span;

/// The span an operation's attempts hang under.
#[derive(Debug)]
pub(crate) enum Parent {
    /// The span current when the operation started (`Span::none()` outside any).
    Caller(Span),
    /// The operation's own INTERNAL span
    /// ([`OtelObserver::with_operation_spans`](crate::OtelObserver::with_operation_spans)).
    Operation(Span),
}

impl Parent {
    pub(crate) fn caller() -> Self {
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
    pub(crate) metrics: RetryMetrics,
    pub(crate) spans: S,
    pub(crate) parent: Parent,
    /// The span of the attempt that just failed, kept open until the retry
    /// log has written what follows it (the engine reports the wait or the
    /// stop right after the attempt ends), so that those events belong to it.
    /// `None` with the log off or with operation spans.
    pub(crate) failed: Option<Span>,
    pub(crate) common: Common,
    pub(crate) max_attempts: u32,
    /// Labels the refusals: sheddable calls are refused first.
    pub(crate) priority: Priority,
    pub(crate) last_failure: LastFailureSlot,
    pub(crate) log: bool,
    pub(crate) service: Option<&'static str>,
    pub(crate) config_hash: Option<Arc<str>>,
    pub(crate) outcome_slot: Option<OutcomeSlot>,
}

impl<S> OtelOperation<S> {
    /// The span the attempts are children of: the operation's own span with
    /// [`OtelObserver::with_operation_spans`](crate::OtelObserver::with_operation_spans),
    /// else the span that was current when the operation started (possibly
    /// [`Span::none`]).
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
