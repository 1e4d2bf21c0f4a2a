#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) into build-asan/ and runs
# each on the committed seed corpus for a fixed time.
#   scripts/fuzz.sh [--seconds 60] [--keep DIR] [target ...]
# targets: safetensors npy run marian gguf chat_template serve_request (default: all). New inputs the fuzzer finds go
# to a scratch corpus (or DIR/<target> with --keep), never into the repository;
# a crash leaves its input as build-asan/crash-* and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
keep=""
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    safetensors|npy|run|marian|gguf|chat_template|serve_request) targets+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument '$1' (expected --seconds N, --keep DIR or a target: safetensors npy run marian gguf chat_template serve_request)" >&2; exit 2 ;;
  esac
done
((${#targets[@]})) || targets=(safetensors npy run marian gguf chat_template serve_request)

scripts/setup.sh clang libclang-rt-14-dev libomp-14-dev >/dev/null
scripts/asan_build.sh $(printf 'fuzz_%s ' "${targets[@]}")

# One target on its own core; as many at once as there are cores, each
# still for the full time. Its report: DIR/<target>.log and .ok.
reports="$(mktemp -d)"
trap 'rm -rf "$reports"' EXIT
fuzz_one() {
  local t=$1 work="${keep:+$keep/$1}"
  [ -n "$work" ] || work="$(mktemp -d)"
  mkdir -p "$work"
  # The chat templates llama.cpp ships (scripts/setup.sh extracts them) seed the renderer too, read in place.
  local extra=()
  local templates="${FFN_LLAMA_CPP_MODELS:-$HOME/.cache/ffn/llama.cpp-models}/templates"
  [ "$t" = chat_template ] && [ -d "$templates" ] && extra=("$templates")
  echo "fuzz: $t for ${seconds}s (corpus fuzz/corpus/$t ${extra[*]}, new inputs in $work)" > "$reports/$t.log"
  # 2 GiB RSS and 512 MiB per allocation: a loader that sizes an allocation
  # from an unchecked field is caught as a failure, not just slow.
  if (cd build-asan && ./bin/fuzz_"$t" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=512 \
        -timeout=20 -print_final_stats=1 "$work" "../fuzz/corpus/$t" "${extra[@]}" > "$reports/$t.out" 2>&1); then
    touch "$reports/$t.ok"
  fi
  tail -n 12 "$reports/$t.out" >> "$reports/$t.log"
  [ -n "$keep" ] || rm -rf "$work"
}
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
  fuzz_one "$t" &
done
wait

status=0
for t in "${targets[@]}"; do
  cat "$reports/$t.log"
  [ -f "$reports/$t.ok" ] || { echo "fuzz: $t FAILED"; status=1; }
done
exit $status
