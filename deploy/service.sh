# Shared by deploy/local-broker.sh and deploy/moto.sh (sourced, not run): the pieces of
# running a local service in the background from a pid file.

# Stops the process in $pidfile: SIGTERM, up to 5 s, then SIGKILL.
stop_service() {
  if [[ -f "$pidfile" ]]; then
    local pid
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

# await_ready NAME LOG SECONDS CHECK...: waits until CHECK succeeds while the process in
# $pidfile lives; on failure shows the log's end, stops it and returns 1.
await_ready() {
  local name="$1" log="$2" seconds="$3"
  shift 3
  for _ in $(seq 1 $((seconds * 10))); do
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "$name exited; its log ($log) ends with:" >&2
      tail -20 "$log" >&2
      return 1
    fi
    if "$@" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "$name did not answer within ${seconds}s (log: $log)" >&2
  stop_service
  return 1
}
