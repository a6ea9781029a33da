#!/usr/bin/env python3
"""Live check of the operations kit against real data (Python 3 stdlib only).

Starts Debian's Prometheus on 127.0.0.1 with a temporary storage directory, the
shipped rules file *unchanged* (dashboards/retryscope.rules.yml, as the compose
stack mounts it) and the operations kit's cadence (15 s scrapes and rule
evaluations). Two storm-lab runs drive real retries through the real
instrumentation, each serving its metrics on its own endpoint:

  * a short storm, with a budget, a circuit breaker and a fallback (the breaker
    policy answers the calls that give up with `503 degraded`, which the
    fallback panel counts), so that every dashboard
    panel has something to show;
  * a sustained outage (four and a half minutes) under naive retries;
  * a rate-limited gateway (`storm --rate-limited`, the pacer holding and
    refusing calls), still loading when the queries run, so that the pacing
    panels — the pacer's time held and its allowed rate, a gauge reported only
    while a pace is in force — have something to show;
  * a slow tail under percentile hedging (`storm --slow-tail`, 2 % of the
    requests taking a second), still loading when the queries run, so that
    the hedging panels — hedges per request and the share that won — have
    something to show;
  * POSTs with lost responses retried with idempotency keys against a server
    behind `IdempotencyLayer` (`storm --lost-responses`), for the panel of
    what the server's idempotency layer did;
  * job workers on a real nats-server (`storm --jobs`: a naive worker that
    dead-letters every job, the retryscope worker that holds them through the
    outage of 45 s), started once RetryStorm fired so that it is over by the
    time the sustained run is and its five-minute rates are live when the
    queries run, for the *Jobs* row. Its workers keep reading their
    dead-letter depth while the run lingers. It needs `nats-server` on PATH
    (CI installs it); it adds no time unless RetryStorm fires late;
  * a healthy server behind 503s injected into 30 % of the attempts below the
    retries (`storm --chaos 503@30%`, budgeted), for the panel of injected
    versus real failed attempts;
  * for the *Overload* row, two runs still loading when the queries run: the
    SRE adaptive throttle (`--policies throttled`) against a server down for
    the whole run, rejecting locally (its accepted share near 0), and an AIMD
    concurrency limit (`--policies limited`) against a server of one worker
    at 100 ms (10 requests/s) offered 20/s, whose queue grows until every
    attempt times out, so that the limit is full and refuses
    (`concurrency_limited`), with its limit and in-flight gauges;
  * for the *Fleet pacing* row, `storm --rate-limited --replicas 3
    --fleet-policies shared-redis-down`: three client processes sharing one
    quota through the run's own `redis-server` (it needs `redis-server` on
    PATH, which CI installs), stopped mid-run and started again, so that the
    shared gauge and a fallback are there; its first replica serves the
    metrics and lingers;
  * for the *Configuration* row, `storm --config FILE` (backoff, its clients
    configured from a small TOML file the lab polls), the file rewritten once
    the run is scraped (a reload, `ok`) and again 30 s later with a value out
    of range (refused: the second configuration stays in force), so that the
    hash panel shows two hashes and the reloads panel both results.

The check then asserts, through Prometheus' HTTP API, that

  * RetryStorm fires (not merely pends) during the sustained outage, with the
    shipped `for:` and windows, and
  * every query of every shipped dashboard returns data, and
  * the configured run reloaded once and refused once, and the hash in force
    at the end is the second file's (as FNV-1a 64 of its text, computed here), and
  * `retryscope advise` on the storms' series writes a file check-config
    accepts, having read the sustained outage.

It takes about five minutes: that is how long the shipped rules need.

Usage: live_check.py PATH/TO/retryscope   (the lab binary)
Prints one PASS/FAIL line per check and "N passed, M failed"; exits 1 on failure.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
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


# `storm --config`: the first file, the reload, and a rewrite refused (attempts out of range,
# 1..=100). The storm's default outage (3:4) comes and goes under them.
CONFIGS = (
    "# live_check: the first configuration\n[defaults]\nattempts = 4\nattempt_timeout = \"2s\"\n"
    "deadline = \"10s\"\n",
    "# live_check: the reload\n[defaults]\nattempts = 3\nattempt_timeout = \"2s\"\ndeadline = \"10s\"\n",
    "# live_check: refused\n[defaults]\nattempts = 0\n",
)


def config_hash(text):
    """retryscope-config's ConfigHash: FNV-1a 64 of the text, 16 hex digits."""
    h = 0xcbf29ce484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def write_config(path, text):
    """Replaces the file whole (write, then rename over it), as an editor or a ConfigMap does."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def free_ports(n):
    """n distinct free ports. Every socket stays bound until all n are chosen:
    one bound and closed at a time, the kernel handed one port out twice (two
    runs on one port, one target fewer for Prometheus, and "the lab is
    scraped" waited for a target that could not exist)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def spawn(args, **kwargs):
    """A process in a session of its own, so that stopping it stops what it
    started too (storm --jobs runs a nats-server of its own, which a SIGTERM to
    the lab alone would leave running)."""
    return subprocess.Popen(args, start_new_session=True, **kwargs)


def stop(p, sig):
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def lab_run(lab, work, name, port, args):
    """One storm-lab run serving its metrics on 127.0.0.1:port until killed."""
    return spawn(
        [str(lab), "storm", "--clients", "5", "--rate", "4", "--capacity", "200", *args,
         "--out", str(work / name), "--prometheus", f"127.0.0.1:{port}", "--linger", "900"],
        stdout=open(work / f"{name}.log", "w"), stderr=subprocess.STDOUT)


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
    (prom_port, short_port, sustained_port, paced_port, hedged_port, keyed_port, jobs_port, chaos_port,
     throttled_port, limited_port, fleet_port, config_port) = free_ports(12)
    ports = (short_port, sustained_port, paced_port, hedged_port, keyed_port, jobs_port, chaos_port,
             throttled_port, limited_port, fleet_port, config_port)
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports)
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 15s, evaluation_interval: 15s}\n"
        f"rule_files: ['{kit.RULES.resolve()}']\n"
        f"scrape_configs:\n  - job_name: {JOB}\n    static_configs: [{{targets: [{targets}]}}]\n")
    procs = []
    results = []
    config_file = work / "retryscope.toml"
    write_config(config_file, CONFIGS[0])
    rewrites = []

    def check(name, ok, detail=""):
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'}: {name}{'' if ok else ' — ' + detail}")

    try:
        procs.append(spawn(
            [prometheus, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
            stdout=open(work / "prometheus.log", "w"), stderr=subprocess.STDOUT))
        check("prometheus is ready", wait_until("prometheus", lambda: api(prom_port, "/api/v1/status/buildinfo"), 60))
        # Every policy's telemetry for the dashboards: a short storm, guarded.
        # Both runs keep serving their metrics afterwards for the last scrapes.
        procs.append(lab_run(lab, work, "short", short_port,
                             ["--policies", "breaker", "--duration", "20", "--outage", "3:14"]))
        # A sustained outage under naive retries: what RetryStorm is for.
        sustained = lab_run(lab, work, "sustained", sustained_port,
                            ["--policies", "naive", "--duration", "280", "--outage", "10:270"])
        procs.append(sustained)
        # Twice a quota of 10/s, paced; it outlasts the checks and is stopped with them.
        procs.append(spawn(
            [str(lab), "storm", "--rate-limited", "--clients", "5", "--rate", "4", "--quota", "10",
             "--rate-policies", "pacer", "--duration", "600", "--out", str(work / "paced"),
             "--prometheus", f"127.0.0.1:{paced_port}", "--linger", "900"],
            stdout=open(work / "paced.log", "w"), stderr=subprocess.STDOUT))
        # A slow tail hedged at its p95, 20 calls/s; it outlasts the checks too.
        procs.append(spawn(
            [str(lab), "storm", "--slow-tail", "--clients", "5", "--rate", "4", "--hedge-policies", "percentile",
             "--duration", "600", "--out", str(work / "hedged"),
             "--prometheus", f"127.0.0.1:{hedged_port}", "--linger", "900"],
            stdout=open(work / "hedged.log", "w"), stderr=subprocess.STDOUT))
        # POSTs whose responses get lost, retried with idempotency keys against a
        # server behind IdempotencyLayer: its outcomes (executed, replayed, …) for
        # the idempotency panel. The run is over in seconds; it lingers, serving
        # its final counts.
        procs.append(spawn(
            [str(lab), "storm", "--lost-responses", "--lost-policies", "retry-keys", "--operations", "2000",
             "--out", str(work / "keyed"), "--prometheus", f"127.0.0.1:{keyed_port}", "--linger", "900"],
            stdout=open(work / "keyed.log", "w"), stderr=subprocess.STDOUT))
        # A healthy server, 503s injected into a third of the attempts below the
        # retries (storm --chaos): the injected failures the fault panel shows
        # apart from the real ones. It outlasts the checks and is stopped with them.
        procs.append(spawn(
            [str(lab), "storm", "--chaos", "503@30%", "--clients", "5", "--rate", "4", "--policies", "budget",
             "--duration", "600", "--out", str(work / "chaos"),
             "--prometheus", f"127.0.0.1:{chaos_port}", "--linger", "900"],
            stdout=open(work / "chaos.log", "w"), stderr=subprocess.STDOUT))
        # The overload guards, for the Overload row; both outlast the checks and are
        # stopped with them. The throttle against a server down from 5 s to the end:
        # every attempt fails, the throttle rejects up to its ceiling (80 %).
        procs.append(spawn(
            [str(lab), "storm", "--clients", "5", "--rate", "4", "--policies", "throttled",
             "--duration", "600", "--outage", "5:595", "--out", str(work / "throttled"),
             "--prometheus", f"127.0.0.1:{throttled_port}", "--linger", "900"],
            stdout=open(work / "throttled.log", "w"), stderr=subprocess.STDOUT))
        # An AIMD limit (min 20) against one worker at 100 ms offered 20 calls/s:
        # the queue grows, attempts wait out their 2 s timeout, 40 and more are in
        # flight and the limit refuses the rest.
        procs.append(spawn(
            [str(lab), "storm", "--clients", "5", "--rate", "4", "--policies", "limited",
             "--capacity", "10", "--service-ms", "100", "--duration", "600", "--out", str(work / "limited"),
             "--prometheus", f"127.0.0.1:{limited_port}", "--linger", "900"],
            stdout=open(work / "limited.log", "w"), stderr=subprocess.STDOUT))
        # Issue 38: three client processes sharing one quota of 10/s through the
        # storm's own redis-server, stopped from 10 s to 20 s of the load: the
        # Fleet pacing row (shared, then local and a fallback, then shared
        # again). The first replica serves its
        # metrics and lingers; stopping the run's session stops the replicas and
        # the redis-server with it.
        procs.append(spawn(
            [str(lab), "storm", "--rate-limited", "--replicas", "3", "--clients", "6", "--rate", "4",
             "--quota", "10", "--fleet-policies", "shared-redis-down", "--duration", "30",
             "--out", str(work / "fleet"), "--replica-prometheus", f"127.0.0.1:{fleet_port}",
             "--linger", "900"],
            stdout=open(work / "fleet.log", "w"), stderr=subprocess.STDOUT))
        # Issue 35: a storm whose clients take their settings from a file, reloaded and
        # refused during the run (below); it outlasts the checks and is stopped with them.
        procs.append(lab_run(lab, work, "configured", config_port,
                             ["--policies", "backoff", "--duration", "600", "--config", str(config_file)]))
        check("the lab is scraped", wait_until(
            f"a successful scrape of the {len(ports) - 1} runs",
            lambda: sum(t["health"] == "up" for t in api(prom_port, "/api/v1/targets")["activeTargets"])
            == len(ports) - 1,
            60))
        # Every run scraped once, so the first configuration's hash is in Prometheus: now the
        # reload, and 30 s (two scrapes) later the refused rewrite, off the main thread so
        # that RetryStorm's timing below is unchanged.
        write_config(config_file, CONFIGS[1])
        rewrites.append(threading.Timer(30, write_config, (config_file, CONFIGS[2])))
        rewrites[-1].start()

        fired_after = None
        started = time.monotonic()
        while time.monotonic() - started < 330 and fired_after is None:
            alerts = api(prom_port, "/api/v1/alerts")["alerts"]
            if any(a["labels"].get("alertname") == "RetryStorm" and a["state"] == "firing" for a in alerts):
                fired_after = time.monotonic() - started
            else:
                time.sleep(5)
        check("RetryStorm fired during the sustained outage (shipped rules, unchanged)", fired_after is not None,
              (work / "sustained.log").read_text()[-2000:])
        if fired_after is not None:
            print(f"live_check: RetryStorm fired {fired_after:.0f} s after the runs started (outage from 10 s)")
        # Job workers on a nats-server of their own, started now so that they are done by
        # the time the sustained run is and the queries run within their five-minute rates:
        # 200 jobs, the dependency down for 45 s, so that the retryscope worker's holds span
        # three scrapes (a counter that appears with its final value between two scrapes has
        # a rate of 0, and the held share none).
        procs.append(spawn(
            [str(lab), "storm", "--jobs", "--job-count", "200", "--down", "45", "--out", str(work / "jobs"),
             "--prometheus", f"127.0.0.1:{jobs_port}", "--linger", "900"],
            stdout=open(work / "jobs.log", "w"), stderr=subprocess.STDOUT))
        finished = wait_until("both runs to finish",
                              lambda: all((work / run / "storm.json").exists() for run in ("short", "sustained")),
                              330)
        check("both storm runs finished", finished, (work / "sustained.log").read_text()[-2000:])
        jobs_done = wait_until("the jobs run to finish", lambda: (work / "jobs" / "storm-jobs.json").exists(), 150)
        check("the jobs run finished", jobs_done, (work / "jobs.log").read_text()[-2000:])
        time.sleep(20)  # a last scrape and rule evaluation after the final counts

        for _, dash in kit.load_dashboards():
            for title, ref, expr in kit.exprs(dash):
                query = expr
                for k in sorted(SUBST, key=len, reverse=True):
                    query = query.replace(k, SUBST[k])
                data = api(prom_port, "/api/v1/query", query=query)
                check(f"{dash['title']} / {title} / {ref} returns data", bool(data["result"]), query)
        # The guarded storm's open breaker and the paced gateway refuse calls
        # before any attempt: counted apart, never as operations with 0 attempts
        # (which the attempt figures would read as "needed a retry").
        zero = api(prom_port, "/api/v1/query",
                   query='retryscope_request_duration_seconds_count{retryscope_attempts="0"}')["result"]
        check("no operation is recorded with 0 attempts", not zero, json.dumps(zero)[:1000])
        reloads = {r["metric"].get("result"): float(r["value"][1]) for r in api(
            prom_port, "/api/v1/query", query="sum by (result) (retryscope_config_reloads_total)")["result"]}
        check("the configured run reloaded once and refused the bad rewrite once",
              reloads == {"ok": 1.0, "refused": 1.0},
              f"{reloads}; {(work / 'configured.log').read_text()[-2000:]}")
        active = [r["metric"].get("retryscope_config_hash") for r in api(
            prom_port, "/api/v1/query", query="retryscope_config_active")["result"]]
        check("the reloaded file's hash is the one in force at the end", active == [config_hash(CONFIGS[1])],
              f"{active}, expected [{config_hash(CONFIGS[1])}]")
        refused = api(prom_port, "/api/v1/query", query="sum(retryscope_refused_total)")["result"]
        check("calls refused before any attempt are counted in retryscope_refused_total",
              bool(refused) and float(refused[0]["value"][1]) > 0, json.dumps(refused))
        # `retryscope advise` on the storms' own series (issue 55): a file check-config
        # accepts, and the sustained outage under naive retries read from them.
        advised = work / "advised.toml"
        run = subprocess.run([str(lab), "advise", "--prometheus", f"http://127.0.0.1:{prom_port}",
                              "--range", "10m", "--selector", f'job="{JOB}"', "--out", str(advised)],
                             capture_output=True, text=True, timeout=300)
        check("advise writes a file from the storms' series", run.returncode == 0, run.stderr[-2000:])
        if run.returncode == 0:
            print(run.stdout, end="")
            checked = subprocess.run([str(lab), "check-config", str(advised)], capture_output=True, text=True)
            check("check-config accepts the advised file", checked.returncode == 0, checked.stderr[-2000:])
            text = advised.read_text()
            # The breaker itself may be withheld by the replay (the file says so):
            # what must hold is that the outage was read from the series.
            outages = [int(m) for m in re.findall(r"longest outage \(failure ratio ≥ 0\.5\) (\d+) s", text)]
            check("advise reads the sustained outage (200 s or more) from the series",
                  any(o >= 200 for o in outages), f"{outages}; {text[-4000:]}")
    finally:
        for t in rewrites:
            t.cancel()
        for p in procs:
            stop(p, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                stop(p, signal.SIGKILL)
    passed, failed = results.count(True), results.count(False)
    print(f"{passed} passed, {failed} failed")
    if failed:
        print(f"live_check: logs kept in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
