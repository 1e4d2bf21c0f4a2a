#!/usr/bin/env bash
# The test suite under sanitizers:
#   address+undefined  every test (clang, build-asan/: scripts/asan_build.sh,
#                      the build the fuzz targets share), with uninitialized
#                      scratch poisoned (FFN_POISON_SCRATCH)
#   thread             the threaded tests (ffn_thread_tests: clang with
#                      libomp and its Archer tool, which tells ThreadSanitizer
#                      about OpenMP's synchronization; build-tsan/)
#   scripts/sanitize.sh [asan] [tsan]     (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=("$@")
((${#jobs[@]})) || jobs=(asan tsan)
# The threaded tests, all in ffn_thread_tests (tests/CMakeLists.txt).
threaded_tests=(
  'ThreadPool.*' 'Threads.*' '*BitwiseIdentical*' '*TokenResultIndependent*'
  '*Bf16PerIsa.InvariantOverThreads*' Fit.PermutationSplitAndDeterminism
  '*QLinearPerIsa.SameBitsAsTheReference*' CausalLM.CacheStepsAreBitwiseTheWholePrefix
  CausalLMGguf.NativeIsOneComputationOnEveryIsa
)

scripts/setup.sh clang libclang-rt-14-dev libomp-14-dev >/dev/null
for job in "${jobs[@]}"; do
  case "$job" in
    asan)
      scripts/asan_build.sh
      echo "sanitize: AddressSanitizer + UndefinedBehaviorSanitizer, every test"
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        ctest --test-dir build-asan -j "$(nproc)" --output-on-failure | grep -E 'tests passed|tests failed|Failed|Total Test time'
      ;;
    tsan)
      cmake -S . -B build-tsan -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFFN_SANITIZE=thread \
        -DFFN_BUILD_PEERS=OFF >/dev/null
      cmake --build build-tsan -j "$(nproc)" --target ffn_thread_tests >/dev/null
      echo "sanitize: ThreadSanitizer, the threaded tests"
      archer=/usr/lib/llvm-14/lib/libarcher.so
      [ -f "$archer" ] || { echo "sanitize.sh: $archer not found (libomp-14-dev)" >&2; exit 1; }
      OMP_TOOL_LIBRARIES="$archer" TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1 \
        build-tsan/bin/ffn_thread_tests --gtest_brief=1 --gtest_filter="$(IFS=:; echo "${threaded_tests[*]}")"
      ;;
    *) echo "sanitize.sh: unknown job '$job' (expected asan or tsan)" >&2; exit 2 ;;
  esac
done
