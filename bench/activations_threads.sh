#!/usr/bin/env bash
# ffn bench on 4096 tokens for each activation in fp32 and bf16 compute (two
# rounds, alternating), then 1 and 2 threads for fp32, int8 and bf16 compute.
cd "$(dirname "$0")/.."
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for round in 1 2; do
for act in relu gelu gelu_tanh swiglu; do
  for c in fp32 bf16; do
    echo -n "act=$act compute=$c round=$round: "; build/bin/ffn bench --norm none --tokens 4096 --threads 2 --activation $act --compute $c --repeats 10 --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.2f ms %.1f GFLOP/s" % (j["median_s"]*1e3, j["gflops"]))'
  done
done
done
for mode in "--dtype fp32" "--dtype int8" "--compute bf16"; do
  for T in 512 4096; do
    for th in 1 2; do
      echo -n "$mode T=$T threads=$th: "; build/bin/ffn bench --norm none --tokens $T --threads $th $mode --repeats 10 --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.3f ms %.1f GFLOP/s" % (j["median_s"]*1e3, j["gflops"]))'
    done
  done
done
