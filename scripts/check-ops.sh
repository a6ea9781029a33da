#!/usr/bin/env bash
# Checks the retryscope operations kit: docker-compose.yml, deploy/ configs,
# dashboards/ (Grafana JSON + Prometheus rules and their unit tests).
#
# Idempotent; meant for CI on Debian 12 as root, works on a developer machine
# that already has the tools. Installs what is missing:
#   promtool, amtool, docker-compose  <- apt (prometheus, prometheus-alertmanager, docker-compose)
#   PyYAML (check_configs.py)         <- apt (python3-yaml)
#   typescript, @grafana/schema       <- npm ci in scripts/ops-tests (versions pinned in package-lock.json)
#
# The images themselves (Jaeger v2, collector-contrib, Prometheus 3, Alertmanager, Grafana 12)
# are not pulled: their configs are checked statically. Debian's promtool is 2.42, older than
# the kit's Prometheus 3; prometheus.yml is checked with it minus the Prometheus 3-only
# `otlp:` block, which check_configs.py checks instead.
# Prints PASS/FAIL per check and ends with "N passed, M failed"; exits 1 on any failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OPS_TESTS="$ROOT/scripts/ops-tests"
LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/check-ops.XXXXXX")"
trap 'rm -rf "$LOG_DIR"' EXIT

passed=0
failed=0

# run_check NAME CMD...: runs CMD, prints PASS/FAIL and, on failure, its output.
run_check() {
  local name="$1"; shift
  local log="$LOG_DIR/$(echo "$name" | tr -c 'A-Za-z0-9' '_').log"
  if "$@" >"$log" 2>&1; then
    passed=$((passed + 1))
    echo "PASS: $name"
  else
    failed=$((failed + 1))
    echo "FAIL: $name"
    sed 's/^/    /' "$log"
  fi
}

# ---------------------------------------------------------------- tools
apt_updated=0
apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "check-ops: missing $*; install it (apt-get install $*) or run as root" >&2
    return 1
  fi
  if [ "$apt_updated" -eq 0 ]; then
    apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v amtool >/dev/null 2>&1 || missing+=(prometheus-alertmanager)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "check-ops: installing ${missing[*]}"
  apt_install "${missing[@]}"
fi
# check_configs.py needs PyYAML: the first python3 that has it, else Debian's with python3-yaml.
PYTHON_YAML=""
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import yaml' >/dev/null 2>&1; then
    PYTHON_YAML="$py"
    break
  fi
done
if [ -z "$PYTHON_YAML" ]; then
  echo "check-ops: installing python3-yaml"
  apt_install python3-yaml
  PYTHON_YAML=/usr/bin/python3
fi
# The Debian packages start no daemon in a container without systemd; nothing
# here needs one (promtool and amtool work offline).

echo "check-ops: $(promtool --version 2>&1 | head -1)"
echo "check-ops: $(docker-compose version --short 2>/dev/null || docker-compose --version)"

if [ ! -x "$OPS_TESTS/node_modules/.bin/tsc" ] || ! (cd "$OPS_TESTS" && npm ls --depth=0 >/dev/null 2>&1); then
  echo "check-ops: npm ci in scripts/ops-tests"
  (cd "$OPS_TESTS" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

# ---------------------------------------------------------------- checks
# docker-compose.yml refuses to start without GRAFANA_ADMIN_PASSWORD (no committed
# default); give the syntax check a throwaway value.
compose_config() {
  GRAFANA_ADMIN_PASSWORD="${GRAFANA_ADMIN_PASSWORD:-check-ops-placeholder}" \
    docker-compose -f docker-compose.yml config -q
}
compose_refuses_without_password() {
  if env -u GRAFANA_ADMIN_PASSWORD docker-compose -f docker-compose.yml config -q 2>/dev/null; then
    echo "docker-compose.yml accepted an unset GRAFANA_ADMIN_PASSWORD"
    return 1
  fi
}
# promtool check config resolves rule_files; lay the files out as the container sees them.
# The top-level `otlp:` block is Prometheus 3's (unknown to promtool 2.42): dropped here,
# checked by check_configs.py.
prometheus_config() {
  local d="$LOG_DIR/prom-layout"
  mkdir -p "$d/etc/prometheus/rules"
  sed "s#/etc/prometheus/rules/#$d/etc/prometheus/rules/#" deploy/prometheus/prometheus.yml \
    | awk '/^otlp:/ { skip = 1; next } /^[^ #]/ { skip = 0 } !skip' \
    >"$d/etc/prometheus/prometheus.yml"
  if grep -q '^otlp:' "$d/etc/prometheus/prometheus.yml"; then
    echo "the otlp: block was not removed"
    return 1
  fi
  cp dashboards/retryscope.rules.yml "$d/etc/prometheus/rules/retryscope.rules.yml"
  promtool check config "$d/etc/prometheus/prometheus.yml"
}

run_check "docker-compose config -q"                 compose_config
run_check "docker-compose refuses an unset Grafana admin password" compose_refuses_without_password
run_check "compose mounts exist, ports on 127.0.0.1, images pinned" python3 "$OPS_TESTS/check_dashboards.py" mounts
run_check "promtool check config (prometheus.yml without its Prometheus 3 otlp: block)" prometheus_config
run_check "collector, Jaeger v2, Prometheus 3 OTLP and Grafana configs agree with compose" \
  "$PYTHON_YAML" "$OPS_TESTS/check_configs.py"
run_check "amtool check-config (alertmanager.yml)"    amtool check-config deploy/alertmanager/alertmanager.yml
run_check "promtool check rules"                      promtool check rules dashboards/retryscope.rules.yml
run_check "promtool test rules"                       promtool test rules dashboards/tests/*.yml
run_check "alerts have runbook sections"             python3 "$OPS_TESTS/check_dashboards.py" runbook
run_check "dashboards match gen_dashboards.py"        python3 "$OPS_TESTS/gen_dashboards.py" --check
run_check "dashboards type-check (@grafana/schema, tsc --strict)" \
  bash -c 'cd "$1" && node gen-dashboard-types.mjs && ./node_modules/.bin/tsc --noEmit --strict -p tsconfig.json' _ "$OPS_TESTS"
run_check "dashboard queries use only contract metrics and labels" python3 "$OPS_TESTS/check_dashboards.py" queries
run_check "dashboard queries parse and return data (promtool)" python3 "$OPS_TESTS/check_dashboards.py" promql

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
