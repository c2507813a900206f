#!/usr/bin/env bash
# Checks the dependency graph against deny.toml with cargo-deny: licences, banned crates,
# sources, and (where the RustSec database can be fetched) known vulnerabilities.
# Installs cargo-deny outside the clone, once per machine (`--install-only`: that and no more).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

version=0.19.0
root="$HOME/.cache/sluice/cargo-deny-$version"
deny="$root/bin/cargo-deny"
if [[ ! -x "$deny" ]]; then
  echo "installing cargo-deny $version into $root (once per machine: about 2 minutes)..." >&2
  # An unoptimised build: it compiles in a third of the time (on a fresh 2-core machine it
  # competes with the project's own build), and checks this workspace in seconds all the same.
  cargo install cargo-deny --version "$version" --locked --debug --root "$root" >&2
fi
[[ "${1:-}" == --install-only ]] && exit 0

checks=(licenses bans sources)
# The advisory database comes from GitHub: checked only where it can be fetched.
if timeout 60 "$deny" fetch db >/dev/null 2>&1; then
  checks+=(advisories)
else
  echo "cargo-deny: the RustSec advisory database cannot be fetched here; advisories not checked (run this script where GitHub is reachable)" >&2
fi
"$deny" --log-level error check "${checks[@]}"
