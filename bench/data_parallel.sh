#!/usr/bin/env bash
# Data-parallel training against one process on the same cores, side by side
# (bench/results/2026-11-23-data-parallel.md): `ffn train` with 2 threads,
# then `mpirun -np 2 ffn train` with 1 thread per rank, 512 -> 2048, 16384
# rows, 2 epochs, no held-out rows; the second epoch's tokens/s.
#   bench/data_parallel.sh [BATCH...]      (default 64 1024 4096; 3 rounds each)
# OLD=path/to/another/ffn adds a column for that binary (e.g. before a change).
set -eu
ffn=$(realpath "${FFN:-build/bin/ffn}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
/usr/bin/python3 -c "
import numpy as np
x = np.random.default_rng(1).standard_normal((16384, 512)).astype(np.float32)
np.save('x.npy', x); np.save('t.npy', (np.tanh(x) * 0.5).astype(np.float32))"
mpirun=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
tps() { grep '^epoch 2/2' | sed 's/.*loss [0-9.e+-]*  \([0-9]*\) tokens.*/\1/'; }
echo "$(date -u +%F) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
batches=("$@")
[ ${#batches[@]} -gt 0 ] || batches=(64 1024 4096)
for batch in "${batches[@]}"; do
  common=(--data x.npy --targets t.npy --epochs 2 --batch "$batch" --val-fraction 0 --output o.safetensors --plot o.svg)
  for round in 1 2 3; do
    old=""
    [ -n "${OLD:-}" ] && old=" old_1x2=$("$OLD" train "${common[@]}" --threads 2 | tps)"
    one=$("$ffn" train "${common[@]}" --threads 2 | tps)
    two=$("${mpirun[@]}" -np 2 "$ffn" train "${common[@]}" --threads 1 | tps)
    echo "batch=$batch round=$round${old} 1x2=$one 2x1=$two ratio=$(awk -v a="$two" -v b="$one" 'BEGIN { printf "%.3f", a / b }')"
  done
done
