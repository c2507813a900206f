#!/usr/bin/env bash
# Installs the tansu broker (Kafka-compatible, with `cargo install`) when it is missing.
# Prints the path of the tansu binary on stdout; progress goes to stderr.
# The install lives outside the clone so every checkout on this machine reuses it.
set -euo pipefail

TANSU_VERSION="${TANSU_VERSION:-0.6.0}"
TANSU_ROOT="${TANSU_ROOT:-$HOME/.cache/sluice/tansu-$TANSU_VERSION}"
TANSU_BIN="$TANSU_ROOT/bin/tansu"

if [[ -x "$TANSU_BIN" ]]; then
  echo "$TANSU_BIN"
  exit 0
fi
if command -v tansu >/dev/null 2>&1 && tansu --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
  command -v tansu
  exit 0
fi

echo "installing tansu $TANSU_VERSION into $TANSU_ROOT (once per machine: about 11 to 17 minutes on 2 cores; cargo names each crate as it compiles)..." >&2
started=$SECONDS
# dynostore gives the memory:// engine, libsql the sqlite:// one; the default features have none.
cargo install tansu --version "$TANSU_VERSION" --locked \
  --features dynostore,libsql --root "$TANSU_ROOT" >&2
echo "installed tansu in $(((SECONDS - started) / 60)) min" >&2
echo "$TANSU_BIN"
