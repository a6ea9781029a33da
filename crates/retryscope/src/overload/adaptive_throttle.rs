//! The Google SRE book's client-side adaptive throttling (ch. 21, "Handling
//! Overload").

use crate::clock::{Clock, GuardClock, Timeline};
use crate::guard::{Admission, Attempt, End, Gauge, GaugeKind, Guard, Worst};
use crate::outcome::StopReason;
use crate::setting::{SettingError, SettingValue};
use crate::window::SlottedWindow;
use std::fmt;
use std::time::Duration;

/// `K` unless set: the SRE book's 2 ("In general, we prefer the 2x
/// multiplier"): the client sends up to twice what the dependency accepts.
const DEFAULT_K: f64 = 2.0;
/// The smallest `K`: 1 rejects as soon as anything is refused, and below it
/// a client would reject requests a healthy dependency accepts.
const MIN_K: f64 = 1.0;
/// The largest `K`: beyond it the throttle hardly ever rejects.
const MAX_K: f64 = 100.0;
/// The window unless set: the SRE book's two minutes.
const DEFAULT_WINDOW: Duration = Duration::from_secs(120);
/// The shortest window: the same bounds as the other guards' windows.
const MIN_WINDOW: Duration = crate::budget::MIN_WINDOW;
/// The longest window.
const MAX_WINDOW: Duration = crate::budget::MAX_WINDOW;
/// The rejection probability's ceiling unless set: Envoy's admission control
/// default (`max_rejection_probability`, 80 %). Uncapped, the formula
/// approaches 1 while a dependency accepts nothing, the client sends about one
/// request per window, and after the dependency is back the accepts that let
/// more through double only once per window or so; capped, a fifth of the
/// requests keep probing, and the client follows the recovery within a window.
const DEFAULT_MAX_REJECTION: f64 = 0.8;

const REQUESTS: usize = 0;
const ACCEPTS: usize = 1;

/// Client-side adaptive throttling, per dependency: before every attempt, the
/// client rejects it locally with probability
///
/// ```text
/// min(max_rejection, max(0, (requests − K · accepts) / (requests + 1)))
/// ```
///
/// over a sliding window (two minutes by default), where `requests` counts
/// every attempt the client meant to send (rejected ones included) and
/// `accepts` those the dependency accepted: any answer but a transient
/// failure or a throttling one (a 404 is the dependency accepting the
/// request; a 503, a 429, a timeout or a reset is not). While the dependency
/// accepts everything, nothing is rejected; when it accepts nothing, the
/// client sends about `1/K` of its requests... and fewer as the window fills
/// with its own rejections (`requests` grows while `accepts` does not), down
/// to `1 − max_rejection`: a fifth by default, Envoy's ceiling, so that the
/// client sees the dependency come back (the SRE book's formula has none;
/// [`AdaptiveThrottleBuilder::max_rejection_probability`]`(1.0)` restores it).
///
/// It is a [`Guard`]: give one to every call to a dependency
/// ([`Dependency::with_guard`](crate::dependency::Dependency::with_guard), or per dependency
/// [`DependenciesBuilder::guard`](crate::dependency::DependenciesBuilder::guard));
/// clones share one state. It is asked as every guard is — a call's first
/// attempt before it is sent, a retry at its plan, a hedge's copy when due —
/// with the attempt's draw ([`Attempt::draw`]: from the call's seed,
/// [`Retry::seed`](crate::Retry::seed), for a reproducible run).
///
/// ```
/// use retryscope::clock::ManualClock;
/// use retryscope::overload::AdaptiveThrottle;
///
/// # fn main() -> Result<(), retryscope::SettingError> {
/// let throttle = AdaptiveThrottle::builder().clock(ManualClock::new()).build()?;
/// // 100 requests, 20 accepted: (100 − 2·20) / 101 of the next are rejected.
/// for n in 0..100 {
///     assert!(throttle.admit(1.0 - f64::EPSILON)); // a draw of ~1 is never rejected
///     if n < 20 {
///         throttle.accepted();
///     }
/// }
/// // So a request that draws 0.5 (below 60/101 ≈ 0.594) is rejected locally,
/// assert!(!throttle.admit(0.5));
/// // and, counted too, makes it (101 − 40) / 102 ≈ 0.598: 0.6 is sent.
/// assert!(throttle.admit(0.6));
/// # Ok(())
/// # }
/// ```
///
/// **Defaults and limits** (the SRE book's):
///
/// | | value |
/// |---|---|
/// | `K`, fixed at the SRE book's 2 ("In general, we prefer the 2x multiplier"): the client sends up to twice what the dependency accepts. | 2 |
/// | The smallest `K`: 1 rejects as soon as anything is refused, and below it a client would reject requests a healthy dependency accepts. | 1 |
/// | The largest `K`: beyond it the throttle hardly ever rejects. | 100 |
/// | The window unless set: the SRE book's two minutes. | 120 s |
/// | The shortest window: the same bounds as the other guards' windows. | 1 s |
/// | The longest window. | 1 h |
/// | The rejection probability's ceiling unless set: Envoy's admission control default (`max_rejection_probability`, 80 %). Uncapped, the formula approaches 1 while a dependency accepts nothing, the client sends about one request per window, and after the dependency is back the accepts that let more through double only once per window or so; capped, a fifth of the requests keep probing, and the client follows the recovery within a window. | 0.8 |
#[derive(Clone)]
pub struct AdaptiveThrottle {
    inner: std::sync::Arc<Inner>,
}

struct Inner {
    k: f64,
    max_rejection: f64,
    window: SlottedWindow<2>,
    time: Timeline,
}

impl AdaptiveThrottle {
    /// Settings other than the defaults.
    pub fn builder() -> AdaptiveThrottleBuilder {
        AdaptiveThrottleBuilder::default()
    }

    fn from_settings(k: f64, max_rejection: f64, window: Duration, clock: GuardClock) -> Self {
        let window = SlottedWindow::new(window);
        Self { inner: std::sync::Arc::new(Inner { k, max_rejection, window, time: clock.start() }) }
    }

    fn epoch(&self) -> u64 {
        self.inner.window.epoch(self.inner.time.coarse_nanos())
    }

    /// The window's counts now: requests, accepts.
    fn counts(&self) -> (f64, f64) {
        let [requests, accepts] = self.inner.window.totals(self.epoch());
        (requests as f64, accepts as f64)
    }

    /// The probability that the next request is rejected locally, now.
    #[cfg(test)]
    pub(crate) fn rejection_probability(&self) -> f64 {
        let (requests, accepts) = self.counts();
        self.probability(requests, accepts)
    }

    /// The share of the window's requests the dependency accepted, `None`
    /// while the window holds none: the `retryscope.overload.accepted`
    /// gauge.
    pub(crate) fn accept_ratio(&self) -> Option<f64> {
        let (requests, accepts) = self.counts();
        (requests > 0.0).then(|| (accepts / requests).min(1.0))
    }

    /// A request is about to be sent: counted, and admitted unless `draw`, a
    /// uniform random number in `[0, 1)`, falls below the rejection
    /// probability. `false`: reject it locally, do not send it.
    pub fn admit(&self, draw: f64) -> bool {
        let epoch = self.epoch();
        let [requests, accepts] = self.inner.window.totals(epoch);
        self.inner.window.add(epoch, REQUESTS, 1);
        draw >= self.probability(requests as f64, accepts as f64)
    }

    /// The dependency accepted a request (it answered, whatever the answer,
    /// except a transient failure or a request to slow down).
    pub fn accepted(&self) {
        self.inner.window.add(self.epoch(), ACCEPTS, 1);
    }

    /// The SRE book's formula, capped at the ceiling.
    fn probability(&self, requests: f64, accepts: f64) -> f64 {
        ((requests - self.inner.k * accepts) / (requests + 1.0)).clamp(0.0, self.inner.max_rejection)
    }
}

/// The throttle is a [`Guard`]: every attempt it is asked about counts as a
/// request, rejected ones too; a sheddable attempt draws zero (rejected
/// whenever the throttle rejects anything); what the dependency accepted —
/// any answer but a transient failure or a request to slow down — counts as
/// accepted.
impl Guard for AdaptiveThrottle {
    type Permit = ();

    fn admit(&self, attempt: Attempt) -> Admission<()> {
        let draw = if attempt.priority().is_sheddable() { 0.0 } else { attempt.draw() };
        match AdaptiveThrottle::admit(self, draw) {
            true => Admission::Go(()),
            false => Admission::Refuse(StopReason::RejectedLocally),
        }
    }

    fn settle(&self, _: Attempt, (): (), end: End) {
        if matches!(end, End::Succeeded | End::Answered) {
            self.accepted();
        }
    }

    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        if let Some(ratio) = self.accept_ratio() {
            report(&ACCEPTED, ratio);
        }
    }

    /// Its accept ratio, reported once its window holds a request.
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        gauge(&ACCEPTED);
    }
}

/// `retryscope.overload.accepted` (`1`): the share of requests the
/// dependency accepted, reported once the throttle's window holds any; the
/// lowest is the worst.
pub(crate) const ACCEPTED: Gauge = Gauge {
    name: "retryscope.overload.accepted",
    description: "The share of the client's requests the dependency accepted over the adaptive throttle's window.",
    unit: "1",
    worst: Worst::Lowest,
    kind: GaugeKind::F64,
};

impl Default for AdaptiveThrottle {
    /// `K` = 2 over two minutes, on the default clock.
    fn default() -> Self {
        Self::from_settings(DEFAULT_K, DEFAULT_MAX_REJECTION, DEFAULT_WINDOW, GuardClock::default())
    }
}

impl fmt::Debug for AdaptiveThrottle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (requests, accepts) = self.counts();
        f.debug_struct("AdaptiveThrottle")
            .field("k", &self.inner.k)
            .field("requests", &requests)
            .field("accepts", &accepts)
            .finish_non_exhaustive()
    }
}

/// Builds an [`AdaptiveThrottle`]; see [`AdaptiveThrottle::builder`].
#[derive(Clone)]
#[must_use = "a builder makes no throttle until `build` is called"]
pub struct AdaptiveThrottleBuilder {
    k: f64,
    max_rejection: f64,
    window: Duration,
    clock: Option<GuardClock>,
}

impl Default for AdaptiveThrottleBuilder {
    fn default() -> Self {
        Self { k: DEFAULT_K, max_rejection: DEFAULT_MAX_REJECTION, window: DEFAULT_WINDOW, clock: None }
    }
}

impl AdaptiveThrottleBuilder {
    /// `K`, within 1 to 100 (default 2): the
    /// client sends up to `K` times what the dependency accepts. Lower is
    /// more aggressive.
    #[cfg(test)]
    pub(crate) fn k(mut self, k: f64) -> Self {
        self.k = k;
        self
    }

    /// The ceiling of the rejection probability, within `0.0..=1.0` (default
    /// 0.8, 0.8, as Envoy's admission control): at
    /// least `1 − max` of the requests are sent even while the dependency
    /// accepts none, so the client sees it come back. `1.0` is the SRE book's
    /// formula uncapped.
    pub fn max_rejection_probability(mut self, max: f64) -> Self {
        self.max_rejection = max;
        self
    }

    /// The sliding window, within 1 s to 1 h (default
    /// two minutes). Counts expire between 0.9 and 1
    /// window after they were made.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The clock to read time from (default: tokio's with the `tokio`
    /// feature, else the system's).
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Some(GuardClock::new(clock));
        self
    }

    /// The throttle, or the setting that is out of range.
    pub fn build(self) -> Result<AdaptiveThrottle, SettingError> {
        if !(MIN_K..=MAX_K).contains(&self.k) {
            return Err(SettingError::overload("k", SettingValue::Number(self.k)));
        }
        if !(0.0..=1.0).contains(&self.max_rejection) {
            return Err(SettingError::overload(
                "max_rejection_probability",
                SettingValue::Number(self.max_rejection),
            ));
        }
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&self.window) {
            return Err(SettingError::overload("window", SettingValue::Duration(self.window)));
        }
        Ok(AdaptiveThrottle::from_settings(
            self.k,
            self.max_rejection,
            self.window,
            self.clock.unwrap_or_default(),
        ))
    }
}

impl fmt::Debug for AdaptiveThrottleBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveThrottleBuilder")
            .field("k", &self.k)
            .field("max_rejection", &self.max_rejection)
            .field("window", &self.window)
            .finish()
    }
}

/// What an overload guard's setting accepts, in a refusal's message: the
/// adaptive throttle's `k` within 1 to 100, its `max_rejection_probability`
/// within `0.0..=1.0`, its `window` within 1 s to 1 h; a concurrency limit's
/// settings as their builders ([`AimdBuilder`](super::AimdBuilder),
/// [`Gradient2Builder`](super::Gradient2Builder),
/// [`ConcurrencyLimiterBuilder`](super::ConcurrencyLimiterBuilder)) say.
pub(crate) fn describe(
    setting: &'static str,
    value: SettingValue,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    match setting {
        "k" => write!(f, "adaptive throttle k must be within {MIN_K}..={MAX_K}, got {value}"),
        "max_rejection_probability" => {
            write!(f, "adaptive throttle max_rejection_probability must be within 0..=1, got {value}")
        }
        "window" => {
            write!(f, "adaptive throttle window must be within {MIN_WINDOW:?}..={MAX_WINDOW:?}, got {value}")
        }
        "min_limit" => write!(f, "concurrency limit min_limit must be at least 1, got {value}"),
        "max_limit" => write!(
            f,
            "concurrency limit max_limit must be within min_limit..={}, got {value}",
            super::limit::MAX_LIMIT
        ),
        "initial_limit" => {
            write!(f, "concurrency limit initial_limit must be within min_limit..=max_limit, got {value}")
        }
        "backoff_ratio" => write!(f, "AIMD backoff_ratio must be within [0.5, 1.0), got {value}"),
        "timeout" => {
            write!(f, "AIMD timeout must be within 1ms..={:?}, got {value}", super::limit::MAX_TIMEOUT)
        }
        "smoothing" => write!(f, "Gradient2 smoothing must be within (0, 1], got {value}"),
        "queue_size" => {
            write!(f, "Gradient2 queue_size must be at most {}, got {value}", super::limit::MAX_LIMIT)
        }
        "long_window" => {
            write!(f, "Gradient2 long_window must be within 1..=100000 samples, got {value}")
        }
        "rtt_tolerance" => write!(f, "Gradient2 rtt_tolerance must be within 1.0..=10.0, got {value}"),
        "max_wait" => {
            write!(
                f,
                "concurrency limiter max_wait must be at most {:?}, got {value}",
                super::limit::MAX_TIMEOUT
            )
        }
        "sheddable_reserve" => {
            write!(f, "concurrency limiter sheddable_reserve must be within 0..=1, got {value}")
        }
        other => write!(f, "{other} is out of range: {value}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn its_gauge_is_published_before_it_has_a_value_and_reported_once_it_has_one() {
        let fresh = AdaptiveThrottle::builder().clock(ManualClock::new()).build().expect("valid");
        // Registered at setup, when no request has been counted yet.
        assert_eq!(Gauge::distinct(|gauge| fresh.published(gauge)), vec![&ACCEPTED]);
        let mut reported = Vec::new();
        fresh.gauges(&mut |gauge, value| reported.push((gauge.name, value)));
        assert!(reported.is_empty(), "no ratio of nothing: {reported:?}");
        assert_eq!(Guard::admit(&fresh, Attempt::first()), Admission::Go(()));
        fresh.settle(Attempt::first(), (), End::Succeeded);
        fresh.gauges(&mut |gauge, value| reported.push((gauge.name, value)));
        assert_eq!(reported, vec![("retryscope.overload.accepted", 1.0)]);
    }

    /// The SRE book's formula as printed: no ceiling.
    fn throttle(clock: &ManualClock) -> AdaptiveThrottle {
        AdaptiveThrottle::builder()
            .max_rejection_probability(1.0)
            .clock(clock.clone())
            .build()
            .expect("valid settings")
    }

    /// `requests` requests, the first `accepts` of them accepted; none rejected.
    fn feed(throttle: &AdaptiveThrottle, requests: u32, accepts: u32) {
        for n in 0..requests {
            assert!(throttle.admit(1.0));
            if n < accepts {
                throttle.accepted();
            }
        }
    }

    #[test]
    fn the_rejection_probability_is_the_sre_formula() {
        for (requests, accepts, expected) in [
            (0, 0, 0.0),
            (10, 10, 0.0),
            (10, 5, 0.0),
            (10, 4, 2.0 / 11.0),
            (100, 0, 100.0 / 101.0),
            (100, 20, 60.0 / 101.0),
            (1_000, 499, 2.0 / 1_001.0),
        ] {
            let clock = ManualClock::new();
            let throttle = throttle(&clock);
            feed(&throttle, requests, accepts);
            assert_eq!(throttle.rejection_probability(), expected, "{requests} requests, {accepts} accepts");
        }
    }

    #[test]
    fn by_default_the_probability_stops_at_envoys_ceiling_so_a_fifth_still_probes() {
        let clock = ManualClock::new();
        let throttle = AdaptiveThrottle::builder().clock(clock.clone()).build().expect("defaults are valid");
        feed(&throttle, 100, 20);
        assert_eq!(throttle.rejection_probability(), 60.0 / 101.0, "below the ceiling: the formula");
        feed(&throttle, 1_000, 0);
        assert_eq!(throttle.rejection_probability(), DEFAULT_MAX_REJECTION);
        assert!(throttle.admit(DEFAULT_MAX_REJECTION), "a draw at the ceiling is sent");
        assert!(!throttle.admit(DEFAULT_MAX_REJECTION - 1e-9));
    }

    #[test]
    fn a_hundred_requests_twenty_accepted_reject_sixty_in_a_hundred_and_one() {
        // Once the type's example, which shows the effect through `admit`.
        let throttle =
            AdaptiveThrottle::builder().clock(ManualClock::new()).build().expect("defaults are valid");
        for n in 0..100 {
            assert!(throttle.admit(1.0 - f64::EPSILON));
            if n < 20 {
                throttle.accepted();
            }
        }
        assert_eq!(throttle.rejection_probability(), 60.0 / 101.0);
        assert_eq!(throttle.accept_ratio(), Some(0.2));
    }

    #[test]
    fn k_changes_the_slack_and_the_window_forgets() {
        let clock = ManualClock::new();
        let throttle = AdaptiveThrottle::builder()
            .k(1.5)
            .window(Duration::from_secs(10))
            .clock(clock.clone())
            .build()
            .expect("valid");
        feed(&throttle, 100, 40);
        assert_eq!(throttle.rejection_probability(), 40.0 / 101.0);
        assert_eq!(throttle.accept_ratio(), Some(0.4));
        clock.advance(Duration::from_secs(10));
        assert_eq!(throttle.rejection_probability(), 0.0);
        assert_eq!(throttle.accept_ratio(), None);
    }

    #[test]
    fn a_draw_below_the_probability_is_rejected_and_still_counted() {
        let clock = ManualClock::new();
        let throttle = throttle(&clock);
        feed(&throttle, 10, 0);
        let p = throttle.rejection_probability();
        assert_eq!(p, 10.0 / 11.0);
        assert!(!throttle.admit(p - 1e-9));
        // The rejected request counts: 11 requests now.
        assert_eq!(throttle.rejection_probability(), 11.0 / 12.0);
        assert!(throttle.admit(11.0 / 12.0));
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        for (builder, setting) in [
            (AdaptiveThrottle::builder().k(0.5), "k"),
            (AdaptiveThrottle::builder().k(f64::NAN), "k"),
            (AdaptiveThrottle::builder().k(1_000.0), "k"),
            (AdaptiveThrottle::builder().max_rejection_probability(1.5), "max_rejection_probability"),
            (AdaptiveThrottle::builder().max_rejection_probability(-0.1), "max_rejection_probability"),
            (AdaptiveThrottle::builder().max_rejection_probability(f64::NAN), "max_rejection_probability"),
            (AdaptiveThrottle::builder().window(Duration::from_millis(10)), "window"),
            (AdaptiveThrottle::builder().window(Duration::from_secs(7_200)), "window"),
        ] {
            let error = builder.build().expect_err("out of range");
            assert!(error.setting() == setting, "{error}");
        }
    }
}
