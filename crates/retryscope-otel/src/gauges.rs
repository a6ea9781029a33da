//! Observable gauges for state that lives outside any one call: the circuit
//! breaker's state, the retry budget's headroom and the pacer's rate.
//!
//! The SDK calls the callbacks at each collection, so reading the state costs
//! nothing on the request path.

use crate::names;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, ObservableGauge};
use retryscope::budget::Budget;
use retryscope::dependency::OVERFLOW;
use retryscope::guard::{Gauge, Worst};
use std::sync::Arc;

/// Registers `retryscope.breaker.state` (`{state}`: 0 closed, 1 half-open, 2 open)
/// for `dependency`, read from `state` at each collection.
///
/// Register once per breaker; several dependencies share the instrument and
/// differ by their `retryscope.dependency` attribute. Integrations that keep a
/// breaker per dependency use [`Dependencies`](retryscope::dependency::Dependencies),
/// which reports them all through one callback and stops when it is dropped.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicI64, Ordering};
///
/// let meter = opentelemetry::global::meter("my-service");
/// let state = Arc::new(AtomicI64::new(0));
/// let shared = state.clone();
/// let _gauge = retryscope_otel::register_breaker_gauge(&meter, "payments", move || {
///     shared.load(Ordering::Relaxed)
/// });
/// ```
pub fn register_breaker_gauge(
    meter: &Meter,
    dependency: impl Into<String>,
    state: impl Fn() -> i64 + Send + Sync + 'static,
) -> ObservableGauge<i64> {
    let dependency: Arc<str> = Arc::from(dependency.into());
    breaker_gauge(meter, move |observe| observe(state(), &dependency))
}

/// Registers `retryscope.budget.available` (`{retry}`) for `dependency`, read
/// from `available` at each collection.
///
/// OpenTelemetry keeps the callback, and what it captures, as long as the meter
/// provider lives: capture shared state (an `Arc`, or better a `Weak`), not
/// something that should be freed earlier.
pub fn register_budget_gauge(
    meter: &Meter,
    dependency: impl Into<String>,
    available: impl Fn() -> f64 + Send + Sync + 'static,
) -> ObservableGauge<f64> {
    let dependency: Arc<str> = Arc::from(dependency.into());
    budget_gauge(meter, move |observe| observe(available(), &dependency))
}

/// Registers `retryscope.budget.available` for a shared [`Budget`] (a
/// [`RetryBudget`](retryscope::RetryBudget) or a
/// [`TokenBucket`](retryscope::TokenBucket)), reading
/// [`Budget::available`] at each collection.
pub fn register_throttle_gauge<T>(
    meter: &Meter,
    dependency: impl Into<String>,
    throttle: Arc<T>,
) -> ObservableGauge<f64>
where
    T: Budget + ?Sized + 'static,
{
    register_budget_gauge(meter, dependency, move || throttle.available())
}

/// Registers the gauges of guards kept per dependency —
/// `retryscope.budget.available`, `retryscope.breaker.state`,
/// `retryscope.pace.rate`, `retryscope.overload.accepted_ratio`,
/// `retryscope.limit.limit`, `retryscope.limit.in_flight`, and
/// `guard_gauges`, those the dependencies' [`Guard`](retryscope::guard::Guard)s
/// publish — read at each collection from
/// the guards `live` lists then, each under its
/// [`dependency`](retryscope::dependency::Dependency::dependency) name — as
/// [`Dependencies`](retryscope::dependency::Dependencies) reports its own. `live`
/// should hold its registry weakly (OpenTelemetry keeps the callbacks for
/// the meter provider's lifetime) and list a bounded number of guards.
///
/// Guard sets labelled [`OVERFLOW`] (`_OTHER`: one per dependency beyond the
/// label bound) make one series per gauge, the worst of them: the least
/// budget available, the most open breaker, the slowest pace in force (as do
/// the registry's own gauges, and its adaptive throttle's and concurrency
/// limit's: the lowest accept ratio, the lowest limit, the most attempts in
/// flight). One series each would collide: they carry the same attributes.
pub fn register_guard_gauges<T: Budget + 'static>(
    meter: &Meter,
    live: impl Fn() -> Vec<Arc<retryscope::dependency::Dependency<T>>> + Send + Sync + 'static,
    guard_gauges: &[&'static Gauge],
) {
    let live = Arc::new(live);
    let budgets = Arc::clone(&live);
    budget_gauge(meter, move |observe| {
        for guards in budgets() {
            if let Some(budget) = guards.budget() {
                observe(budget.available(), guards.name());
            }
        }
    });
    let breakers = Arc::clone(&live);
    breaker_gauge(meter, move |observe| {
        for guards in breakers() {
            if let Some(breaker) = guards.breaker() {
                observe(breaker.state().as_gauge(), guards.name());
            }
        }
    });
    let pacers = Arc::clone(&live);
    pace_gauge(meter, move |observe| {
        for guards in pacers() {
            if let Some(rate) = guards.pacer().and_then(retryscope::Pacer::allowed_rate) {
                observe(rate, guards.name());
            }
        }
    });
    let limits = Arc::clone(&live);
    limit_gauge(meter, move |observe| {
        for guards in limits() {
            if let Some(limiter) = guards.concurrency_limit() {
                observe(u64::from(limiter.limit()), guards.name());
            }
        }
    });
    let slots = Arc::clone(&live);
    in_flight_gauge(meter, move |observe| {
        for guards in slots() {
            if let Some(limiter) = guards.concurrency_limit() {
                observe(u64::from(limiter.in_flight()), guards.name());
            }
        }
    });
    for gauge in guard_gauges.iter().copied() {
        let read = Arc::clone(&live);
        guard_gauge(meter, gauge, move |observe| {
            for guards in read() {
                if let Some(guard) = guards.guards() {
                    guard.gauges(&mut |published, value| {
                        if published.name == gauge.name {
                            observe(value, guards.name());
                        }
                    });
                }
            }
        });
    }
}

/// Publishes the gauges of every dependency `registry` keeps, now and later,
/// on `meter` ([`register_guard_gauges`] with the registry's reader and its
/// guards' gauges). The callbacks hold the registry weakly
/// ([`Dependencies::live`](retryscope::dependency::Dependencies::live)):
/// dropping its last clone frees the guards and ends the reports, although
/// OpenTelemetry keeps callbacks for the meter provider's lifetime. With the
/// global provider's meter and no provider installed, this costs nothing.
///
/// ```
/// use retryscope::dependency::Dependencies;
/// use retryscope::{CircuitBreaker, RetryBudget};
///
/// let guards = Dependencies::builder().budget(RetryBudget::default).breaker(CircuitBreaker::default).build();
/// retryscope_otel::publish_dependency_gauges(&opentelemetry::global::meter("my-client"), &guards);
/// ```
pub fn publish_dependency_gauges<T: Budget + Send + Sync + 'static>(
    meter: &Meter,
    registry: &retryscope::dependency::Dependencies<T>,
) {
    register_guard_gauges(meter, registry.live(), registry.guard_gauges());
}

/// `retryscope.breaker.state` with a callback that reports any number of
/// dependencies: `report` calls `observe(state, dependency)` for each.
pub(crate) fn breaker_gauge(
    meter: &Meter,
    report: impl Fn(&mut dyn FnMut(i64, &str)) + Send + Sync + 'static,
) -> ObservableGauge<i64> {
    meter
        .i64_observable_gauge(names::BREAKER_STATE)
        .with_unit(names::UNIT_STATE)
        .with_description("Circuit breaker state: 0 closed, 1 half-open, 2 open.")
        .with_callback(move |gauge| {
            fold_overflow(&report, i64::max, &mut |state, dependency| {
                gauge.observe(state, &attrs(dependency))
            })
        })
        .build()
}

/// `retryscope.budget.available` with a callback that reports any number of
/// dependencies: `report` calls `observe(available, dependency)` for each.
pub(crate) fn budget_gauge(
    meter: &Meter,
    report: impl Fn(&mut dyn FnMut(f64, &str)) + Send + Sync + 'static,
) -> ObservableGauge<f64> {
    meter
        .f64_observable_gauge(names::BUDGET_AVAILABLE)
        .with_unit(names::UNIT_RETRY)
        .with_description("Retries the retry budget would allow right now.")
        .with_callback(move |gauge| {
            fold_overflow(&report, f64::min, &mut |available, dependency| {
                gauge.observe(available, &attrs(dependency))
            })
        })
        .build()
}

/// `retryscope.pace.rate` with a callback that reports any number of
/// dependencies: `report` calls `observe(rate, dependency)` for each whose
/// pacer has a pace in force.
pub(crate) fn pace_gauge(
    meter: &Meter,
    report: impl Fn(&mut dyn FnMut(f64, &str)) + Send + Sync + 'static,
) -> ObservableGauge<f64> {
    meter
        .f64_observable_gauge(names::PACE_RATE)
        .with_unit(names::UNIT_RATE)
        .with_description("The send rate the dependency's pacer allows while a pace is in force.")
        .with_callback(move |gauge| {
            fold_overflow(&report, f64::min, &mut |rate, dependency| gauge.observe(rate, &attrs(dependency)))
        })
        .build()
}

/// `retryscope.limit.limit` with a callback that reports each dependency's
/// concurrency limit.
pub(crate) fn limit_gauge(
    meter: &Meter,
    report: impl Fn(&mut dyn FnMut(u64, &str)) + Send + Sync + 'static,
) -> ObservableGauge<u64> {
    meter
        .u64_observable_gauge(names::LIMIT)
        .with_unit(names::UNIT_REQUEST)
        .with_description(
            "The adaptive concurrency limit: how many attempts may be in flight to the dependency.",
        )
        .with_callback(move |gauge| {
            fold_overflow(&report, u64::min, &mut |limit, dependency| {
                gauge.observe(limit, &attrs(dependency))
            })
        })
        .build()
}

/// `retryscope.limit.in_flight` with a callback that reports how many
/// attempts hold a slot of each dependency's concurrency limit.
pub(crate) fn in_flight_gauge(
    meter: &Meter,
    report: impl Fn(&mut dyn FnMut(u64, &str)) + Send + Sync + 'static,
) -> ObservableGauge<u64> {
    meter
        .u64_observable_gauge(names::LIMIT_IN_FLIGHT)
        .with_unit(names::UNIT_REQUEST)
        .with_description("How many attempts hold a slot of the dependency's adaptive concurrency limit.")
        .with_callback(move |gauge| {
            fold_overflow(&report, u64::max, &mut |n, dependency| gauge.observe(n, &attrs(dependency)))
        })
        .build()
}

/// `gauge`, one a dependency's [`Guard`](retryscope::guard::Guard) publishes
/// ([`Guard::gauges`](retryscope::guard::Guard::gauges)), with a callback
/// that reports it for each dependency (the overflow sets' worst value, as
/// the gauge says which is, as one `_OTHER` series).
pub(crate) fn guard_gauge(
    meter: &Meter,
    gauge: &'static Gauge,
    report: impl Fn(&mut dyn FnMut(f64, &str)) + Send + Sync + 'static,
) -> ObservableGauge<f64> {
    meter
        .f64_observable_gauge(gauge.name)
        .with_unit(gauge.unit)
        .with_description(gauge.description)
        .with_callback(move |observer| {
            let worst = match gauge.worst {
                Worst::Highest => f64::max,
                Worst::Lowest => f64::min,
            };
            fold_overflow(&report, worst, &mut |value, dependency| {
                observer.observe(value, &attrs(dependency))
            })
        })
        .build()
}

/// Reports what `report` observes, the values labelled [`OVERFLOW`] folded
/// into one by `worse`: the guard sets beyond the label bound all carry that
/// label, and several values of one series in one collection would collide
/// (the SDK would keep whichever came last).
fn fold_overflow<V: Copy, R: Fn(&mut dyn FnMut(V, &str)) + ?Sized>(
    report: &R,
    worse: fn(V, V) -> V,
    observe: &mut dyn FnMut(V, &str),
) {
    let mut other: Option<V> = None;
    report(&mut |value, dependency| {
        if dependency == OVERFLOW {
            other = Some(other.map_or(value, |kept| worse(kept, value)));
        } else {
            observe(value, dependency);
        }
    });
    if let Some(value) = other {
        observe(value, OVERFLOW);
    }
}

/// The gauges' one attribute. Read at each collection, off the request
/// path: a copy of the name, which a dependency made by
/// `Dependency::new` owns (only a registry's lives as long as the process).
fn attrs(dependency: &str) -> [KeyValue; 1] {
    [KeyValue::new(names::DEPENDENCY, dependency.to_owned())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overflow_sets_make_one_series_the_worst_of_them() {
        let (a, b, other): (Arc<str>, Arc<str>, Arc<str>) = ("a".into(), "b".into(), OVERFLOW.into());
        let report = |observe: &mut dyn FnMut(i64, &str)| {
            observe(0, &a);
            observe(0, &other);
            observe(2, &other);
            observe(1, &b);
            observe(0, &other);
        };
        let mut seen = Vec::new();
        fold_overflow(&report, i64::max, &mut |state, dependency| seen.push((dependency.to_string(), state)));
        let seen: Vec<(&str, i64)> = seen.iter().map(|(d, s)| (d.as_str(), *s)).collect();
        assert_eq!(
            seen,
            [("a", 0), ("b", 1), (OVERFLOW, 2)],
            "named as they come, one _OTHER: the open breaker"
        );
        let mut none = 0;
        fold_overflow(&|observe: &mut dyn FnMut(f64, &str)| observe(5.0, &a), f64::min, &mut |_, _| {
            none += 1
        });
        assert_eq!(none, 1, "no overflow set, no _OTHER series");
    }
}
