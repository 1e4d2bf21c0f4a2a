#!/usr/bin/env bash
# Byte identity against an earlier commit: builds BASE's `ffn` beside the
# current tree (a git worktree, cached under ~/.cache/ffn/same-bits/<sha>),
# runs the same commands with both programs on the same inputs, and compares
# every output file (and the printed lines of train and embed) byte for byte.
#
#   scripts/same_bits.sh BASE [--new build/bin/ffn] [--quick] [--keep]
#
# Covers: init (FFN and encoder); run over every activation, norm placement,
# norm type, bias, weight dtype (fp32 file, bf16/fp16/int8 stored, int8
# converted on load), bf16 compute, both layouts, ragged lengths, T = 1, 13,
# 300 and 1 and 2 threads, and FFN_ISA=avx2 and scalar; grad with and without
# dropout; quantize (int8 with and without calibration, bf16, fp16); train
# (mse, xent, dropout, adam/sgd, cosine) with its printed curve and plot;
# encode and encode-grad (post/pre, causal, lengths, dropout); decode and
# decode-grad (an nn.Transformer's decoder, causal or not); translate (the
# repository's MarianMT models, text and ids, beams and greedy, dtype int8
# and bf16, FFN_ISA=avx2 and scalar for int8); generate
# (the repository's GGUF and Hugging Face LLaMA models: logits, greedy and
# sampled tokens, native and fp32 compute, FFN_ISA=avx2 and scalar; SmolLM2's
# chat and logits when installed) and tokenize; the reference path through
# `bench --json`'s check (FFN fp32/int8/bf16 compute, backward, encoder); embed
# fp32, int8 and bf16 and --similarity when the MiniLM model is installed
# (said so when it is not); demo approximate and demo interaction --save;
# demo translate (30 steps of a small model: its files and lines, times
# aside). --quick runs a subset (one thread count, fewer sizes). Exit 0 when every output is identical, 1 when one
# differs (each named), 2 on a usage or build error.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() { echo "usage: scripts/same_bits.sh BASE [--new PATH_TO_FFN] [--quick] [--keep]" >&2; exit 2; }
[ $# -ge 1 ] || usage
base=$1; shift
new="" quick=0 keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --new) [ $# -ge 2 ] || usage; new=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --keep) keep=1; shift ;;
    *) echo "same_bits: unknown option $1" >&2; usage ;;
  esac
done
sha=$(git rev-parse --verify -q "$base^{commit}") || { echo "same_bits: $base: not a commit" >&2; exit 2; }

# ---- the two programs -------------------------------------------------------
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ffn/same-bits/$sha"
old="$cache/bin/ffn"
if [ ! -x "$old" ]; then
  echo "same_bits: building $base ($sha) in $cache"
  tree="$cache.src"
  rm -rf "$tree"
  git worktree prune
  git worktree add -q --detach "$tree" "$sha"
  cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release -DFFN_BUILD_TESTS=OFF -DFFN_PYTHON=OFF \
        -DFFN_BUILD_PEERS=OFF >/dev/null || exit 2
  cmake --build "$tree/build" --target ffn_cli -j "$(nproc)" >/dev/null || exit 2
  mkdir -p "$cache/bin"
  cp "$tree/build/bin/ffn" "$old"
  git worktree remove --force "$tree"
fi
if [ -z "$new" ]; then
  cmake --build build --target ffn_cli -j "$(nproc)" >/dev/null || exit 2
  new=build/bin/ffn
fi
new=$(realpath "$new")
py=/usr/bin/python3  # Debian's: has numpy

work=$(mktemp -d)
((keep)) && echo "same_bits: outputs kept in $work" || trap 'rm -rf "$work"' EXIT
mkdir -p "$work/in" "$work/old" "$work/new"

# ---- inputs (numpy, fixed seeds) --------------------------------------------
FFN_ROOT="$root" "$py" - "$work/in" <<'EOF'
import numpy as np, sys, os
d = sys.argv[1]
r = np.random.default_rng(30)
for t in (1, 13, 300):
    np.save(os.path.join(d, f"x{t}.npy"), r.standard_normal((t, 48)).astype(np.float32))
    np.save(os.path.join(d, f"dy{t}.npy"), r.standard_normal((t, 48)).astype(np.float32))
np.save(os.path.join(d, "xb.npy"), r.standard_normal((3, 11, 48)).astype(np.float32))
np.save(os.path.join(d, "dyb.npy"), r.standard_normal((3, 11, 48)).astype(np.float32))
np.save(os.path.join(d, "xncw.npy"), r.standard_normal((3, 48, 11)).astype(np.float32))
np.save(os.path.join(d, "len.npy"), np.array([11, 4, 1], dtype=np.int64))
np.save(os.path.join(d, "len32.npy"), np.array([7, 11, 2], dtype=np.int32))
# training: 200 rows, regression and classification targets
np.save(os.path.join(d, "data.npy"), r.standard_normal((200, 16)).astype(np.float32))
np.save(os.path.join(d, "targets.npy"), r.standard_normal((200, 16)).astype(np.float32))
np.save(os.path.join(d, "classes.npy"), r.integers(0, 10, 200).astype(np.int64))
# encoder: d_model 40, 4 heads
np.save(os.path.join(d, "xe.npy"), r.standard_normal((2, 9, 40)).astype(np.float32))
np.save(os.path.join(d, "dye.npy"), r.standard_normal((2, 9, 40)).astype(np.float32))
np.save(os.path.join(d, "lene.npy"), np.array([9, 5], dtype=np.int64))
with open(os.path.join(d, "texts.txt"), "w") as f:
    f.write("The cat sits on the mat.\nA feed-forward network is applied to every position separately and identically.\n"
            "Où est la gare ?\nunaffable naïve café — 東京\n\nshort\n")# decoder: a random nn.Transformer (2 + 2 layers, d_model 24, 4 heads), its
# target, memory and lengths (torch: Debian's python3 has it)
try:
    import torch
    sys.path.insert(0, os.path.join(os.environ["FFN_ROOT"], "scripts"))
    import torch_roundtrip as tr
    torch.manual_seed(3)
    m = torch.nn.Transformer(24, 4, 2, 2, 40, dropout=0.0, activation="gelu", batch_first=True)
    tr.save(m.state_dict(), os.path.join(d, "tf.safetensors"), heads=4, activation="gelu", norm="post", eps=1e-5)
    np.save(os.path.join(d, "tgt.npy"), r.standard_normal((2, 6, 24)).astype(np.float32))
    np.save(os.path.join(d, "dtgt.npy"), r.standard_normal((2, 6, 24)).astype(np.float32))
    np.save(os.path.join(d, "mem.npy"), r.standard_normal((2, 7, 24)).astype(np.float32))
    np.save(os.path.join(d, "tl.npy"), np.array([6, 3], dtype=np.int64))
    np.save(os.path.join(d, "ml.npy"), np.array([7, 4], dtype=np.int64))
except ImportError:
    pass
EOF

ncmp=0 ndiff=0 nfail=0
# run_both NAME ARGS...: runs `ffn ARGS` for old and new, with @OUT@ replaced by
# the side's output directory; stdout is kept as NAME.stdout. Both must agree
# on the exit status too.
run_both() {
  local name=$1; shift
  local side bin st_old st_new
  for side in old new; do
    bin=$old; [ $side = new ] && bin=$new
    local args=() a
    for a in "$@"; do args+=("${a//@OUT@/$work/$side}"); done
    set +e
    (cd "$work/in" && "$bin" "${args[@]}") >"$work/$side/$name.stdout" 2>"$work/$side/$name.stderr"
    local st=$?
    set -e
    [ $side = old ] && st_old=$st || st_new=$st
  done
  if [ "$st_old" != "$st_new" ]; then
    echo "DIFF $name: exit status $st_old (base) vs $st_new (new)"; ndiff=$((ndiff + 1))
  elif [ "$st_old" != 0 ]; then
    echo "FAIL $name: both exit $st_old: $(head -1 "$work/new/$name.stderr")"; nfail=$((nfail + 1))
  fi
}

threads=(1 2); sizes=(1 13 300)
((quick)) && { threads=(2); sizes=(13 300); }

# ---- init, quantize --------------------------------------------------------
acts=(relu gelu gelu_tanh silu swiglu geglu reglu)
((quick)) && acts=(relu gelu swiglu)
for act in "${acts[@]}"; do
  for norm in post pre none; do
    for nt in layernorm rmsnorm; do
      [ $norm = none ] && [ $nt = rmsnorm ] && continue
      for bias in bias nobias; do
        w="w_${act}_${norm}_${nt}_${bias}"
        extra=(); [ $bias = nobias ] && extra=(--no-bias)
        run_both "$w.init" init --d-model 48 --d-ff 72 --activation $act --norm $norm --norm-type $nt "${extra[@]}" \
                 --seed 7 --output @OUT@/$w.safetensors
        # the new side's file feeds both programs from here on (init was compared)
        cp "$work/new/$w.safetensors" "$work/in/$w.safetensors"
        for q in int8 bf16 fp16; do
          run_both "$w.q$q" quantize --weights $w.safetensors --dtype $q --output @OUT@/$w.$q.safetensors
          cp "$work/new/$w.$q.safetensors" "$work/in/$w.$q.safetensors"
        done
        run_both "$w.qcal" quantize --weights $w.safetensors --dtype int8 --calibrate x300.npy --output @OUT@/$w.cal.safetensors
      done
    done
  done
done

# ---- run, grad ---------------------------------------------------------------
for f in "$work"/in/w_*.safetensors; do
  w=$(basename "$f" .safetensors)
  stored=fp32
  case $w in *.int8) stored=int8 ;; *.bf16) stored=bf16 ;; *.fp16) stored=fp16 ;; esac
  for t in "${threads[@]}"; do
    for n in "${sizes[@]}"; do
      run_both "$w.run.T$n.t$t" run --weights $w.safetensors --input x$n.npy --threads $t --output @OUT@/$w.run.T$n.t$t.npy
    done
    run_both "$w.run.len.t$t" run --weights $w.safetensors --input xb.npy --lengths len.npy --threads $t \
             --output @OUT@/$w.run.len.t$t.npy
    run_both "$w.run.ncw.t$t" run --weights $w.safetensors --input xncw.npy --layout ncw --lengths len32.npy \
             --threads $t --output @OUT@/$w.run.ncw.t$t.npy
    if [ $stored = fp32 ]; then
      run_both "$w.run.int8.t$t" run --weights $w.safetensors --input x300.npy --dtype int8 --threads $t \
               --output @OUT@/$w.run.int8.t$t.npy
      run_both "$w.run.bf16c.t$t" run --weights $w.safetensors --input x300.npy --compute bf16 --threads $t \
               --output @OUT@/$w.run.bf16c.t$t.npy
      mkdir -p "$work/old/$w.grad.t$t" "$work/new/$w.grad.t$t" "$work/old/$w.gradd.t$t" "$work/new/$w.gradd.t$t"
      run_both "$w.grad.t$t" grad --weights $w.safetensors --input xb.npy --lengths len.npy --grad-output dyb.npy \
               --threads $t --output-dir @OUT@/$w.grad.t$t
      run_both "$w.gradd.t$t" grad --weights $w.safetensors --input x300.npy --grad-output dy300.npy \
               --dropout 0.1 --dropout-output 0.2 --seed 5 --threads $t --output-dir @OUT@/$w.gradd.t$t
    elif [ $stored = bf16 ]; then
      run_both "$w.run.bf16c.t$t" run --weights $w.safetensors --input x300.npy --compute bf16 --threads $t \
               --output @OUT@/$w.run.bf16c.t$t.npy
    fi
  done
done
for isa in avx2 scalar; do
  for w in w_relu_post_layernorm_bias w_swiglu_pre_rmsnorm_nobias w_gelu_none_layernorm_bias; do
    for d in "" .int8 .bf16; do
      FFN_ISA=$isa run_both "$w$d.run.$isa" run --weights $w$d.safetensors --input x300.npy --threads 2 \
                            --output @OUT@/$w$d.run.$isa.npy
    done
  done
done

# ---- train -------------------------------------------------------------------
run_both train.mse train --data data.npy --targets targets.npy --d-ff 24 --activation gelu --epochs 3 --batch 32 \
         --seed 3 --threads 2 --output @OUT@/train.mse.safetensors --plot @OUT@/train.mse.svg
run_both train.xent train --data data.npy --targets classes.npy --loss xent --vocab 10 --d-ff 24 --norm pre \
         --dropout 0.1 --epochs 3 --batch 50 --optimizer sgd --momentum 0.9 --lr-schedule cosine --seed 4 --threads 1 \
         --output @OUT@/train.xent.safetensors
run_both train.swiglu train --data data.npy --targets targets.npy --d-ff 24 --activation swiglu --norm-type rmsnorm \
         --norm pre --no-bias --optimizer adamw --weight-decay 0.01 --epochs 2 --batch 64 --seed 1 --threads 2 \
         --output @OUT@/train.swiglu.safetensors

# ---- encoder -----------------------------------------------------------------
for norm in post pre; do
  e="enc_$norm"
  run_both "$e.init" init --encoder --layers 2 --heads 4 --d-model 40 --d-ff 56 --activation gelu --norm $norm \
           --final-norm --seed 9 --output @OUT@/$e.safetensors
  cp "$work/new/$e.safetensors" "$work/in/$e.safetensors"
  for t in "${threads[@]}"; do
    run_both "$e.encode.t$t" encode --weights $e.safetensors --input xe.npy --lengths lene.npy --threads $t \
             --output @OUT@/$e.encode.t$t.npy
    run_both "$e.encode.causal.t$t" encode --weights $e.safetensors --input xe.npy --causal --threads $t \
             --output @OUT@/$e.encode.causal.t$t.npy
    mkdir -p "$work/old/$e.egrad.t$t" "$work/new/$e.egrad.t$t"
    run_both "$e.egrad.t$t" encode-grad --weights $e.safetensors --input xe.npy --lengths lene.npy --grad-output dye.npy \
             --dropout 0.1 --seed 2 --threads $t --output-dir @OUT@/$e.egrad.t$t
  done
done

# ---- embed (the pretrained model, when installed) ------------------------------
model="${FFN_MODEL_DIR:-$HOME/.cache/ffn/all-MiniLM-L6-v2}"
if [ -f "$model/model.safetensors" ]; then
  for dt in fp32 int8 bf16; do
    run_both "embed.$dt" embed --model "$model" --input-file texts.txt --dtype $dt --threads 2 --output @OUT@/embed.$dt.npy
  done
  run_both embed.similarity embed --model "$model" --similarity "a cat on a mat" "the cat sits on the mat"
else
  echo "same_bits: embed skipped: no all-MiniLM-L6-v2 in $model (scripts/setup.sh installs it)"
fi

# ---- the reference path, through bench's check ---------------------------------
# `ffn bench --json` compares the fast path with the reference on the same
# inputs; its check_max_error is a pure function of both paths' bits, so a
# change to the reference (or the fast path) on these shapes shows here.
for args in "--norm post" "--norm pre --norm-type rmsnorm --activation swiglu" "--norm none --activation gelu" \
            "--norm post --backward" "--norm pre --backward --norm-type rmsnorm" "--dtype int8 --norm pre" \
            "--dtype int8 --norm post" "--compute bf16 --norm pre" "--compute bf16 --norm post"; do
  name="bench.$(echo "$args" | tr -d ' -')"
  run_both "$name" bench --tokens 40 --d-model 48 --d-ff 72 --repeats 1 --warmup 0 --threads 1 --json $args
done
run_both bench.encoder bench --encoder --layers 2 --heads 4 --d-model 40 --d-ff 56 --batch 2 --seq 9 --repeats 1 \
         --warmup 0 --threads 1 --json

# ---- decoder --------------------------------------------------------------------
if [ -f "$work/in/tf.safetensors" ]; then
  dec=(--weights tf.safetensors --prefix decoder. --input tgt.npy --lengths tl.npy --memory mem.npy --memory-lengths ml.npy)
  for t in "${threads[@]}"; do
    run_both "decode.t$t" decode "${dec[@]}" --threads $t --output @OUT@/decode.t$t.npy
    run_both "decode.nocausal.t$t" decode "${dec[@]}" --no-causal --threads $t --output @OUT@/decode.nocausal.t$t.npy
    mkdir -p "$work/old/dgrad.t$t" "$work/new/dgrad.t$t"
    run_both "dgrad.t$t" decode-grad "${dec[@]}" --grad-output dtgt.npy --threads $t --output-dir @OUT@/dgrad.t$t
  done
else
  echo "same_bits: decode skipped: $py has no torch to write the nn.Transformer"
fi

# ---- translate (the repository's small MarianMT models) ------------------------
data=$root/tests/data
for t in "${threads[@]}"; do
  run_both "translate.text.t$t" translate --model "$data/marian_text" --threads $t "The cat sits on the mat." "Où est la gare ?"
  run_both "translate.greedy.t$t" translate --model "$data/marian_text" --beams 1 --threads $t "A red house." "short"
  for m in relu_untied gelu_separate swish_shared; do
    run_both "translate.$m.t$t" translate --model "$data/marian/$m" --ids "5 9 13 2 0" --max-new-tokens 12 --threads $t
  done
  # int8: the FFN, the decoder's attention projections and the output projection; bf16: the FFN
  for dt in int8 bf16; do
    run_both "translate.text.$dt.t$t" translate --model "$data/marian_text" --dtype $dt --threads $t \
             "The cat sits on the mat." "Où est la gare ?"
  done
done
for isa in avx2 scalar; do
  FFN_ISA=$isa run_both "translate.text.int8.$isa" translate --model "$data/marian_text" --dtype int8 --threads 2 \
           "The cat sits on the mat." "Où est la gare ?"
done

# ---- generate, tokenize (the repository's small LLaMA models; SmolLM2 when installed) ---
ids="$(seq -s ' ' 3 2 201)"  # 100 ids
for t in "${threads[@]}"; do
  for compute in native fp32; do
    run_both "gen.q.$compute.logits.t$t" generate --model "$data/gguf/llama_q.gguf" --compute $compute --ids "$ids"              --max-new-tokens 0 --logits @OUT@/gen.q.$compute.logits.t$t.npy --threads $t
    run_both "gen.q.$compute.greedy.t$t" generate --model "$data/gguf/llama_q.gguf" --compute $compute --ids "$ids"              --max-new-tokens 24 --threads $t
  done
  run_both "gen.q.sample.t$t" generate --model "$data/gguf/llama_q.gguf" "Once upon a time" --temperature 0.8            --top-k 40 --top-p 0.95 --repeat-penalty 1.1 --seed 7 --max-new-tokens 24 --threads $t
  for m in mha_odd gqa2_untied gqa3_tied; do
    run_both "gen.$m.logits.t$t" generate --model "$data/llama/$m" --ids "$ids" --max-new-tokens 0              --logits @OUT@/gen.$m.logits.t$t.npy --threads $t
    run_both "gen.$m.greedy.t$t" generate --model "$data/llama/$m" "The feed-forward network" --max-new-tokens 16 --threads $t
  done
done
for isa in avx2 scalar; do
  FFN_ISA=$isa run_both "gen.q.native.$isa" generate --model "$data/gguf/llama_q.gguf" --ids "$ids" \
                        --max-new-tokens 0 --logits @OUT@/gen.q.native.$isa.npy --threads 2
done
run_both tok.gguf tokenize --model "$data/gguf/llama_q.gguf" --input-file texts.txt --output @OUT@/tok.gguf.txt
run_both tok.hf tokenize --model "$data/llama/mha_odd" --input-file texts.txt --output @OUT@/tok.hf.txt
llm="${FFN_SMOLLM2_GGUF:-$HOME/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
if [ -f "$llm" ]; then
  for t in "${threads[@]}"; do
    run_both "smollm2.chat.t$t" generate --model "$llm" --chat "What is the capital of France?" --max-new-tokens 16 --threads $t
    run_both "smollm2.logits.t$t" generate --model "$llm" --ids "$ids" --max-new-tokens 0 --logits @OUT@/smollm2.logits.t$t.npy --threads $t
  done
  run_both smollm2.tok tokenize --model "$llm" --input-file texts.txt --output @OUT@/smollm2.tok.txt
else
  echo "same_bits: SmolLM2 skipped: no $llm (scripts/setup.sh installs it)"
fi

# ---- demo ----------------------------------------------------------------------
run_both demo.approximate demo approximate --neurons 8 --steps 300 --save @OUT@/demo.safetensors
run_both demo.interaction demo interaction --d-ff 16 --epochs 20 --seed 2 --save @OUT@/demo.interaction.safetensors
# demo translate, small: the seq2seq trainer (encoder, decoder, tied head, SentencePiece) for 30 steps
run_both demo.translate demo translate --steps 30 --batch 8 --held-out 20 --d-model 32 --heads 2 --d-ff 64 \
         --layers 1 --threads 2 --model-dir @OUT@/demo.nt --loss-plot @OUT@/demo.nt.loss.svg \
         --attention-plot @OUT@/demo.nt.attention.svg

# ---- compare -------------------------------------------------------------------
normalize() {
  sed -E "s#$work/(old|new)/#OUT/#g; s#[0-9.]+ tokens/s +[0-9.]+ s##"
}
demo_times() { normalize | sed -E 's#(lr [0-9.e+-]+) +[0-9.]+ s#\1#; s#(trained in|, in) [0-9.]+ s#\1 T s#'; }
# bench's JSON: only what the check found (its times and the peak vary)
bench_checks() { python3 -c 'import json, sys; j = json.load(sys.stdin); print(sorted((k, v) for k, v in j.items() if k.startswith("check")))'; }
# stdout of every command, and every file written; stderr only where a
# command failed on both sides (already reported).
while IFS= read -r -d '' f; do
  rel=${f#"$work/old/"}
  case $rel in *.stderr) continue ;; esac
  ncmp=$((ncmp + 1))
  if [ ! -e "$work/new/$rel" ]; then
    echo "DIFF $rel: written by base only"; ndiff=$((ndiff + 1))
  elif [[ $rel == bench.*.stdout ]]; then
    if ! cmp -s <(bench_checks <"$f") <(bench_checks <"$work/new/$rel"); then
      echo "DIFF $rel (bench check)"; ndiff=$((ndiff + 1))
    fi
  elif [[ $rel == demo.translate.stdout ]]; then
    # its lines without their times ("... lr 6.63e-04  0 s", "trained in 0.1 s", "in 0.0 s")
    if ! cmp -s <(demo_times <"$f") <(demo_times <"$work/new/$rel"); then
      echo "DIFF $rel"; ndiff=$((ndiff + 1))
    fi
  elif [[ $rel == *.stdout ]]; then
    # printed lines: the side's directory and the speed (tokens/s, seconds) aside
    if ! cmp -s <(normalize <"$f") <(normalize <"$work/new/$rel"); then
      echo "DIFF $rel"; ndiff=$((ndiff + 1))
    fi
  elif ! cmp -s "$f" "$work/new/$rel"; then
    echo "DIFF $rel"; ndiff=$((ndiff + 1))
  fi
done < <(find "$work/old" -type f -print0 | sort -z)
while IFS= read -r -d '' f; do
  rel=${f#"$work/new/"}
  [ -e "$work/old/$rel" ] || { echo "DIFF $rel: written by new only"; ndiff=$((ndiff + 1)); }
done < <(find "$work/new" -type f -print0)

echo "same_bits: $ncmp outputs compared against $base ($sha): $ndiff differ, $nfail commands failed on both sides"
[ $ndiff -eq 0 ] && [ $nfail -eq 0 ]
