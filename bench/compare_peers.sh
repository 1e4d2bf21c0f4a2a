#!/usr/bin/env bash
# The peer comparison of issue 3: ffn against oneDNN, OpenBLAS and PyTorch on
# the same machine, each case in its own process, implementations alternating,
# for T in {1, 8, 64, 512, 4096}, 1 and 2 threads, forward and forward+backward.
# Installs the benchmark-only packages (oneDNN, OpenBLAS; PyTorch is used when
# Debian's python3-torch is there), builds, runs, prints a Markdown table.
#
#   bench/compare_peers.sh [ffn_peers compare options, e.g. --rounds 5]
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh libdnnl-dev libopenblas-dev
[ -x build/bin/ffn_peers ] || { echo "compare_peers: ffn_peers was not built (oneDNN/OpenBLAS not found by CMake)" >&2; exit 2; }

# OpenBLAS picks its kernels from the CPU it detects; under some hypervisors it
# falls back to old SSE code. Name the core from the CPU's flags unless the
# caller already did (used by OpenBLAS and by PyTorch's BLAS alike).
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  flags=$(grep -m1 '^flags' /proc/cpuinfo)
  vendor=$(grep -m1 '^vendor_id' /proc/cpuinfo)
  if [[ $flags == *avx512_bf16* ]]; then export OPENBLAS_CORETYPE=Cooperlake
  elif [[ $flags == *avx512f* ]]; then export OPENBLAS_CORETYPE=SkylakeX
  elif [[ $vendor == *AMD* && $flags == *avx2* ]]; then export OPENBLAS_CORETYPE=Zen
  elif [[ $flags == *avx2* ]]; then export OPENBLAS_CORETYPE=Haswell
  fi
fi
echo "compare_peers: $(date -u +%Y-%m-%dT%H:%MZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
python=""
/usr/bin/python3 -c 'import torch' 2>/dev/null && python=/usr/bin/python3
exec build/bin/ffn_peers compare --ffn build/bin/ffn --python "$python" --torch-script bench/torch_ffn.py "$@"
