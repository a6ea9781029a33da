//! Envoy's retry budget as a [`Guard`]: see [`InFlightBudget`].

use crate::guard::{Admission, Attempt, End, Gauge, GaugeKind, Guard, Worst};
use crate::outcome::StopReason;
use crate::setting::SettingError;
use crate::setting::SettingValue;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Envoy's retry budget: retries *in flight* at most a share of the calls in
/// progress, with a floor. Cheap to clone: clones share their counts.
///
/// A [`RetryBudget`](crate::RetryBudget) caps how many retries *start* per
/// request over a window; this caps how many are *outstanding at once*.
/// During an outage every call fails and wants its retry at the same moment:
/// a rate over ten seconds lets that burst through until the window fills,
/// a cap on concurrency never does. Envoy's `retry_budget` (20 % of active
/// requests, at least 3 concurrent retries) is the model; the two compose
/// (`with_budget(..)` and `with_guard(..)` on one
/// [`Dependency`](crate::dependency::Dependency)).
///
/// What is counted, exactly:
/// - **Calls in progress**: each call once, from its start to its end, its
///   waits included. Envoy counts the cluster's active and pending upstream
///   requests, retries among them; counting calls instead keeps the share
///   what it says (20 % of calls may have a retry outstanding) whether or
///   not retries are flowing.
/// - **Retries in flight**: a retry from the moment it is planned (at the
///   failure, before its backoff: a refusal costs no wait) until it ends,
///   and a hedge's further copy from when it is sent until it ends or is
///   cancelled. Both are "retries" here, as Envoy counts hedged retries.
/// - **The limit**: `max(min, ⌊share × calls in progress⌋)`. A retry that
///   would exceed it is refused, and the call stops with
///   [`StopReason::BudgetExhausted`], keeping its last result.
///
/// ```
/// use retryscope::budget::InFlightBudget;
/// use retryscope::guard::{Admission, Attempt, End, Guard};
/// use retryscope::StopReason;
///
/// // Envoy's defaults: 20 %, at least 3.
/// let budget = InFlightBudget::envoy();
/// for _ in 0..20 {
///     budget.call_started();
/// }
/// // Twenty calls in progress: four retries may be out at once.
/// for number in 0..4 {
///     assert_eq!(budget.admit(Attempt::retry(2 + number)), Admission::Go(()));
/// }
/// assert_eq!(budget.admit(Attempt::retry(2)), Admission::Refuse(StopReason::BudgetExhausted));
/// budget.settle(Attempt::retry(2), (), End::Failed);
/// assert_eq!(budget.admit(Attempt::retry(2)), Admission::Go(()));
/// # Ok::<(), retryscope::SettingError>(())
/// ```
#[derive(Clone)]
pub struct InFlightBudget {
    inner: Arc<Inner>,
}

struct Inner {
    /// The share, in thousandths: integral, so the limit needs no float.
    per_mille: u32,
    min: u32,
    calls: AtomicU32,
    retries: AtomicU32,
}

impl InFlightBudget {
    /// The most a floor may be: more concurrent retries than any one
    /// process sends.
    pub(super) const MAX_MIN: u32 = 100_000;

    /// Retries in flight at most `share` (in `0.001..=1`) of the calls in
    /// progress, and at least `min` (at most 100,000).
    pub fn new(share: f64, min: u32) -> Result<Self, SettingError> {
        if !(0.001..=1.0).contains(&share) {
            return Err(SettingError::budget("share", SettingValue::Number(share)));
        }
        if min > Self::MAX_MIN {
            return Err(SettingError::budget("min", SettingValue::Count(min)));
        }
        // In range, so the product is within 1..=1000.
        Ok(Self::with((share * 1000.0).round() as u32, min))
    }

    /// Envoy's defaults: 20 % of the calls in progress, at least 3.
    pub fn envoy() -> Self {
        Self::with(200, 3)
    }

    /// A budget of `per_mille` thousandths of the calls, at least `min`: both in range.
    fn with(per_mille: u32, min: u32) -> Self {
        let inner = Inner { per_mille, min, calls: AtomicU32::new(0), retries: AtomicU32::new(0) };
        Self { inner: Arc::new(inner) }
    }

    /// The share of the calls in progress that may have a retry in flight.
    pub(crate) fn share(&self) -> f64 {
        f64::from(self.inner.per_mille) / 1000.0
    }

    /// The floor: retries always allowed in flight.
    pub(crate) fn min(&self) -> u32 {
        self.inner.min
    }

    /// Retries planned or running now.
    pub fn in_flight(&self) -> u32 {
        self.inner.retries.load(Ordering::Acquire)
    }

    /// Calls in progress now.
    pub fn calls(&self) -> u32 {
        self.inner.calls.load(Ordering::Acquire)
    }

    /// How many retries may be in flight now.
    pub(crate) fn limit(&self) -> u32 {
        let calls = u64::from(self.calls());
        // At most u32::MAX × 1000 / 1000: fits.
        let share = u32::try_from(calls * u64::from(self.inner.per_mille) / 1000).unwrap_or(u32::MAX);
        share.max(self.inner.min)
    }
}

/// `retryscope.budget.retries_in_flight`: retries planned or running now.
const IN_FLIGHT: Gauge = Gauge {
    name: "retryscope.budget.retries_in_flight",
    description: "Retries and hedge copies of the dependency planned or running now, under its in-flight budget.",
    unit: "{retry}",
    worst: Worst::Highest,
    kind: GaugeKind::F64,
};

/// `retryscope.budget.retries_in_flight_limit`: how many may be.
const IN_FLIGHT_LIMIT: Gauge = Gauge {
    name: "retryscope.budget.retries_in_flight_limit",
    description: "How many retries of the dependency its in-flight budget lets out now: max(min, share x calls in progress).",
    unit: "{retry}",
    worst: Worst::Highest,
    kind: GaugeKind::F64,
};

impl Guard for InFlightBudget {
    fn call_started(&self) {
        self.inner.calls.fetch_add(1, Ordering::AcqRel);
    }

    type Permit = ();

    fn admit(&self, attempt: Attempt) -> Admission<()> {
        if attempt.is_first() {
            return Admission::Go(());
        }
        let limit = self.limit();
        // A compare-exchange, not an add then a check: two retries racing
        // for the last place must not both take it.
        let taken = self
            .inner
            .retries
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1));
        match taken {
            Ok(_) => Admission::Go(()),
            Err(_) => Admission::Refuse(StopReason::BudgetExhausted),
        }
    }

    fn settle(&self, attempt: Attempt, (): (), _end: End) {
        if !attempt.is_first() {
            // Saturating: a settlement never drives the count below zero,
            // even if a caller of the trait settles what it did not admit.
            let _ =
                self.inner.retries.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        }
    }

    fn call_finished(&self) {
        let _ = self.inner.calls.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        report(&IN_FLIGHT, f64::from(self.in_flight()));
        report(&IN_FLIGHT_LIMIT, f64::from(self.limit()));
    }
}

impl fmt::Debug for InFlightBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightBudget")
            .field("share", &self.share())
            .field("min", &self.min())
            .field("in_flight", &self.in_flight())
            .field("calls", &self.calls())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_holds_with_no_call_in_progress_and_the_share_above_it() {
        let budget = InFlightBudget::new(0.5, 2).expect("valid budget");
        assert_eq!(budget.limit(), 2);
        for _ in 0..10 {
            budget.call_started();
        }
        assert_eq!(budget.limit(), 5);
        for _ in 0..10 {
            budget.call_finished();
        }
        // Finishing more calls than started saturates at zero.
        budget.call_finished();
        assert_eq!((budget.calls(), budget.limit()), (0, 2));
    }

    #[test]
    fn a_share_of_the_calls_that_is_not_whole_is_rounded_down() {
        // Envoy's 20 % with a floor of 1: 14 calls allow ⌊2.8⌋ = 2 retries
        // out at once, 15 allow 3 — never the 3rd before the 15th call.
        let budget = InFlightBudget::new(0.2, 1).expect("valid budget");
        for _ in 0..14 {
            budget.call_started();
        }
        assert_eq!(budget.limit(), 2);
        for number in 2..4 {
            assert_eq!(budget.admit(Attempt::retry(number)), Admission::Go(()));
        }
        assert_eq!(budget.admit(Attempt::retry(2)), Admission::Refuse(StopReason::BudgetExhausted));
        budget.call_started();
        assert_eq!(budget.limit(), 3);
        assert_eq!(budget.admit(Attempt::retry(2)), Admission::Go(()));
    }

    #[test]
    fn first_attempts_are_never_counted_or_refused() {
        let budget = InFlightBudget::new(0.001, 0).expect("valid budget");
        assert_eq!(budget.admit(Attempt::first()), Admission::Go(()));
        budget.settle(Attempt::first(), (), End::Succeeded);
        assert_eq!(budget.in_flight(), 0);
        assert_eq!(budget.admit(Attempt::hedge(2)), Admission::Refuse(StopReason::BudgetExhausted));
    }

    #[test]
    fn settings_outside_their_range_are_refused() {
        for share in [0.0, -0.2, 1.5, f64::NAN] {
            assert!(InFlightBudget::new(share, 3).is_err(), "share {share}");
        }
        assert!(InFlightBudget::new(0.2, 100_001).is_err());
        assert_eq!(
            InFlightBudget::new(0.2, 3).expect("valid budget").share(),
            InFlightBudget::envoy().share()
        );
    }
}
