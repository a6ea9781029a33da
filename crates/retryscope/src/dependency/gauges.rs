//! A dependency's gauges: what each of its guards publishes
//! ([`Guard::gauges`], [`Guard::published`]), visited in the order every call
//! asks the guards, built-in and further ones alike — so that telemetry
//! registers whatever they publish through one path, naming no guard.

use super::value::Dependency;
use crate::guard::{Gauge, Guard};

impl Dependency {
    /// Reports every figure its guards have a value for now, each with the
    /// [`Gauge`] it is published as ([`Guard::gauges`]): what a telemetry
    /// crate reads at each collection, labelled with the dependency's
    /// [`name`](Self::name).
    ///
    /// ```
    /// use retryscope::CircuitBreaker;
    /// use retryscope::dependency::Dependency;
    ///
    /// let payments = Dependency::new("payments").with_breaker(CircuitBreaker::default());
    /// let mut seen = Vec::new();
    /// payments.gauges(&mut |gauge, value| seen.push((gauge.name, value)));
    /// assert_eq!(seen, [("retryscope.breaker.state", 0.0)], "a closed breaker");
    /// ```
    pub fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        self.each_guard(&mut |guard| guard.gauges(report));
    }

    /// The distinct gauges its guards may report through
    /// [`gauges`](Self::gauges), by name ([`Guard::published`]), whether or
    /// not they have a value now: what a telemetry crate registers, once.
    pub fn published(&self) -> Vec<&'static Gauge> {
        Gauge::distinct(|gauge| self.each_guard(&mut |guard| guard.published(gauge)))
    }

    /// Each of its guards, in the order every call asks them: the one list
    /// both visits read.
    fn each_guard(&self, visit: &mut dyn FnMut(&dyn Publishes)) {
        visit(&self.pacer);
        visit(&self.concurrency_limit);
        visit(&self.breaker);
        visit(&self.guard);
        visit(&self.budget.as_deref());
    }
}

/// What a guard publishes, whatever its permit: [`Guard`] less its
/// associated type, so that guards of every kind go through one visit.
trait Publishes {
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64));
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge));
}

impl<G: Guard> Publishes for G {
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        Guard::gauges(self, report);
    }

    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        Guard::published(self, gauge);
    }
}

#[cfg(test)]
mod tests {
    use crate::budget::{AVAILABLE, InFlightBudget};
    use crate::dependency::Dependency;
    use crate::guard::{Gauge, GaugeKind};
    use crate::overload::{Aimd, ConcurrencyLimiter, LIMIT, LIMIT_IN_FLIGHT};
    use crate::pace::RATE;
    use crate::{CircuitBreaker, Pacer, RetryBudget, breaker};

    /// What `dependency` reports now, by name.
    fn reported(dependency: &Dependency) -> Vec<(&'static str, f64)> {
        let mut seen = Vec::new();
        dependency.gauges(&mut |gauge, value| seen.push((gauge.name, value)));
        seen
    }

    fn names(gauges: &[&'static Gauge]) -> Vec<&'static str> {
        gauges.iter().map(|gauge| gauge.name).collect()
    }

    #[test]
    fn an_open_breaker_reports_its_state_as_an_integer_gauge_through_the_trait() {
        let breaker = CircuitBreaker::builder().min_calls(1).failure_ratio(0.5).build().expect("valid");
        breaker.try_acquire().expect("closed").failure();
        let mut seen = Vec::new();
        crate::guard::Guard::gauges(&breaker, &mut |gauge, value| seen.push((gauge.kind, value)));
        assert_eq!(seen, [(GaugeKind::I64, 2.0)], "open, an i64 gauge");
        assert_eq!(breaker::STATE.kind, GaugeKind::I64);
    }

    #[test]
    fn a_pacer_without_a_pace_in_force_reports_nothing_but_publishes_its_rate() {
        let paced = Dependency::new("paced").with_pacer(Pacer::new());
        assert_eq!(reported(&paced), [], "no pace in force");
        assert_eq!(names(&paced.published()), [RATE.name]);
    }

    #[test]
    fn a_dependency_visits_every_guards_gauges_in_the_order_calls_ask_them() {
        let limiter =
            ConcurrencyLimiter::new(Aimd::builder().initial_limit(3).min_limit(1).build().expect("valid"));
        let everything = Dependency::new("everything")
            .with_budget(RetryBudget::default())
            .with_breaker(CircuitBreaker::default())
            .with_pacer(Pacer::new())
            .with_concurrency_limit(limiter)
            .with_guard(InFlightBudget::envoy());
        assert_eq!(
            names(&everything.published()),
            [
                RATE.name,
                LIMIT.name,
                LIMIT_IN_FLIGHT.name,
                breaker::STATE.name,
                "retryscope.budget.retries_in_flight",
                "retryscope.budget.retries_in_flight_limit",
                AVAILABLE.name,
            ]
        );
        let seen = reported(&everything);
        assert_eq!(&seen[..3], [(LIMIT.name, 3.0), (LIMIT_IN_FLIGHT.name, 0.0), (breaker::STATE.name, 0.0)]);
        assert_eq!(seen.last().map(|(name, _)| *name), Some(AVAILABLE.name), "the budget last");
        assert_eq!(seen.len(), 6, "every gauge but the pace, none in force");
    }

    #[test]
    fn built_in_gauges_keep_their_exported_number_types() {
        let kinds = [AVAILABLE.kind, breaker::STATE.kind, RATE.kind, LIMIT.kind, LIMIT_IN_FLIGHT.kind];
        assert_eq!(kinds, [GaugeKind::F64, GaugeKind::I64, GaugeKind::F64, GaugeKind::U64, GaugeKind::U64]);
    }
}
