#!/usr/bin/env bash
# Installs the system packages the build needs: libclang for RocksDB's bindings (bindgen),
# a C/C++ toolchain for RocksDB and librdkafka, OpenSSL's headers with pkg-config for
# librdkafka's TLS and SASL/SCRAM, and libcurl's for its OAUTHBEARER OIDC token fetch (the
# system's library, so curl is not compiled too). Safe to run again: it only installs what
# is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=deploy/service.sh
source deploy/service.sh

need=()
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
dpkg -s libcurl4-openssl-dev >/dev/null 2>&1 || need+=(libcurl4-openssl-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
apt_install ${need[@]+"${need[@]}"}
