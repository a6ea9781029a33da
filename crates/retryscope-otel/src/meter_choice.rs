//! Where an integration's metrics go, and the observers that choice makes:
//! written once for every integration's builder (reqwest, tower, sqlx).

use crate::{OtelObserver, RetryLog};
use opentelemetry::metrics::Meter;

/// Where an integration's metrics go, as its builder records it: the global
/// meter provider's (the default), a meter of the caller's, or nowhere
/// (`no_telemetry()`). Not [`Telemetry`](crate::Telemetry), the providers a
/// program sets up.
///
/// ```
/// use retryscope_otel::MeterChoice;
///
/// let (meter, observer, log) = MeterChoice::Off.observers(true, false);
/// // No metrics and no spans; the retry log stays on by itself.
/// assert!(meter.is_none() && observer.is_none() && log.is_some());
/// ```
#[derive(Debug, Clone, Default)]
pub enum MeterChoice {
    /// The global meter provider's, as it is when the client is built.
    #[default]
    Global,
    /// This meter.
    Meter(Meter),
    /// Nowhere: no metrics and no spans.
    Off,
}

impl MeterChoice {
    /// The meter to record with, if any.
    pub fn meter(self) -> Option<Meter> {
        match self {
            MeterChoice::Global => Some(crate::observer::global_meter().0),
            MeterChoice::Meter(meter) => Some(meter),
            MeterChoice::Off => None,
        }
    }

    /// The meter, the observer that records with it, and the retry log for
    /// when telemetry is off; once, when the client is built. With telemetry
    /// on, the observer writes the log itself (unless `retry_log` is false);
    /// with it off, the log stays on alone unless turned off too.
    /// `operation_spans` gives each call an INTERNAL span over its attempts.
    pub fn observers(
        self,
        retry_log: bool,
        operation_spans: bool,
    ) -> (Option<Meter>, Option<OtelObserver>, Option<RetryLog>) {
        // Whether the meter is the API's no-op is known only of the global
        // provider's: an observer that nobody hears is skipped per call.
        let (meter, noop) = match self {
            MeterChoice::Global => {
                let (meter, noop) = crate::observer::global_meter();
                (Some(meter), noop)
            }
            choice => (choice.meter(), false),
        };
        let observer = meter
            .as_ref()
            .map(|meter| OtelObserver::from_meter(meter).with_noop_meter(noop))
            .map(|o| if retry_log { o } else { o.no_retry_log() })
            .map(|o| if operation_spans { o.with_operation_spans() } else { o });
        let log = (observer.is_none() && retry_log).then(RetryLog::new);
        (meter, observer, log)
    }
}
