#!/usr/bin/env bash
# Runs the benchmark harness: builds sluice and sluice-bench in release mode, starts a local
# broker of its own, runs every scenario (or the ones named) and writes the results to
# bench/results/latest.md as well as stdout. Works on a fresh machine (installs what it needs).
#
#   deploy/bench.sh                    # everything (tens of minutes on 2 cores)
#   deploy/bench.sh --quick            # a harness check in about a minute
#   deploy/bench.sh throughput latency # some scenarios
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

deploy/install-deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
cargo build --release --locked -p sluice -p sluice-bench
deploy/install-tansu.sh >/dev/null
# The Quix Streams baseline's Python.
# shellcheck source=deploy/service.sh
source deploy/service.sh
venv="$HOME/.cache/sluice/quix-venv"
ensure_venv "$venv" "import quixstreams; assert quixstreams.__version__ == '3.28.1'" "quixstreams==3.28.1"
export SLUICE_BENCH_PYTHON="$venv/bin/python"

broker_dir="$(mktemp -d)"
cleanup() {
  SLUICE_BROKER_DIR="$broker_dir" deploy/local-broker.sh stop
  rm -rf "$broker_dir"
}
trap cleanup EXIT
brokers="$(SLUICE_BROKER_DIR="$broker_dir" SLUICE_BROKER_PORT=auto deploy/local-broker.sh start)"
# The local broker is tansu: sluice and the pass-through work around its known bugs.
export SLUICE_BROKER_QUIRKS=tansu
mkdir -p bench/results
"$CARGO_TARGET_DIR/release/sluice-bench" --brokers "$brokers" --out bench/results/latest.md "$@"
