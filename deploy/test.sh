#!/usr/bin/env bash
# Runs every check: formatting, lints, unit tests and the integration tests, which drive
# the real `sluice` binary against a real tansu broker started by deploy/local-broker.sh.
# Works on a machine that has never built the project (installs what it needs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

deploy/install-deps.sh
# The test broker and cargo-deny are built from source once per machine. On a fresh machine
# they build beside the project's own build (each in a target directory of its own), on
# the cores it leaves idle while it links or compiles one crate at a time; their output
# goes to a log, shown if they fail.
tools_log="$(mktemp)"
env -u CARGO_TARGET_DIR setsid bash -c \
  'deploy/install-tansu.sh >/dev/null && deploy/supply-chain.sh --install-only' >"$tools_log" 2>&1 &
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
echo "waiting for the broker and cargo-deny to be installed (log: $tools_log)..." >&2
if ! wait "$tools"; then
  cat "$tools_log" >&2
  echo "installing tansu or cargo-deny failed (above)" >&2
  exit 1
fi
rm -f "$tools_log"
# Licences, banned crates and sources of every dependency (deny.toml).
deploy/supply-chain.sh
# The Kubernetes manifests, rendered and validated against the Kubernetes schemas (seconds).
deploy/check-k8s.sh

broker_dir="$(mktemp -d)"
secure_dir="$(mktemp -d)"
moto_dir="$(mktemp -d)"
cleanup() {
  SLUICE_BROKER_DIR="$broker_dir" deploy/local-broker.sh stop
  SLUICE_BROKER_DIR="$secure_dir" deploy/local-broker.sh stop
  SLUICE_MOTO_DIR="$moto_dir" deploy/moto.sh stop
  rm -rf "$broker_dir" "$secure_dir" "$moto_dir"
}
trap cleanup EXIT
export SLUICE_TEST_BROKERS="$(SLUICE_BROKER_DIR="$broker_dir" SLUICE_BROKER_PORT=auto deploy/local-broker.sh start)"
# Both test brokers are tansu: every sluice the tests start works around its known bugs.
export SLUICE_BROKER_QUIRKS=tansu
# ... and use the client settings tuned for a local broker (a 10 s session timeout).
export SLUICE_COMMAND_CONFIG="$broker_dir/client.properties"
echo "broker for tests: $SLUICE_TEST_BROKERS" >&2
# A second broker that takes only TLS with SASL/SCRAM, with a password made up for this run
# (tests/secure.rs checks it never shows).
export SLUICE_TEST_SECURE_USER=sluice
export SLUICE_TEST_SECURE_PASSWORD="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
export SLUICE_TEST_SECURE_BROKERS="$(SLUICE_BROKER_DIR="$secure_dir" SLUICE_BROKER_PORT=auto SLUICE_BROKER_TLS=1 \
  SLUICE_BROKER_USERS="$SLUICE_TEST_SECURE_USER:$SLUICE_TEST_SECURE_PASSWORD:scram512" deploy/local-broker.sh start)"
export SLUICE_TEST_SECURE_CA="$secure_dir/ca.pem"
echo "TLS+SASL broker for tests: $SLUICE_TEST_SECURE_BROKERS" >&2
# moto's server mode stands in for AWS in the tests of the AWS job types.
export SLUICE_TEST_MOTO="$(SLUICE_MOTO_DIR="$moto_dir" deploy/moto.sh start)"
echo "moto for tests: $SLUICE_TEST_MOTO" >&2

# The benchmark harness's Quix Streams baseline (its quick run is a test).
# shellcheck source=deploy/service.sh
source deploy/service.sh
ensure_venv "$HOME/.cache/sluice/quix-venv" "import quixstreams; assert quixstreams.__version__ == '3.28.1'" "quixstreams==3.28.1"
export SLUICE_BENCH_PYTHON="$HOME/.cache/sluice/quix-venv/bin/python"

# The operator page's test drives Debian's Chromium with playwright-core.
export SLUICE_TEST_NODE_MODULES="$(deploy/install-browser.sh)"

cargo test --workspace --locked "$@"
