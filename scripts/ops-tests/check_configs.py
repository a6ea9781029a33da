#!/usr/bin/env python3
"""Static checks of the operations kit's service configs against docker-compose.yml.

No image is pulled and no container runs (CI has no container engine), so this checks
what can be known from the files alone, for the configs promtool and amtool cannot read:

  * every config parses as YAML;
  * the OpenTelemetry Collector and Jaeger v2 configs (both collector-style): every
    component a pipeline or `service.extensions` names is defined, every defined
    receiver/processor/exporter is used, each pipeline has receivers and exporters, and
    every listening endpoint is bound to 0.0.0.0 (other containers cannot reach a
    component on localhost, the collector's default);
  * ports agree between the files: what compose publishes is what the service listens on,
    what the collector exports traces to is what Jaeger receives on, what Prometheus
    scrapes is what each service serves its metrics on, compose's healthchecks probe
    the health endpoints the configs define, Grafana's data sources point at the
    services' query ports;
  * Prometheus 3's `otlp:` block (which the Debian promtool 2.42 of scripts/check-ops.sh
    does not know, so that check runs without it): only known keys, and a translation
    strategy that yields the names of docs/telemetry.md; compose enables the receiver;
  * the dashboards' data source variables default to the provisioned uids;
  * no image is one the configs were not written for: Jaeger v1 (all-in-one, end of life
    since 2025-12-31; its environment variables configure nothing in v2), Prometheus 2
    (no `otlp:` block, no --web.enable-otlp-receiver), Grafana before 12.

Needs PyYAML (Debian: python3-yaml). Exit 0 when every check passes; problems are printed
one per line.
"""
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
COLLECTOR = ROOT / "deploy/otel-collector/config.yaml"
JAEGER = ROOT / "deploy/jaeger/config.yaml"
PROMETHEUS = ROOT / "deploy/prometheus/prometheus.yml"
ALERTMANAGER = ROOT / "deploy/alertmanager/alertmanager.yml"
DATASOURCES = ROOT / "deploy/grafana/provisioning/datasources/datasources.yml"
DASHBOARD_PROVIDERS = ROOT / "deploy/grafana/provisioning/dashboards/dashboards.yml"

KINDS = ("receivers", "processors", "exporters")
# The strategies Prometheus 3 knows; only the first gives the names of docs/telemetry.md
# (`retryscope_requests_total`, `retryscope_attempt_duration_seconds_bucket`).
TRANSLATION_STRATEGIES = {"UnderscoreEscapingWithSuffixes", "UnderscoreEscapingWithoutSuffixes",
                          "NoUTF8EscapingWithSuffixes", "NoTranslation"}
CONTRACT_STRATEGY = "UnderscoreEscapingWithSuffixes"
PROMETHEUS_OTLP_KEYS = {"promote_resource_attributes", "ignore_resource_attributes",
                        "promote_all_resource_attributes", "translation_strategy",
                        "keep_identifying_resource_attributes", "convert_histograms_to_nhcb",
                        "promote_scope_metadata"}


def load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def port_of(endpoint):
    """The port of `host:port`, or None."""
    m = re.fullmatch(r"(?:\[?[^\]]*\]?|[^:]*):(\d+)", str(endpoint))
    return int(m.group(1)) if m else None


def host_of(endpoint):
    return str(endpoint).rsplit(":", 1)[0]


def endpoints(tree, path=""):
    """(path, value) of every `endpoint:` anywhere in a config tree."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            here = f"{path}.{k}" if path else str(k)
            if k == "endpoint" and isinstance(v, (str, int)):
                yield here, str(v)
            else:
                yield from endpoints(v, here)
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from endpoints(v, f"{path}[{i}]")


def telemetry_metrics_port(config):
    """The port of the collector's own Prometheus metrics (service.telemetry.metrics.readers)."""
    readers = (((config.get("service") or {}).get("telemetry") or {}).get("metrics") or {}).get("readers") or []
    for reader in readers:
        prom = (((reader or {}).get("pull") or {}).get("exporter") or {}).get("prometheus")
        if prom:
            return prom.get("host"), prom.get("port")
    return None, None


def check_collector_style(name, config, problems):
    """Pipelines reference defined components; every defined one is used; 0.0.0.0 binds."""
    service = config.get("service") or {}
    pipelines = service.get("pipelines") or {}
    if not pipelines:
        problems.append(f"{name}: no service.pipelines")
    used = {k: set() for k in KINDS}
    for pname, pipeline in pipelines.items():
        pipeline = pipeline or {}
        for kind in ("receivers", "exporters"):
            if not pipeline.get(kind):
                problems.append(f"{name}: pipeline {pname} has no {kind}")
        for kind in KINDS:
            for component in pipeline.get(kind) or []:
                used[kind].add(component)
                if component not in (config.get(kind) or {}):
                    problems.append(f"{name}: pipeline {pname} uses {kind[:-1]} {component!r}, "
                                    f"which is not defined under {kind}:")
    for kind in KINDS:
        for component in (config.get(kind) or {}):
            if component not in used[kind]:
                problems.append(f"{name}: {kind[:-1]} {component!r} is defined but in no pipeline")
    for ext in service.get("extensions") or []:
        if ext not in (config.get("extensions") or {}):
            problems.append(f"{name}: service.extensions names {ext!r}, which is not defined under extensions:")
    for ext in (config.get("extensions") or {}):
        if ext not in (service.get("extensions") or []):
            problems.append(f"{name}: extension {ext!r} is defined but not in service.extensions")
    for where, ep in endpoints({k: config.get(k) for k in ("receivers", "extensions")}):
        if host_of(ep) != "0.0.0.0":
            problems.append(f"{name}: {where} is {ep}: bind 0.0.0.0, other containers cannot reach localhost")
    host, port = telemetry_metrics_port(config)
    if port is None:
        problems.append(f"{name}: service.telemetry.metrics has no pull/prometheus reader "
                        "(Prometheus scrapes it)")
    elif host != "0.0.0.0":
        problems.append(f"{name}: its own metrics are served on {host}:{port}: bind 0.0.0.0")
    if "address" in (((service.get("telemetry") or {}).get("metrics")) or {}):
        problems.append(f"{name}: service.telemetry.metrics.address was removed from the collector; "
                        "use readers")


def compose_ports(service):
    """{container port: host binding} of a compose service's published ports."""
    out = {}
    for p in service.get("ports") or []:
        parts = str(p).split(":")
        out[int(parts[-1].split("/")[0])] = str(p)
    return out


def healthcheck_ports(service):
    test = " ".join((service.get("healthcheck") or {}).get("test") or [])
    return {(int(port), path) for port, path in re.findall(r"127\.0\.0\.1:(\d+)(/\S*)?", test)}


def listening_ports(config):
    return {port_of(ep) for _, ep in endpoints(config) if port_of(ep) is not None}


def scrape_targets(prom):
    for job in prom.get("scrape_configs") or []:
        for sc in job.get("static_configs") or []:
            for t in sc.get("targets") or []:
                yield job.get("job_name"), t


def check_all():
    problems = []
    docs = {}
    for path in (COMPOSE, COLLECTOR, JAEGER, PROMETHEUS, ALERTMANAGER, DATASOURCES, DASHBOARD_PROVIDERS):
        try:
            docs[path] = load(path)
        except (OSError, yaml.YAMLError) as e:
            problems.append(f"{path.relative_to(ROOT)}: {e}")
    if problems:
        return problems
    compose = docs[COMPOSE]["services"]
    collector, jaeger, prom = docs[COLLECTOR], docs[JAEGER], docs[PROMETHEUS]

    check_collector_style("deploy/otel-collector/config.yaml", collector, problems)
    check_collector_style("deploy/jaeger/config.yaml", jaeger, problems)

    # Collector: what compose publishes is what its receivers and health check listen on.
    for svc, config in (("otel-collector", collector), ("jaeger", jaeger)):
        listens = listening_ports(config)
        for port, binding in compose_ports(compose[svc]).items():
            if port not in listens:
                problems.append(f"docker-compose.yml publishes {binding} for {svc}, but "
                                f"nothing in its config listens on {port}")
        for port, path in healthcheck_ports(compose[svc]):
            if port not in listens:
                problems.append(f"docker-compose.yml healthchecks {svc} on :{port}, which its config does not serve")
    jaeger_health = ((jaeger.get("extensions") or {}).get("healthcheckv2") or {})
    for port, path in healthcheck_ports(compose["jaeger"]):
        if port == port_of((jaeger_health.get("http") or {}).get("endpoint", "")) and path != "/status":
            problems.append(f"jaeger healthcheck probes {path}; healthcheckv2 (use_v2) answers on /status")
    if "jaeger" not in collector.get("exporters", {}).get("otlp/jaeger", {}).get("endpoint", ""):
        problems.append("collector: exporter otlp/jaeger does not send to the jaeger service")
    else:
        sent_to = port_of(collector["exporters"]["otlp/jaeger"]["endpoint"])
        jaeger_grpc = port_of(((jaeger.get("receivers") or {}).get("otlp") or {}).get("protocols", {})
                              .get("grpc", {}).get("endpoint", ""))
        if sent_to != jaeger_grpc:
            problems.append(f"collector sends traces to jaeger:{sent_to}, Jaeger receives OTLP gRPC on :{jaeger_grpc}")
    if "jaeger" not in (compose["otel-collector"].get("depends_on") or {}):
        problems.append("docker-compose.yml: otel-collector does not wait for jaeger")

    # The images the configs were written for.
    images = {svc: str(compose[svc].get("image", "")) for svc in compose}
    minimum = {"jaeger": ("jaegertracing/jaeger:", 2), "prometheus": ("prom/prometheus:v", 3),
               "grafana": ("grafana/grafana:", 12)}
    for svc, (prefix, major) in minimum.items():
        image = images.get(svc, "")
        m = re.fullmatch(re.escape(prefix) + r"(\d+)\.\d+\.\d+", image)
        if not m or int(m.group(1)) < major:
            problems.append(f"docker-compose.yml: {svc} image {image!r} is not {prefix}{major}.x.y or later, "
                            "which its config is written for")

    # Prometheus scrapes what the services serve.
    served = {
        "otel-collector": {port_of((collector.get("exporters") or {}).get("prometheus", {}).get("endpoint", "")),
                           telemetry_metrics_port(collector)[1]},
        "jaeger": {telemetry_metrics_port(jaeger)[1]},
        "alertmanager": {9093},
        "localhost": {9090},
    }
    for job, target in scrape_targets(prom):
        host, port = host_of(target), port_of(target)
        if host != "localhost" and host not in compose:
            problems.append(f"prometheus.yml job {job} scrapes {target}: no compose service {host}")
        elif port not in served.get(host, set()):
            problems.append(f"prometheus.yml job {job} scrapes {target}, but {host} serves metrics on "
                            + ", ".join(f":{p}" for p in sorted(p for p in served.get(host, set()) if p)))
    for am in (prom.get("alerting") or {}).get("alertmanagers") or []:
        for sc in am.get("static_configs") or []:
            for t in sc.get("targets") or []:
                if host_of(t) not in compose or port_of(t) not in compose_ports(compose[host_of(t)]):
                    problems.append(f"prometheus.yml sends alerts to {t}, which compose does not serve")

    # Prometheus 3's OTLP receiver: enabled, and naming series as the rules expect.
    flags = compose["prometheus"].get("command") or []
    if "--web.enable-otlp-receiver" not in flags:
        problems.append("docker-compose.yml: prometheus runs without --web.enable-otlp-receiver")
    if any("otlp-write-receiver" in f for f in flags):
        problems.append("docker-compose.yml: --enable-feature=otlp-write-receiver is Prometheus 2's flag")
    otlp = prom.get("otlp")
    if not isinstance(otlp, dict):
        problems.append("prometheus.yml: no otlp: block (the OTLP receiver's naming is then left to the default)")
    else:
        for key in sorted(set(otlp) - PROMETHEUS_OTLP_KEYS):
            problems.append(f"prometheus.yml: otlp.{key} is not a Prometheus 3 setting")
        strategy = otlp.get("translation_strategy")
        if strategy not in TRANSLATION_STRATEGIES:
            problems.append(f"prometheus.yml: otlp.translation_strategy {strategy!r} is not one of "
                            + ", ".join(sorted(TRANSLATION_STRATEGIES)))
        elif strategy != CONTRACT_STRATEGY:
            problems.append(f"prometheus.yml: otlp.translation_strategy {strategy} does not produce the "
                            f"docs/telemetry.md names; use {CONTRACT_STRATEGY}")
    exporter = (collector.get("exporters") or {}).get("prometheus") or {}
    if exporter.get("translation_strategy") != CONTRACT_STRATEGY:
        problems.append(f"collector: exporter prometheus translation_strategy is "
                        f"{exporter.get('translation_strategy')!r}, not {CONTRACT_STRATEGY}")
    if "add_metric_suffixes" in exporter:
        problems.append("collector: add_metric_suffixes is deprecated (and ignored beside translation_strategy)")
    if not (prom.get("storage") or {}).get("tsdb", {}).get("out_of_order_time_window"):
        problems.append("prometheus.yml: no storage.tsdb.out_of_order_time_window (pushed OTLP samples may arrive late)")

    # Grafana: data sources point at the services; dashboards default to their uids.
    sources = {d.get("type"): d for d in docs[DATASOURCES].get("datasources") or []}
    for kind, svc, port in (("prometheus", "prometheus", 9090),
                            ("jaeger", "jaeger", port_of(((jaeger.get("extensions") or {}).get("jaeger_query") or {})
                                                         .get("http", {}).get("endpoint", "")))):
        ds = sources.get(kind)
        if not ds:
            problems.append(f"datasources.yml: no {kind} data source")
            continue
        if ds.get("url") != f"http://{svc}:{port}":
            problems.append(f"datasources.yml: {kind} url {ds.get('url')} is not http://{svc}:{port}")
        for f in sorted((ROOT / "dashboards").glob("*.json")):
            variables = {v.get("name"): v for v in json.loads(f.read_text()).get("templating", {}).get("list", [])}
            var = {"prometheus": variables.get("datasource"), "jaeger": variables.get("traces")}[kind]
            if not var or var.get("type") != "datasource" or var.get("query") != kind:
                problems.append(f"{f.name}: no {kind} data source variable")
            elif var.get("current", {}).get("value") != ds.get("uid"):
                problems.append(f"{f.name}: variable {var.get('name')} defaults to "
                                f"{var.get('current', {}).get('value')!r}, the provisioned uid is {ds.get('uid')!r}")
    return problems


def main():
    problems = check_all()
    for p in problems:
        print(p)
    if not problems:
        print("configs: collector, Jaeger, Prometheus and Grafana agree with docker-compose.yml")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
