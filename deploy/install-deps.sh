#!/usr/bin/env bash
# Installs the system packages the build needs: libclang for RocksDB's bindings (bindgen),
# and a C/C++ toolchain for RocksDB and librdkafka. Safe to run again: it only installs
# what is missing.
set -euo pipefail

need=()
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
if (( ${#need[@]} )); then
  echo "installing ${need[*]}..." >&2
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >&2
fi
