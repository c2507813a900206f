#!/usr/bin/env bash
# Installs the real kustomize (Debian's build of sigs.k8s.io/kustomize) once per machine,
# outside the clone, and prints its path. Debian 12 has no kustomize package; Debian 13's is
# one static Go binary that needs nothing of the newer release, so its .deb is downloaded
# with apt from this machine's own Debian mirror (the `URIs` of its apt sources) and
# unpacked into the cache, leaving the machine's packages and apt lists untouched.
set -euo pipefail

KUSTOMIZE_SUITE="${KUSTOMIZE_SUITE:-trixie}"
KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-5.6.0}"
root="${SLUICE_CACHE:-$HOME/.cache/sluice}/kustomize-$KUSTOMIZE_VERSION"
bin="$root/usr/bin/kustomize"
# Debian's build reports its version as "(devel)": the install leaves a marker instead.
if [[ -x "$bin" && -f "$root/installed" ]]; then
  echo "$bin"
  exit 0
fi

# The mirror this machine's apt already uses for Debian itself (deb822 or one-line form).
mirror="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
  awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i !~ /security/) {print $i; exit}}')"
if [[ -z "$mirror" ]]; then
  mirror="$(cat /etc/apt/sources.list 2>/dev/null |
    awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}')"
fi
if [[ -z "$mirror" ]]; then
  echo "install-kustomize: no Debian mirror found in /etc/apt/sources.list{,.d}" >&2
  exit 1
fi

echo "installing kustomize $KUSTOMIZE_VERSION (Debian $KUSTOMIZE_SUITE's package) into $root" >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
cat >"$work/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $KUSTOMIZE_SUITE main
EOF
apt_options=(
  -o "Dir::Etc::SourceList=$work/sources.list"
  -o "Dir::Etc::SourceParts=/dev/null"
  -o "Dir::State::Lists=$work/lists"
  -o "Dir::Cache=$work/cache"
  -o "Dir::State::status=/dev/null"
  -o "APT::Sandbox::User=root"
)
apt-get "${apt_options[@]}" -qq update >&2
version="$(apt-cache "${apt_options[@]}" show kustomize | awk '/^Version:/ {print $2; exit}')"
if [[ "$version" != "$KUSTOMIZE_VERSION"* ]]; then
  echo "install-kustomize: Debian $KUSTOMIZE_SUITE has kustomize $version, not $KUSTOMIZE_VERSION (set KUSTOMIZE_VERSION)" >&2
  exit 1
fi
(cd "$work" && apt-get "${apt_options[@]}" -qq download kustomize >&2)
rm -rf "$root"
mkdir -p "$root"
dpkg-deb -x "$work"/kustomize_*.deb "$root"
"$bin" build --help >/dev/null
touch "$root/installed"
echo "$bin"
