#!/usr/bin/env bash
# A throwaway PostgreSQL for retryscope-sqlx's tests, on 127.0.0.1:5439.
#
#   bash scripts/postgres.sh start   # installs Debian's postgresql if missing, starts a cluster,
#                                    # prints the export line for RETRYSCOPE_POSTGRES_URL
#   bash scripts/postgres.sh stop    # stops it and deletes its data
#
# The cluster lives in a temporary directory owned by the `postgres` user
# (PostgreSQL refuses to run as root), with fsync off (the data is thrown
# away) and a modest max_connections. .ci/run starts it before the tests and
# stops it at exit.
set -euo pipefail

PORT="${RETRYSCOPE_POSTGRES_PORT:-5439}"
STATE="${RETRYSCOPE_POSTGRES_STATE:-/tmp/retryscope-postgres}"
URL="postgres://retryscope:retryscope@127.0.0.1:$PORT/retryscope"

# Debian installs each major version's binaries under its own directory: take the newest.
bindir() {
  local dir
  dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$dir" ] && [ -x "$dir/initdb" ] && echo "$dir"
}

# Runs a command as the postgres user, from a directory it may read.
as_postgres() {
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else (cd / && "$@"); fi
}

start() {
  local bin
  if ! bin="$(bindir)"; then
    if [ "$(id -u)" != 0 ]; then echo "postgresql is not installed; run as root to install it" >&2; exit 1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }
    bin="$(bindir)" || { echo "postgresql installed, but no initdb under /usr/lib/postgresql/*/bin" >&2; exit 1; }
  fi
  if [ -f "$STATE/data/postmaster.pid" ] && as_postgres "$bin/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
    echo "already running" >&2
  else
    rm -rf "$STATE"
    mkdir -p "$STATE"
    [ "$(id -u)" = 0 ] && chown postgres: "$STATE"
    as_postgres "$bin/initdb" --pgdata "$STATE/data" --auth-local trust --auth-host scram-sha-256 \
      --username postgres --encoding UTF8 --no-sync >/dev/null
    as_postgres "$bin/pg_ctl" --pgdata "$STATE/data" --log "$STATE/server.log" --silent \
      -o "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$STATE -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=60" \
      start
    local tries=0
    until as_postgres "$bin/pg_isready" -q -h 127.0.0.1 -p "$PORT"; do
      tries=$((tries + 1))
      if [ "$tries" -gt 60 ]; then
        echo "postgres did not accept connections within 30 s:" >&2
        cat "$STATE/server.log" >&2
        exit 1
      fi
      sleep 0.5
    done
    # The tests create roles (CONNECTION LIMIT) and terminate backends: a superuser.
    as_postgres "$bin/psql" -q -h "$STATE" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 \
      -c "CREATE ROLE retryscope LOGIN SUPERUSER PASSWORD 'retryscope'" \
      -c "CREATE DATABASE retryscope OWNER retryscope"
  fi
  echo "export RETRYSCOPE_POSTGRES_URL=$URL"
}

stop() {
  local bin
  bin="$(bindir)" || exit 0
  if [ -f "$STATE/data/postmaster.pid" ]; then
    as_postgres "$bin/pg_ctl" --pgdata "$STATE/data" --silent --mode immediate stop || true
  fi
  rm -rf "$STATE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
