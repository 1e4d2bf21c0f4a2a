#!/usr/bin/env bash
# Configures build-asan/ (clang, ASan + UBSan, libFuzzer's coverage, scratch
# poisoned) and builds the given targets there (default: all). One build
# serves the fuzz targets (scripts/fuzz.sh) and every test under ASan + UBSan
# (scripts/sanitize.sh asan), so CI compiles the library once for both.
#   scripts/asan_build.sh [target ...]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFFN_FUZZ=ON \
  -DFFN_POISON_SCRATCH=ON -DFFN_BUILD_PEERS=OFF >/dev/null
targets=()
(($#)) && targets=(--target "$@")
cmake --build build-asan -j "$(nproc)" "${targets[@]}" >/dev/null
