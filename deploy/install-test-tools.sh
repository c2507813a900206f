#!/usr/bin/env bash
# Installs what the tests need beside the project's own build, once per machine and outside
# the clone: the Python virtualenvs (the Kubernetes check, moto, the Quix Streams baseline),
# the browser for the operator page's test, the tansu broker and cargo-deny (both built
# from source: the long part). deploy/test.sh runs it in the background while it builds;
# each step says what it installs and how long it took. Safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=deploy/service.sh
source deploy/service.sh

# The quick, network-bound ones first, so the cores stay with the builds.
deploy/check-k8s.sh --install-only
deploy/moto.sh install
quix_python >/dev/null
deploy/install-browser.sh >/dev/null
deploy/install-tansu.sh >/dev/null
deploy/supply-chain.sh --install-only
