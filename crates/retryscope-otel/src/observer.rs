//! The engine's observer: turns attempts, waits and outcomes into spans,
//! metrics and the retry log (one event per retry, one per give-up).
//!
//! By default an operation costs its attempts' spans and nothing more: each
//! attempt is a CLIENT span under the caller's span, as the OpenTelemetry HTTP
//! conventions draw retries, so a call that succeeds at once makes one span.
//! [`OtelObserver::with_operation_spans`] adds an INTERNAL span per operation
//! above its attempts.

use crate::labels::Common;
use crate::log::LastFailureSlot;
use crate::metrics::RetryMetrics;
use crate::names;
use crate::operation::{OtelOperation, Parent};
use crate::outcome_slot::OutcomeSlot;
use crate::spans::{DefaultAttemptSpan, MakeAttemptSpan, operation_span};
use opentelemetry::InstrumentationScope;
use opentelemetry::metrics::Meter;
use retryscope::observe::{Observer, OperationInfo};
use std::sync::Arc;

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
