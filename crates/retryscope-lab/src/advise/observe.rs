//! What a service saw, per dependency, read from its retryscope series
//! (names and labels as `docs/telemetry.md` gives them) over one range.

use super::error::AdviseError;
use super::prom::{Prometheus, Sample};
use std::collections::BTreeMap;
use std::time::Duration;

/// The Prometheus series read, as `docs/telemetry.md` names them.
pub mod series {
    /// Logical operations, one per call.
    pub const REQUESTS: &str = "retryscope_requests_total";
    /// Retries by reason.
    pub const RETRIES: &str = "retryscope_retries_total";
    /// Attempt latency by attempt number and `error_type`.
    pub const ATTEMPT_BUCKET: &str = "retryscope_attempt_duration_seconds_bucket";
    /// Attempts by attempt number and `error_type`.
    pub const ATTEMPT_COUNT: &str = "retryscope_attempt_duration_seconds_count";
    /// Operations by the attempts they took.
    pub const REQUEST_COUNT: &str = "retryscope_request_duration_seconds_count";
    /// Retries and calls a guard refused, by reason.
    pub const THROTTLED: &str = "retryscope_throttled_total";
    /// Calls that ended before any attempt.
    pub const REFUSED: &str = "retryscope_refused_total";
    /// Attempts the pacer held back.
    pub const HELD: &str = "retryscope_pace_held_seconds_count";
    /// The breaker's state (0 closed, 1 half-open, 2 open).
    pub const BREAKER: &str = "retryscope_breaker_state";
    /// Hedged copies beyond the first.
    pub const HEDGES: &str = "retryscope_hedges_total";
}

/// The dependency label (`retryscope.dependency` as Prometheus writes it).
pub const DEPENDENCY: &str = "retryscope_dependency";
/// A value above this is no latency a service observed: the histograms stop at 60 s.
const MAX_SECONDS: f64 = 86_400.0;
/// A failure ratio at or above this, for a whole step of the timeline, is an outage.
pub const OUTAGE_RATIO: f64 = 0.5;

/// Latency quantiles of successful attempts, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quantiles {
    /// Median.
    pub p50: f64,
    /// 95th percentile: "The Tail at Scale"'s hedging delay.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile: the floor of the attempt timeout (0 where unknown).
    pub p999: f64,
}

/// One dependency's figures over the range.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Its name, as the series carry it.
    pub name: String,
    /// Logical operations started.
    pub requests: f64,
    /// Attempts, by attempt number (1 = first try).
    pub attempts: BTreeMap<u32, f64>,
    /// Failed first attempts.
    pub first_failures: f64,
    /// Failed attempts, by `error_type` (a status `503`, or a kind `timeout`).
    pub failures: BTreeMap<String, f64>,
    /// Latency of successful attempts, by attempt number.
    pub latency: BTreeMap<u32, Quantiles>,
    /// Finished operations, by the attempts they took (`1`, `2`, …).
    pub operations: BTreeMap<String, f64>,
    /// Retries, by reason.
    pub retries: BTreeMap<String, f64>,
    /// Retries and calls refused by a guard, by reason (`rate_limited`, `budget`, …).
    pub throttled: BTreeMap<String, f64>,
    /// Calls that ended before any attempt.
    pub refused: f64,
    /// Attempts the pacer held back.
    pub held: f64,
    /// Breaker state changes.
    pub breaker_changes: f64,
    /// Hedged copies sent.
    pub hedges: f64,
    /// The longest stretch whose failure ratio stayed at or above [`OUTAGE_RATIO`].
    pub longest_outage: Duration,
    /// The steps of the timeline with any failure, and all its steps.
    pub failing_steps: (usize, usize),
    /// The attempt failure ratio, step by step over the range (0 where no attempt failed).
    pub timeline: Vec<f64>,
    /// The timeline's step, seconds.
    pub timeline_step: f64,
    /// The range's length.
    pub window: Duration,
    /// The attempt timeout in force while the series were recorded (the
    /// replay's reading of `timeout` failures), where advise knows it.
    pub timeout_in_force: Option<Duration>,
}

impl Observed {
    /// Attempts of every number (`+ 0.0`: an empty sum is -0.0, shown as "-0").
    pub fn all_attempts(&self) -> f64 {
        self.attempts.values().sum::<f64>() + 0.0
    }

    /// Failed attempts of every type.
    pub fn all_failures(&self) -> f64 {
        self.failures.values().sum::<f64>() + 0.0
    }

    /// Retries of every reason.
    pub fn all_retries(&self) -> f64 {
        self.retries.values().sum::<f64>() + 0.0
    }
}

/// Where to read: the server, the selector's matchers, the range.
pub struct Scope<'a> {
    /// The server.
    pub prometheus: &'a Prometheus,
    /// The selector's matchers without braces (`job="checkout"`).
    pub matchers: &'a str,
    /// The range's end, unix seconds.
    pub end: f64,
    /// The range's length.
    pub window: Duration,
}

impl Scope<'_> {
    /// `metric{matchers,extra}`.
    fn select(&self, metric: &str, extra: &str) -> String {
        let all: Vec<&str> = [self.matchers, extra].into_iter().filter(|m| !m.is_empty()).collect();
        format!("{metric}{{{}}}", all.join(","))
    }

    /// `sum by (dependency, by) (increase(metric{…}[window]))`.
    fn increase(&self, metric: &str, extra: &str, by: &str) -> String {
        let by = if by.is_empty() { DEPENDENCY.to_owned() } else { format!("{DEPENDENCY}, {by}") };
        format!("sum by ({by}) (increase({}[{}s]))", self.select(metric, extra), self.window.as_secs())
    }

    /// The selector as an error shows it.
    fn shown(&self) -> String {
        format!("{{{}}} over {} s to {:.0}", self.matchers, self.window.as_secs(), self.end)
    }
}

/// A sample's dependency name (series without one are not a dependency's).
fn dependency(sample: &Sample) -> Option<&str> {
    sample.labels.get(DEPENDENCY).map(String::as_str)
}

/// Refuses a value no counter or histogram can have.
fn sane(metric: &'static str, dependency: &str, value: f64) -> Result<f64, AdviseError> {
    let why = if value.is_nan() {
        "not a number"
    } else if value < 0.0 {
        "negative"
    } else if value > 1e15 {
        "beyond any count"
    } else {
        return Ok(value);
    };
    Err(AdviseError::Absurd { metric, dependency: dependency.to_owned(), value, why })
}

/// The retryscope series the selector matches, by name: what a refusal shows
/// to tell "the selector matches nothing" from "a series was renamed".
pub async fn matched_names(scope: &Scope<'_>) -> Result<Vec<String>, AdviseError> {
    let expr = format!(
        "count by (__name__) (last_over_time({}[{}s]))",
        scope.select("", "__name__=~\"retryscope_.+\""),
        scope.window.as_secs()
    );
    let mut names: Vec<String> = scope
        .prometheus
        .query(&expr, scope.end)
        .await?
        .into_iter()
        .filter_map(|s| s.labels.get("__name__").cloned())
        .collect();
    names.sort();
    Ok(names)
}

/// Every dependency's figures; refuses a missing series, an absurd value, or
/// more than `cap` dependencies.
pub async fn read(scope: &Scope<'_>, cap: usize) -> Result<Vec<Observed>, AdviseError> {
    let p = scope.prometheus;
    let missing = |metric, dependency: Option<&str>, matched| AdviseError::Missing {
        metric,
        selector: scope.shown(),
        dependency: dependency.map(str::to_owned),
        matched,
    };
    let requests = p.query(&scope.increase(series::REQUESTS, "", ""), scope.end).await?;
    if requests.iter().all(|s| dependency(s).is_none()) {
        return Err(missing(series::REQUESTS, None, matched_names(scope).await?));
    }
    let mut deps: BTreeMap<String, Observed> = BTreeMap::new();
    for s in &requests {
        if let Some(name) = dependency(s) {
            let requests = sane(series::REQUESTS, name, s.value)?;
            let o = Observed { name: name.to_owned(), requests, window: scope.window, ..Observed::default() };
            deps.insert(name.to_owned(), o);
        }
    }
    if deps.len() > cap {
        return Err(AdviseError::TooManyDependencies { found: deps.len(), limit: cap });
    }

    // Attempts by number, and failed ones by type (no `error_type`: a success).
    let attempts =
        p.query(&scope.increase(series::ATTEMPT_COUNT, "", "retryscope_attempt"), scope.end).await?;
    if attempts.iter().all(|s| dependency(s).is_none()) {
        return Err(missing(series::ATTEMPT_COUNT, None, matched_names(scope).await?));
    }
    for s in &attempts {
        let (Some(o), Some(n)) = (entry(&mut deps, s), s.labels.get("retryscope_attempt")) else { continue };
        // A label that is not a number is not ours: counted as a later attempt.
        let n = n.parse::<u32>().unwrap_or(u32::MAX);
        let v = sane(series::ATTEMPT_COUNT, &o.name, s.value)?;
        *o.attempts.entry(n).or_default() += v;
    }
    let failed = "error_type!=\"\"";
    for s in p.query(&scope.increase(series::ATTEMPT_COUNT, failed, "error_type"), scope.end).await? {
        let Some(o) = entry(&mut deps, &s) else { continue };
        let kind = s.labels.get("error_type").cloned().unwrap_or_default();
        *o.failures.entry(kind).or_default() += sane(series::ATTEMPT_COUNT, &o.name, s.value)?;
    }
    let first_failed = format!("{failed},retryscope_attempt=\"1\"");
    for s in p.query(&scope.increase(series::ATTEMPT_COUNT, &first_failed, ""), scope.end).await? {
        if let Some(o) = entry(&mut deps, &s) {
            o.first_failures = sane(series::ATTEMPT_COUNT, &o.name, s.value)?;
        }
    }

    // Latency of successful attempts, by attempt number.
    for (q, set) in [(0.5, 0usize), (0.95, 1), (0.99, 2), (0.999, 3)] {
        let expr = format!(
            "histogram_quantile({q}, {})",
            scope.increase(series::ATTEMPT_BUCKET, "error_type=\"\"", "retryscope_attempt, le")
        );
        for s in p.query(&expr, scope.end).await? {
            let Some(o) = entry(&mut deps, &s) else { continue };
            let Some(n) = s.labels.get("retryscope_attempt").and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            // histogram_quantile is NaN where the buckets grew by nothing: no
            // successful attempt of that number in the range (a live storm's
            // outage fails every 4th attempt), so no quantile, not an absurd one.
            if s.value.is_nan() {
                continue;
            }
            let v = sane(series::ATTEMPT_BUCKET, &o.name, s.value)?;
            if v > MAX_SECONDS {
                return Err(AdviseError::Absurd {
                    metric: series::ATTEMPT_BUCKET,
                    dependency: o.name.clone(),
                    value: v,
                    why: "a latency above one day",
                });
            }
            let quantiles = o.latency.entry(n).or_default();
            match set {
                0 => quantiles.p50 = v,
                1 => quantiles.p95 = v,
                2 => quantiles.p99 = v,
                _ => quantiles.p999 = v,
            }
        }
    }
    // A dependency with attempts but no histogram at all: the buckets are missing.
    if deps.values().all(|o| o.latency.is_empty()) {
        let matched = matched_names(scope).await?;
        if !matched.iter().any(|m| m == series::ATTEMPT_BUCKET) {
            return Err(missing(series::ATTEMPT_BUCKET, None, matched));
        }
    }

    let optional: [(&'static str, &str, &str); 6] = [
        (series::REQUEST_COUNT, "", "retryscope_attempts"),
        (series::RETRIES, "", "retryscope_retry_reason"),
        (series::THROTTLED, "", "retryscope_throttle_reason"),
        (series::REFUSED, "", ""),
        (series::HELD, "", ""),
        (series::HEDGES, "", ""),
    ];
    // Counters appear at their first increment: absent means none happened.
    for (metric, extra, by) in optional {
        for s in p.query(&scope.increase(metric, extra, by), scope.end).await? {
            let Some(o) = entry(&mut deps, &s) else { continue };
            let v = sane(metric, &o.name, s.value)?;
            let key =
                if by.is_empty() { String::new() } else { s.labels.get(by).cloned().unwrap_or_default() };
            match metric {
                series::REQUEST_COUNT => *o.operations.entry(key).or_default() += v,
                series::RETRIES => *o.retries.entry(key).or_default() += v,
                series::THROTTLED => *o.throttled.entry(key).or_default() += v,
                series::REFUSED => o.refused += v,
                series::HELD => o.held += v,
                _ => o.hedges += v,
            }
        }
    }
    let changes = format!(
        "sum by ({DEPENDENCY}) (changes({}[{}s]))",
        scope.select(series::BREAKER, ""),
        scope.window.as_secs()
    );
    for s in p.query(&changes, scope.end).await? {
        if let Some(o) = entry(&mut deps, &s) {
            o.breaker_changes = sane(series::BREAKER, &o.name, s.value)?;
        }
    }
    timeline(scope, &mut deps).await?;
    Ok(deps.into_values().collect())
}

/// The failure ratio of attempts, step by step: the longest outage, and how
/// many steps saw failures at all.
async fn timeline(scope: &Scope<'_>, deps: &mut BTreeMap<String, Observed>) -> Result<(), AdviseError> {
    // At most ~500 steps, none shorter than a 15 s scrape; each step's ratio
    // over a minute, so that every ratio holds several scrapes.
    let step = (scope.window.as_secs_f64() / 500.0).max(15.0);
    let rate = |extra: &str| {
        format!("sum by ({DEPENDENCY}) (increase({}[1m]))", scope.select(series::ATTEMPT_COUNT, extra))
    };
    let expr = format!("{} / {}", rate("error_type!=\"\""), rate(""));
    let start = scope.end - scope.window.as_secs_f64();
    for o in deps.values_mut() {
        o.timeline_step = step;
    }
    for s in scope.prometheus.query_range(&expr, start, scope.end, step).await? {
        let Some(o) = s.labels.get(DEPENDENCY).and_then(|d| deps.get_mut(d)) else { continue };
        let (mut run, mut longest, mut failing) = (0usize, 0usize, 0usize);
        for &(_, ratio) in &s.points {
            // NaN: no attempt in that minute (0/0), neither failing nor healthy.
            if ratio.is_finite() && ratio > 0.0 {
                failing += 1;
            }
            run = if ratio.is_finite() && ratio >= OUTAGE_RATIO { run + 1 } else { 0 };
            longest = longest.max(run);
        }
        // Each point looks a minute back, so a run of points overstates the
        // stretch by up to that minute less one step: taken off (a 2 s outage
        // whose retries failed for 4 points of 15 s is not a 60 s outage).
        let stretch = longest as f64 * step - (60.0 - step);
        o.longest_outage =
            if longest == 0 { Duration::ZERO } else { Duration::from_secs_f64(stretch.max(step)) };
        o.failing_steps = (failing, s.points.len());
        // Indexed by step from the range's start; a missing point (no attempt) fails nothing.
        let steps = (scope.window.as_secs_f64() / step).ceil() as usize + 1;
        o.timeline = vec![0.0; steps];
        for &(t, ratio) in &s.points {
            let i = ((t - start) / step).round();
            if ratio.is_finite() && i >= 0.0 && (i as usize) < steps {
                o.timeline[i as usize] = ratio.clamp(0.0, 1.0);
            }
        }
    }
    Ok(())
}

/// The dependency a sample belongs to, when it is one `read` knows.
fn entry<'a>(deps: &'a mut BTreeMap<String, Observed>, sample: &Sample) -> Option<&'a mut Observed> {
    dependency(sample).and_then(|d| deps.get_mut(d))
}
