#!/usr/bin/env python3
# The four `ffn bench` modes of two ffn programs side by side (the FFN layer at T = 8 and 4096,
# --embed, --translate, --generate), alternating OLD and NEW within each round (the order
# flipped every other round), medians over the rounds and the pairwise ratios NEW/OLD.
#   python3 bench/alternate_modes.py OLD_FFN NEW_FFN ROUNDS [CASE,CASE,...]
# Inputs it expects: /tmp/texts.txt (texts, one per line), /tmp/src_ids.txt (Marian source ids),
# ~/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; run from the repository root.
import json, subprocess, statistics, sys, os
old, new, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
only = sys.argv[4].split(",") if len(sys.argv) > 4 else None  # a subset of the cases, by name
gg = os.path.expanduser("~/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
cases = {
  "ffn T=8": (["bench","--norm","none","--tokens","8","--repeats","10","--warmup","2","--threads","2","--json"], lambda j: {"tokens/s": 8/j["median_s"]}),
  "ffn T=4096": (["bench","--norm","none","--tokens","4096","--repeats","10","--warmup","2","--threads","2","--json"], lambda j: {"tokens/s": 4096/j["median_s"]}),
  "embed": (["bench","--embed","--input-file","/tmp/texts.txt","--repeats","3","--threads","2","--json"], lambda j: {"texts/s": j["texts_per_s"]}),
  "translate": (["bench","--translate","--model","tests/data/marian/swish_shared","--input-file","/tmp/src_ids.txt","--repeats","5","--threads","2","--json"], lambda j: {"tokens/s": j["tokens_per_s"]}),
  "generate": (["bench","--generate","--model",gg,"--repeats","3","--threads","2","--json"], lambda j: {"prompt tok/s": j["prompt_tokens_per_s"], "gen tok/s": j["generate_tokens_per_s"]}),
}
res = {}
for r in range(rounds):
    for name,(args,get) in cases.items():
        if only and name not in only: continue
        order = [("old",old),("new",new)] if r % 2 == 0 else [("new",new),("old",old)]
        for side,b in order:
            # The environment as a user has it: no OMP_WAIT_POLICY (PASSIVE slows OLD's OpenMP hand-offs
            # between small parallel regions twofold in translate and generate).
            out = subprocess.run([b]+args, capture_output=True, text=True)
            j = json.loads(out.stdout.strip().splitlines()[-1])
            for k,v in get(j).items():
                res.setdefault((name,k),{}).setdefault(side,[]).append(v)
    print(f"round {r+1} done", file=sys.stderr, flush=True)
print(f"{'case':28} {'OLD median':>12} {'NEW median':>12} {'NEW/OLD':>8}  pairwise ratios")
for (name,k),d in res.items():
    o,n = d["old"], d["new"]
    pw = [b/a for a,b in zip(o,n)]
    print(f"{name+' '+k:28} {statistics.median(o):12.1f} {statistics.median(n):12.1f} {statistics.median(n)/statistics.median(o):8.3f}  {min(pw):.2f}-{max(pw):.2f}")
