#!/usr/bin/env bash
# Runs the benchmark harness: builds sluice and sluice-bench in release mode, runs every
# scenario (or the ones named), each against a fresh local broker of its own, and writes the
# results to bench/results/latest.md as well as stdout. Works on a fresh machine (installs what it needs).
#
#   deploy/bench.sh                    # everything (tens of minutes on 2 cores)
#   deploy/bench.sh --quick            # a harness check in about a minute
#   deploy/bench.sh throughput latency # some scenarios
#   SLUICE_BENCH_OUT=bench/results/million.md deploy/bench.sh --scale 1000000 --configs-only scale
#                                      # elsewhere than latest.md: a million pipelines
#   SLUICE_BROKER_STORAGE=sqlite SLUICE_BENCH_OUT=bench/results/latency-10min.md \
#     deploy/bench.sh --latency-seconds 600 --latency-rate 100 latency
#                                      # the 10-minute latency run, on the broker set-up that
#                                      # holds a rate that long (see that file)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

deploy/install-deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
cargo build --release --locked -p sluice -p sluice-bench
deploy/install-tansu.sh >/dev/null
# The Quix Streams baseline's Python.
# shellcheck source=deploy/service.sh
source deploy/service.sh
export SLUICE_BENCH_PYTHON="$(quix_python)"

# Each scenario runs against a fresh broker of its own: tansu keeps every record in memory
# and slows as they accumulate, so a scenario's figures would otherwise depend on which ran
# before it (the scale scenario's RSS doubled, the latency floor moved). Within a scenario,
# sluice and its baselines share one broker.
scenarios=()
flags=()
for arg in "$@"; do
  case "$arg" in
    history | throughput | latency | timers | triggers | takeover | page | scale) scenarios+=("$arg") ;;
    *) flags+=("$arg") ;;
  esac
done
if [ "${#scenarios[@]}" -eq 0 ]; then
  scenarios=(history throughput latency timers triggers takeover page scale)
fi
work="$(mktemp -d)"
broker_dir="$work/broker"
cleanup() {
  SLUICE_BROKER_DIR="$broker_dir" deploy/local-broker.sh stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
# The local broker is tansu: sluice and the pass-through work around its known bugs.
export SLUICE_BROKER_QUIRKS=tansu
export SLUICE_COMMAND_CONFIG="$broker_dir/client.properties"
# Where the harness starts the broker again, fresh, for each variant a scenario compares.
export SLUICE_BENCH_BROKER_DIR="$broker_dir"
out="${SLUICE_BENCH_OUT:-bench/results/latest.md}"
mkdir -p "$(dirname "$out")"
for scenario in "${scenarios[@]}"; do
  echo "== $scenario (a fresh broker)" >&2
  rm -rf "$broker_dir"
  brokers="$(SLUICE_BROKER_DIR="$broker_dir" SLUICE_BROKER_PORT=auto deploy/local-broker.sh start)"
  "$CARGO_TARGET_DIR/release/sluice-bench" --brokers "$brokers" --out "$work/$scenario.md" \
    ${flags[@]+"${flags[@]}"} "$scenario" >/dev/null
  SLUICE_BROKER_DIR="$broker_dir" deploy/local-broker.sh stop >/dev/null
done
# One report: the first scenario's title line, a note, then every scenario's sections.
{
  head -n 3 "$work/${scenarios[0]}.md" | sed 's/ · broker [^ ]*//'
  echo
  echo "Each scenario ran against a fresh local broker (tansu) of its own."
  for scenario in "${scenarios[@]}"; do
    tail -n +4 "$work/$scenario.md"
  done
} >"$out"
cat "$out"
