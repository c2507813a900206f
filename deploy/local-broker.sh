#!/usr/bin/env bash
# Starts or stops a local tansu broker (Kafka-compatible) on loopback.
#
#   deploy/local-broker.sh start   # prints the bootstrap address, e.g. 127.0.0.1:9092
#   deploy/local-broker.sh stop
#
# Settings (environment):
#   SLUICE_BROKER_PORT     port to listen on (default 9092; "auto" picks a free one)
#   SLUICE_BROKER_DIR      where the pid file, log and sqlite data live (default .sluice/broker)
#   SLUICE_BROKER_STORAGE  memory (default, fast) or sqlite (survives a broker restart, and
#                          holds a steady rate for longer: memory:// lists every stored batch
#                          on every fetch and never deletes, so it slows within minutes)
#   SLUICE_BROKER_LISTEN_PORT  tansu listens here and advertises SLUICE_BROKER_PORT, where
#                          something else forwards to it (a test's proxy that cuts clients off)
#   SLUICE_BROKER_USERS    "NAME:PASSWORD:MECHANISM ..." (scram256 or scram512): clients must
#                          authenticate with SASL/SCRAM as one of these users (sqlite storage)
#   SLUICE_BROKER_TLS      1: clients connect over TLS (stunnel in front of tansu, whose own
#                          TLS flags cannot be combined in 0.6), with a certificate signed by a
#                          CA made here: $SLUICE_BROKER_DIR/ca.pem
#
# It also writes $SLUICE_BROKER_DIR/client.properties: client settings tuned for a local
# broker, for `sluice --command-config` (env SLUICE_COMMAND_CONFIG). Sluice's own defaults suit
# a production cluster; the tests, the demo and the benchmarks use this file.
set -euo pipefail

# shellcheck source=deploy/service.sh
source "$(dirname "${BASH_SOURCE[0]}")/service.sh"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${SLUICE_BROKER_DIR:-.sluice/broker}"
port="${SLUICE_BROKER_PORT:-9092}"
storage="${SLUICE_BROKER_STORAGE:-memory}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
pidfile="$dir/tansu.pid"

stop() {
  stop_service
  pidfile="$dir/stunnel.pid" stop_service
}

# A CA and a certificate for 127.0.0.1 signed by it, for the TLS listener.
make_certificates() {
  command -v openssl >/dev/null 2>&1 || apt_install openssl
  [[ -f "$dir/server.pem" ]] && return 0
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=sluice test CA" \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$dir/server.ext"
  openssl x509 -req -days 30 -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -extfile "$dir/server.ext" -out "$dir/server.pem" 2>/dev/null
}

# tansu in the background on $listen, advertising $port; extra flags in "$@". In its own
# session (setsid): a Ctrl-C meant for the demo must not take the broker down before the
# processor has closed; `stop` ends it.
start_tansu() {
  (cd "$dir" && exec setsid "$tansu" broker \
      --listener-url "tcp://127.0.0.1:$listen" \
      --advertised-listener-url "tcp://127.0.0.1:$port" \
      --storage-engine "$engine" "$@" >>"$dir/tansu.log" 2>&1) &
  echo $! >"$pidfile"
  await_ready tansu "$dir/tansu.log" 15 python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$listen),0.2)" || exit 1
}

# tansu 0.6's sqlite schema has no index on record headers, and every fetched record looks
# its headers up: without one, a topic of records with headers (Sluice's events and
# changelog) slows with every record stored. tansu made the schema on starting.
index_headers() {
  python3 - "$dir/tansu.db" <<'PY'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=30)
for _ in range(150):
    if db.execute("select 1 from sqlite_master where type = 'table' and name = 'header'").fetchone():
        db.execute("create index if not exists header_topition_offset on header (topition, offset_id)")
        db.commit()
        sys.exit(0)
    time.sleep(0.1)
sys.exit("tansu made no header table in " + sys.argv[1])
PY
}

start() {
  if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    cat "$dir/address"
    return 0
  fi
  tansu="$("$here/install-tansu.sh")"
  [[ "$port" == auto ]] && port="$(free_port)"
  [[ -n "${SLUICE_BROKER_USERS:-}" ]] && storage=sqlite
  case "$storage" in
    memory) engine="memory://tansu/" ;;
    sqlite) engine="sqlite://tansu.db" ;;
    *) echo "SLUICE_BROKER_STORAGE must be memory or sqlite, not $storage" >&2; exit 2 ;;
  esac
  # Behind TLS, tansu listens on a port of its own and advertises stunnel's.
  listen="${SLUICE_BROKER_LISTEN_PORT:-$port}"
  [[ "${SLUICE_BROKER_TLS:-}" == 1 ]] && listen="$(free_port)"
  if [[ -n "${SLUICE_BROKER_USERS:-}" ]]; then
    # Users are created over the Kafka protocol, which needs a broker without
    # authentication: create them, then start again requiring it (sqlite keeps them).
    start_tansu
    for user in $SLUICE_BROKER_USERS; do
      IFS=: read -r name password mechanism <<<"$user"
      "$tansu" user create --broker "tcp://127.0.0.1:$listen" --mechanism "$mechanism" "$name" "$password" >>"$dir/tansu.log" 2>&1
    done
    stop_service
    start_tansu --authentication
  else
    start_tansu
  fi
  [[ "$storage" == sqlite ]] && index_headers
  if [[ "${SLUICE_BROKER_TLS:-}" == 1 ]]; then
    command -v stunnel4 >/dev/null 2>&1 || apt_install stunnel4
    make_certificates
    printf 'foreground = yes\npid =\n[kafka]\naccept = 127.0.0.1:%s\nconnect = 127.0.0.1:%s\ncert = %s\nkey = %s\n' \
      "$port" "$listen" "$dir/server.pem" "$dir/server.key" >"$dir/stunnel.conf"
    (cd "$dir" && exec setsid stunnel4 "$dir/stunnel.conf" >>"$dir/stunnel.log" 2>&1) &
    echo $! >"$dir/stunnel.pid"
    pidfile="$dir/stunnel.pid" await_ready stunnel "$dir/stunnel.log" 15 python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),0.2)" || exit 1
  fi
  # One broker that never moves: a dead member is noticed in 10 s (Kafka's default, 45 s,
  # suits pods that pause for a garbage collection or a slow disk).
  # The earlier settings for tansu too, until its runs are shown stable without them: an
  # unanswered produce given up after 30 s and retried (librdkafka's default waits 5
  # minutes), and uncompressed batches (two CI runs stalled after lz4 became the default).
  printf '%s\n' '# Client settings for this local broker (sluice --command-config FILE).' \
    'session.timeout.ms=10000' 'message.timeout.ms=30000' 'compression.type=none' \
    >"$dir/client.properties"
  echo "127.0.0.1:$port" >"$dir/address"
  echo "127.0.0.1:$port"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
