#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz/ and runs
# each on the committed seed corpus for a fixed time.
#   scripts/fuzz.sh [--seconds 60] [--keep DIR] [target ...]
# targets: safetensors npy run marian gguf chat_template (default: all). New inputs the fuzzer finds go
# to a scratch corpus (or DIR/<target> with --keep), never into the repository;
# a crash leaves its input as build-fuzz/crash-* and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
keep=""
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    safetensors|npy|run|marian|gguf|chat_template) targets+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument '$1' (expected --seconds N, --keep DIR or a target: safetensors npy run marian gguf chat_template)" >&2; exit 2 ;;
  esac
done
((${#targets[@]})) || targets=(safetensors npy run marian gguf chat_template)

scripts/setup.sh clang libclang-rt-14-dev libomp-14-dev >/dev/null
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DFFN_FUZZ=ON -DFFN_BUILD_TESTS=OFF -DFFN_BUILD_PEERS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}") >/dev/null

status=0
for t in "${targets[@]}"; do
  work="${keep:+$keep/$t}"
  [ -n "$work" ] || work="$(mktemp -d)"
  mkdir -p "$work"
  # The chat templates llama.cpp ships (scripts/setup.sh extracts them) seed the renderer too, read in place.
  extra=()
  templates="${FFN_LLAMA_CPP_MODELS:-$HOME/.cache/ffn/llama.cpp-models}/templates"
  [ "$t" = chat_template ] && [ -d "$templates" ] && extra=("$templates")
  echo "fuzz: $t for ${seconds}s (corpus fuzz/corpus/$t ${extra[*]}, new inputs in $work)"
  # 2 GiB RSS and 512 MiB per allocation: a loader that sizes an allocation
  # from an unchecked field is caught as a failure, not just slow.
  if ! (cd build-fuzz && ./bin/fuzz_"$t" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=512 \
        -timeout=20 -print_final_stats=1 "$work" "../fuzz/corpus/$t" "${extra[@]}" 2>&1 | tail -n 12); then
    status=1
  fi
  [ -n "$keep" ] || rm -rf "$work"
done
exit $status
