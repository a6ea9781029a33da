//! The metric instruments of the telemetry contract (docs/telemetry.md), created
//! once per meter.

use crate::labels::{Common, with_attrs};
use crate::names;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};
use retryscope::overload::Priority;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The retry instruments: counters for requests, retries, refusals and
/// hedges, and
/// histograms for attempt durations, operation durations and waits.
///
/// Create it once per [`Meter`] and share it: it is an [`Arc`] inside, so
/// cloning is cheap, and creating instruments per call would cost a lookup in the
/// SDK every time.
///
/// ```
/// use opentelemetry::metrics::MeterProvider;
/// use retryscope_otel::{OtelObserver, RetryMetrics};
///
/// # let provider = opentelemetry::global::meter_provider();
/// let metrics = RetryMetrics::new(&provider.meter("my-service"));
/// let observer = OtelObserver::new(metrics);
/// # drop(observer);
/// ```
#[derive(Clone)]
pub struct RetryMetrics {
    inner: Arc<Instruments>,
}

struct Instruments {
    requests: Counter<u64>,
    retries: Counter<u64>,
    throttled: Counter<u64>,
    refused: Counter<u64>,
    hedges: Counter<u64>,
    hedge_wins: Counter<u64>,
    attempt_duration: Histogram<f64>,
    request_duration: Histogram<f64>,
    backoff_delay: Histogram<f64>,
    pace_held: Histogram<f64>,
}

impl RetryMetrics {
    /// Creates the instruments on `meter`, with the units and bucket boundaries of
    /// the telemetry contract.
    pub fn new(meter: &Meter) -> Self {
        let counter = |name: &'static str, unit: &'static str, description: &'static str| {
            meter.u64_counter(name).with_unit(unit).with_description(description).build()
        };
        let histogram = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit(names::UNIT_SECONDS)
                .with_description(description)
                .with_boundaries(names::DURATION_BUCKETS.to_vec())
                .build()
        };
        let inner = Instruments {
            requests: counter(names::REQUESTS, names::UNIT_REQUEST, "Logical operations started."),
            retries: counter(names::RETRIES, names::UNIT_RETRY, "Retries started."),
            throttled: counter(
                names::THROTTLED,
                names::UNIT_RETRY,
                "Retries (or calls) refused by the retry budget, the circuit breaker or the pacer.",
            ),
            refused: counter(
                names::REFUSED,
                names::UNIT_REQUEST,
                "Logical operations that ended before any attempt was sent.",
            ),
            hedges: counter(
                names::HEDGES,
                names::UNIT_HEDGE,
                "Copies of hedged calls sent beyond the first.",
            ),
            hedge_wins: counter(
                names::HEDGE_WINS,
                names::UNIT_HEDGE,
                "Hedged calls won by a copy other than the first.",
            ),
            attempt_duration: histogram(names::ATTEMPT_DURATION, "Duration of each attempt."),
            request_duration: histogram(
                names::REQUEST_DURATION,
                "Duration of each logical operation, waits included.",
            ),
            backoff_delay: histogram(names::BACKOFF_DELAY, "Waits between attempts."),
            pace_held: histogram(
                names::PACE_HELD,
                "How long the pacer held a call back before an attempt was sent.",
            ),
        };
        Self { inner: Arc::new(inner) }
    }

    pub(crate) fn request_started(&self, common: &Common) {
        with_attrs!(common, [], |attrs: &[KeyValue]| self.inner.requests.add(1, attrs));
    }

    pub(crate) fn retry_started(&self, common: &Common, reason: &'static str) {
        with_attrs!(common, [names::RETRY_REASON => reason], |attrs: &[KeyValue]| {
            self.inner.retries.add(1, attrs);
        });
    }

    pub(crate) fn hedge_sent(&self, common: &Common) {
        with_attrs!(common, [], |attrs: &[KeyValue]| self.inner.hedges.add(1, attrs));
    }

    pub(crate) fn hedge_won(&self, common: &Common) {
        with_attrs!(common, [], |attrs: &[KeyValue]| self.inner.hedge_wins.add(1, attrs));
    }

    pub(crate) fn attempt_finished(
        &self,
        common: &Common,
        attempt: i64,
        error: Option<&'static str>,
        duration: Duration,
    ) {
        let seconds = duration.as_secs_f64();
        let record = |attrs: &[KeyValue]| self.inner.attempt_duration.record(seconds, attrs);
        match error {
            Some(error) => {
                with_attrs!(common, [names::ATTEMPT => attempt, names::ERROR_TYPE => error], record)
            }
            None => with_attrs!(common, [names::ATTEMPT => attempt], record),
        }
    }

    pub(crate) fn waited(&self, common: &Common, source: &'static str, delay: Duration) {
        with_attrs!(common, [names::DELAY_SOURCE => source], |attrs: &[KeyValue]| {
            self.inner.backoff_delay.record(delay.as_secs_f64(), attrs);
        });
    }

    pub(crate) fn held(&self, common: &Common, source: &'static str, wait: Duration) {
        with_attrs!(common, [names::PACE_SOURCE => source], |attrs: &[KeyValue]| {
            self.inner.pace_held.record(wait.as_secs_f64(), attrs);
        });
    }

    pub(crate) fn finished(&self, common: &Common, outcome: &'static str, attempts: i64, duration: Duration) {
        with_attrs!(common, [names::OUTCOME => outcome, names::ATTEMPTS => attempts], |attrs: &[KeyValue]| {
            self.inner.request_duration.record(duration.as_secs_f64(), attrs);
        });
    }

    /// An operation that ended before any attempt was sent: counted apart, so
    /// that the operation histogram's attempt figures count attempts.
    /// A guard's refusal carries the call's priority (two values), so that
    /// sheddable calls refused first show.
    pub(crate) fn refused(
        &self,
        common: &Common,
        outcome: &'static str,
        reason: Option<&'static str>,
        priority: Priority,
    ) {
        let add = |attrs: &[KeyValue]| self.inner.refused.add(1, attrs);
        match reason {
            Some(reason) => with_attrs!(
                common,
                [
                    names::OUTCOME => outcome,
                    names::THROTTLE_REASON => reason,
                    names::PRIORITY => priority.as_str()
                ],
                add
            ),
            None => with_attrs!(common, [names::OUTCOME => outcome], add),
        }
    }

    pub(crate) fn throttled(&self, common: &Common, reason: &'static str, priority: Priority) {
        let add = |attrs: &[KeyValue]| self.inner.throttled.add(1, attrs);
        with_attrs!(common, [names::THROTTLE_REASON => reason, names::PRIORITY => priority.as_str()], add);
    }
}

impl fmt::Debug for RetryMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryMetrics").finish_non_exhaustive()
    }
}
