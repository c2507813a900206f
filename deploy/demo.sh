#!/usr/bin/env bash
# The whole thing on one machine: a local tansu broker, Sluice's topics, the example
# pipelines, the processor and a small sample producer; lifecycle events stream to this
# terminal until Ctrl-C. Works on a machine that has never built the project.
#
# Settings (environment): SLUICE_BROKER_PORT (default 9092), SLUICE_DEMO_DIR (default .sluice/demo)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

demo_dir="${SLUICE_DEMO_DIR:-.sluice/demo}"
mkdir -p "$demo_dir"
export SLUICE_BROKER_DIR="$demo_dir/broker"

echo "==> installing build dependencies (first run only)"
deploy/install-deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
echo "==> building sluice (the first build compiles RocksDB and librdkafka: about 15 minutes on 2 cores)"
# Built with --tests so dependency features match deploy/test.sh and both share one build
# of RocksDB and librdkafka.
cargo build --locked --tests
sluice="$CARGO_TARGET_DIR/debug/sluice"

echo "==> starting the local broker (installs tansu with cargo install on first use: about 11 minutes)"
export SLUICE_BROKERS="$(deploy/local-broker.sh start)"
# The local broker is tansu: work around its known bugs (see the README's Kafka section).
export SLUICE_BROKER_QUIRKS=tansu
export SLUICE_COMMAND_CONFIG="$SLUICE_BROKER_DIR/client.properties"
pids=()
cleanup() {
  trap - EXIT INT TERM
  echo; echo "==> stopping"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  deploy/local-broker.sh stop
}
trap cleanup EXIT INT TERM

echo "==> broker at $SLUICE_BROKERS; creating topics"
"$sluice" topics apply --dir topics
echo "==> validating and applying examples/pipelines"
"$sluice" config validate examples/pipelines
"$sluice" config apply examples/pipelines

http="${SLUICE_DEMO_HTTP:-127.0.0.1:9464}"
echo "==> starting the processor (log: $demo_dir/processor.log)"
"$sluice" run --state-dir "$demo_dir/state" --http "$http" >>"$demo_dir/processor.log" 2>&1 &
pids+=($!)
echo "==> the operator page: http://$http/ (why each pipeline waits, SLA countdowns, timelines)"
echo "==> starting the sample producer (log: $demo_dir/producer.log)"
SLUICE_BIN="$sluice" deploy/sample-producer.sh >>"$demo_dir/producer.log" 2>&1 &
pids+=($!)

echo "==> lifecycle events (Ctrl-C to stop)"
# In the background and waited for, so Ctrl-C (or a TERM) reaches the cleanup at once.
"$sluice" events tail --from beginning --follow &
pids+=($!)
wait "${pids[-1]}"
