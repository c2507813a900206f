#!/usr/bin/env bash
# Runs every check: formatting, lints, unit tests and the integration tests, which drive
# the real `sluice` binary against a real tansu broker started by deploy/local-broker.sh.
# Works on a machine that has never built the project (installs what it needs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

deploy/install-deps.sh
# What the tests need beside the build (the test broker and cargo-deny, built from source
# once per machine; virtualenvs; the browser) installs in the background, in a group of its
# own, on the cores the project's build leaves idle while it links or compiles one crate at
# a time. Its output goes to a log, shown if it fails.
tools_log="$(mktemp)"
env -u CARGO_TARGET_DIR setsid deploy/install-test-tools.sh >"$tools_log" 2>&1 &
tools=$!
# Stopped early (a lint fails), the builds in the background stop too (their own group).
trap 'kill -- -$tools 2>/dev/null || true' EXIT
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
cargo fmt --all -- --check
# The build directory is shared by every checkout on this machine, and cargo names a
# workspace member's artifacts without its path: another checkout's build of this crate can
# look fresh here. Drop this crate's artifacts (its dependencies stay cached).
cargo clean -p sluice --quiet
cargo clippy --workspace --all-targets --locked -- -D warnings
# The test binaries now, while the tools may still be building.
cargo test --workspace --locked --no-run
echo "waiting for the test tools (tansu, cargo-deny, virtualenvs, browser) to be installed (log: $tools_log)..." >&2
if ! wait "$tools"; then
  cat "$tools_log" >&2
  echo "installing the test tools failed (above)" >&2
  exit 1
fi
rm -f "$tools_log"
# Licences, banned crates and sources of every dependency (deny.toml).
deploy/supply-chain.sh
# The Kubernetes manifests, rendered and validated against the Kubernetes schemas (seconds).
deploy/check-k8s.sh

# Each suite that starts many processes gets a broker of its own and runs beside the others
# (the tests mostly wait on the broker and on timers, so two cores carry three suites; one
# after another they took 10 minutes on a fresh machine, side by side under 5). A test
# target not named here runs in the last group, so none is ever left out.
groups=(durability integration rest)
declare -A group_tests=([durability]="--test durability" [integration]="--test integration")
own_tests=" $(cargo metadata --no-deps --format-version 1 --locked | python3 -c '
import json, sys
print(" ".join(t["name"] for p in json.load(sys.stdin)["packages"]
               for t in p["targets"] if "test" in t["kind"]))') "
rest_tests="--lib --bins"
for t in $own_tests; do
  [[ "$t" == durability || "$t" == integration ]] || rest_tests+=" --test $t"
done
group_tests[rest]="$rest_tests"
# Arguments (a filter, a target) run what they select in one group instead.
(( $# )) && groups=(args)

cleanup() {
  for d in "$logs"/broker-*; do
    [[ -d "$d" ]] && SLUICE_BROKER_DIR="$d" deploy/local-broker.sh stop
  done
  SLUICE_MOTO_DIR="$moto_dir" deploy/moto.sh stop
  rm -rf "$moto_dir" "$logs"
}
moto_dir="$(mktemp -d)"
logs="$(mktemp -d)"
trap cleanup EXIT
# broker NAME [settings...]: starts a tansu broker with its own directory; prints its address.
broker() {
  local d="$logs/broker-$1"
  shift
  mkdir -p "$d"
  env SLUICE_BROKER_DIR="$d" SLUICE_BROKER_PORT=auto "$@" deploy/local-broker.sh start
}
# Every test broker is tansu: every sluice the tests start works around its known bugs...
export SLUICE_BROKER_QUIRKS=tansu
# A broker that takes only TLS with SASL/SCRAM, with a password made up for this run
# (tests/secure.rs checks it never shows).
export SLUICE_TEST_SECURE_USER=sluice
export SLUICE_TEST_SECURE_PASSWORD="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
export SLUICE_TEST_SECURE_BROKERS="$(broker secure SLUICE_BROKER_TLS=1 \
  SLUICE_BROKER_USERS="$SLUICE_TEST_SECURE_USER:$SLUICE_TEST_SECURE_PASSWORD:scram512")"
export SLUICE_TEST_SECURE_CA="$logs/broker-secure/ca.pem"
echo "TLS+SASL broker for tests: $SLUICE_TEST_SECURE_BROKERS" >&2
# moto's server mode stands in for AWS in the tests of the AWS job types.
export SLUICE_TEST_MOTO="$(SLUICE_MOTO_DIR="$moto_dir" deploy/moto.sh start)"
echo "moto for tests: $SLUICE_TEST_MOTO" >&2
# The benchmark harness's Quix Streams baseline (its quick run is a test).
# shellcheck source=deploy/service.sh
source deploy/service.sh
export SLUICE_BENCH_PYTHON="$(quix_python)"
# The operator page's test drives Debian's Chromium with playwright-core.
export SLUICE_TEST_NODE_MODULES="$(deploy/install-browser.sh)"

# A failing test's processor log is kept outside the clone (the run's own directory goes
# with it), for a post-mortem of failures that do not repeat; the last ten runs' are kept.
failed_logs_root="${XDG_CACHE_HOME:-$HOME/.cache}/sluice/failed-test-logs"
export SLUICE_FAILED_TEST_LOGS="$failed_logs_root/$(date -u +%Y%m%dT%H%M%SZ)-$$"
mkdir -p "$failed_logs_root"
{ ls -1d "$failed_logs_root"/*/ 2>/dev/null || true; } | head -n -10 | xargs -r rm -rf

declare -A pids
for g in "${groups[@]}"; do
  address="$(broker "$g")"
  echo "broker for the $g tests: $address" >&2
  if [[ "$g" == args ]]; then
    command=(cargo test --workspace --locked "$@")
  else
    # shellcheck disable=SC2206 # the targets are words
    command=(cargo test --workspace --locked ${group_tests[$g]})
  fi
  # ... with the client settings tuned for a local broker (a 10 s session timeout).
  SLUICE_TEST_BROKERS="$address" SLUICE_COMMAND_CONFIG="$logs/broker-$g/client.properties" \
    "${command[@]}" >"$logs/$g.log" 2>&1 &
  pids[$g]=$!
  echo "started the $g tests: ${command[*]}" >&2
done
# The doc tests need no broker.
failed=()
cargo test --workspace --locked --doc --quiet || failed+=(doc)

# Each group's output in full as it finishes; the run fails if any group failed.
running=("${groups[@]}")
while (( ${#running[@]} )); do
  waiting=()
  for g in "${running[@]}"; do waiting+=("${pids[$g]}"); done
  finished=""
  wait -n -p finished "${waiting[@]}" && status=0 || status=$?
  if [[ -z "$finished" ]]; then
    echo "waiting for the test groups failed (exit $status)" >&2
    exit 1
  fi
  still=()
  for g in "${running[@]}"; do
    if [[ "${pids[$g]}" != "$finished" ]]; then
      still+=("$g")
      continue
    fi
    echo "==> the $g tests (exit $status):" >&2
    cat "$logs/$g.log"
    (( status == 0 )) || failed+=("$g")
  done
  running=(${still[@]+"${still[@]}"})
done
if (( ${#failed[@]} )); then
  echo "FAILED: the ${failed[*]} tests (output above)" >&2
  [[ -d "$SLUICE_FAILED_TEST_LOGS" ]] && echo "the failing tests' processor logs: $SLUICE_FAILED_TEST_LOGS" >&2
  exit 1
fi
echo "all tests passed" >&2
