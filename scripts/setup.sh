#!/usr/bin/env bash
# Installs what the build and the tests need from Debian's packages, only
# what is missing (safe to run again), then configures and builds into build/.
#   scripts/setup.sh [more Debian packages to install first]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake make libgomp1 googletest libgtest-dev nlohmann-json3-dev libcli11-dev libpugixml-dev
          python3-numpy python3-torch "$@")  # python3-*: for ctest torch_roundtrip
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
