#!/usr/bin/env python3
"""Static and semi-live checks of the retryscope operations kit (Python 3 stdlib only).

  check_dashboards.py mounts   every host file/dir docker-compose.yml mounts exists, and the
                               in-container paths the configs refer to are the mounted ones
  check_dashboards.py queries  every panel (except rows/text) has a target with a non-empty
                               expr; every metric in every expr is a docs/telemetry.md series or a
                               recording rule of dashboards/retryscope.rules.yml; only known
                               labels and template variables are used; uids/schemaVersion/tags;
                               trace links go through the ${traces} data source variable
  check_dashboards.py runbook  every alert has severity, summary, description and a runbook_url
                               whose anchor is a section of docs/runbook.md
  check_dashboards.py promql   evaluates every dashboard expr (variables substituted as Grafana
                               would with "All" selected) with `promtool test rules` against
                               synthetic series of the whole contract, recording rules loaded,
                               and fails for any expr that does not parse on this promtool or
                               returns no data

Exit 0 when the check passes; problems are printed one per line.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
RULES = DASHBOARDS / "retryscope.rules.yml"
COMPOSE = ROOT / "docker-compose.yml"

# docs/telemetry.md as Prometheus sees it (after the collector's translation).
HISTOGRAMS = {
    "retryscope_attempt_duration_seconds": ["retryscope_attempt", "error_type"],
    "retryscope_request_duration_seconds": ["retryscope_outcome", "retryscope_attempts"],
    "retryscope_backoff_delay_seconds": ["retryscope_delay_source"],
    "retryscope_pace_held_seconds": ["retryscope_pace_source"],
    "retryscope_job_age_seconds": ["messaging_destination_name"],
    "retryscope_job_attempts": ["messaging_destination_name"],
}
CONTRACT = {
    "retryscope_requests_total": [],
    "retryscope_retries_total": ["retryscope_retry_reason"],
    "retryscope_throttled_total": ["retryscope_throttle_reason", "retryscope_priority"],
    "retryscope_refused_total": ["retryscope_outcome", "retryscope_throttle_reason", "retryscope_priority"],
    "retryscope_breaker_state": [],
    "retryscope_budget_available": [],
    "retryscope_pace_rate_per_second": [],
    "retryscope_pace_shared": [],
    "retryscope_pace_shared_fallbacks_total": [],
    "retryscope_budget_shared": [],
    "retryscope_overload_accepted_ratio": [],
    "retryscope_limit_limit": [],
    "retryscope_limit_in_flight": [],
    "retryscope_server_requests_total": ["retryscope_attempt", "http_route"],
    "retryscope_hedges_total": [],
    "retryscope_hedge_wins_total": [],
    "retryscope_idempotency_requests_total": ["retryscope_idempotency_outcome", "http_route"],
    "retryscope_faults_injected_total": ["retryscope_fault_kind"],
    "retryscope_fallbacks_total": ["retryscope_fallback_reason"],
    "retryscope_config_reloads_total": ["result"],
    "retryscope_config_active": ["retryscope_config_hash"],
    "retryscope_job_deliveries_total": ["retryscope_job_outcome", "messaging_destination_name"],
    "retryscope_job_dead_letters_total": ["retryscope_job_dead_reason", "messaging_destination_name"],
    "retryscope_job_dead_letter_depth": ["messaging_destination_name"],
    "retryscope_job_claims_taken_over_total": ["messaging_destination_name"],
}
for _h, _labels in HISTOGRAMS.items():
    CONTRACT[_h + "_bucket"] = _labels + ["le"]
    CONTRACT[_h + "_sum"] = _labels
    CONTRACT[_h + "_count"] = _labels
COMMON_LABELS = ["job", "instance", "retryscope_dependency", "retryscope_operation"]
KNOWN_LABELS = set(COMMON_LABELS) | {l for ls in CONTRACT.values() for l in ls}
ALLOWED_VARS = {"job", "dependency", "__rate_interval", "__interval"}
BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 15, 30, 60]

PROMQL_FUNCS_AND_KEYWORDS = {
    # aggregation operators and keywords
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
    "topk", "quantile", "by", "without", "on", "ignoring", "group_left", "group_right", "and",
    "or", "unless", "offset", "bool", "atan2", "inf", "nan",
}


def recording_rules():
    names = re.findall(r"^\s*-\s*record:\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*$", RULES.read_text(), re.M)
    if not names:
        raise SystemExit(f"no recording rules found in {RULES}")
    return names


def load_dashboards():
    files = sorted(DASHBOARDS.glob("*.json"))
    if not files:
        raise SystemExit(f"no dashboards in {DASHBOARDS}")
    return [(f, json.loads(f.read_text(encoding="utf-8"))) for f in files]


def all_panels(dash):
    for p in dash.get("panels", []):
        yield p
        for q in p.get("panels", []) or []:
            yield q


def exprs(dash):
    """(panel title, refId, expr) for every target of every panel."""
    for p in all_panels(dash):
        for t in p.get("targets", []) or []:
            if "expr" in t:
                yield p.get("title", "?"), t.get("refId", "?"), t["expr"]


def strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def metric_names(expr):
    """Identifiers that are metric names: not followed by '(' (functions), not keywords,
    not inside {...} matchers, [...] ranges or by/on/... label lists."""
    e = strip_strings(expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![A-Za-z0-9_:.$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", e):
        ident, call = m.group(1), m.group(2)
        if call or ident in PROMQL_FUNCS_AND_KEYWORDS:
            continue
        if re.fullmatch(r"\d.*", ident):
            continue
        names.add(ident)
    return names


def label_names(expr):
    e = strip_strings(expr)
    labels = set()
    for block in re.findall(r"\{([^}]*)\}", e):
        labels |= set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", block))
    for block in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", e):
        labels |= {x.strip() for x in block.split(",") if x.strip()}
    labels.discard("__name__")
    return labels


def variables_used(text):
    return set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))


def panel_links(panel):
    return ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("links") or []


def check_trace_link(where, link):
    """An Explore link's panes name the trace data source only as ${traces}, never a uid."""
    url = link.get("url", "")
    if "/explore" not in url:
        return []
    m = re.search(r"[?&]panes=([^&]*)", url)
    if not m:
        return [f"{where}: trace link without panes: {url}"]
    try:
        panes = json.loads(urllib.parse.unquote(m.group(1)))
    except ValueError as e:
        return [f"{where}: trace link panes are not JSON ({e})"]
    problems = []
    for name, pane in panes.items():
        refs = [pane.get("datasource")] + [q.get("datasource", {}).get("uid") for q in pane.get("queries", [])]
        for ref in refs:
            if not (isinstance(ref, str) and ref.startswith("${traces")):
                problems.append(f"{where}: trace link pane {name} uses data source {ref!r}, not ${{traces}}")
    return problems


def check_queries():
    problems = []
    allowed_metrics = set(CONTRACT) | set(recording_rules())
    uids = {}
    for f, d in load_dashboards():
        name = f.name
        for key in ("uid", "title", "tags", "schemaVersion"):
            if not d.get(key):
                problems.append(f"{name}: missing {key}")
        if isinstance(d.get("schemaVersion"), int) and d["schemaVersion"] < 39:
            problems.append(f"{name}: schemaVersion {d['schemaVersion']} < 39")
        if d.get("uid") in uids:
            problems.append(f"{name}: uid {d['uid']} also used by {uids[d['uid']]}")
        uids[d.get("uid")] = name
        var_names = {v.get("name") for v in d.get("templating", {}).get("list", [])}
        for need in ("job", "dependency", "traces"):
            if need not in var_names:
                problems.append(f"{name}: templating variable ${need} missing")
        links = 0
        for p in all_panels(d):
            for link in panel_links(p):
                links += "/explore" in link.get("url", "")
                problems.extend(check_trace_link(f"{name}: panel {p.get('title', '?')!r}", link))
        if not links:
            problems.append(f"{name}: no trace links (Explore data links) found")
        ids = set()
        for p in all_panels(d):
            ptype, title = p.get("type"), p.get("title", "?")
            if p.get("id") in ids:
                problems.append(f"{name}: duplicate panel id {p.get('id')}")
            ids.add(p.get("id"))
            if ptype in ("row", "text"):
                continue
            ds = p.get("datasource") or {}
            if ds.get("uid") not in ("${datasource}", "prometheus"):
                problems.append(f"{name}: panel {title!r}: datasource uid {ds.get('uid')!r} is neither "
                                "${datasource} nor the provisioned 'prometheus'")
            targets = [t for t in p.get("targets", []) or [] if str(t.get("expr", "")).strip()]
            if not targets:
                problems.append(f"{name}: panel {title!r} ({ptype}) has no target with a non-empty expr")
            for t in p.get("targets", []) or []:
                if not str(t.get("expr", "")).strip():
                    problems.append(f"{name}: panel {title!r} target {t.get('refId')} has an empty expr")
        for title, ref, expr in exprs(d):
            where = f"{name}: panel {title!r} {ref}"
            for m in sorted(metric_names(expr) - allowed_metrics):
                problems.append(f"{where}: metric {m!r} is neither a contract series nor a recording rule")
            if not metric_names(expr):
                problems.append(f"{where}: no metric in expr {expr!r}")
            for l in sorted(label_names(expr) - KNOWN_LABELS):
                problems.append(f"{where}: label {l!r} is not in the telemetry contract")
            for v in sorted(variables_used(expr) - ALLOWED_VARS):
                problems.append(f"{where}: template variable ${v} is not one of "
                                + ", ".join("$" + a for a in sorted(ALLOWED_VARS)))
            if expr.count("(") != expr.count(")"):
                problems.append(f"{where}: unbalanced parentheses")
    return problems


def compose_mounts():
    """Host paths of short-syntax bind mounts (`- ./host:/container[:ro]`) and their targets."""
    mounts = []
    for line in COMPOSE.read_text().splitlines():
        m = re.match(r"""^\s*-\s*["']?(\.{1,2}/[^:"']+):([^:"']+)""", line)
        if m:
            mounts.append((m.group(1), m.group(2)))
        if re.match(r"^\s*source:\s*\.", line):
            mounts.append((line.split(":", 1)[1].strip(), None))
    return mounts


def check_mounts():
    problems = []
    mounts = compose_mounts()
    if not mounts:
        return ["docker-compose.yml: no bind mounts found (parser out of date?)"]
    targets = {}
    for host, target in mounts:
        p = (ROOT / host).resolve()
        if not p.exists():
            problems.append(f"docker-compose.yml mounts {host}, which does not exist")
        if target:
            targets[target] = host
    # Cross-file consistency: what the configs expect inside the containers is mounted.
    prom = (ROOT / "deploy/prometheus/prometheus.yml").read_text()
    for pattern in re.findall(r"^\s*-\s*(/etc/prometheus/rules/\S+)\s*$", prom, re.M):
        rx = re.compile("^" + re.escape(pattern).replace(r"\*", "[^/]*") + "$")
        if not any(rx.match(t) for t in targets):
            problems.append(f"prometheus.yml rule_files {pattern} matches no mounted file")
    prov = (ROOT / "deploy/grafana/provisioning/dashboards/dashboards.yml").read_text()
    m = re.search(r"^\s*path:\s*(\S+)", prov, re.M)
    if not m or m.group(1) not in targets:
        problems.append("grafana dashboards provider path is not a mounted directory")
    elif targets[m.group(1)].rstrip("/") not in ("./dashboards",):
        problems.append(f"grafana dashboards provider path is mounted from {targets[m.group(1)]}, not ./dashboards")
    # Published ports: host side bound to 127.0.0.1 only.
    in_ports = False
    for line in COMPOSE.read_text().splitlines():
        if re.match(r"^\s*ports:\s*$", line):
            in_ports = True
            continue
        if in_ports:
            m = re.match(r"""^\s*-\s*["']?([^"'#\s]+)""", line)
            if m:
                if not m.group(1).startswith("127.0.0.1:"):
                    problems.append(f"docker-compose.yml publishes {m.group(1)} on all interfaces")
                continue
            in_ports = False
    # Pinned images.
    for img in re.findall(r"^\s*image:\s*(\S+)", COMPOSE.read_text(), re.M):
        if ":" not in img or img.endswith(":latest"):
            problems.append(f"docker-compose.yml image {img} is not pinned to a version")
    return problems


def check_runbook():
    """Every alert has labels.severity, summary, description and a runbook_url whose anchor
    is a section of docs/runbook.md (GitHub anchors: lower-cased heading)."""
    problems = []
    rules = RULES.read_text()
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#{1,6}\s+(.+)$", runbook, re.M)}
    blocks = re.split(r"^\s*-\s*alert:\s*", rules, flags=re.M)[1:]
    if not blocks:
        return ["no alerts found in the rules file"]
    for b in blocks:
        name = b.split()[0]
        body = b.split("\n- record:")[0]
        for need in ("severity:", "summary:", "description:", "runbook_url:"):
            if need not in body:
                problems.append(f"alert {name}: no {need.rstrip(':')}")
        m = re.search(r"runbook_url:\s*\S*docs/runbook\.md#(\S+)", body)
        if not m:
            problems.append(f"alert {name}: runbook_url does not point into docs/runbook.md")
        elif m.group(1) not in anchors:
            problems.append(f"alert {name}: docs/runbook.md has no section #{m.group(1)}")
        elif m.group(1) != name.lower():
            problems.append(f"alert {name}: runbook anchor #{m.group(1)} is not #{name.lower()}")
    return problems


# ---------------------------------------------------------------- promql
SUBST = {"$__rate_interval": "1m", "${__rate_interval}": "1m", "$__interval": "15s",
         "${__interval}": "15s", "$job": ".*", "${job}": ".*", "$dependency": ".*", "${dependency}": ".*"}


def substitute(expr):
    for k in sorted(SUBST, key=len, reverse=True):
        expr = expr.replace(k, SUBST[k])
    return expr


def synthetic_series():
    """20 min of realistic data for two services, three dependencies, every label value of §3."""
    out = []
    n = 80  # samples at 15 s

    def counter(name, labels, per_scrape):
        lbl = ",".join(f'{k}="{v}"' for k, v in labels.items())
        out.append({"series": f"{name}{{{lbl}}}", "values": f"0+{per_scrape}x{n}"})

    def gauge(name, labels, values):
        lbl = ",".join(f'{k}="{v}"' for k, v in labels.items())
        out.append({"series": f"{name}{{{lbl}}}", "values": values})

    def histogram(name, labels, per_scrape, median):
        # cumulative share of observations below each bound: a rough log-normal-ish shape
        acc = []
        for b in BUCKETS:
            share = min(1.0, max(0.0, 0.5 + 0.5 * ((b / median) - 1) / ((b / median) + 1)))
            acc.append(round(share * per_scrape, 3))
        for b, c in zip(BUCKETS, acc):
            counter(name + "_bucket", {**labels, "le": str(b)}, c)
        counter(name + "_bucket", {**labels, "le": "+Inf"}, per_scrape)
        counter(name + "_count", labels, per_scrape)
        counter(name + "_sum", labels, round(per_scrape * median, 3))

    for job, inst, dep, op in (("checkout", "c-1", "payments", "charge"),
                               ("checkout", "c-1", "inventory", "reserve"),
                               ("worker", "w-1", "payments", "refund")):
        base = {"job": job, "instance": inst, "retryscope_dependency": dep, "retryscope_operation": op}
        counter("retryscope_requests_total", base, 150)
        counter("retryscope_hedges_total", base, 6)
        counter("retryscope_hedge_wins_total", base, 4)
        for kind, k in (("status", 12), ("reset", 3), ("latency", 5)):
            counter("retryscope_faults_injected_total", {**base, "retryscope_fault_kind": kind}, k)
        for reason, k in (("circuit_open", 9), ("attempts_exhausted", 2)):
            counter("retryscope_fallbacks_total", {**base, "retryscope_fallback_reason": reason}, k)
        for reason, k in (("503", 20), ("timeout", 10)):
            counter("retryscope_retries_total", {**base, "retryscope_retry_reason": reason}, k)
        for attempt, err, k, med in (("1", "", 120, 0.05), ("1", "503", 30, 0.02),
                                     ("2", "", 20, 0.08), ("2", "timeout", 10, 1.0),
                                     ("3", "", 8, 0.2)):
            lbl = {**base, "retryscope_attempt": attempt}
            if err:
                lbl["error_type"] = err
            histogram("retryscope_attempt_duration_seconds", lbl, k, med)
        for outcome, attempts, k, med in (("success", "1", 120, 0.05), ("success", "2", 15, 0.4),
                                          ("failure", "1", 5, 0.05), ("exhausted", "4", 4, 3.0),
                                          ("throttled", "2", 4, 0.3), ("cancelled", "1", 2, 0.1)):
            histogram("retryscope_request_duration_seconds",
                      {**base, "retryscope_outcome": outcome, "retryscope_attempts": attempts}, k, med)
        for src, k, med in (("policy", 25, 0.2), ("retry_after", 4, 2.0), ("rate_limit", 1, 5.0)):
            histogram("retryscope_backoff_delay_seconds", {**base, "retryscope_delay_source": src}, k, med)
        for reason, priority, k in (("budget", "critical", 3), ("circuit_open", "critical", 1),
                                    ("rate_limited", "critical", 1), ("rejected_locally", "critical", 2),
                                    ("rejected_locally", "sheddable", 4),
                                    ("concurrency_limited", "sheddable", 3)):
            counter("retryscope_throttled_total",
                    {**base, "retryscope_throttle_reason": reason, "retryscope_priority": priority}, k)
        for outcome, reason, k in (("throttled", "circuit_open", 1), ("throttled", "rate_limited", 1),
                                   ("cancelled", "", 1)):
            lbl = {**base, "retryscope_outcome": outcome}
            if reason:
                lbl["retryscope_throttle_reason"] = reason
            counter("retryscope_refused_total", lbl, k)
        for src, k, med in (("retry_after", 3, 1.5), ("rate_limit", 6, 0.3), ("adaptive", 2, 0.1),
                            ("fleet", 2, 0.8)):
            histogram("retryscope_pace_held_seconds", {**base, "retryscope_pace_source": src}, k, med)
        gauge("retryscope_pace_rate_per_second", base, "5x40 0x10 2-0.01x29")
        gauge("retryscope_pace_shared", base, "1x40 0x20 1x19")
        gauge("retryscope_breaker_state", base, "0x20 2x20 1 2x20 1 0x17")
        gauge("retryscope_budget_available", base, "10-0.1x80")
        gauge("retryscope_overload_accepted_ratio", base, "1x40 0.3x20 0.4+0.02x19")
        gauge("retryscope_limit_limit", base, "20x40 12x20 16x19")
        gauge("retryscope_limit_in_flight", base, "3x40 12x20 9x19")
    for job, inst in (("checkout", "c-1"), ("worker", "w-1")):
        # Fleet pacing (issue 38): the share's fallbacks carry no dependency.
        counter("retryscope_pace_shared_fallbacks_total", {"job": job, "instance": inst}, 0.05)
        # Configuration (issue 35): per process, no dependency; one hash in force, then a
        # reload to another halfway (the gauge's old series ends, as a reload ends it), and a
        # refused reload now and then. Hashes as ConfigHash prints them: 16 hex digits.
        gauge("retryscope_config_active",
              {"job": job, "instance": inst, "retryscope_config_hash": "9f86d081884c7d65"}, "1x40")
        gauge("retryscope_config_active",
              {"job": job, "instance": inst, "retryscope_config_hash": "2c26b46b68ffc68f"}, "_x40 1x39")
        for result, k in (("ok", 0.0125), ("refused", 0.025)):
            counter("retryscope_config_reloads_total", {"job": job, "instance": inst, "result": result}, k)
        for attempt, k in (("1", 120), ("2", 20), ("3", 8), ("4+", 4), ("unknown", 1)):
            counter("retryscope_server_requests_total",
                    {"job": job, "instance": inst, "retryscope_attempt": attempt, "http_route": "/orders"}, k)
        for outcome, k in (("executed", 100), ("replayed", 12), ("conflict", 3), ("mismatch", 1)):
            counter("retryscope_idempotency_requests_total",
                    {"job": job, "instance": inst, "retryscope_idempotency_outcome": outcome,
                     "http_route": "/orders"}, k)
    # Job workers (retryscope-jobs): series by subject, not by dependency; values
    # as JobOutcome::as_str and DeadReason::as_str spell them.
    for job, inst, subject, dead in (("worker", "w-1", "orders.created", "ORDERS_DEAD"),
                                     ("worker", "w-2", "orders.created", "ORDERS_DEAD")):
        base = {"job": job, "instance": inst, "messaging_destination_name": subject}
        for outcome, k in (("succeeded", 60), ("retried", 9), ("held", 30), ("dead_lettered", 1),
                           ("deduplicated", 1), ("waiting", 3), ("replayed", 1),
                           ("claimed_elsewhere", 2), ("superseded", 1)):
            counter("retryscope_job_deliveries_total", {**base, "retryscope_job_outcome": outcome}, k)
        for reason, k in (("attempts_exhausted", 1), ("permanent", 1)):
            counter("retryscope_job_dead_letters_total", {**base, "retryscope_job_dead_reason": reason}, k)
        counter("retryscope_job_claims_taken_over_total", base, 1)
        histogram("retryscope_job_age_seconds", base, 60, 2.0)
        histogram("retryscope_job_attempts", base, 60, 1.5)
        gauge("retryscope_job_dead_letter_depth",
              {"job": job, "instance": inst, "messaging_destination_name": dead}, "0+1x80")
    return out


def check_promql():
    problems = []
    tests = []
    index = []
    for f, d in load_dashboards():
        for title, ref, expr in exprs(d):
            e = substitute(expr)
            index.append((f.name, title, ref, e))
    # One test group for every query: the synthetic series are loaded and the
    # recording rules evaluated once (a group per query did it ~150 times, nearly
    # two minutes of CI). Each query still has its own expression test, named in
    # a PromQL comment that promtool prints with the expression when it fails.
    tests.append({
        "name": "dashboard queries",
        "interval": "15s",
        "input_series": synthetic_series(),
        "promql_expr_test": [
            {"expr": f"absent(\n# {name} | {title} | {ref}\n{e}\n)", "eval_time": "19m", "exp_samples": []}
            for name, title, ref, e in index
        ],
    })
    with tempfile.TemporaryDirectory(prefix="retryscope-promql-") as tmp:
        path = Path(tmp) / "dashboard_queries_test.yml"
        path.write_text(json.dumps({"rule_files": [str(RULES)], "evaluation_interval": "15s",
                                    "tests": tests}, indent=1))
        r = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)
        if r.returncode != 0:
            out = (r.stdout + r.stderr).strip()
            failed = [t for t in re.findall(r"name: (.+?),\s*$", out, re.M)]
            problems.append("promtool: some dashboard queries fail to parse or return no data "
                            "(`absent(expr)` returned a sample):")
            problems.extend("  " + line for line in out.splitlines()[-60:])
            if not failed:
                pass
    if not problems:
        print(f"{len(index)} dashboard queries parse and return data on "
              + subprocess.run(["promtool", "--version"], capture_output=True, text=True)
              .stdout.splitlines()[0])
    return problems


def main(argv):
    checks = {"queries": check_queries, "mounts": check_mounts, "runbook": check_runbook,
              "promql": check_promql}
    wanted = argv[1:] or list(checks)
    bad = [w for w in wanted if w not in checks]
    if bad:
        print(f"usage: {argv[0]} [{'|'.join(checks)}]...", file=sys.stderr)
        return 2
    rc = 0
    for w in wanted:
        problems = checks[w]()
        for p in problems:
            print(f"{w}: {p}")
        rc |= bool(problems)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
