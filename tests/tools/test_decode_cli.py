#!/usr/bin/python3
"""`ffn decode` and `ffn decode-grad` against PyTorch (run by ctest).

A random nn.Transformer (2 + 2 layers, d_model 24, 4 heads, gelu, post-LN,
ragged source and target lengths) saved as one safetensors file: `ffn encode
--prefix encoder.` gives the memory, `ffn decode --prefix decoder.` the
output, which must equal the model's at every valid position; `--no-causal`
equals the model without a target mask; `ffn decode-grad` gives the
gradients of the target, of the memory and of every decoder parameter under
the file's names. Bad input gets one line, exit 2 and no output file.

    /usr/bin/python3 tests/tools/test_decode_cli.py FFN_BINARY

Exits 77 (ctest: skipped) when this Python lacks torch or numpy.
Tolerances: outputs 1e-5 of the largest value (the project's float32 bound);
gradients 1e-4 (they sum over every target position as well, tests/README.md).
"""
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import torch_roundtrip as tr  # noqa: E402

FFN = sys.argv[1]
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def ffn(*args):
    return subprocess.run([FFN, *args], capture_output=True, text=True)


def rel(a, b, mask):
    a, b = a * mask, b * mask
    return float((a - b).abs().max() / b.abs().max())


def main():
    torch.manual_seed(5)
    d, B, S, T = 24, 2, 7, 5
    model = torch.nn.Transformer(d, 4, 2, 2, 40, dropout=0.0, activation="gelu", batch_first=True)
    model.eval()
    src, tgt = torch.randn(B, S, d), torch.randn(B, T, d)
    slen, tlen = [7, 4], [5, 3]
    spad = torch.arange(S)[None, :] >= torch.tensor(slen)[:, None]
    tpad = torch.arange(T)[None, :] >= torch.tensor(tlen)[:, None]
    tmask, smask = (~tpad)[:, :, None].float(), (~spad)[:, :, None].float()
    causal = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
    with tempfile.TemporaryDirectory() as tmp:
        p = lambda n: os.path.join(tmp, n)  # noqa: E731
        tr.save(model.state_dict(), p("w.safetensors"), heads=4, activation="gelu", norm="post", eps=1e-5)
        tr.save(model.state_dict(), p("bare.safetensors"))
        np.save(p("src.npy"), src.numpy())
        np.save(p("tgt.npy"), tgt.numpy())
        np.save(p("sl.npy"), np.array(slen, dtype=np.int64))
        np.save(p("tl.npy"), np.array(tlen, dtype=np.int64))
        r = ffn("encode", "--weights", p("w.safetensors"), "--prefix", "encoder.", "--input", p("src.npy"),
                "--lengths", p("sl.npy"), "--output", p("mem.npy"))
        check(r.returncode == 0, f"ffn encode --prefix encoder. ({r.stderr.strip()})")
        mem = torch.from_numpy(np.load(p("mem.npy")))
        with torch.no_grad():
            want_mem = model.encoder(src, src_key_padding_mask=spad)
        check(rel(mem, want_mem, smask) <= 1e-5, f"memory: rel {rel(mem, want_mem, smask):.2e}")

        dec = ["--weights", p("w.safetensors"), "--prefix", "decoder.", "--input", p("tgt.npy"), "--lengths", p("tl.npy"),
               "--memory", p("mem.npy"), "--memory-lengths", p("sl.npy")]
        for no_causal in (False, True):
            r = ffn("decode", *dec, *(["--no-causal"] if no_causal else []), "--output", p("y.npy"))
            check(r.returncode == 0 and r.stderr == "", f"ffn decode{' --no-causal' if no_causal else ''} ({r.stderr.strip()})")
            y = torch.from_numpy(np.load(p("y.npy")))
            with torch.no_grad():
                want = model.decoder(tgt, mem, tgt_mask=None if no_causal else causal, tgt_key_padding_mask=tpad,
                                     memory_key_padding_mask=spad)
                whole = model(src, tgt, tgt_mask=None if no_causal else causal, src_key_padding_mask=spad,
                              tgt_key_padding_mask=tpad, memory_key_padding_mask=spad)
            e, e2 = rel(y, want, tmask), rel(y, whole, tmask)
            check(e <= 1e-5 and e2 <= 1e-5, f"decode matches nn.Transformer's decoder: rel {e:.2e}, whole model {e2:.2e}")
            check(bool((y * (1 - tmask) == 0).all()), "padding positions are zero")

        # decode-grad: L = sum(y * dy) over valid positions.
        dy = torch.randn(B, T, d) * tmask
        np.save(p("dy.npy"), dy.numpy())
        r = ffn("decode-grad", *dec, "--grad-output", p("dy.npy"), "--output-dir", p("g"))
        check(r.returncode == 0, f"ffn decode-grad ({r.stderr.strip()})")
        x = tgt.clone().requires_grad_()
        m = mem.clone().requires_grad_()
        model.zero_grad()
        (model.decoder(x, m, tgt_mask=causal, tgt_key_padding_mask=tpad, memory_key_padding_mask=spad) * dy).sum().backward()
        gx = torch.from_numpy(np.load(p("g/grad_input.npy")))
        gm = torch.from_numpy(np.load(p("g/grad_memory.npy")))
        check(rel(gx, x.grad, tmask) <= 1e-4, f"grad_input: rel {rel(gx, x.grad, tmask):.2e}")
        check(rel(gm, m.grad, smask) <= 1e-4, f"grad_memory: rel {rel(gm, m.grad, smask):.2e}")
        grads, _ = tr.read(p("g/grads.safetensors"))
        want_names = {"decoder." + n for n, _ in model.decoder.named_parameters()}
        check(set(grads) == want_names, f"grads.safetensors holds every decoder parameter under its name ({len(grads)})")
        worst = 0.0
        for n, t in model.decoder.named_parameters():
            g = grads.get("decoder." + n)
            if g is not None:
                worst = max(worst, float((g - t.grad).abs().max() / t.grad.abs().max().clamp_min(1e-30)))
        check(worst <= 1e-4, f"every parameter gradient: worst rel {worst:.2e}")

        # Bad input: one line, exit 2, nothing written.
        np.save(p("mem3.npy"), np.zeros((3, S, d), dtype=np.float32))
        r = ffn("decode", *dec[:-4], "--memory", p("mem3.npy"), "--output", p("never.npy"))
        check(r.returncode == 2 and r.stderr.count("\n") == 1 and "mem3.npy: memory has 3 sequences, the input 2" in r.stderr
              and not os.path.exists(p("never.npy")), f"memory of another batch: {r.stderr.strip()}")
        r = ffn("decode", *dec, "--output", p("missing/y.npy"))
        check(r.returncode == 2 and "missing" in r.stderr, f"output in a missing directory: {r.stderr.strip()}")
        r = ffn("decode", "--weights", p("bare.safetensors"), *dec[2:], "--output", p("never.npy"))
        check(r.returncode == 2 and "--heads" in r.stderr, f"a plain state_dict without --heads: {r.stderr.strip()}")
        r = ffn("decode", "--weights", p("bare.safetensors"), "--heads", "4", *dec[2:], "--output", p("never.npy"))
        check(r.returncode == 2 and "add --activation and --norm" in r.stderr,
              f"a plain state_dict without --activation/--norm: {r.stderr.strip()}")
        r = ffn("decode", "--weights", p("w.safetensors"), *dec[2:4][:0], "--prefix", "encoder.", *dec[4:],
                "--output", p("never.npy"))
        check(r.returncode == 2 and "not a decoder's state_dict" in r.stderr, f"the encoder's prefix: {r.stderr.strip()}")
        check(not os.path.exists(p("never.npy")), "no output file after the refusals")
    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
