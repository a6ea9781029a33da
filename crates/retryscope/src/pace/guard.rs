//! A pacer as a [`Guard`]: a retry's pace is asked at its plan, with its
//! backoff (a hold lengthens the wait, a pace past the deadline refuses it
//! at once); every attempt is paced again as it is sent. The rate in force
//! is published as a gauge.

use super::Pacer;
use crate::guard::{Admission, Attempt, End, Gauge, GaugeKind, Guard, Worst};
use crate::outcome::StopReason;
use crate::wait::pace::{self, Hold};

/// `retryscope.pace.rate` (`{request}/s`): the send rate the pacer allows
/// while a pace is in force ([`Pacer::allowed_rate`]), absent otherwise; the
/// lowest, the slowest pace, is the worst.
pub(crate) const RATE: Gauge = Gauge {
    name: "retryscope.pace.rate",
    description: "The send rate the dependency's pacer allows while a pace is in force.",
    unit: "{request}/s",
    worst: Worst::Lowest,
    kind: GaugeKind::F64,
};

impl Guard for Pacer {
    /// Whether the schedule has let this attempt go already (its plan or an
    /// earlier hold asked it): then only the adaptive rate's token is taken
    /// at its send.
    type Permit = bool;

    #[inline]
    fn admit(&self, attempt: Attempt) -> Admission<bool> {
        // Only a retry planned ahead of its backoff is paced at its plan; an
        // attempt due now is paced as it is sent.
        let Some(wait) = attempt.wait() else { return Admission::Go(false) };
        // The pace in force when the wait is over.
        self.offered();
        if self.is_idle() {
            return Admission::Go(true);
        }
        decide(pace::after_wait(self, wait, attempt.remaining()), true)
    }

    #[inline]
    fn send(&self, attempt: Attempt, scheduled: &mut bool) -> Admission {
        let asked = std::mem::replace(scheduled, true);
        // A send that no plan nor hold counted yet.
        if !asked {
            self.offered();
        }
        if self.is_idle() {
            return Admission::Go(());
        }
        decide(pace::before_send(self, asked, attempt.remaining()), ())
    }

    /// The pacer learns from answers through the call's classifier
    /// ([`Classify::pace`](crate::classify::Classify::pace)), not here.
    #[inline]
    fn settle(&self, _attempt: Attempt, _scheduled: bool, _end: End) {}

    /// Its rate while a pace is in force; nothing otherwise.
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        if let Some(rate) = self.allowed_rate() {
            report(&RATE, rate);
        }
    }

    /// Its rate, whether or not a pace is in force now: a pacer starts
    /// without one, and its gauge must be registered all the same.
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        gauge(&RATE);
    }
}

/// The pace's answer as an admission keeping `permit`.
fn decide<P>(hold: Result<Hold, StopReason>, permit: P) -> Admission<P> {
    match hold {
        Ok(None) => Admission::Go(permit),
        Ok(Some((wait, source))) => Admission::Hold { wait, source: Some(source), permit },
        Err(reason) => Admission::Refuse(reason),
    }
}
