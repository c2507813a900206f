#!/usr/bin/env bash
# Renders every kustomization under deploy/k8s (the base and the overlays) with the real
# kustomize (deploy/install-kustomize.sh), and the Helm chart deploy/helm/sluice with the real
# Helm (deploy/install-helm.sh), and validates what they render: the Kubernetes schemas (strict, with kubernetes-validate),
# the ServiceMonitor's structure, the references between objects, the restricted Pod
# Security Standard and Sluice's settings file (deploy/check_k8s.py says what exactly).
# Exits 1 naming every problem. The first run installs its Python packages into a virtualenv
# and kustomize under ${SLUICE_CACHE:-$HOME/.cache/sluice}; later runs reuse them and need no
# network (`--install-only`: that and no more).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=deploy/service.sh
source deploy/service.sh

venv="${SLUICE_CACHE:-$HOME/.cache/sluice}/k8s-venv"
kv_version=1.37.0
echo "k8s check: Python packages in $venv" >&2
ensure_venv "$venv" \
  "import kubernetes_validate.version as v, yaml, jsonschema, referencing; assert v.__version__ == '$kv_version'" \
  "kubernetes-validate==$kv_version" pyyaml==6.0.3 jsonschema==4.26.0 referencing==0.37.0
if ! "$venv/bin/python" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
  echo "k8s check: needs Python 3.11 or newer (tomllib); $venv has $("$venv/bin/python" --version 2>&1)" >&2
  exit 1
fi
kustomize="$(deploy/install-kustomize.sh)"
helm="$(PYTHON="$venv/bin/python" deploy/install-helm.sh)"
[[ "${1:-}" == --install-only ]] && exit 0
echo "k8s check: rendering deploy/k8s with $kustomize and deploy/helm with $helm, and validating them" >&2
KUSTOMIZE="$kustomize" HELM="$helm" "$venv/bin/python" deploy/check_k8s.py deploy/k8s
