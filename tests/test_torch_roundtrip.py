#!/usr/bin/python3
"""From PyTorch and back (README), run by ctest: scripts/torch_roundtrip.py
saves an nn.TransformerEncoderLayer, an nn.Sequential and a LLaMA-style MLP;
`ffn run` matches each module's FFN half with no setting assumed (and
`ffn encode` an encoder layer, its head count recorded too); `ffn train
--init` and `ffn quantize` keep the module's tensor names and its other
tensors byte for byte, and their output loads back into the module, which
then computes what `ffn run` computes on that file. A torch.save file or a
.npy given as weights, and a safetensors file given as input, are named as
such (exit 2).

    /usr/bin/python3 tests/test_torch_roundtrip.py FFN_BINARY

Exits 77 (ctest: skipped) when this Python lacks torch or numpy.
Tolerance: 1e-5 of the largest output, the project's float32-vs-PyTorch bound
(tests/README.md); d_ff is 64, so the two summation orders differ by far less.
"""
import copy
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIPPED: {sys.executable} cannot import {e.name} (Debian: python3-torch, python3-numpy)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import torch_roundtrip as tr  # noqa: E402

TOL = 1e-5
FFN = sys.argv[1]
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def ffn(*args):
    return subprocess.run([FFN, *args], capture_output=True, text=True)


def ffn_half(m, x):
    """What ffn computes for module m: its FFN sublayer with residual and norm."""
    with torch.no_grad():
        if isinstance(m, torch.nn.TransformerEncoderLayer):
            return x + m._ff_block(m.norm2(x)) if m.norm_first else m.norm2(x + m._ff_block(x))
        return m(x)


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def main():
    with tempfile.TemporaryDirectory(prefix="ffn-roundtrip-") as tmp:
        return run(tmp)


def run(tmp):
    torch.manual_seed(1)
    x = torch.randn(5, 32)
    np.save(os.path.join(tmp, "x.npy"), x.numpy())
    np.save(os.path.join(tmp, "t.npy"), torch.randn(5, 32).numpy())
    for name, m in tr._demo_modules().items():
        m.eval()
        w = os.path.join(tmp, name + ".safetensors")
        tr.save(m, w)
        y_path = os.path.join(tmp, name + "_y.npy")
        r = ffn("run", "--weights", w, "--input", os.path.join(tmp, "x.npy"), "--output", y_path)
        check(r.returncode == 0 and r.stderr == "", f"{name}: ffn run, nothing assumed ({r.stderr.strip()})")
        e = rel(torch.from_numpy(np.load(y_path)), ffn_half(m, x))
        check(e <= TOL, f"{name}: ffn run matches the module: rel {e:.2e}")

        src, _ = tr.read(w)
        for cmd, out in (("train", "trained"), ("quantize", "bf16")):
            o = os.path.join(tmp, f"{name}_{out}.safetensors")
            if cmd == "train":
                r = ffn("train", "--init", w, "--data", os.path.join(tmp, "x.npy"), "--targets", os.path.join(tmp, "t.npy"),
                        "--epochs", "1", "--val-fraction", "0", "--lr", "1e-2", "--output", o)
            else:
                r = ffn("quantize", "--weights", w, "--dtype", "bf16", "--output", o)
            check(r.returncode == 0, f"{name}: ffn {cmd} ({r.stderr.strip()})")
            got, _ = tr.read(o)
            check(set(got) == set(src), f"{name}: ffn {cmd} keeps the tensor names {sorted(set(got) ^ set(src))}")
            others = [k for k in src if k.split(".")[0] not in ("linear1", "linear2", "norm2", "mlp", "0", "2")]
            same = all(k in got and torch.equal(got[k], src[k]) for k in others)
            check(same, f"{name}: ffn {cmd} copies the other {len(others)} tensors unchanged")
            back = copy.deepcopy(m)
            loaded = tr.load_into(back, o)
            check(len(loaded) > 0, f"{name}: load_into loads {len(loaded)} tensors of {o}")
            y2 = os.path.join(tmp, f"{name}_{out}_y.npy")
            r = ffn("run", "--weights", o, "--input", os.path.join(tmp, "x.npy"), "--output", y2)
            e = rel(torch.from_numpy(np.load(y2)), ffn_half(back, x)) if r.returncode == 0 else float("inf")
            check(e <= TOL, f"{name}: after ffn {cmd}, the module loaded back matches ffn run: rel {e:.2e}")

    # An encoder layer through `ffn encode` (issue 31): save records the head
    # count with the activation and the norm, so nothing is given or guessed;
    # the same layer as a plain state_dict is refused, naming every flag to add.
    torch.manual_seed(2)
    enc = torch.nn.TransformerEncoderLayer(32, 4, 48, dropout=0.0, activation="gelu", norm_first=True, batch_first=True)
    enc.eval()
    xe = torch.randn(2, 6, 32)
    np.save(os.path.join(tmp, "xe.npy"), xe.numpy())
    we, bare = os.path.join(tmp, "enc.safetensors"), os.path.join(tmp, "enc_bare.safetensors")
    tr.save(enc, we)
    tr.save(enc.state_dict(), bare)
    _, meta = tr.read(we)
    check(meta.get("ffn.heads") == "4", f"save records the head count: {meta.get('ffn.heads')}")
    ye = os.path.join(tmp, "ye.npy")
    r = ffn("encode", "--weights", we, "--input", os.path.join(tmp, "xe.npy"), "--output", ye)
    check(r.returncode == 0 and r.stderr == "", f"ffn encode on a saved encoder layer, nothing given ({r.stderr.strip()})")
    with torch.no_grad():
        e = rel(torch.from_numpy(np.load(ye)), enc(xe)) if r.returncode == 0 else float("inf")
    check(e <= TOL, f"ffn encode matches the 4-head gelu pre-LN layer: rel {e:.2e}")
    r = ffn("encode", "--weights", bare, "--input", os.path.join(tmp, "xe.npy"), "--output", os.path.join(tmp, "never.npy"))
    check(r.returncode == 2 and r.stderr.count("\n") == 1 and "--heads" in r.stderr,
          f"a plain state_dict without --heads: {r.stderr.strip()}")
    r = ffn("encode", "--weights", bare, "--heads", "4", "--input", os.path.join(tmp, "xe.npy"),
            "--output", os.path.join(tmp, "never.npy"))
    check(r.returncode == 2 and "add --activation and --norm" in r.stderr,
          f"a plain state_dict without --activation/--norm: {r.stderr.strip()}")
    r = ffn("encode", "--weights", bare, "--heads", "3", "--activation", "gelu", "--norm", "pre",
            "--input", os.path.join(tmp, "xe.npy"), "--output", os.path.join(tmp, "never.npy"))
    check(r.returncode == 2 and "heads 3 does not divide d_model 32" in r.stderr, f"--heads 3: {r.stderr.strip()}")

    # Files of the wrong kind.
    m = tr._demo_modules()["sequential"]
    pt, legacy = os.path.join(tmp, "w.pt"), os.path.join(tmp, "legacy.pt")
    torch.save(m.state_dict(), pt)
    torch.save(m.state_dict(), legacy, _use_new_zipfile_serialization=False)
    xin = os.path.join(tmp, "x.npy")
    for path, want in ((pt, "a PyTorch checkpoint (torch.save), not safetensors"),
                       (legacy, "a pickle file (torch.save, legacy format), not safetensors"),
                       (xin, "a NumPy .npy array, not safetensors")):
        r = ffn("run", "--weights", path, "--input", xin, "--output", os.path.join(tmp, "never.npy"))
        check(r.returncode == 2 and r.stderr.count("\n") == 1 and want in r.stderr and "torch_roundtrip" in r.stderr
              if path != xin else r.returncode == 2 and want in r.stderr, f"--weights {os.path.basename(path)}: {r.stderr.strip()}")
    w = os.path.join(tmp, "sequential.safetensors")
    r = ffn("run", "--weights", w, "--input", w, "--output", os.path.join(tmp, "never.npy"))
    check(r.returncode == 2 and "a safetensors file, not .npy" in r.stderr, f"--input a safetensors file: {r.stderr.strip()}")
    check(not os.path.exists(os.path.join(tmp, "never.npy")), "nothing written on bad input")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
