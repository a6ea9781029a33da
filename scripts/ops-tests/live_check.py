#!/usr/bin/env python3
"""Live check of the operations kit against real data (Python 3 stdlib only).

Starts Debian's Prometheus on 127.0.0.1 with a temporary storage directory, the
shipped rules (a test copy: rule groups evaluated every second and RetryStorm's
`for:` shortened to seconds) and a 1 s scrape of the storm lab's Prometheus
endpoint. The storm lab drives real retries through the real instrumentation:
healthy -> outage -> recovery, first with naive retries, then with a budget and
a circuit breaker. The check then asserts, through Prometheus' HTTP API, that

  * RetryStorm became pending (or firing) during the naive outage, and
  * every query of every shipped dashboard returns data.

Usage: live_check.py PATH/TO/retryscope   (the lab binary)
Prints one PASS/FAIL line per check and "N passed, M failed"; exits 1 on failure.
"""
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_dashboards as kit  # noqa: E402  (the static checks' dashboard and rule readers)

JOB = "retryscope-lab"
# Grafana's variables as a person looking at this job with "All" selected would set them.
SUBST = {"$__rate_interval": "1m", "${__rate_interval}": "1m", "$__interval": "5s", "${__interval}": "5s",
         "$job": JOB, "${job}": JOB, "$dependency": ".*", "${dependency}": ".*"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def live_rules(target):
    """The shipped rules with every group evaluated each second and RetryStorm's
    `for:` shortened, so that a one-minute run can show it."""
    text = kit.RULES.read_text()
    text = re.sub(r"(?m)^(\s*)interval:\s*\S+", r"\1interval: 1s", text)
    text, n = re.subn(r"(- alert: RetryStorm\n(?:.*\n)*?\s*)for: 2m", r"\1for: 5s", text)
    if n != 1:
        raise SystemExit("live_check: could not shorten RetryStorm's for: in the rules")
    target.write_text(text)


def api(port, path, **params):
    url = f"http://127.0.0.1:{port}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{path}: {body}")
    return body["data"]


def wait_until(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except OSError:
            pass  # not up yet
        time.sleep(0.5)
    print(f"live_check: timed out waiting for {what}", file=sys.stderr)
    return False


def main(argv):
    if len(argv) != 2:
        raise SystemExit(__doc__)
    lab = Path(argv[1]).resolve()
    prometheus = shutil.which("prometheus")
    if not prometheus:
        raise SystemExit("live_check: prometheus not installed (apt-get install prometheus)")
    work = Path(tempfile.mkdtemp(prefix="retryscope-live."))
    prom_port, metrics_port = free_port(), free_port()
    live_rules(work / "rules.yml")
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{work / 'rules.yml'}']\n"
        f"scrape_configs:\n  - job_name: {JOB}\n    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]\n")
    procs = []
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'}: {name}{'' if ok else ' — ' + detail}")

    try:
        procs.append(subprocess.Popen(
            [prometheus, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
            stdout=open(work / "prometheus.log", "w"), stderr=subprocess.STDOUT))
        check("prometheus is ready", wait_until("prometheus", lambda: api(prom_port, "/api/v1/status/buildinfo"), 60))
        # Naive retries through a long outage, then the guarded policy; the lab keeps
        # serving its metrics afterwards so the last scrapes see the final counts.
        storm = subprocess.Popen(
            [str(lab), "storm", "--policies", "naive,breaker", "--clients", "10", "--rate", "10",
             "--capacity", "200", "--duration", "20", "--outage", "3:14", "--out", str(work / "storm"),
             "--prometheus", f"127.0.0.1:{metrics_port}", "--linger", "600"],
            stdout=open(work / "storm.log", "w"), stderr=subprocess.STDOUT)
        procs.append(storm)
        check("the lab is scraped", wait_until(
            "a successful scrape",
            lambda: any(t["health"] == "up" for t in api(prom_port, "/api/v1/targets")["activeTargets"]), 60))

        seen_storm = False
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (work / "storm" / "storm.json").exists():
            alerts = api(prom_port, "/api/v1/alerts")["alerts"]
            if any(a["labels"].get("alertname") == "RetryStorm" and a["state"] in ("pending", "firing")
                   for a in alerts):
                seen_storm = True
            time.sleep(1)
        check("the storm run finished", (work / "storm" / "storm.json").exists(),
              (work / "storm.log").read_text()[-2000:])
        check("RetryStorm became pending during the naive outage", seen_storm)
        time.sleep(3)  # a last scrape and rule evaluation after the final counts

        for _, dash in kit.load_dashboards():
            for title, ref, expr in kit.exprs(dash):
                query = expr
                for k in sorted(SUBST, key=len, reverse=True):
                    query = query.replace(k, SUBST[k])
                data = api(prom_port, "/api/v1/query", query=query)
                check(f"{dash['title']} / {title} / {ref} returns data", bool(data["result"]), query)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    passed, failed = results.count(True), results.count(False)
    print(f"{passed} passed, {failed} failed")
    if failed:
        print(f"live_check: logs kept in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
