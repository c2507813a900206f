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

# ensure_venv VENV CHECK PACKAGE...: a virtualenv at VENV in which the Python statement
# CHECK succeeds, made with pip-installed PACKAGEs when it does not yet. Debian splits the
# venv module into python3-venv, installed here when missing.
ensure_venv() {
  local venv="$1" check="$2"
  shift 2
  if "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
    return 0
  fi
  local py
  py="$(command -v python3.11 || command -v python3 || true)"
  if [[ -z "$py" ]]; then
    echo "python3 (3.9 or newer) is needed" >&2
    return 1
  fi
  if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "installing python3-venv..." >&2
    local sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >&2
  fi
  echo "installing $* into $venv (once per machine; pip's progress follows)..." >&2
  local started=$SECONDS
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv "$venv" >&2
  "$venv/bin/pip" install --progress-bar off --disable-pip-version-check "$@" >&2
  echo "installed $* in $((SECONDS - started)) s" >&2
}

# quix_python: the Python of the virtualenv the benchmark's Quix Streams baseline runs in
# (pinned), installed when missing. The tests use it too: confluent-kafka (a dependency of
# Quix Streams) and wheel, with which the producer helper's test pip-installs
# clients/python from the checkout without reaching an index.
QUIX_VERSION=3.28.1
quix_python() {
  local venv="$HOME/.cache/sluice/quix-venv"
  ensure_venv "$venv" "import quixstreams, wheel; assert quixstreams.__version__ == '$QUIX_VERSION'" \
    "quixstreams==$QUIX_VERSION" wheel
  echo "$venv/bin/python"
}

# apt_install PACKAGE...: installs the Debian packages given (the caller lists only the
# missing ones), with sudo unless root; nothing when the list is empty.
apt_install() {
  (( $# )) || return 0
  echo "installing $* (Debian packages)..." >&2
  local sudo="" started=$SECONDS
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >&2
  echo "installed $* in $((SECONDS - started)) s" >&2
}
