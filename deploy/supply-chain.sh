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
  echo "installing cargo-deny $version into $root..." >&2
  cargo install cargo-deny --version "$version" --locked --root "$root" >&2
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
