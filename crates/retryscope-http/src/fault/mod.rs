//! Fault injection: failures injected below the retry layer, so that retries,
//! budgets, breakers and pacers meet them as they would meet real ones.
//!
//! The model and its seeded decision live here, once; `retryscope-reqwest`
//! (a middleware) and `retryscope-tower` (a client layer and a server layer)
//! apply what [`Faults::decide`] says. Safe by construction:
//!
//! - a [`Faults`] is built **off**: it injects only after an explicit
//!   [`enable`](Faults::enable) (or [`FaultsBuilder::enabled`]), and can be
//!   switched off and on again live, by any clone, at the cost of one atomic
//!   load per call while off;
//! - a request's own headers ([`FAULT_KIND_HEADER`]) are read only when the
//!   process built its `Faults` with [`header_control`](FaultsBuilder::header_control),
//!   and only while it is on;
//! - every injected fault marks the current (attempt) span
//!   `retryscope.fault.injected` = its [kind label](FaultKind::label) and
//!   counts in `retryscope.faults.injected{retryscope.dependency,retryscope.fault.kind}`.
//!
//! ```
//! use retryscope_http::fault::{FaultKind, FaultRate, FaultRule, Faults};
//!
//! let faults = Faults::builder()
//!     .rule(FaultRule::new(FaultKind::unavailable(), FaultRate::percent(10.0)?).dependency("payments.internal"))
//!     .seed(42)
//!     .no_metrics()
//!     .build();
//! let call = |f: &Faults| f.decide(&retryscope_http::fault::Target::new("payments.internal", "/charge"));
//! assert_eq!(call(&faults), None, "built off");
//! faults.enable();
//! let injected = (0..1_000).filter(|_| call(&faults).is_some()).count();
//! assert!((70..=130).contains(&injected), "{injected}");
//! # Ok::<(), retryscope_http::fault::FaultSpecError>(())
//! ```

mod body;
mod draw;
mod error;
mod header;
mod kind;
mod rule;

pub use body::FaultBody;
pub use error::{FaultSpecError, InjectedFault};
pub use header::{FAULT_KIND_HEADER, FAULT_PERCENTAGE_HEADER};
pub use kind::{FaultKind, MAX_FAULT_DELAY};
pub use rule::{FaultRate, FaultRule, FaultSpec};

use http::HeaderMap;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter};
use retryscope_otel::names;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The place in the draw sequence of faults asked for by header: apart from
/// every rule's.
const HEADER_SEQUENCE: u64 = u64::MAX;

/// A set of fault rules and the switch that arms them; cheap to clone, every
/// clone shares the switch, the draw sequences and the counter.
#[derive(Clone)]
pub struct Faults {
    inner: Arc<Inner>,
}

struct Inner {
    on: AtomicBool,
    header_control: bool,
    seed: u64,
    rules: Box<[Armed]>,
    header_calls: AtomicU64,
    injected: Option<Counter<u64>>,
}

/// A rule and how many calls it has selected.
struct Armed {
    rule: FaultRule,
    calls: AtomicU64,
}

/// What a layer knows of one call when it asks [`Faults::decide`].
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The dependency as the retry layer names it ([`retryscope::dependency::dependency_name`]).
    pub dependency: &'a str,
    /// The request's path.
    pub path: &'a str,
    /// The request's headers, read only under header control.
    pub headers: Option<&'a HeaderMap>,
}

impl<'a> Target<'a> {
    /// A call to `dependency` at `path`, headers unread.
    pub const fn new(dependency: &'a str, path: &'a str) -> Self {
        Self { dependency, path, headers: None }
    }

    /// With the request's headers, for [header control](FaultsBuilder::header_control).
    #[must_use]
    pub const fn with_headers(mut self, headers: &'a HeaderMap) -> Self {
        self.headers = Some(headers);
        self
    }
}

impl Faults {
    /// Configures a set of faults (built off).
    pub fn builder() -> FaultsBuilder {
        FaultsBuilder {
            rules: Vec::new(),
            seed: 0,
            header_control: false,
            enabled: false,
            meter: MeterSetting::Global,
        }
    }

    /// Arms the faults: calls from now on are injected.
    pub fn enable(&self) {
        self.inner.on.store(true, Ordering::Relaxed);
    }

    /// Disarms them: calls from now on pass through untouched.
    pub fn disable(&self) {
        self.inner.on.store(false, Ordering::Relaxed);
    }

    /// Whether they are armed.
    pub fn is_enabled(&self) -> bool {
        self.inner.on.load(Ordering::Relaxed)
    }

    /// The rules, in the order they are asked.
    pub fn rules(&self) -> impl Iterator<Item = &FaultRule> {
        self.inner.rules.iter().map(|armed| &armed.rule)
    }

    /// Whether requests' own headers may ask for faults.
    pub fn header_control(&self) -> bool {
        self.inner.header_control
    }

    /// The fault to inject into one call, if any: while armed, the first rule
    /// that selects the call and whose seeded draw falls under its rate; then,
    /// under header control, what the request's headers ask for. An injected
    /// fault is marked on the current span and counted here, once, so the
    /// layers only apply it. Off, this is one relaxed atomic load.
    #[inline]
    pub fn decide(&self, target: &Target<'_>) -> Option<FaultKind> {
        if !self.inner.on.load(Ordering::Relaxed) {
            return None;
        }
        self.decide_armed(target)
    }

    #[inline(never)]
    fn decide_armed(&self, target: &Target<'_>) -> Option<FaultKind> {
        let inner = &*self.inner;
        let from_rules = inner.rules.iter().zip(0u64..).find_map(|(armed, place)| {
            if !armed.rule.selects(target.dependency, target.path) {
                return None;
            }
            let call = armed.calls.fetch_add(1, Ordering::Relaxed);
            (draw::draw(inner.seed, place, call) < armed.rule.rate.basis_points()).then_some(armed.rule.kind)
        });
        let kind = from_rules.or_else(|| {
            let (kind, rate) = header::asked(target.headers.filter(|_| inner.header_control)?)?;
            let call = inner.header_calls.fetch_add(1, Ordering::Relaxed);
            (draw::draw(inner.seed, HEADER_SEQUENCE, call) < rate.basis_points()).then_some(kind)
        })?;
        self.mark(kind, target.dependency);
        Some(kind)
    }

    fn mark(&self, kind: FaultKind, dependency: &str) {
        tracing::Span::current().record(names::FAULT_INJECTED, kind.label());
        if let Some(counter) = &self.inner.injected {
            let dependency = retryscope::dependency::bounded_dependency(dependency);
            counter.add(
                1,
                &[
                    KeyValue::new(names::DEPENDENCY, dependency),
                    KeyValue::new(names::FAULT_KIND, kind.label()),
                ],
            );
        }
    }
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rules: Vec<_> = self.inner.rules.iter().map(|armed| &armed.rule).collect();
        f.debug_struct("Faults")
            .field("enabled", &self.is_enabled())
            .field("header_control", &self.inner.header_control)
            .field("seed", &self.inner.seed)
            .field("rules", &rules)
            .finish_non_exhaustive()
    }
}

/// Where the counter `retryscope.faults.injected` goes.
enum MeterSetting {
    Global,
    Meter(Meter),
    Off,
}

/// Configures [`Faults`]; nothing is injected until they are enabled.
#[must_use = "a builder does nothing until `build` is called"]
pub struct FaultsBuilder {
    rules: Vec<FaultRule>,
    seed: u64,
    header_control: bool,
    enabled: bool,
    meter: MeterSetting,
}

impl FaultsBuilder {
    /// Adds a rule, asked after those added before it.
    pub fn rule(mut self, rule: FaultRule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Adds every rule of `spec`, in order.
    pub fn spec(mut self, spec: FaultSpec) -> Self {
        self.rules.extend(spec.0);
        self
    }

    /// The seed of the draws (0 by default): the same seed, rules and calls
    /// inject the same faults into the same calls.
    pub const fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Lets requests ask for faults with [`FAULT_KIND_HEADER`] and
    /// [`FAULT_PERCENTAGE_HEADER`] while the faults are enabled. For a test
    /// process only: anyone who can send this process a request could make it
    /// fail its calls.
    pub const fn header_control(mut self) -> Self {
        self.header_control = true;
        self
    }

    /// Builds the faults already armed, as if [`Faults::enable`] followed.
    pub const fn enabled(mut self) -> Self {
        self.enabled = true;
        self
    }

    /// Counts injections on `meter` instead of the global provider's.
    pub fn meter(mut self, meter: Meter) -> Self {
        self.meter = MeterSetting::Meter(meter);
        self
    }

    /// Counts nothing (spans are still marked).
    pub fn no_metrics(mut self) -> Self {
        self.meter = MeterSetting::Off;
        self
    }

    /// The faults. The counter binds to the global meter provider of this
    /// moment: install it first.
    pub fn build(self) -> Faults {
        let meter = match self.meter {
            MeterSetting::Global => Some(opentelemetry::global::meter_with_scope(retryscope_otel::scope())),
            MeterSetting::Meter(meter) => Some(meter),
            MeterSetting::Off => None,
        };
        let injected = meter.map(|meter| {
            meter
                .u64_counter(names::FAULTS_INJECTED)
                .with_unit(names::UNIT_FAULT)
                .with_description("Faults injected below the retry layer.")
                .build()
        });
        let rules = self.rules.into_iter().map(|rule| Armed { rule, calls: AtomicU64::new(0) }).collect();
        Faults {
            inner: Arc::new(Inner {
                on: AtomicBool::new(self.enabled),
                header_control: self.header_control,
                seed: self.seed,
                rules,
                header_calls: AtomicU64::new(0),
                injected,
            }),
        }
    }
}

/// The answer a fault gives instead of the call, when it is one: the head of
/// a [`Status`](FaultKind::Status) (with `Retry-After`) or of a Trailers-Only
/// [`Grpc`](FaultKind::Grpc) status, with an empty body of the caller's type.
pub fn answer<B>(kind: FaultKind, body: B) -> Option<http::Response<B>> {
    let mut response = http::Response::new(body);
    match kind {
        FaultKind::Status { status, retry_after } => {
            *response.status_mut() = status;
            if let Some(after) = retry_after {
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, http::HeaderValue::from(after.as_secs()));
            }
        }
        FaultKind::Grpc(code) => {
            let headers = response.headers_mut();
            headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
            headers.insert("grpc-status", http::HeaderValue::from(u16::from(code)));
            headers.insert("grpc-message", http::HeaderValue::from_static("injected fault"));
        }
        _ => return None,
    }
    Some(response)
}

#[cfg(test)]
mod tests;
