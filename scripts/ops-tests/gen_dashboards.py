#!/usr/bin/env python3
"""Generates dashboards/retry-overview.json and dashboards/retry-storm.json.

The JSON files are committed (Grafana provisions them as they are); this script
is their source. Edit it, run `python3 scripts/ops-tests/gen_dashboards.py`, and
commit both. `scripts/check-ops.sh` fails when the JSON and this script drift
(`--check`). Python 3 standard library only.

Conventions (checked by check_dashboards.py):
* queries only use the docs/telemetry.md series and the recording rules of
  dashboards/retryscope.rules.yml;
* the only template variables in queries are $job, $dependency,
  $__rate_interval and $__interval;
* the Prometheus datasource is the ${datasource} variable (default: the
  provisioned uid "prometheus"), the trace backend the ${traces} variable (type
  jaeger, default: the provisioned uid "jaeger"): no data source uid is written
  into a panel or a link, so the dashboards work in a Grafana whose data sources
  have other uids (pick them in the variables) and the trace links follow.
"""
import json
import sys
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "dashboards"

PROM = {"type": "prometheus", "uid": "${datasource}"}
# The trace links' data source: the ${traces} variable, interpolated by Grafana when
# the link is followed (Explore has no dashboard variables of its own).
TRACE_DS = {"type": "jaeger", "uid": "@TRACES@"}
SEL = 'job=~"$job", retryscope_dependency=~"$dependency"'
BY = "job, retryscope_dependency"
RI = "$__rate_interval"


def target(expr, legend, ref, **extra):
    t = {"datasource": PROM, "editorMode": "code", "expr": expr,
         "legendFormat": legend, "range": True, "refId": ref}
    t.update(extra)
    return t


def thresholds(*steps):
    return {"mode": "absolute",
            "steps": [{"color": "green", "value": None}] +
                     [{"color": c, "value": v} for v, c in steps]}


def trace_link():
    """Data link: from a (job, dependency) series to its traces in Jaeger Explore."""
    pane = {"traces": {
        "datasource": TRACE_DS["uid"],
        "queries": [{
            "refId": "A",
            "datasource": TRACE_DS,
            "queryType": "search",
            "service": "@SERVICE@",
            "tags": "retryscope.dependency=@DEPENDENCY@",
            "limit": 20,
        }],
        "range": {"from": "@FROM@", "to": "@TO@"},
    }}
    enc = urllib.parse.quote(json.dumps(pane, separators=(",", ":")), safe="")
    enc = (enc.replace("%40TRACES%40", "${traces:percentencode}")
              .replace("%40SERVICE%40", "${__field.labels.job:percentencode}")
              .replace("%40DEPENDENCY%40", "${__field.labels.retryscope_dependency:percentencode}")
              .replace("%40FROM%40", "${__from}")
              .replace("%40TO%40", "${__to}"))
    return {
        "title": "Traces of ${__field.labels.job} calling ${__field.labels.retryscope_dependency}",
        "url": "/explore?schemaVersion=1&orgId=1&panes=" + enc,
        "targetBlank": True,
    }


def timeseries(pid, title, desc, targets, pos, unit="short", stack=False, th=None,
               th_style="off", links=None, overrides=None, min_=0, max_=None, legend_calcs=None):
    custom = {
        "drawStyle": "line", "lineWidth": 1, "fillOpacity": 10 if not stack else 60,
        "gradientMode": "none", "showPoints": "never", "spanNulls": False,
        "axisPlacement": "auto", "axisLabel": "", "axisSoftMin": 0,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        "thresholdsStyle": {"mode": th_style},
        "lineInterpolation": "linear", "pointSize": 4,
        "scaleDistribution": {"type": "linear"},
        "hideFrom": {"legend": False, "tooltip": False, "viz": False},
    }
    defaults = {"unit": unit, "custom": custom,
                "color": {"mode": "palette-classic"},
                "thresholds": th or thresholds(),
                "links": links or [], "mappings": []}
    if min_ is not None:
        defaults["min"] = min_
    if max_ is not None:
        defaults["max"] = max_
    return {
        "id": pid, "type": "timeseries", "title": title, "description": desc,
        "datasource": PROM, "gridPos": pos,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                       "calcs": legend_calcs if legend_calcs is not None else ["mean", "max", "lastNotNull"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": targets,
    }


def row(pid, title, y):
    return {"id": pid, "type": "row", "title": title, "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []}


def color_override(name, color):
    return {"matcher": {"id": "byName", "options": name},
            "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": color}}]}


def variables(dependency_label="Dependency"):
    def query_var(name, label, query):
        return {
            "name": name, "label": label, "type": "query", "datasource": PROM,
            "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery", "qryType": 1},
            "refresh": 2, "sort": 1, "multi": True, "includeAll": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "options": [], "regex": "", "hide": 0, "skipUrlSync": False,
        }
    return {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {"selected": False, "text": "Prometheus", "value": "prometheus"},
         "options": [], "regex": "", "hide": 0, "refresh": 1, "includeAll": False, "multi": False,
         "skipUrlSync": False},
        {"name": "traces", "label": "Traces", "type": "datasource", "query": "jaeger",
         "current": {"selected": False, "text": "Jaeger", "value": "jaeger"},
         "options": [], "regex": "", "hide": 0, "refresh": 1, "includeAll": False, "multi": False,
         "skipUrlSync": False},
        query_var("job", "Service (job)", "label_values(retryscope_requests_total, job)"),
        query_var("dependency", dependency_label,
                  'label_values(retryscope_requests_total{job=~"$job"}, retryscope_dependency)'),
    ]}


def dashboard(uid, title, desc, panels, other_uid_tag="retryscope"):
    return {
        "uid": uid, "title": title, "description": desc,
        "tags": ["retryscope", "retries", "opentelemetry"],
        "schemaVersion": 39, "version": 1, "editable": False,
        "graphTooltip": 1, "liveNow": False, "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {}, "timezone": "browser", "fiscalYearStartMonth": 0,
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "links": [{"title": "retryscope dashboards", "type": "dashboards", "tags": [other_uid_tag],
                   "asDropdown": True, "includeVars": True, "keepTime": True,
                   "icon": "external link", "targetBlank": False, "tooltip": "", "url": ""}],
        "templating": variables(),
        "panels": panels,
    }


def rate(metric, extra="", by=BY):
    sel = SEL + (", " + extra if extra else "")
    return f"sum by ({by}) (rate({metric}{{{sel}}}[{RI}]))"


def quantile(q, metric, by):
    return (f"histogram_quantile({q}, sum by (le, {by}) "
            f"(rate({metric}_bucket{{{SEL}}}[{RI}])))")


OUTCOME_COLORS = [("success", "green"), ("failure", "orange"), ("exhausted", "red"),
                  ("throttled", "purple"), ("cancelled", "text"), ("refused", "dark-purple"),
                  ("fallback", "yellow")]
BREAKER_MAPPINGS = [{"type": "value", "options": {
    "0": {"text": "closed", "color": "green", "index": 0},
    "1": {"text": "half-open", "color": "yellow", "index": 1},
    "2": {"text": "open", "color": "red", "index": 2}}}]


def overview():
    W = 12
    p = []
    p.append(row(100, "Traffic and retries", 0))
    p.append(timeseries(
        1, "Request rate",
        "Logical operations started per second (retryscope_requests_total), per service and dependency. "
        "Click a series for its traces.",
        [target(rate("retryscope_requests_total"), "{{job}} → {{retryscope_dependency}}", "A")],
        {"h": 8, "w": W, "x": 0, "y": 1}, unit="reqps", links=[trace_link()]))
    p.append(timeseries(
        2, "Retry-to-request ratio",
        "Retries per logical request (recording rules retryscope:retry_ratio:rate2m / rate5m). "
        "Lines: 10 % (RetryRatioHigh, warning) and 50 % (RetryStorm, critical). Click a series for its traces.",
        [target(f"retryscope:retry_ratio:rate5m{{{SEL}}}", "{{job}} → {{retryscope_dependency}} (5m)", "A"),
         target(f"retryscope:retry_ratio:rate2m{{{SEL}}}", "{{job}} → {{retryscope_dependency}} (2m)", "B")],
        {"h": 8, "w": W, "x": 12, "y": 1}, unit="percentunit",
        th=thresholds((0.1, "orange"), (0.5, "red")), th_style="line", links=[trace_link()],
        overrides=[{"matcher": {"id": "byFrameRefID", "options": "B"},
                    "properties": [{"id": "custom.lineStyle",
                                    "value": {"fill": "dash", "dash": [10, 10]}}]}]))
    p.append(timeseries(
        3, "Attempts per request",
        "Average attempts per logical request = (requests + retries) / requests = 1 + retry ratio "
        "(5m). 1 means no retries.",
        [target(f"1 + retryscope:retry_ratio:rate5m{{{SEL}}}", "{{job}} → {{retryscope_dependency}}", "A")],
        {"h": 8, "w": W, "x": 0, "y": 9}, unit="none", min_=1))
    p.append(timeseries(
        4, "Outcomes",
        "Finished operations per second by retryscope_outcome (success, failure = permanent error, "
        "exhausted = attempts or deadline used up, throttled = budget or breaker, cancelled, "
        "fallback = the engine gave up and the client's fallback answered: not a success), and "
        "refused = calls that ended before any attempt was sent (retryscope_refused_total: an open "
        "breaker, a spent budget, the pacer, or the caller giving up while held).",
        [target(rate("retryscope_request_duration_seconds_count", by="retryscope_outcome"),
                "{{retryscope_outcome}}", "A"),
         target(f"sum(rate(retryscope_refused_total{{{SEL}}}[{RI}]))", "refused", "B")],
        {"h": 8, "w": W, "x": 12, "y": 9}, unit="reqps", stack=True,
        overrides=[color_override(n, c) for n, c in OUTCOME_COLORS]))
    p.append(timeseries(
        14, "Operations that needed a retry",
        "Share of finished operations that used 2 or more attempts (recording rule "
        "retryscope:multi_attempt_ratio:rate5m, from retryscope_request_duration_seconds_count by "
        "retryscope_attempts). A call that succeeds on its fourth attempt counts here, not as an error.",
        [target(f"retryscope:multi_attempt_ratio:rate5m{{{SEL}}}", "{{job}} → {{retryscope_dependency}}", "A")],
        {"h": 8, "w": W, "x": 0, "y": 17}, unit="percentunit", max_=1))
    p.append(timeseries(
        15, "Attempts per operation (p50 / p90 / p99)",
        "Exact quantiles of the attempts finished operations used (recording rules "
        "retryscope:operation_attempts:p50_rate5m / p90 / p99; whole numbers, 10 reads "
        "\"10 or more\"). p99 at max_attempts means the slowest 1 % spend every attempt.",
        [target(f"retryscope:operation_attempts:{name}_rate5m{{{SEL}}}",
                f"{name} {{{{job}}}} → {{{{retryscope_dependency}}}}", ref)
         for name, ref in (("p50", "A"), ("p90", "B"), ("p99", "C"))],
        {"h": 8, "w": W, "x": 12, "y": 17}, unit="none", min_=1))
    p.append(timeseries(
        5, "Retries by reason",
        "Retries started per second by retryscope_retry_reason (error.type of the failure that caused them).",
        [target(rate("retryscope_retries_total", by="retryscope_dependency, retryscope_retry_reason"),
                "{{retryscope_dependency}}: {{retryscope_retry_reason}}", "A")],
        {"h": 8, "w": 24, "x": 0, "y": 25}, unit="short", stack=True))

    p.append(row(101, "Latency", 33))
    p.append(timeseries(
        6, "Attempt latency by attempt number",
        "p50 / p95 / p99 of retryscope_attempt_duration_seconds per attempt number (1 = first try). "
        "Later attempts that are slower than the first point at an overloaded dependency.",
        [target(quantile(q, "retryscope_attempt_duration_seconds", "retryscope_attempt"),
                f"p{int(q * 100)} attempt {{{{retryscope_attempt}}}}", ref)
         for q, ref in ((0.5, "A"), (0.95, "B"), (0.99, "C"))],
        {"h": 9, "w": W, "x": 0, "y": 34}, unit="s"))
    p.append(timeseries(
        7, "Operation latency by attempts used",
        "p50 / p95 of retryscope_request_duration_seconds (waits included) by the number of attempts "
        "the operation used: what each retry costs the caller.",
        [target(quantile(q, "retryscope_request_duration_seconds", "retryscope_attempts"),
                f"p{int(q * 100)} {{{{retryscope_attempts}}}} attempt(s)", ref)
         for q, ref in ((0.5, "A"), (0.95, "B"))],
        {"h": 9, "w": W, "x": 12, "y": 34}, unit="s"))
    p.append(timeseries(
        8, "Backoff delay by source",
        "p95 and mean wait before a retry, by retryscope_delay_source: policy (computed backoff), "
        "retry_after (server Retry-After), rate_limit (RateLimit headers).",
        [target(quantile(0.95, "retryscope_backoff_delay_seconds", "retryscope_delay_source"),
                "p95 {{retryscope_delay_source}}", "A"),
         target(f"{rate('retryscope_backoff_delay_seconds_sum', by='retryscope_delay_source')}\n/\n"
                f"({rate('retryscope_backoff_delay_seconds_count', by='retryscope_delay_source')} > 0)",
                "mean {{retryscope_delay_source}}", "B")],
        {"h": 9, "w": 24, "x": 0, "y": 43}, unit="s"))

    p.append(row(102, "Protection: budget and circuit breaker", 52))
    p.append(timeseries(
        9, "Throttled retries by reason",
        "Retries refused per second (retryscope_throttled_total) by retryscope_throttle_reason: "
        "budget (retry budget spent) or circuit_open.",
        [target(rate("retryscope_throttled_total", by=f"{BY}, retryscope_throttle_reason"),
                "{{job}} → {{retryscope_dependency}}: {{retryscope_throttle_reason}}", "A")],
        {"h": 8, "w": W, "x": 0, "y": 53}, unit="short"))
    p.append(timeseries(
        10, "Retry budget available",
        "Retries the budget would still allow (retryscope_budget_available), lowest instance per "
        "service and dependency. At 0, further retries are throttled (reason budget).",
        [target(f"min by ({BY}) (retryscope_budget_available{{{SEL}}})",
                "{{job}} → {{retryscope_dependency}}", "A")],
        {"h": 8, "w": W, "x": 12, "y": 53}, unit="short"))
    p.append({
        "id": 11, "type": "state-timeline", "title": "Circuit breaker state",
        "description": "retryscope_breaker_state, worst instance per service and dependency: "
                       "0 closed, 1 half-open, 2 open.",
        "datasource": PROM, "gridPos": {"h": 8, "w": 24, "x": 0, "y": 61},
        "fieldConfig": {"defaults": {
            "custom": {"fillOpacity": 80, "lineWidth": 0, "spanNulls": False,
                       "hideFrom": {"legend": False, "tooltip": False, "viz": False}},
            "color": {"mode": "thresholds"},
            "thresholds": thresholds((1, "yellow"), (2, "red")),
            "mappings": BREAKER_MAPPINGS, "min": 0, "max": 2, "unit": "none", "links": [trace_link()]},
            "overrides": []},
        "options": {"showValue": "auto", "rowHeight": 0.9, "mergeValues": True, "alignValue": "left",
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "single", "sort": "none"}},
        "targets": [target(f"max by ({BY}) (retryscope_breaker_state{{{SEL}}})",
                           "{{job}} → {{retryscope_dependency}}", "A")],
    })

    p.append(row(103, "Call chain: retries of retries", 69))
    p.append(timeseries(
        12, "Call chain: retries received and sent",
        "Solid: the share of a service's incoming requests that are retries of its callers "
        "(retryscope:incoming_retry_share:rate5m, from the callers' retry-attempt header). Dashed: the "
        "same service's own retry ratio towards its worst dependency. Both high means retries are "
        "multiplying down the call chain (alert NestedRetries): retry at one layer only.",
        [target('retryscope:incoming_retry_share:rate5m{job=~"$job"}', "{{job}} receives", "A"),
         target(f"max by (job) (retryscope:retry_ratio:rate5m{{{SEL}}})", "{{job}} sends (worst dependency)", "B")],
        {"h": 8, "w": W, "x": 0, "y": 70}, unit="percentunit", th=thresholds((0.1, "orange")),
        th_style="line",
        overrides=[{"matcher": {"id": "byFrameRefID", "options": "B"},
                    "properties": [{"id": "custom.lineStyle",
                                    "value": {"fill": "dash", "dash": [10, 10]}}]}]))
    p.append(timeseries(
        13, "Incoming requests by caller attempt",
        "Incoming requests per second (retryscope_server_requests_total) by the attempt their caller "
        "says they are: 1 = first try, 2, 3, 4+ = retries, unknown = an attempt header that could not "
        "be believed.",
        [target('sum by (job, retryscope_attempt) (rate(retryscope_server_requests_total{job=~"$job"}'
                f'[{RI}]))', "{{job}}: attempt {{retryscope_attempt}}", "A")],
        {"h": 8, "w": W, "x": 12, "y": 70}, unit="reqps", stack=True))

    p.append(row(104, "Pacing: rate limits", 78))
    p.append(timeseries(
        16, "Rate-limit events per request",
        "Calls the pacer held back or refused (retryscope_pace_held_seconds_count, retryscope_throttled_total "
        "reason rate_limited) and attempts answered 429 or RESOURCE_EXHAUSTED, per logical request (recording "
        "rule retryscope:rate_limited_ratio:rate5m). Line: 5 % (RateLimited, warning, for 10 minutes).",
        [target(f"retryscope:rate_limited_ratio:rate5m{{{SEL}}}", "{{job}} → {{retryscope_dependency}}", "A")],
        {"h": 8, "w": 8, "x": 0, "y": 79}, unit="percentunit", th=thresholds((0.05, "orange")),
        th_style="line"))
    p.append(timeseries(
        17, "Time held by the pacer (p95)",
        "p95 of how long the pacer held a call back before sending it (retryscope_pace_held_seconds), by "
        "retryscope_pace_source: retry_after (a 429's or 503's Retry-After, for the whole dependency), "
        "rate_limit (a quota from RateLimit / X-RateLimit-* headers), grpc_pushback, adaptive.",
        [target(quantile(0.95, "retryscope_pace_held_seconds", "retryscope_pace_source"),
                "p95 {{retryscope_pace_source}}", "A")],
        {"h": 8, "w": 8, "x": 8, "y": 79}, unit="s"))
    p.append(timeseries(
        18, "Send rate the pacer allows",
        "retryscope_pace_rate_per_second, lowest instance per service and dependency, while a pace is in "
        "force: 0 behind a Retry-After gate, the reported quota's rate, or the adaptive limiter's. No line: "
        "the dependency has not asked the client to slow down.",
        [target(f"min by ({BY}) (retryscope_pace_rate_per_second{{{SEL}}})",
                "{{job}} → {{retryscope_dependency}}", "A")],
        {"h": 8, "w": 8, "x": 16, "y": 79}, unit="reqps", min_=0))

    p.append(row(105, "Hedging: slow tails", 87))
    p.append(timeseries(
        19, "Hedge-to-request ratio (extra load)",
        "Copies sent beyond the first (retryscope_hedges_total) per logical request (recording rule "
        "retryscope:hedge_ratio:rate5m): the load hedging adds, 0.05 = 5 % more requests reach the "
        "dependency. Line: 10 % (HedgeLoadHigh, warning, for 10 minutes). 0 for a dependency that is "
        "called without hedging.",
        [target(f"retryscope:hedge_ratio:rate5m{{{SEL}}}", "{{job}} → {{retryscope_dependency}}", "A")],
        {"h": 8, "w": W, "x": 0, "y": 88}, unit="percentunit", th=thresholds((0.1, "orange")),
        th_style="line", links=[trace_link()]))
    p.append(timeseries(
        20, "Hedges that won",
        "Calls won by a later copy (retryscope_hedge_wins_total) per hedge sent (recording rule "
        "retryscope:hedge_win_ratio:rate5m). High: hedges cut slow calls short. Low with a high hedge "
        "ratio: the first copy wins anyway and the hedging delay is too short for this dependency. "
        "No line: no hedge was sent.",
        [target(f"retryscope:hedge_win_ratio:rate5m{{{SEL}}}", "{{job}} → {{retryscope_dependency}}", "A")],
        {"h": 8, "w": W, "x": 12, "y": 88}, unit="percentunit", max_=1))
    # Issue 25: the server side of idempotency keys (retryscope-idempotency).
    p.append(row(140, "Idempotency keys: the server side", 96))
    p.append(timeseries(
        40, "Keyed requests by what the server did",
        "Requests of keyed methods (POST, PATCH) per second seen by the idempotency layer "
        "(retryscope_idempotency_requests_total), by retryscope_idempotency_outcome: executed (ran once), "
        "replayed (a retry answered from the store), conflict (409: the first still running), mismatch "
        "(422: the key reused for another request), missing_key / invalid_key (400), unkeyed (passed "
        "through), not_replayable, body_refused, store_full and store_error (503). Replays are retries that "
        "did not run twice.",
        [target('sum by (job, retryscope_idempotency_outcome) (rate(retryscope_idempotency_requests_total'
                f'{{job=~"$job"}}[{RI}]))', "{{job}}: {{retryscope_idempotency_outcome}}", "A")],
        {"h": 8, "w": 24, "x": 0, "y": 97}, unit="reqps", stack=True))
    # Issue 37: fault injection (retryscope_http::fault), injected failures apart from real ones.
    injected = (f'sum by ({BY}) (rate(retryscope_faults_injected_total{{{SEL}, '
                f'retryscope_fault_kind!~"latency|slow_body"}}[{RI}]))')
    failed = (f'sum by ({BY}) (rate(retryscope_attempt_duration_seconds_count{{{SEL}, '
              f'error_type!=""}}[{RI}]))')
    p.append(row(150, "Fault injection: injected versus real failures", 105))
    p.append(timeseries(
        50, "Injected versus real failed attempts",
        "Failed attempts per second, split into those a fault layer injected "
        "(retryscope_faults_injected_total, by retryscope_fault_kind; latency and slow_body delay "
        "an attempt without failing it and are left out) and the rest, the real failures (failed "
        "attempts, retryscope_attempt_duration_seconds_count with an error_type, minus the injected "
        "ones). During a game day the injected line is the drill; a real line that rises with it "
        "is an outage the drill caused. No injected line: no fault layer is enabled.",
        [target(f'sum by ({BY}, retryscope_fault_kind) (rate(retryscope_faults_injected_total{{{SEL}}}[{RI}]))',
                "injected {{retryscope_fault_kind}}: {{job}} → {{retryscope_dependency}}", "A"),
         target(f"{failed} - ({injected} or 0 * {failed})",
                "real: {{job}} → {{retryscope_dependency}}", "B")],
        {"h": 8, "w": 24, "x": 0, "y": 106}, unit="reqps", links=[trace_link()]))
    # Issue 39: job workers on a broker (retryscope-jobs). Their series carry the job's
    # subject (messaging_destination_name), not a dependency: only $job applies.
    jsel = 'job=~"$job"'
    p.append(row(160, "Jobs", 115))
    p.append(timeseries(
        60, "Jobs by outcome",
        "Job deliveries per second (retryscope_job_deliveries_total) by retryscope_job_outcome: "
        "succeeded, retried (the next attempt queued with a run-at), held (the dependency's breaker, "
        "pacer or budget refused it: not an attempt), dead_lettered, deduplicated (its key was already "
        "processed: acked without running), waiting (before its run-at), unsettled (the broker failed "
        "while it was settled: it comes again), replayed (a dead letter queued again), and "
        "claimed_elsewhere (another worker's claim holds its key: running there, or that worker died "
        "less than a claim ago; not a hold), and superseded (a delivery of an attempt older than one "
        "already run or scheduled for its key, after a broker restart or a lost ack: acked and dropped, "
        "not run).",
        [target(f"sum by (job, retryscope_job_outcome) (rate(retryscope_job_deliveries_total{{{jsel}}}[{RI}]))",
                "{{job}}: {{retryscope_job_outcome}}", "A")],
        {"h": 8, "w": 8, "x": 0, "y": 116}, unit="ops", links=[trace_link()]))
    p.append(timeseries(
        61, "Dead letters by reason",
        "Jobs given up per second (retryscope_job_dead_letters_total, counted once the dead letter is "
        "stored) by retryscope_job_dead_reason: permanent, unrepeatable, attempts_exhausted, "
        "deadline_exceeded, hint_too_long, invalid_job_metadata, max_deliveries. A hold never is one.",
        [target(f"sum by (job, retryscope_job_dead_reason) (rate(retryscope_job_dead_letters_total{{{jsel}}}[{RI}]))",
                "{{job}}: {{retryscope_job_dead_reason}}", "A")],
        {"h": 8, "w": 8, "x": 8, "y": 116}, unit="ops"))
    p.append(timeseries(
        65, "Claims taken over",
        "Job keys claimed again after their claim ran out unrenewed, neither completed nor released "
        "(retryscope_job_claims_taken_over_total, per subject, in each interval): the worker that held "
        "the claim crashed or stalled, and another runs the job again. Each is logged once, with the "
        "dead claim's age. A crashed worker shows here, not as holds. A subject whose jobs are "
        "delivered and never taken over shows 0 (the counter has no series until its first).",
        [target(f"sum by (job, messaging_destination_name) (increase(retryscope_job_claims_taken_over_total{{{jsel}}}[{RI}]))"
                f" or sum by (job, messaging_destination_name) (rate(retryscope_job_deliveries_total{{{jsel}}}[{RI}])) * 0",
                "{{job}}: {{messaging_destination_name}}", "A")],
        {"h": 8, "w": 8, "x": 16, "y": 116}, unit="short"))
    p.append(timeseries(
        62, "Dead letters kept",
        "Dead letters in each dead-letter stream (recording rule retryscope:job_dead_letter_depth:max, "
        "from the gauge retryscope_job_dead_letter_depth every running worker reads). Growing for 20 "
        "minutes: JobDeadLettersGrowing. A replay removes the letter it queues again.",
        [target(f"retryscope:job_dead_letter_depth:max{{{jsel}}}",
                "{{job}}: {{messaging_destination_name}}", "A")],
        {"h": 8, "w": 8, "x": 0, "y": 124}, legend_calcs=["lastNotNull", "max"]))
    p.append(timeseries(
        63, "Held share of deliveries",
        "Deliveries that were holds, per job subject (recording rule retryscope:job_held_ratio:rate5m): "
        "the dependency the jobs call is refusing them, and the worker waits instead of spending their "
        "attempts. Line: 50 % (JobsHeldLong, warning, for 15 minutes).",
        [target(f"retryscope:job_held_ratio:rate5m{{{jsel}}}",
                "{{job}}: {{messaging_destination_name}}", "A")],
        {"h": 8, "w": 8, "x": 8, "y": 124}, unit="percentunit", max_=1, th=thresholds((0.5, "orange")),
        th_style="line"))
    p.append(timeseries(
        64, "Job age at completion",
        "Time from a job's first attempt to its success (retryscope_job_age_seconds), p50 and p99, and "
        "the attempts it took (retryscope_job_attempts), p99, a count (series C). A long hold shows "
        "here as age, not as attempts.",
        [target(f"histogram_quantile(0.5, sum by (le, job) (rate(retryscope_job_age_seconds_bucket{{{jsel}}}[{RI}])))",
                "p50 age: {{job}}", "A"),
         target(f"histogram_quantile(0.99, sum by (le, job) (rate(retryscope_job_age_seconds_bucket{{{jsel}}}[{RI}])))",
                "p99 age: {{job}}", "B"),
         target(f"histogram_quantile(0.99, sum by (le, job) (rate(retryscope_job_attempts_bucket{{{jsel}}}[{RI}])))",
                "p99 attempts: {{job}}", "C")],
        {"h": 8, "w": 8, "x": 16, "y": 124}, unit="s",
        overrides=[{"matcher": {"id": "byFrameRefID", "options": "C"},
                    "properties": [{"id": "unit", "value": "short"}]}]))
    # Issue 36: overload guards on first attempts (the adaptive throttle, the
    # adaptive concurrency limit), refusing calls in the client before any attempt.
    local = 'retryscope_throttle_reason=~"rejected_locally|concurrency_limited"'
    p.append(row(136, "Overload: local rejections, limits", 132))
    p.append(timeseries(
        360, "Local rejections by dependency and priority",
        "Calls (first attempts and retries) refused in the client before they were sent, per second "
        "(retryscope_throttled_total), by retryscope_throttle_reason — rejected_locally: the adaptive "
        "throttle (the dependency accepted too few of the client's requests over its window); "
        "concurrency_limited: the adaptive concurrency limit stayed full for as long as the call could "
        "wait — and retryscope_priority: sheddable calls are refused first. No line: no local rejection.",
        [target(f"sum by ({BY}, retryscope_throttle_reason, retryscope_priority) "
                f"(rate(retryscope_throttled_total{{{SEL}, {local}}}[{RI}]))",
                "{{job}} → {{retryscope_dependency}}: {{retryscope_throttle_reason}} "
                "{{retryscope_priority}}", "A")],
        {"h": 8, "w": W, "x": 0, "y": 133}, unit="reqps", links=[trace_link()]))
    p.append(timeseries(
        361, "Local rejections per request",
        "Calls refused locally (adaptive throttle and concurrency limit) per logical request started "
        "(recording rule retryscope:local_rejection_ratio:rate5m). Line: 10 % (LocalRejectionsHigh, "
        "warning, for 10 minutes). 0 for a dependency called without local rejections.",
        [target(f"retryscope:local_rejection_ratio:rate5m{{{SEL}}}", "{{job}} → {{retryscope_dependency}}", "A")],
        {"h": 8, "w": W, "x": 12, "y": 133}, unit="percentunit", th=thresholds((0.1, "orange")),
        th_style="line"))
    p.append(timeseries(
        362, "Share accepted (adaptive throttle)",
        "retryscope_overload_accepted_ratio, lowest instance per service and dependency: the share of the "
        "client's requests the dependency accepted over the throttle's window (2 minutes by default). "
        "Line: 1/K = 50 % (K = 2 by default): below it the client rejects locally with probability "
        "1 − K · accepted. No line: no adaptive throttle, or its window is empty.",
        [target(f"min by ({BY}) (retryscope_overload_accepted_ratio{{{SEL}}})",
                "{{job}} → {{retryscope_dependency}}", "A")],
        {"h": 8, "w": W, "x": 0, "y": 141}, unit="percentunit", max_=1,
        th={"mode": "absolute", "steps": [{"color": "red", "value": None}, {"color": "green", "value": 0.5}]},
        th_style="line"))
    p.append(timeseries(
        363, "Concurrency limit and in flight",
        "The adaptive concurrency limit (retryscope_limit_limit: how many attempts may be in flight to the "
        "dependency at once, as its algorithm, aimd or gradient2, last set it) and the attempts holding a "
        "slot (retryscope_limit_in_flight), summed over the instances. In flight at the limit: further "
        "calls wait for a slot, then are refused (concurrency_limited). No line: no concurrency limit.",
        [target(f"sum by ({BY}) (retryscope_limit_limit{{{SEL}}})",
                "limit: {{job}} → {{retryscope_dependency}}", "A"),
         target(f"sum by ({BY}) (retryscope_limit_in_flight{{{SEL}}})",
                "in flight: {{job}} → {{retryscope_dependency}}", "B")],
        {"h": 8, "w": W, "x": 12, "y": 141}))
    # Issue 35: fallbacks, the calls that gave up answered by the client itself.
    p.append(row(170, "Fallbacks", 149))
    p.append(timeseries(
        70, "Fallbacks served, by dependency and reason",
        "Calls per second that gave up and were answered by the dependency's fallback instead "
        "(retryscope_fallbacks_total, by retryscope_fallback_reason: circuit_open, attempts_exhausted, "
        "deadline_exceeded, budget_exhausted, rate_limited, rejected_locally, concurrency_limited, "
        "hint_too_long, kill_switch). Served or failed: a failed fallback is counted too, and its "
        "call ended with both errors (span event retryscope.fallback, result failed). Callers see a "
        "degraded answer, not an error: compare with the requests to the dependency. No line: no "
        "client has a fallback, or none gave up.",
        [target(f"sum by ({BY}, retryscope_fallback_reason) (rate(retryscope_fallbacks_total{{{SEL}}}[{RI}]))",
                "{{job}} → {{retryscope_dependency}}: {{retryscope_fallback_reason}}", "A")],
        {"h": 8, "w": 24, "x": 0, "y": 150}, unit="reqps", stack=True, links=[trace_link()]))
    # Issue 38: fleet pacing (retryscope-redis), its own block.
    p.extend(fleet_pacing(158))
    # Issue 35: the configuration in force (retryscope-config), its own block.
    p.extend(configuration(167))
    return dashboard(
        "retryscope-overview", "Retry overview",
        "How much retrying the services instrumented with retryscope do, why, what it costs, and "
        "what the retry budget and circuit breakers refuse, whether retries multiply down the call chain, how dependencies' rate limits pace the calls, what hedging adds to the load and wins back, what servers' idempotency layers replay, which failures a fault layer injected, how job workers retry, hold and dead-letter their jobs, what the overload guards (adaptive throttle, concurrency limit) refuse locally, and which calls fallbacks answered. Metrics: docs/telemetry.md; alerts: docs/runbook.md.",
        p)


def fleet_pacing(y):
    """Issue 38: the Fleet pacing row, at y: whether each dependency's pace is shared with the
    other replicas through Redis, and the fallbacks. (A panel of the holds gates learned by other
    replicas caused, pace source fleet, is not here: live_check's short fleet storm did not reliably
    produce one.)"""
    return [
        row(180, "Fleet pacing: one quota, many replicas", y),
        timeseries(
            80, "Fleet pacing shared (1) or local (0)",
            "retryscope_pace_shared, lowest instance per service and dependency: 1 while the "
            "dependency's pacer shares its gates and quota with the other replicas through Redis "
            "(retryscope-redis RedisPaceShare), 0 while gates are not shared because Redis does "
            "not answer within its deadline (quotas stay divided by the fleet size last read; "
            "runbook: Fleet pacing falls back to local). No line: no pacer is shared.",
            [target(f"min by ({BY}) (retryscope_pace_shared{{{SEL}}})",
                    "{{job}} → {{retryscope_dependency}}", "A")],
            {"h": 8, "w": 12, "x": 0, "y": y + 1}, min_=0, max_=1),
        timeseries(
            82, "Redis fallbacks to local pacing",
            "Times a replica stopped sharing its pace because Redis failed three heartbeats in a "
            "row or dropped the subscriber connection (retryscope_pace_shared_fallbacks_total, "
            "increase per service over the interval); each comes with one log line. Calls are not "
            "slowed by it: gates are not shared until Redis answers again.",
            [target('sum by (job) (increase(retryscope_pace_shared_fallbacks_total{job=~"$job"}'
                    f'[{RI}]))', "{{job}}", "A")],
            {"h": 8, "w": 12, "x": 12, "y": y + 1}, min_=0),
    ]


def configuration(y):
    """Issue 35: the Configuration row, at y: which configuration file (by its hash) each service
    had in force when, and its reloads, so that the start of a storm can be set against a
    configuration change."""
    return [
        row(190, "Configuration: which file was in force", y),
        timeseries(
            90, "Configuration in force, by hash",
            "retryscope_config_active: 1 for the configuration each service has in force, one line per "
            "retryscope_config_hash (the file's text hashed, 16 hex digits; `retryscope check-config FILE` "
            "prints it on its first line, and a configured client's spans carry it as "
            "retryscope.config.hash). A line ending and another starting is a reload: put it next to "
            "the retry ratio to see which configuration a storm began under. Two lines at once for one "
            "service: its instances run different files. No line: no client is configured from a file.",
            [target('max by (job, retryscope_config_hash) (retryscope_config_active{job=~"$job"})',
                    "{{job}}: {{retryscope_config_hash}}", "A")],
            {"h": 8, "w": 12, "x": 0, "y": y + 1}, min_=0, max_=1),
        timeseries(
            91, "Configuration reloads, by result",
            "Reloads per service over the interval (retryscope_config_reloads_total, by result): ok, a "
            "new configuration put in force (from the watched file, or an API call); refused, a file "
            "that did not check (syntax, unknown key, value out of range, ambiguous match, unknown "
            "name) — the last good configuration stays in force and an ERROR log names the file, line "
            "and column (runbook: A configuration reload was refused). A refused file is counted "
            "once, not at every poll.",
            [target('sum by (job, result) (increase(retryscope_config_reloads_total{job=~"$job"}'
                    f'[{RI}]))', "{{job}}: {{result}}", "A")],
            {"h": 8, "w": 12, "x": 12, "y": y + 1}, min_=0,
            overrides=[{"matcher": {"id": "byRegexp", "options": ".*: refused$"},
                        "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}}]}]),
    ]


def storm():
    p = []
    p.append(timeseries(
        1, "Retry-to-request ratio (2m), all selected dependencies",
        "retryscope:retry_ratio:rate2m. Above 50 % for 2 minutes is a retry storm (alert RetryStorm).",
        [target(f"retryscope:retry_ratio:rate2m{{{SEL}}}", "{{job}} → {{retryscope_dependency}}", "A")],
        {"h": 8, "w": 16, "x": 0, "y": 0}, unit="percentunit",
        th=thresholds((0.1, "orange"), (0.5, "red")), th_style="line+area", links=[trace_link()],
        legend_calcs=["max", "lastNotNull"]))
    p.append({
        "id": 2, "type": "state-timeline", "title": "Circuit breakers",
        "description": "retryscope_breaker_state (worst instance): closed, half-open, open.",
        "datasource": PROM, "gridPos": {"h": 8, "w": 8, "x": 16, "y": 0},
        "fieldConfig": {"defaults": {
            "custom": {"fillOpacity": 80, "lineWidth": 0, "spanNulls": False,
                       "hideFrom": {"legend": False, "tooltip": False, "viz": False}},
            "color": {"mode": "thresholds"},
            "thresholds": thresholds((1, "yellow"), (2, "red")),
            "mappings": BREAKER_MAPPINGS, "min": 0, "max": 2, "unit": "none"},
            "overrides": []},
        "options": {"showValue": "never", "rowHeight": 0.9, "mergeValues": True, "alignValue": "left",
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "single", "sort": "none"}},
        "targets": [target(f"max by ({BY}) (retryscope_breaker_state{{{SEL}}})",
                           "{{job}} → {{retryscope_dependency}}", "A")],
    })
    per = "sum by (job) (rate({m}{{{sel}}}[{ri}]))"
    # A call its fallback answered is no success, but no error its caller saw either.
    sel_err = SEL + ', retryscope_outcome!~"success|fallback"'
    p.append(timeseries(
        3, "$dependency: requests, retries, errors, throttling",
        "One panel per selected dependency, on one time axis: logical requests/s, retries/s, "
        "error outcomes/s (failure, exhausted, throttled, cancelled; not fallback: a call the client's "
        "fallback answered) and refused retries/s. "
        "In a storm, retries climb towards or past requests while errors do not fall.",
        [target(per.format(m="retryscope_requests_total", sel=SEL, ri=RI), "{{job}} requests/s", "A"),
         target(per.format(m="retryscope_retries_total", sel=SEL, ri=RI), "{{job}} retries/s", "B"),
         target(per.format(m="retryscope_request_duration_seconds_count", sel=sel_err, ri=RI),
                "{{job}} errors/s (failed, not answered by a fallback)", "C"),
         target(per.format(m="retryscope_throttled_total", sel=SEL, ri=RI), "{{job}} throttled/s", "D")],
        {"h": 9, "w": 12, "x": 0, "y": 8}, unit="short", legend_calcs=["max", "lastNotNull"],
        overrides=[
            {"matcher": {"id": "byFrameRefID", "options": "A"},
             "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "blue"}}]},
            {"matcher": {"id": "byFrameRefID", "options": "B"},
             "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "orange"}}]},
            {"matcher": {"id": "byFrameRefID", "options": "C"},
             "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}}]},
            {"matcher": {"id": "byFrameRefID", "options": "D"},
             "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "purple"}},
                            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}]},
        ]))
    p[-1]["repeat"] = "dependency"
    p[-1]["repeatDirection"] = "h"
    p[-1]["maxPerRow"] = 2
    return dashboard(
        "retryscope-storm", "Retry storm",
        "Per dependency: requests, retries, errors and throttling on one time axis, to see a retry "
        "storm build up and the budget/breaker cut it. Select dependencies with the variable; one "
        "panel is repeated per dependency.",
        p)


def render():
    return {
        "retry-overview.json": json.dumps(overview(), indent=2, ensure_ascii=False) + "\n",
        "retry-storm.json": json.dumps(storm(), indent=2, ensure_ascii=False) + "\n",
    }


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, text in render().items():
        path = OUT / name
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("out of date with scripts/ops-tests/gen_dashboards.py: " + ", ".join(stale)
              + " (run python3 scripts/ops-tests/gen_dashboards.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
