#!/usr/bin/env bash
# Installs what the operator page's browser test needs: Debian's Chromium, Node.js when the
# machine has none, and playwright-core (which never downloads a browser of its own: the
# test drives Debian's Chromium). Prints the node_modules folder to use. Safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=deploy/service.sh
source deploy/service.sh

PLAYWRIGHT_CORE=1.64.1
dir="$HOME/.cache/sluice/ui-node"

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
apt_install ${need[@]+"${need[@]}"}
installed="$(node -p "require('$dir/node_modules/playwright-core/package.json').version" 2>/dev/null || true)"
if [[ "$installed" != "$PLAYWRIGHT_CORE" ]]; then
  echo "installing playwright-core $PLAYWRIGHT_CORE into $dir..." >&2
  mkdir -p "$dir"
  (cd "$dir" && npm install --no-save --no-package-lock --no-audit --no-fund "playwright-core@$PLAYWRIGHT_CORE" >&2)
fi
echo "$dir/node_modules"
