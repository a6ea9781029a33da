//! Observable gauges for state that lives outside any one call: whatever a
//! dependency's guards publish ([`Guard::gauges`](retryscope::guard::Guard::gauges)) —
//! the breaker's state, the budget's headroom, the pacer's rate, the
//! overload guards' figures, any further guard's — registered through one
//! path that names no guard.
//!
//! The SDK calls the callbacks at each collection, so reading the state costs
//! nothing on the request path.

use crate::names;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrumentBuilder, Meter};
use retryscope::dependency::{Dependency, OVERFLOW};
use retryscope::guard::{Gauge, GaugeKind, Worst};
use std::sync::Arc;

/// Publishes the gauges of `dependency`'s guards ([`Dependency::published`]),
/// each labelled with its name: for guards kept outside any
/// [`Dependencies`](retryscope::dependency::Dependencies) registry, which
/// [`publish_dependency_gauges`] reports instead. The callbacks hold the
/// dependency weakly (OpenTelemetry keeps them for the meter provider's
/// lifetime): dropping its last `Arc` ends the reports, so keep it as long
/// as its gauges should be reported.
///
/// ```
/// use retryscope::CircuitBreaker;
/// use retryscope::dependency::Dependency;
/// use std::sync::Arc;
///
/// let meter = opentelemetry::global::meter("my-service");
/// let payments = Arc::new(Dependency::new("payments").with_breaker(CircuitBreaker::default()));
/// retryscope_otel::publish_guard_gauges(&meter, &payments);
/// ```
pub fn publish_guard_gauges(meter: &Meter, dependency: &Arc<Dependency>) {
    let held = Arc::downgrade(dependency);
    register_guard_gauges(meter, move || held.upgrade().into_iter().collect(), &dependency.published());
}

/// Registers `guard_gauges`, the gauges the dependencies' guards publish
/// ([`Dependencies::guard_gauges`](retryscope::dependency::Dependencies::guard_gauges):
/// `retryscope.budget.available`, `retryscope.breaker.state`,
/// `retryscope.pace.rate`, `retryscope.limit.limit`,
/// `retryscope.limit.in_flight`, `retryscope.overload.accepted`, a further
/// guard's own), one instrument each, of the number type its
/// [`kind`](Gauge::kind) says — read at each collection from the guards
/// `live` lists then ([`Dependency::gauges`]), each under its
/// [`dependency`](retryscope::dependency::Dependency::name) name — as
/// [`Dependencies`](retryscope::dependency::Dependencies) reports its own. `live`
/// should hold its registry weakly (OpenTelemetry keeps the callbacks for
/// the meter provider's lifetime) and list a bounded number of guards.
///
/// Guard sets labelled [`OVERFLOW`] (`_OTHER`: one per dependency beyond the
/// label bound) make one series per gauge, the worst of them as the gauge's
/// [`worst`](Gauge::worst) says: the least budget available, the most open
/// breaker, the slowest pace in force, the lowest accept ratio, the lowest
/// limit, the most attempts in flight. One series each would collide: they
/// carry the same attributes.
pub fn register_guard_gauges(
    meter: &Meter,
    live: impl Fn() -> Vec<Arc<Dependency>> + Send + Sync + 'static,
    guard_gauges: &[&'static Gauge],
) {
    let live = Arc::new(live);
    for gauge in guard_gauges.iter().copied() {
        let read = Arc::clone(&live);
        // Each instrument's callback hears every figure of every guard and
        // keeps its own: OpenTelemetry calls one callback per instrument,
        // and a collection is off the call path, so reading a few figures
        // more than needed costs no call anything.
        guard_gauge(meter, gauge, move |observe| {
            for dependency in read() {
                dependency.gauges(&mut |published, value| {
                    if published.name == gauge.name {
                        observe(value, dependency.name());
                    }
                });
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
pub fn publish_dependency_gauges(meter: &Meter, registry: &retryscope::dependency::Dependencies) {
    register_guard_gauges(meter, registry.live(), registry.guard_gauges());
}

/// `gauge`, one a dependency's [`Guard`](retryscope::guard::Guard) publishes,
/// as an instrument of its [`kind`](Gauge::kind), with a callback that
/// reports it for each dependency (the overflow sets' worst value, as the
/// gauge says which is, as one `_OTHER` series).
fn guard_gauge(
    meter: &Meter,
    gauge: &'static Gauge,
    report: impl Fn(&mut dyn FnMut(f64, &str)) + Send + Sync + 'static,
) {
    // Folded as f64, then converted: an integer gauge's values (a breaker's
    // state, a limit, slots in flight) are small integers, exact as f64, so
    // the worst of them and the cast back are exact too.
    let worst = match gauge.worst {
        Worst::Highest => f64::max,
        Worst::Lowest => f64::min,
    };
    let observed = move |observe: &mut dyn FnMut(f64, &str)| fold_overflow(&report, worst, observe);
    match gauge.kind {
        GaugeKind::F64 => {
            described(meter.f64_observable_gauge(gauge.name), gauge, observed, |v| v).build();
        }
        GaugeKind::I64 => {
            described(meter.i64_observable_gauge(gauge.name), gauge, observed, |v| v as i64).build();
        }
        GaugeKind::U64 => {
            described(meter.u64_observable_gauge(gauge.name), gauge, observed, |v| v as u64).build();
        }
    }
}

/// `builder`, an instrument of `gauge`'s number type `T`, with the gauge's
/// unit and description and a callback observing what `observed` reports,
/// each value `convert`ed to `T`. (The three typed builders share no trait
/// with `build`, so each kind builds its own.)
fn described<'a, I, T: 'static>(
    builder: AsyncInstrumentBuilder<'a, I, T>,
    gauge: &'static Gauge,
    observed: impl Fn(&mut dyn FnMut(f64, &str)) + Send + Sync + 'static,
    convert: fn(f64) -> T,
) -> AsyncInstrumentBuilder<'a, I, T> {
    builder.with_unit(gauge.unit).with_description(gauge.description).with_callback(move |observer| {
        observed(&mut |value, dependency| observer.observe(convert(value), &attrs(dependency)))
    })
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
