//! The alert rules' unit tests speak the instrumentation's language.
//!
//! `dashboards/tests/cadence_test.yml` (run by `promtool test rules` in
//! `scripts/check-ops.sh`) is generated here, from the instrumentation's own
//! name table, and must match the committed file: counters and gauges exported
//! the way an OpenTelemetry SDK exports them by default — a step every 60 s,
//! scraped every 15 s, with rules evaluated every 10 s, so that exports, scrapes
//! and evaluations never line up. Set `RETRYSCOPE_BLESS=1` to rewrite it.
//!
//! Every label value in every promtool test file must be one the code emits.

use retryscope::{ErrorType, Outcome};
use retryscope_otel::{IncomingAttempt, error_type_str, names};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

/// OpenTelemetry's default metric export interval.
const EXPORT_S: u32 = 60;
/// Prometheus's scrape interval in the operations kit.
const SCRAPE_S: u32 = 15;
/// promtool's rule evaluation interval: unaligned with the scrapes on purpose.
const EVAL_S: u32 = 10;

const JOB: &str = "checkout";
const DEPENDENCY: &str = "payments:8443";
const OPERATION: &str = "charge";
/// Requests per second in every scenario.
const RATE: f64 = 10.0;

fn dashboards() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../dashboards")
}

/// The Prometheus name of an OpenTelemetry attribute: dots become underscores.
fn label(attribute: &str) -> String {
    attribute.replace('.', "_")
}

/// A counter as the collector serves it: `per_second(t)` accumulates in the SDK
/// and becomes visible at each export (first one `offset_s` after start); the
/// values are what each scrape reads.
fn exported_counter(minutes: u32, offset_s: u32, per_second: impl Fn(u32) -> f64) -> Vec<f64> {
    counter_exported_every(EXPORT_S, minutes, offset_s, per_second)
}

/// Like [`exported_counter`], exported every `export_s` seconds.
fn counter_exported_every(
    export_s: u32,
    minutes: u32,
    offset_s: u32,
    per_second: impl Fn(u32) -> f64,
) -> Vec<f64> {
    let mut visible = 0.0;
    let mut accumulated = 0.0;
    let mut next_export = offset_s;
    let mut samples = Vec::new();
    for t in 0..=minutes * 60 {
        if t == next_export {
            visible = accumulated;
            next_export += export_s;
        }
        if t % SCRAPE_S == 0 {
            samples.push(visible);
        }
        accumulated += per_second(t);
    }
    samples
}

/// A gauge as the collector serves it: the value observed at the last export.
fn exported_gauge(minutes: u32, offset_s: u32, value: impl Fn(u32) -> f64) -> Vec<f64> {
    let mut visible = None;
    let mut next_export = offset_s;
    let mut samples = Vec::new();
    for t in 0..=minutes * 60 {
        if t == next_export {
            visible = Some(value(t));
            next_export += EXPORT_S;
        }
        if t % SCRAPE_S == 0 {
            // Before the first export the series does not exist yet.
            samples.push(visible);
        }
    }
    samples.into_iter().map(|v| v.unwrap_or(f64::NAN)).collect()
}

fn values(samples: &[f64]) -> String {
    let text: Vec<String> = samples
        .iter()
        .map(|v| if v.is_nan() { "_".to_owned() } else { format!("{}", (v * 1000.0).round() / 1000.0) })
        .collect();
    text.join(" ")
}

/// `metric{job, instance, dependency, operation, extra…}` as promtool wants it.
fn series(metric: &str, extra: &[(&str, &str)]) -> String {
    let mut labels = vec![
        ("job".to_owned(), JOB.to_owned()),
        ("instance".to_owned(), "checkout-1".to_owned()),
        (label(names::DEPENDENCY), DEPENDENCY.to_owned()),
        (label(names::OPERATION), OPERATION.to_owned()),
    ];
    labels.extend(extra.iter().map(|(k, v)| (label(k), (*v).to_owned())));
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{metric}{{{}}}", inner.join(","))
}

/// One PromQL check of a promtool test group.
struct Check {
    /// Evaluation time, in minutes.
    at: u32,
    expr: String,
    /// Expected samples: labels → value.
    samples: Vec<(String, f64)>,
}

/// One promtool test group.
struct Scenario {
    name: String,
    minutes: u32,
    /// How often the counters are exported: [`EXPORT_S`], or every scrape.
    export_s: u32,
    input: Vec<(String, Vec<f64>)>,
    checks: Vec<Check>,
}

impl Scenario {
    fn new(name: impl Into<String>, minutes: u32) -> Self {
        Self { name: name.into(), minutes, export_s: EXPORT_S, input: Vec::new(), checks: Vec::new() }
    }

    /// Counters exported at every scrape: smooth, as a pull endpoint serves them.
    fn smooth(mut self) -> Self {
        self.export_s = SCRAPE_S;
        self
    }

    /// A counter of this scenario, exported at its cadence.
    fn counter(&self, offset_s: u32, per_second: impl Fn(u32) -> f64) -> Vec<f64> {
        counter_exported_every(self.export_s, self.minutes, offset_s, per_second)
    }

    fn input(mut self, series: String, samples: Vec<f64>) -> Self {
        self.input.push((series, samples));
        self
    }

    /// `alert` fires for the dependency at `at` minutes and, with `held` > 0,
    /// has fired at every evaluation of the `held` minutes before: it fired in
    /// time and kept firing.
    fn fires(self, alert: &str, severity: &str, at: u32, held: u32) -> Self {
        let dependency = format!(",{}=\"{DEPENDENCY}\"", label(names::DEPENDENCY));
        self.fires_for(alert, &dependency, severity, at, held)
    }

    /// Like [`fires`](Self::fires), for an alert about the whole service.
    fn fires_for_service(self, alert: &str, severity: &str, at: u32, held: u32) -> Self {
        self.fires_for(alert, "", severity, at, held)
    }

    fn fires_for(mut self, alert: &str, labels: &str, severity: &str, at: u32, held: u32) -> Self {
        let selector = format!(
            "{{alertname=\"{alert}\",alertstate=\"firing\",job=\"{JOB}\"{labels},severity=\"{severity}\"}}"
        );
        let check = if held == 0 {
            (format!("ALERTS{selector}"), format!("ALERTS{selector}"), 1.0)
        } else {
            // The range is closed at both ends: one evaluation per EVAL_S, plus one.
            let evaluations = f64::from(held * 60 / EVAL_S + 1);
            (format!("count_over_time(ALERTS{selector}[{held}m])"), selector, evaluations)
        };
        let (expr, labels, value) = check;
        self.checks.push(Check { at, expr, samples: vec![(labels, value)] });
        self
    }

    /// No alert at all — not even pending — in the `minutes` before `at`.
    fn silent(mut self, at: u32, minutes: u32) -> Self {
        self.checks.push(Check {
            at,
            expr: format!("count_over_time(ALERTS[{minutes}m])"),
            samples: Vec::new(),
        });
        self
    }

    /// No `alert` firing at `at`.
    fn not_firing(mut self, alert: &str, at: u32) -> Self {
        let expr = format!("ALERTS{{alertname=\"{alert}\",alertstate=\"firing\"}}");
        self.checks.push(Check { at, expr, samples: Vec::new() });
        self
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "  - name: \"{}\"", self.name);
        let _ = writeln!(out, "    interval: {SCRAPE_S}s");
        let _ = writeln!(out, "    input_series:");
        for (series, samples) in &self.input {
            assert_eq!(samples.len() as u32, self.minutes * 60 / SCRAPE_S + 1);
            let _ = writeln!(out, "      - series: '{series}'");
            let _ = writeln!(out, "        values: '{}'", values(samples));
        }
        let _ = writeln!(out, "    promql_expr_test:");
        for Check { at, expr, samples } in &self.checks {
            let _ = writeln!(out, "      - expr: '{expr}'");
            let _ = writeln!(out, "        eval_time: {at}m");
            if samples.is_empty() {
                let _ = writeln!(out, "        exp_samples: []");
            } else {
                let _ = writeln!(out, "        exp_samples:");
                for (labels, value) in samples {
                    let _ = writeln!(out, "          - labels: '{labels}'");
                    let _ = writeln!(out, "            value: {value}");
                }
            }
        }
    }
}

/// Requests and retries of a service whose retry ratio is `ratio(t)`.
fn retrying(scenario: Scenario, offset_s: u32, ratio: impl Fn(u32) -> f64 + Copy) -> Scenario {
    let reason = error_type_str(ErrorType::Status(503));
    let requests = scenario.counter(offset_s, |_| RATE);
    let retries = scenario.counter(offset_s, |t| RATE * ratio(t));
    scenario
        .input(series("retryscope_requests_total", &[]), requests)
        .input(series("retryscope_retries_total", &[(names::RETRY_REASON, reason)]), retries)
}

/// Incoming requests of the service: `retried(t)` of them are retries of its
/// callers, spread over attempts 2, 3 and 4+ as a caller with four attempts
/// would send them.
fn serving(scenario: Scenario, offset_s: u32, retried: impl Fn(u32) -> f64 + Copy) -> Scenario {
    let [first, second, third, fourth, _] = IncomingAttempt::BUCKETS;
    let share = [(first, None), (second, Some(0.5)), (third, Some(0.3)), (fourth, Some(0.2))];
    share.into_iter().fold(scenario, |scenario, (bucket, part)| {
        let per_second = move |t| match part {
            None => RATE * (1.0 - retried(t)),
            Some(part) => RATE * retried(t) * part,
        };
        let series = format!(
            "retryscope_server_requests_total{{job=\"{JOB}\",instance=\"checkout-1\",{}=\"{bucket}\",{}=\"/orders\"}}",
            label(names::ATTEMPT),
            label(names::HTTP_ROUTE)
        );
        let samples = scenario.counter(offset_s, per_second);
        scenario.input(series, samples)
    })
}

fn scenarios() -> Vec<Scenario> {
    let mut all = Vec::new();
    // A calm service (5 % retries) goes into a sustained storm (60 %) at 10 min.
    // Exports fall at different offsets from the scrapes in each variant.
    for offset in [0, 23, 47] {
        let storm = Scenario::new(
            format!(
                "RetryStorm fires within 6 min of a 60 % storm and keeps firing (60 s exports at +{offset} s)"
            ),
            24,
        );
        let storm = retrying(storm, offset, |t| if t < 600 { 0.05 } else { 0.6 })
            .not_firing("RetryStorm", 10)
            .fires("RetryStorm", "critical", 16, 0)
            .fires("RetryStorm", "critical", 24, 8)
            .fires("RetryRatioHigh", "warning", 24, 2);
        all.push(storm);
    }
    all.push(
        retrying(Scenario::new("A calm service (5 % retries, 60 s exports) never alerts", 30), 31, |_| 0.05)
            .silent(30, 30),
    );
    all.push(
        retrying(
            Scenario::new(
                "RetryRatioHigh fires on a sustained 20 % and keeps firing; RetryStorm does not",
                30,
            ),
            11,
            |_| 0.2,
        )
        .fires("RetryRatioHigh", "warning", 18, 0)
        .fires("RetryRatioHigh", "warning", 30, 12)
        .not_firing("RetryStorm", 30),
    );

    // Operations that end exhausted: 3 % sustained fires, 0.5 % stays silent.
    for (share, fires) in [(0.03, true), (0.005, false)] {
        let name = if fires {
            "RetriesExhausted fires on 3 % exhausted operations and keeps firing".to_owned()
        } else {
            "0.5 % exhausted operations stay below RetriesExhausted".to_owned()
        };
        let count = |outcome: Outcome| {
            series(
                "retryscope_request_duration_seconds_count",
                &[(names::OUTCOME, outcome.as_str()), (names::ATTEMPTS, "4")],
            )
        };
        let scenario = Scenario::new(name, 20)
            .input(series("retryscope_requests_total", &[]), exported_counter(20, 5, |_| RATE))
            .input(count(Outcome::Success), exported_counter(20, 5, |_| RATE * (1.0 - share)))
            .input(count(Outcome::Exhausted), exported_counter(20, 5, |_| RATE * share));
        all.push(if fires {
            scenario.fires("RetriesExhausted", "warning", 20, 8)
        } else {
            scenario.silent(20, 20)
        });
    }

    let throttled =
        series("retryscope_throttled_total", &[(names::THROTTLE_REASON, names::THROTTLED_BY_BUDGET)]);
    all.push(
        Scenario::new(
            "RetryBudgetThrottling fires on budget refusals exported every 60 s and keeps firing",
            20,
        )
        .input(series("retryscope_requests_total", &[]), exported_counter(20, 41, |_| RATE))
        .input(throttled, exported_counter(20, 41, |_| 0.5))
        .fires("RetryBudgetThrottling", "warning", 20, 8),
    );

    // A breaker open from minute 2 on, half-open at every third export (a
    // probe in flight when the SDK collected); another that is always closed.
    let state = |t: u32| {
        if t < 120 {
            0.0
        } else if (t / 60).is_multiple_of(3) {
            1.0
        } else {
            2.0
        }
    };
    let gauge = series("retryscope_breaker_state", &[]);
    all.push(
        Scenario::new("CircuitBreakerOpen fires on a breaker exported every 60 s and keeps firing", 16)
            .input(gauge.clone(), exported_gauge(16, 19, state))
            .fires("CircuitBreakerOpen", "warning", 8, 0)
            .fires("CircuitBreakerOpen", "warning", 16, 8),
    );
    all.push(
        Scenario::new("A closed breaker exported every 60 s never alerts", 16)
            .input(gauge, exported_gauge(16, 19, |_| 0.0))
            .silent(16, 16),
    );

    // A service in the middle of a chain: 30 % of what it receives are retries
    // from 5 min on, and it retries 40 % of its own calls.
    let nested = Scenario::new(
        "NestedRetries fires on a service that receives 30 % retries and retries 40 % itself",
        20,
    );
    let nested = serving(nested, 13, |t| if t < 300 { 0.0 } else { 0.3 });
    all.push(
        retrying(nested, 13, |t| if t < 300 { 0.02 } else { 0.4 })
            .not_firing("NestedRetries", 5)
            .fires_for_service("NestedRetries", "warning", 14, 0)
            .fires_for_service("NestedRetries", "warning", 20, 6),
    );
    // Receiving retries alone, or retrying alone, is not nesting.
    let receives =
        Scenario::new("A service that receives 30 % retries but does not retry itself is no nesting", 20);
    all.push(retrying(serving(receives, 13, |_| 0.3), 13, |_| 0.02).silent(20, 20));
    let retries = Scenario::new("A service that retries 40 % but receives no retries is no nesting", 20);
    all.push(retrying(serving(retries, 13, |_| 0.0), 13, |_| 0.4).not_firing("NestedRetries", 20));
    // The same nesting with counters scraped straight from the service.
    let smooth = Scenario::new("NestedRetries fires on smooth counters too", 20).smooth();
    all.push(
        retrying(serving(smooth, 0, |t| if t < 300 { 0.0 } else { 0.3 }), 0, |t| {
            if t < 300 { 0.02 } else { 0.4 }
        })
        .fires_for_service("NestedRetries", "warning", 20, 6),
    );
    all
}

fn render() -> String {
    let mut out = String::from(
        "# GENERATED by crates/retryscope-otel/tests/alert_fixtures.rs from the instrumentation's\n\
         # name table: do not edit (RETRYSCOPE_BLESS=1 cargo test -p retryscope-otel --test alert_fixtures).\n\
         #\n\
         # The alert rules at OpenTelemetry's default export interval: counters and gauges step\n\
         # once every 60 s (as a collector serves what an SDK exports), Prometheus scrapes every\n\
         # 15 s and evaluates the rules every 10 s, so exports, scrapes and evaluations never line up.\n\
         # `count_over_time(ALERTS{...}[Nm])` counts evaluations: an alert that fired at every one\n\
         # of the last N minutes has N*6+1 of them.\n",
    );
    let _ =
        writeln!(out, "rule_files:\n  - ../retryscope.rules.yml\n\nevaluation_interval: {EVAL_S}s\n\ntests:");
    for scenario in scenarios() {
        scenario.render(&mut out);
    }
    out
}

#[test]
fn the_cadence_tests_are_generated_from_the_name_table() {
    let path = dashboards().join("tests/cadence_test.yml");
    let generated = render();
    if std::env::var_os("RETRYSCOPE_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the cadence tests");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is out of date: run RETRYSCOPE_BLESS=1 cargo test -p retryscope-otel --test alert_fixtures",
        path.display()
    );
}

/// The values the instrumentation gives each bounded label; `None` for labels
/// whose values are the user's (dependency, operation) or numbers.
fn vocabulary(label_name: &str) -> Option<BTreeSet<String>> {
    let statuses = (100..=599).map(|code| error_type_str(ErrorType::Status(code)).to_owned());
    let kinds = ErrorType::BUILT_IN_KINDS.into_iter().map(|kind| error_type_str(kind).to_owned());
    let set = |values: &[&str]| Some(values.iter().map(|v| (*v).to_owned()).collect());
    match label_name {
        l if l == label(names::RETRY_REASON) || l == label(names::ERROR_TYPE) => {
            Some(statuses.chain(kinds).collect())
        }
        // The engine's outcomes, and `fallback` (a call its fallback answered).
        l if l == label(names::OUTCOME) => Some(
            Outcome::ALL
                .iter()
                .map(|o| o.as_str())
                .chain([names::OUTCOME_FALLBACK])
                .map(str::to_owned)
                .collect(),
        ),
        l if l == label(names::DELAY_SOURCE) => {
            Some(retryscope::DelaySource::ALL.iter().map(|s| s.as_str().to_owned()).collect())
        }
        l if l == label(names::ATTEMPT) => {
            let numbers = (1..=retryscope_otel::MAX_TRUSTED_ATTEMPT).map(|n| n.to_string());
            Some(numbers.chain(IncomingAttempt::BUCKETS.iter().map(|b| (*b).to_owned())).collect())
        }
        l if l == label(names::THROTTLE_REASON) => set(&[
            names::THROTTLED_BY_BUDGET,
            names::THROTTLED_BY_BREAKER,
            names::THROTTLED_BY_PACER,
            names::THROTTLED_BY_UPSTREAM,
            names::THROTTLED_LOCALLY,
            names::THROTTLED_BY_LIMIT,
        ]),
        l if l == label(names::PRIORITY) => {
            Some(retryscope::overload::Priority::ALL.iter().map(|p| p.as_str().to_owned()).collect())
        }
        l if l == label(names::PACE_SOURCE) => {
            Some(retryscope::pace::HoldSource::ALL.iter().map(|s| s.as_str().to_owned()).collect())
        }
        _ => None,
    }
}

#[test]
fn every_label_value_in_the_promtool_tests_is_one_the_code_emits() {
    let mut checked = 0;
    for entry in std::fs::read_dir(dashboards().join("tests")).expect("dashboards/tests") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("readable test file");
        // Every `retryscope_label="value"` pair, wherever it stands.
        for (i, _) in text.match_indices("retryscope_") {
            let rest = &text[i..];
            let Some((name, after)) = rest.split_once("=\"") else { continue };
            if !name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                continue;
            }
            let Some(value) = after.split('"').next() else { continue };
            if let Some(allowed) = vocabulary(name) {
                assert!(allowed.contains(value), "{}: {name}=\"{value}\" is never emitted", path.display());
                checked += 1;
            }
        }
    }
    assert!(
        checked > 10,
        "the scan found only {checked} bounded label values: is it still reading the tests?"
    );
}
