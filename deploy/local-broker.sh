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

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${SLUICE_BROKER_DIR:-.sluice/broker}"
port="${SLUICE_BROKER_PORT:-9092}"
storage="${SLUICE_BROKER_STORAGE:-memory}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
pidfile="$dir/tansu.pid"

stop() {
  if [[ -f "$pidfile" ]]; then
    pid="$(cat "$pidfile")"
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

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
  for _ in $(seq 1 150); do
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "tansu exited; its log ($dir/tansu.log) ends with:" >&2
      tail -20 "$dir/tansu.log" >&2
      exit 1
    fi
    if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null; then
      echo "127.0.0.1:$port"
      return 0
    fi
    sleep 0.1
  done
  echo "tansu did not accept connections on port $port within 15s (log: $dir/tansu.log)" >&2
  stop
  exit 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
