#!/usr/bin/env bash
# Starts or stops moto's server mode (a local AWS look-alike) on loopback, for the tests of
# the AWS job types (glue, emr, emr-serverless, step-function, lambda).
#
#   deploy/moto.sh start   # prints the endpoint URL, e.g. http://127.0.0.1:45123
#   deploy/moto.sh stop
#   deploy/moto.sh install # only installs moto (deploy/install-test-tools.sh)
#
# moto is installed into a virtualenv the first time (pinned below); Lambda runs without
# Docker (the tests configure that through moto's own API).
#
# Settings (environment):
#   SLUICE_MOTO_PORT   port to listen on (default "auto": a free one)
#   SLUICE_MOTO_DIR    where the pid file, address and log live (default .sluice/moto)
#   SLUICE_MOTO_VENV   the virtualenv (default $HOME/.cache/sluice/moto-venv)
#   SLUICE_MOTO_PARENT a process id: once that process has exited, moto is stopped and
#                      SLUICE_MOTO_DIR removed (the tests start moto this way, so nothing
#                      outlives a test run)
set -euo pipefail

# shellcheck source=deploy/service.sh
source "$(dirname "${BASH_SOURCE[0]}")/service.sh"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

MOTO_VERSION="5.2.5"

dir="${SLUICE_MOTO_DIR:-.sluice/moto}"
port="${SLUICE_MOTO_PORT:-auto}"
venv="${SLUICE_MOTO_VENV:-$HOME/.cache/sluice/moto-venv}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
pidfile="$dir/moto.pid"

stop() { stop_service; }

install() {
  ensure_venv "$venv" "import moto; assert moto.__version__ == '$MOTO_VERSION'" "moto[server]==$MOTO_VERSION"
  [[ -x "$venv/bin/moto_server" ]]
}

start() {
  if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    cat "$dir/address"
    return 0
  fi
  install
  [[ "$port" == auto ]] && port="$(free_port)"
  # In its own session, so a Ctrl-C meant for a test run does not take it down; `stop` ends it.
  (cd "$dir" && exec setsid "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >>"$dir/moto.log" 2>&1) &
  echo $! >"$pidfile"
  url="http://127.0.0.1:$port"
  echo "$url" >"$dir/address"
  if [[ -n "${SLUICE_MOTO_PARENT:-}" ]]; then
    # A watchdog in its own session, detached from this script's output (whoever reads
    # that waits for its end).
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done
                    SLUICE_MOTO_DIR="$2" "$3" stop; rm -rf "$2"' \
      watchdog "$SLUICE_MOTO_PARENT" "$dir" "$here/moto.sh" </dev/null >/dev/null 2>&1 &
  fi
  # Wait until it answers, with a deadline (its first start imports a lot).
  await_ready moto_server "$dir/moto.log" 30 python3 -c "import urllib.request; urllib.request.urlopen('$url/moto-api/', timeout=0.5)" || exit 1
  echo "$url"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  install) install ;;
  *) echo "usage: $0 start|stop|install" >&2; exit 2 ;;
esac
