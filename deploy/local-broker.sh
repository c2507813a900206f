#!/usr/bin/env bash
# Starts or stops a local tansu broker (Kafka-compatible) on loopback.
#
#   deploy/local-broker.sh start   # prints the bootstrap address, e.g. 127.0.0.1:9092
#   deploy/local-broker.sh stop
#
# Settings (environment):
#   SLUICE_BROKER_PORT     port to listen on (default 9092; "auto" picks a free one)
#   SLUICE_BROKER_DIR      where the pid file, log and sqlite data live (default .sluice/broker)
#   SLUICE_BROKER_STORAGE  memory (default, fast) or sqlite (survives a broker restart)
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

stop() { stop_service; }

start() {
  if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    cat "$dir/address"
    return 0
  fi
  tansu="$("$here/install-tansu.sh")"
  [[ "$port" == auto ]] && port="$(free_port)"
  case "$storage" in
    memory) engine="memory://tansu/" ;;
    sqlite) engine="sqlite://tansu.db" ;;
    *) echo "SLUICE_BROKER_STORAGE must be memory or sqlite, not $storage" >&2; exit 2 ;;
  esac
  # In its own session: a Ctrl-C meant for the demo must not take the broker down before
  # the processor has closed; `stop` ends it.
  (cd "$dir" && exec setsid "$tansu" broker \
      --listener-url "tcp://127.0.0.1:$port" \
      --advertised-listener-url "tcp://127.0.0.1:$port" \
      --storage-engine "$engine" >>"$dir/tansu.log" 2>&1) &
  echo $! >"$pidfile"
  echo "127.0.0.1:$port" >"$dir/address"
  # Wait until the broker accepts connections, with a deadline.
  await_ready tansu "$dir/tansu.log" 15 python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),0.2)" || exit 1
  echo "127.0.0.1:$port"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
