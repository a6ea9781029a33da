//! The registry's gauges: one callback per gauge, reading every guard set
//! at collection time.

use super::Registry;
use crate::gauges;
use crate::guards::Guards;
use opentelemetry::metrics::Meter;
use retryscope::Pacer;
use retryscope::guard::{Gauge, Guard};
use retryscope::overload::AdaptiveThrottle;
use retryscope::throttle::Throttle;
use std::sync::{Arc, Weak};

/// One callback per gauge, reading every dependency's guards at collection
/// time. The callbacks hold the registry weakly: see [`live`].
pub(super) fn register_gauges<T: Throttle + 'static>(meter: &Meter, registry: &Arc<Registry<T>>) {
    register_guard_gauges(meter, registry);
    if registry.budget.is_some() {
        let registry = Arc::downgrade(registry);
        gauges::budget_gauge(meter, move |observe| {
            for guards in live(&registry) {
                if let Some(budget) = &guards.budget {
                    observe(budget.available(), &guards.dependency);
                }
            }
        });
    }
    if registry.breaker.is_some() {
        let registry = Arc::downgrade(registry);
        gauges::breaker_gauge(meter, move |observe| {
            for guards in live(&registry) {
                if let Some(breaker) = &guards.breaker {
                    observe(breaker.state().as_gauge(), &guards.dependency);
                }
            }
        });
    }
    if registry.pacer.is_some() {
        let registry = Arc::downgrade(registry);
        gauges::pace_gauge(meter, move |observe| {
            for guards in live(&registry) {
                if let Some(rate) = guards.pacer.as_ref().and_then(Pacer::allowed_rate) {
                    observe(rate, &guards.dependency);
                }
            }
        });
    }
    if registry.adaptive_throttle.is_some() {
        let registry = Arc::downgrade(registry);
        gauges::accept_ratio_gauge(meter, move |observe| {
            for guards in live(&registry) {
                if let Some(ratio) =
                    guards.adaptive_throttle.as_ref().and_then(AdaptiveThrottle::accept_ratio)
                {
                    observe(ratio, &guards.dependency);
                }
            }
        });
    }
    if registry.concurrency_limit.is_some() {
        let limits = Arc::downgrade(registry);
        gauges::limit_gauge(meter, move |observe| {
            for guards in live(&limits) {
                if let Some(limiter) = &guards.concurrency_limit {
                    observe(u64::from(limiter.limit()), &guards.dependency);
                }
            }
        });
        let registry = Arc::downgrade(registry);
        gauges::in_flight_gauge(meter, move |observe| {
            for guards in live(&registry) {
                if let Some(limiter) = &guards.concurrency_limit {
                    observe(u64::from(limiter.in_flight()), &guards.dependency);
                }
            }
        });
    }
}

/// The gauges of each dependency's [`Guard`]: which they are, a guard the
/// factory makes once more here says ([`Guard::gauges`] reports the same
/// ones from every guard); each is then read from every dependency's guard
/// at collection time.
fn register_guard_gauges<T: Throttle + 'static>(meter: &Meter, registry: &Arc<Registry<T>>) {
    let Some(make) = &registry.guard else { return };
    let mut published: Vec<&'static Gauge> = Vec::new();
    make().gauges(&mut |gauge, _| {
        if !published.iter().any(|known| known.name == gauge.name) {
            published.push(gauge);
        }
    });
    for gauge in published {
        let registry = Arc::downgrade(registry);
        gauges::guard_gauge(meter, gauge, move |observe| {
            for guards in live(&registry) {
                if let Some(guard) = &guards.guard {
                    guard.gauges(&mut |read, value| {
                        if read.name == gauge.name {
                            observe(value, &guards.dependency);
                        }
                    });
                }
            }
        });
    }
}

/// A snapshot of the guards of a registry that may be gone (then: none), so a
/// gauge callback neither keeps the registry alive nor holds its lock while
/// the SDK records.
fn live<T>(registry: &Weak<Registry<T>>) -> Vec<Arc<Guards<T>>> {
    registry.upgrade().map(|registry| registry.all()).unwrap_or_default()
}
