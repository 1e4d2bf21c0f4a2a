#!/usr/bin/env bash
# Tensor and data parallelism over MPI (src/dist), run by ctest when built with MPI:
#   - mpirun -np P ffn run --tensor-parallel for P = 1, 2, 4 writes the same
#     bytes as plain ffn run (padding, pre-norm SwiGLU, a bf16 file, int8
#     quantized per shard on load, a layer with 6 hidden chunks);
#   - faults: 3 ranks (do not divide the 4 shards), one rank's missing file,
#     an input shape that differs across ranks: every rank exits 2 with one
#     line naming its rank and the cause, none hangs, nothing is written;
#     a rank killed mid-run ends the job (no hang) and leaves no output;
#   - mpirun -np P ffn grad --tensor-parallel: grad_input.npy and
#     grads.safetensors (each rank writes its parts) byte-identical to ffn grad;
#   - ffn bench --tensor-parallel reports every rank's times and bytes;
#   - mpirun -np P ffn train (data parallel) for P = 1, 2, 4 prints the loss
#     curve of plain ffn train and writes the same weights and plot, byte for
#     byte (mse and cross-entropy, dropout, partial and tiny batches, every
#     optimizer); faults: 3 ranks, one rank's missing data file, data or
#     settings that differ across ranks, a rank killed mid-training (no
#     hang, no partial checkpoint);
#   - two hosts: two ranks in two network namespaces joined by a veth pair,
#     talking over TCP only (Open MPI's rsh launcher entering the other
#     namespace instead of ssh): run, grad and train byte-identical again.
#     Skipped, and said so, where namespaces cannot be made (not root, no
#     iproute2, no CAP_SYS_ADMIN).
# Usage: test_mpi.sh FFN_BINARY
set -u
ffn=$(realpath "$1")
# Under AddressSanitizer (scripts/sanitize.sh): Open MPI leaves allocations
# of its dlopen()ed components (unloaded by MPI_Finalize, so no library name
# to suppress) at exit; leak checking is off for these runs only. Every
# other ASan/UBSan check stays on, and the library code they run is
# leak-checked by the other tests.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mpirun=(timeout 120 mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)  # CI runs as root
fail=0
bad() { echo "FAIL: $*"; fail=1; }

python_npy() {  # name shape... : writes a seeded float32 array
  /usr/bin/python3 - "$@" <<'PY'
import sys, numpy as np
name, shape = sys.argv[1], [int(v) for v in sys.argv[2:]]
np.save(name, np.random.default_rng(len(name)).standard_normal(shape).astype(np.float32))
PY
}
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "mpi: SKIPPED: Debian's python3-numpy is missing (scripts/setup.sh installs it)"; exit 77
fi

"$ffn" init --d-model 48 --d-ff 1100 --activation swiglu --norm pre --seed 3 --output w.safetensors || bad init
"$ffn" init --d-model 40 --d-ff 1300 --activation gelu --seed 4 --output w6.safetensors || bad init6
"$ffn" quantize --weights w.safetensors --dtype bf16 --output wb.safetensors || bad quantize
python_npy x.npy 3 7 48
python_npy x40.npy 33 40
python_npy x5.npy 5 48
/usr/bin/python3 -c "import numpy as np; np.save('len.npy', np.array([7, 3, 0], dtype=np.int64))"

check_same() {  # label, plain args..., -- , common args
  local label=$1; shift
  "$ffn" run "$@" --output plain.npy || { bad "$label: plain run"; return; }
  for P in 1 2 4; do
    rm -f tp.npy
    "${mpirun[@]}" -np $P "$ffn" run --tensor-parallel --threads 1 "$@" --output tp.npy > log.txt 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then bad "$label P=$P: exit $rc"; cat log.txt; continue; fi
    cmp -s plain.npy tp.npy && echo "ok: $label P=$P byte-identical" || bad "$label P=$P: bytes differ"
  done
}
check_same "fp32 swiglu pre-norm, padded" --weights w.safetensors --input x.npy --lengths len.npy
check_same "bf16 file" --weights wb.safetensors --input x.npy
check_same "int8 quantized per shard" --weights w.safetensors --input x.npy --dtype int8
check_same "gelu, 6 hidden chunks" --weights w6.safetensors --input x40.npy

# The backward: grad_input.npy and grads.safetensors (each rank writing its
# own parts of the one file) byte-identical to plain ffn grad, with dropout.
python_npy dy.npy 3 7 48
python_npy dy40.npy 33 40
check_grad() {  # label, args...
  local label=$1; shift
  rm -rf gplain
  "$ffn" grad "$@" --output-dir gplain || { bad "$label: plain grad"; return; }
  for P in 1 2 4; do
    rm -rf gtp
    "${mpirun[@]}" -np $P "$ffn" grad --tensor-parallel --threads 1 "$@" --output-dir gtp > log.txt 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then bad "grad $label P=$P: exit $rc"; cat log.txt; continue; fi
    cmp -s gplain/grads.safetensors gtp/grads.safetensors && cmp -s gplain/grad_input.npy gtp/grad_input.npy \
      && [ "$(ls -A gtp | wc -l)" = 2 ] && echo "ok: grad $label P=$P byte-identical" || bad "grad $label P=$P: files differ"
  done
}
check_grad "swiglu pre-norm, padded, dropout" --weights w.safetensors --input x.npy --lengths len.npy \
  --grad-output dy.npy --dropout 0.1 --seed 4
check_grad "gelu post-norm, 6 hidden chunks" --weights w6.safetensors --input x40.npy --grad-output dy40.npy

fault() {  # label, expected text, command...
  local label=$1 want=$2; shift 2
  rm -f e.npy
  "$@" > out.txt 2> err.txt
  local rc=$?
  [ $rc -ne 0 ] || bad "$label: exit 0"
  [ $rc -ne 124 ] || bad "$label: hung (timeout)"
  [ ! -e e.npy ] || bad "$label: wrote e.npy"
  local lines
  lines=$(grep -c '^ffn: error: rank [0-9]*: ' err.txt)
  grep -q -- "$want" err.txt || { bad "$label: no '$want' in"; cat err.txt; }
  echo "ok: $label (exit $rc, $lines rank lines)"
  LAST_LINES=$lines
}
fault "3 ranks" "3 ranks do not divide the 4 shards" \
  "${mpirun[@]}" -np 3 "$ffn" run --tensor-parallel --threads 1 --weights w.safetensors --input x.npy --output e.npy
[ "$LAST_LINES" = 3 ] || bad "3 ranks: $LAST_LINES error lines, expected one per rank"
fault "rank 1 cannot read its file" "rank 0: stopped, rank 1 failed: missing.safetensors" \
  "${mpirun[@]}" -np 2 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then w=missing.safetensors; else w=w.safetensors; fi;
    exec "$0" run --tensor-parallel --threads 1 --weights $w --input x.npy --output e.npy' "$ffn"
grep -q "rank 1: missing.safetensors: cannot open" err.txt || bad "rank 1 names its own cause"
[ "$LAST_LINES" = 2 ] || bad "missing file: $LAST_LINES error lines, expected 2"
fault "shapes differ across ranks" "the input's shape (and lengths) differs across ranks" \
  "${mpirun[@]}" -np 2 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then x=x5.npy; else x=x.npy; fi;
    exec "$0" run --tensor-parallel --threads 1 --weights w.safetensors --input $x --output e.npy' "$ffn"
[ "$LAST_LINES" = 2 ] || bad "shapes: $LAST_LINES error lines, expected 2"

"$ffn" init --d-model 16 --d-ff 500 --output small.safetensors || bad init-small
python_npy x16.npy 4 16
fault "d_ff of 2 chunks on 4 ranks" "d_ff = 500 is too small for 4 ranks: tensor parallelism needs at least 1024 hidden units (4 shards of 256" \
  "${mpirun[@]}" -np 4 "$ffn" run --tensor-parallel --threads 1 --weights small.safetensors --input x16.npy --output e.npy
[ "$LAST_LINES" = 4 ] || bad "small d_ff: $LAST_LINES error lines, expected 4"

fault "grad: rank 1 cannot read dL/dy" "rank 0: stopped, rank 1 failed: missing.npy" \
  "${mpirun[@]}" -np 2 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then g=missing.npy; else g=dy.npy; fi;
    exec "$0" grad --tensor-parallel --threads 1 --weights w.safetensors --input x.npy --grad-output $g --output-dir e.npy' "$ffn"
[ "$LAST_LINES" = 2 ] || bad "grad fault: $LAST_LINES error lines, expected 2"

# Outputs are checked before the work, by rank 0 (which writes); every rank stops.
fault "run: output directory missing" "no_such_dir' does not exist" \
  "${mpirun[@]}" -np 2 "$ffn" run --tensor-parallel --threads 1 --weights w.safetensors --input x.npy --output no_such_dir/e.npy
[ "$LAST_LINES" = 2 ] || bad "output dir: $LAST_LINES error lines, expected 2"
grep -q "rank 1: stopped, rank 0 failed" err.txt || bad "output dir: rank 1 did not stop with rank 0's verdict"
fault "grad: output dir under a file" "not a directory" \
  "${mpirun[@]}" -np 2 "$ffn" grad --tensor-parallel --threads 1 --weights w.safetensors --input x.npy --grad-output dy.npy \
  --output-dir x.npy/d

# Without a parallel mode under mpirun: refused on every rank, naming the flag;
# nothing written (before, each rank ran the whole job and wrote the same file).
for cmd in "run --weights w.safetensors --input x.npy --output e.npy" "embed --output e.npy hello"; do
  rm -f e.npy
  "${mpirun[@]}" -np 2 "$ffn" $cmd > out.txt 2> err.txt
  rc=$?
  [ $rc -ne 0 ] || bad "mpirun ffn ${cmd%% *} without a parallel mode: exit 0"
  [ ! -e e.npy ] || bad "mpirun ffn ${cmd%% *} without a parallel mode: wrote e.npy"
  n=$(grep -c "started by mpirun as one of 2 ranks" err.txt)
  [ "$n" = 2 ] || { bad "mpirun ffn ${cmd%% *}: $n refusal lines, expected one per rank"; cat err.txt; }
  echo "ok: mpirun ffn ${cmd%% *} without a parallel mode refused ($n lines, exit $rc)"
done
grep -q -- "add --tensor-parallel" err.txt || grep -q "no parallel mode" err.txt || bad "refusal names no flag"

# A rank killed mid-run: a job of several seconds, rank 1 killed after one.
"$ffn" init --d-model 128 --d-ff 4096 --output big.safetensors || bad init-big
/usr/bin/python3 -c "import numpy as np; np.save('xbig.npy', np.ones((200000, 128), np.float32))"
start=$(date +%s)
"${mpirun[@]}" -np 2 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then "$0" run --tensor-parallel --threads 1 \
    --weights big.safetensors --input xbig.npy --output e.npy & sleep 1; kill -9 $!; exit 9;
  else exec "$0" run --tensor-parallel --threads 1 --weights big.safetensors --input xbig.npy --output e.npy; fi' \
  "$ffn" > out.txt 2>&1
rc=$?
took=$(( $(date +%s) - start ))
case $rc in 0|124|126|127) bad "killed rank: exit $rc";; esac
[ ! -e e.npy ] || bad "killed rank: wrote e.npy"
[ -z "$(ls -a | grep '^\.e\.npy\|\.tmp')" ] || bad "killed rank: a temporary file was left"
echo "ok: a rank killed mid-run ends the job (exit $rc after ${took}s), nothing written"

# Data-parallel training: the loss curve (epoch lines without their timings)
# and the files of plain ffn train, for 1, 2 and 4 ranks.
/usr/bin/python3 - <<'PY'
import numpy as np
r = np.random.default_rng(5)
x = r.standard_normal((600, 24)).astype(np.float32)
np.save('tx.npy', x)
np.save('tt.npy', (np.tanh(x) * 0.5).astype(np.float32))
np.save('tl.npy', r.integers(0, 5, 600).astype(np.int64))
PY
curve() { grep '^epoch' "$1" | sed 's/  [0-9]* tokens\/s .*//'; }
check_train() {  # label, args...
  local label=$1; shift
  rm -f tplain.* tdp.*
  "$ffn" train --data tx.npy "$@" --output tplain.safetensors > tplain.log || { bad "train $label: plain"; return; }
  for P in 1 2 4; do
    rm -f tdp.*
    "${mpirun[@]}" -np $P "$ffn" train --data tx.npy "$@" --output tdp.safetensors > tdp.log 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then bad "train $label P=$P: exit $rc"; cat tdp.log; continue; fi
    grep -q "data parallel over $P ranks" tdp.log || bad "train $label P=$P: not data parallel"
    [ "$(curve tplain.log | wc -l)" -gt 0 ] && [ "$(curve tplain.log)" = "$(curve tdp.log)" ] \
      || { bad "train $label P=$P: loss curves differ"; diff <(curve tplain.log) <(curve tdp.log); }
    cmp -s tplain.safetensors tdp.safetensors && cmp -s tplain.loss.svg tdp.loss.svg \
      && echo "ok: train $label P=$P: same loss curve, weights and plot" || bad "train $label P=$P: files differ"
  done
}
check_train "mse, dropout, batch 37 (a partial last batch)" --targets tt.npy --batch 37 --epochs 2 --dropout 0.1
check_train "xent head, swiglu pre-rmsnorm, adamw" --targets tl.npy --loss xent --vocab 5 --activation swiglu \
  --norm pre --norm-type rmsnorm --optimizer adamw --weight-decay 0.1 --dropout 0.2 --epochs 2 --batch 64
check_train "batch 3 (empty slices), sgd momentum, cosine" --targets tt.npy --batch 3 --epochs 1 --optimizer sgd \
  --momentum 0.9 --lr 0.01 --lr-schedule cosine --no-bias

tfault() {  # label, expected text, command...: every rank exits 2, one line each, nothing written
  local label=$1 want=$2; shift 2
  rm -f e.safetensors e.loss.svg
  "$@" > out.txt 2> err.txt
  local rc=$?
  [ $rc -ne 0 ] || bad "$label: exit 0"
  [ $rc -ne 124 ] || bad "$label: hung (timeout)"
  [ ! -e e.safetensors ] && [ ! -e e.loss.svg ] || bad "$label: wrote output"
  grep -q -- "$want" err.txt || { bad "$label: no '$want' in"; cat err.txt; }
  LAST_LINES=$(grep -c '^ffn: error: rank [0-9]*: ' err.txt)
  echo "ok: $label (exit $rc, $LAST_LINES rank lines)"
}
tfault "train on 3 ranks" "3 ranks do not divide the 4 token slices" \
  "${mpirun[@]}" -np 3 "$ffn" train --data tx.npy --targets tt.npy --epochs 1 --output e.safetensors
[ "$LAST_LINES" = 3 ] || bad "train on 3 ranks: $LAST_LINES error lines, expected 3"
tfault "train: rank 1 cannot read the data" "rank 0: stopped, rank 1 failed: missing.npy" \
  "${mpirun[@]}" -np 2 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then d=missing.npy; else d=tx.npy; fi;
    exec "$0" train --data $d --targets tt.npy --epochs 1 --output e.safetensors' "$ffn"
[ "$LAST_LINES" = 2 ] || bad "train missing data: $LAST_LINES error lines, expected 2"
/usr/bin/python3 -c "import numpy as np; t = np.load('tt.npy'); t[7, 3] += 1; np.save('tt2.npy', t); np.save('tx2.npy', np.load('tx.npy')[:500]); np.save('tt3.npy', np.load('tt.npy')[:500])"
tfault "train: rank 1's targets differ" "the targets (checksum) differs across ranks: rank 0 has" \
  "${mpirun[@]}" -np 2 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then t=tt2.npy; else t=tt.npy; fi;
    exec "$0" train --data tx.npy --targets $t --epochs 1 --output e.safetensors' "$ffn"
[ "$LAST_LINES" = 2 ] || bad "train targets differ: $LAST_LINES error lines, expected 2"
tfault "train: rank 1 has fewer rows" "the data's rows differs across ranks: rank 0 has 600, rank 1 has 500" \
  "${mpirun[@]}" -np 2 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then d=tx2.npy; t=tt3.npy; else d=tx.npy; t=tt.npy; fi;
    exec "$0" train --data $d --targets $t --epochs 1 --output e.safetensors' "$ffn"
tfault "train: rank 1's --lr differs" "--lr differs across ranks: rank 0 has 0.001" \
  "${mpirun[@]}" -np 2 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then lr=0.002; else lr=0.001; fi;
    exec "$0" train --data tx.npy --targets tt.npy --epochs 1 --lr $lr --output e.safetensors' "$ffn"
# SIGTERM to one rank (as a batch scheduler's, or Ctrl-C reaching the
# ranks): the ranks agree to stop after the same step; rank 0 writes the
# weights of the last complete step and says so. (Ctrl-C to mpirun itself
# makes Open MPI end the ranks still running after 1 s, odls_base_sigkill_timeout;
# then the file on disk is the last whole epoch's.)
python_npy tsig.npy 20000 32
rm -f sig.safetensors sig.loss.svg pid.*
"${mpirun[@]}" -np 2 sh -c 'echo $$ > pid.$OMPI_COMM_WORLD_RANK; exec "$0" train --data tsig.npy --targets tsig.npy \
  --epochs 100000 --output sig.safetensors' "$ffn" > sig.log 2>&1 &
sig_pid=$!
for _ in $(seq 100); do grep -q '^epoch 1/' sig.log && [ -s pid.1 ] && break; sleep 0.1; done
kill -TERM "$(cat pid.1)"
wait $sig_pid
rc=$?
if grep -q "^interrupted after [1-9][0-9]* steps .*wrote sig.safetensors" sig.log && [ $rc -ne 0 ] && [ $rc -ne 124 ]; then
  python_npy x32.npy 2 32
  "$ffn" run --weights sig.safetensors --input x32.npy --output chk.npy > /dev/null 2>&1 \
    && echo "ok: SIGTERM to rank 1 stops every rank at one step (exit $rc), the last step's weights written" \
    || bad "SIGTERM: sig.safetensors does not load"
else
  bad "SIGTERM to rank 1: exit $rc"; tail -5 sig.log
fi

# A rank killed mid-training: the job ends, and the checkpoint is a whole
# file (written atomically by rank 0 after an epoch) or absent.
python_npy tbig.npy 20000 64
start=$(date +%s)
"${mpirun[@]}" -np 2 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then "$0" train --data tbig.npy --targets tbig.npy \
    --epochs 1000 --output e.safetensors & sleep 2; kill -9 $!; exit 9;
  else exec "$0" train --data tbig.npy --targets tbig.npy --epochs 1000 --output e.safetensors; fi' "$ffn" > out.txt 2>&1
rc=$?
took=$(( $(date +%s) - start ))
case $rc in 0|124|126|127) bad "killed training rank: exit $rc";; esac
if [ -e e.safetensors ]; then
  python_npy x64.npy 2 64
  "$ffn" run --weights e.safetensors --input x64.npy --output chk.npy > /dev/null 2>&1 \
    || bad "killed training rank: e.safetensors does not load"
fi
[ -z "$(ls -a | grep '^\.e\.\|\.tmp')" ] || bad "killed training rank: a temporary file was left"
echo "ok: a training rank killed mid-run ends the job (exit $rc after ${took}s), no partial file"

# Two hosts: namespaces A (x.1) and B (x.2) joined by a veth pair; mpirun in
# A starts rank 1's daemon in B through an rsh agent that enters B (what ssh
# would do between machines); TCP alone carries the messages (no shared
# memory), over the veth pair alone.
nsa=ffn_a_$$ nsb=ffn_b_$$ net=10.77.$(( $$ % 250 ))
cleanup_ns() { ip netns del $nsa 2>/dev/null; ip netns del $nsb 2>/dev/null; }
trap 'cleanup_ns; rm -rf "$work"' EXIT
tx_bytes() { ip -n $nsa -s -j link show va$$ | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])'; }
if ip netns add $nsa 2>/dev/null && ip netns add $nsb && ip link add va$$ type veth peer name vb$$ &&
   ip link set va$$ netns $nsa && ip link set vb$$ netns $nsb &&
   ip -n $nsa addr add $net.1/24 dev va$$ && ip -n $nsb addr add $net.2/24 dev vb$$ &&
   ip -n $nsa link set va$$ up && ip -n $nsb link set vb$$ up && ip -n $nsa link set lo up && ip -n $nsb link set lo up; then
  printf '#!/bin/sh\nhost=$1; shift\ncase $host in %s) ns=%s;; %s) ns=%s;; *) echo "agent: unknown host $host" >&2; exit 1;; esac\nexec ip netns exec $ns sh -c "$*"\n' \
    $net.1 $nsa $net.2 $nsb > agent.sh
  chmod +x agent.sh
  printf '%s slots=1\n%s slots=1\n' $net.1 $net.2 > hosts
  two_hosts=(timeout 120 ip netns exec $nsa mpirun --hostfile hosts -np 2 --mca plm_rsh_agent "$PWD/agent.sh"
             --mca btl tcp,self --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24)
  [ "$(id -u)" = 0 ] && two_hosts+=(--allow-run-as-root)
  # Each rank sees only its own namespace's address.
  "${two_hosts[@]}" sh -c 'echo "$OMPI_COMM_WORLD_RANK $(ip -o -4 addr show | grep -o " $0\.[12]/" | tr -d " /")"' "$net" \
    > where.txt 2>&1
  [ "$(sort where.txt | tr '\n' ' ')" = "0 $net.1 1 $net.2 " ] || { bad "two hosts: ranks not in their namespaces"; cat where.txt; }
  "$ffn" run --weights w.safetensors --input x.npy --output plain.npy
  rm -f tp.npy
  "${two_hosts[@]}" "$ffn" run --tensor-parallel --threads 1 --weights w.safetensors --input x.npy --output tp.npy \
    > log.txt 2>&1 && cmp -s plain.npy tp.npy && echo "ok: two hosts over TCP: run --tensor-parallel byte-identical" \
    || { bad "two hosts: run"; cat log.txt; }
  rm -rf gplain gtp
  "$ffn" grad --weights w.safetensors --input x.npy --grad-output dy.npy --output-dir gplain > /dev/null
  "${two_hosts[@]}" "$ffn" grad --tensor-parallel --threads 1 --weights w.safetensors --input x.npy --grad-output dy.npy \
    --output-dir gtp > log.txt 2>&1 && cmp -s gplain/grads.safetensors gtp/grads.safetensors \
    && echo "ok: two hosts over TCP: grad --tensor-parallel byte-identical" || { bad "two hosts: grad"; cat log.txt; }
  before=$(tx_bytes)
  rm -f tplain.* tdp.*
  "$ffn" train --data tx.npy --targets tt.npy --batch 37 --epochs 1 --dropout 0.1 --output tplain.safetensors > tplain.log
  "${two_hosts[@]}" "$ffn" train --data tx.npy --targets tt.npy --batch 37 --epochs 1 --dropout 0.1 \
    --output tdp.safetensors > tdp.log 2>&1 && [ "$(curve tplain.log)" = "$(curve tdp.log)" ] \
    && cmp -s tplain.safetensors tdp.safetensors && echo "ok: two hosts over TCP: train, same loss curve and weights" \
    || { bad "two hosts: train"; cat tdp.log; }
  moved=$(( $(tx_bytes) - before ))
  [ $moved -gt 100000 ] && echo "ok: two hosts: $moved bytes left namespace A over the veth pair in training" \
    || bad "two hosts: only $moved bytes on the veth pair"
else
  echo "two hosts: SKIPPED: cannot make network namespaces here (needs root, iproute2 and CAP_SYS_ADMIN)"
fi
cleanup_ns

# The bench: per-rank compute and sum times, bytes per call.
"${mpirun[@]}" -np 2 "$ffn" bench --tensor-parallel --threads 1 --tokens 64 --repeats 2 --json > bench.txt 2> err.txt
rc=$?
if [ $rc -eq 0 ]; then
  grep -q '"ranks": 2' bench.txt && grep -q '"rank": 1' bench.txt && grep -q '"bytes_sent": [1-9]' bench.txt \
    && echo "ok: bench --tensor-parallel" || { bad "bench output"; cat bench.txt; }
else
  bad "bench --tensor-parallel: exit $rc"; cat err.txt
fi
exit $fail
