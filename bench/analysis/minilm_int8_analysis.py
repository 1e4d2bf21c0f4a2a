#!/usr/bin/env python3
"""Where the int8 FFN error of all-MiniLM-L6-v2 comes from, and what fixes it.

Simulates the library's int8 FFN (src/backends/cpu/quantize.hpp, the integer reference
src/reference/ffn_int8_reference.cpp) inside Hugging Face's BertModel: each
layer's FFN sublayer (BertLayer.feed_forward_chunk = intermediate + output)
is replaced by a function that quantizes exactly as the C++ does:

    weights      per output channel (row of W1 [d_ff, d], of W2 [d, d_ff]):
                 s = max|w| / 127 (1 for a zero row), q = clamp(round(w / s), ±127),
                 float32 arithmetic, round half to even
    activations  per token row (x before W1: the whole row of d; h before W2:
                 each 256-unit chunk of d_ff): lo = min(0, min v),
                 hi = max(0, max v), s = hi/255 − lo/255, inv = 1/s,
                 zp = clamp(round(−lo·inv), 0, 255),
                 u = clamp(round(v·inv) + zp, 0, 255), a = u − zp ∈ [−255, 255]
    products     acc = Σ a·q exact (float64 sums of integers), then
                 z = fma(float(acc), s_a·s_w, prev): prev = b1 for W1; for W2
                 the running sum over the chunks in order within each of the
                 fused path's two groups of chunks (0-2, 3-5), the groups
                 added, then b2 (src/ops/fused_forward.cpp)
    GELU         the library's float32 approximation of erf's GELU (A&S 7.1.26 and
                 its exp polynomial, op for op) in the quantized paths; the fp32
                 paths keep torch's erf GELU, as the reference does

Everything else (embeddings, attention, LayerNorms, pooling) is the model's
float32. Each sentence runs alone (no padding), one thread.

It then splits the error (weights only, activations only, x only, h only,
one layer at a time) and evaluates fixes calibrated on 200 seeded synthetic
sentences that are not the 72 test sentences: LLM.int8()-style fp32 outlier
channels, SmoothQuant, per-token fp32 fallback, 16-bit activations, W2 scales
per 256-column chunk, fp32 layers and combinations. The metric: cosine between each test sentence's embedding (mean
pooling, L2 normalization) with the variant and with float32, worst and mean
over the 72 sentences of tests/data/minilm_golden.safetensors.

Run (about 5 minutes on one core):
    .venv/bin/python bench/analysis/minilm_int8_analysis.py [--ffn-bin build/bin/ffn] [--out FILE.md]
--ffn-bin: an already built ffn binary (nothing is built): each layer's FFN is
run through `ffn run --dtype int8` on real inputs and compared bit for bit with
the simulation, and `ffn embed --dtype int8` / fp32 on the 72 sentences with
the simulated cosines; the results go into the report.
"""
import argparse
import datetime
import json
import os
import platform
import random
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import BertModel, BertTokenizerFast  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_DIR = os.environ.get("FFN_MODEL_DIR") or os.path.expanduser("~/.cache/ffn/all-MiniLM-L6-v2")
GOLDEN = os.path.join(ROOT, "tests", "data", "minilm_golden.safetensors")
DEFAULT_OUT = os.path.join(ROOT, "bench", "results", "2026-11-23-minilm-int8.md")
CHUNK = 256  # kQuantChunk: hidden units per activation scale
GROUPS = 2  # kMaxGroups in src/ops/fused_forward.cpp: the fixed split of d_ff
TARGET = 0.999

torch.set_num_threads(1)
torch.manual_seed(0)


# ---- the quantizers (quantize.hpp) ------------------------------------------------

def quant_weight(w, group=None):
    """Symmetric int8 per output channel (row), or per row and group of `group`
    columns: (q as float64, scale float32 [rows] or [rows, groups])."""
    if group:
        parts = [quant_weight(w[:, c0:c0 + group]) for c0 in range(0, w.shape[1], group)]
        return torch.cat([q for q, _ in parts], dim=1), torch.stack([s for _, s in parts], dim=1)
    mx = w.abs().amax(dim=1)
    s = torch.where(mx > 0, mx / 127.0, torch.ones_like(mx))
    q = torch.clamp(torch.round(w / s[:, None]), -127.0, 127.0)
    return q.double(), s


def quant_act(v, mode):
    """Per row quantization of v [T, n] float32: (a float64 integers, s float32 [T])."""
    if mode == "asym8":  # the library's: u8 levels with a zero point, a = u − zp
        lo = torch.clamp(v.amin(dim=1), max=0.0)
        hi = torch.clamp(v.amax(dim=1), min=0.0)
        s = hi / 255.0 - lo / 255.0
        inv = 1.0 / s
        ok = (s > 0) & torch.isfinite(inv)
        s = torch.where(ok, s, torch.ones_like(s))
        inv = torch.where(ok, inv, torch.ones_like(inv))
        zp = torch.clamp(torch.round(-lo * inv), 0.0, 255.0)
        u = torch.clamp(torch.round(v * inv[:, None]) + zp[:, None], 0.0, 255.0)
        a = torch.where(ok[:, None], u - zp[:, None], torch.zeros_like(u))
        return a.double(), s
    levels = {"sym8": 127.0, "sym9": 255.0, "sym16": 32767.0}[mode]
    mx = v.abs().amax(dim=1)
    s = mx / levels
    ok = s > 0
    s = torch.where(ok, s, torch.ones_like(s))
    inv = 1.0 / s
    a = torch.clamp(torch.round(v * inv[:, None]), -levels, levels)
    a = torch.where(ok[:, None], a, torch.zeros_like(a))
    return a.double(), s


def product(v, vmode, w, wq, prev):
    """z = fma(float(Σ a·q), s_a·s_w, prev) for v [T, k] and w [n, k] (fp32 where a mode is None)."""
    if vmode:
        a, sa = quant_act(v, vmode)
    else:
        a, sa = v.double(), torch.ones(v.shape[0])
    if wq:
        q, sw = wq
    else:
        q, sw = w.double(), torch.ones(w.shape[0])
    acc = (a @ q.T).float()
    scale = sa[:, None] * sw[None, :]  # float32 product, as s_a · s_w in C++
    return (acc.double() * scale.double() + prev.double()).float()


# ---- the C++ GELU (src/backends/cpu/activation_simd.hpp, no contraction), float32 op by op

def _f(v):
    return torch.tensor(v, dtype=torch.float32)


def exp_approx(x):
    xc = torch.clamp(x, min=-87.33654, max=88.72283)
    t = xc * _f(1.44269504088896341)
    n = (t + _f(12582912.0)) - _f(12582912.0)
    r = (xc - n * _f(0.693145751953125)) - n * _f(1.428606765330187045e-06)
    p = _f(1.0 / 720.0)
    for c in (1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
        p = p * r + _f(c)
    e = n.to(torch.int32) + 126
    scale = (torch.clamp(e, min=0) << 23).view(torch.float32)
    y = p * scale * _f(2.0)
    y = torch.where(x > 88.72283, torch.full_like(y, float("inf")), y)
    return torch.where(x < -87.33654, torch.zeros_like(y), y)


def gelu_cpp(z):
    """z·Φ(z), Φ from Abramowitz & Stegun 7.1.26, exactly the library's float32 operations."""
    x = z * _f(0.70710678118654752)
    ax = x.abs()
    t = _f(1.0) / (_f(1.0) + _f(0.3275911) * ax)
    poly = _f(1.061405429)
    poly = poly * t - _f(1.453152027)
    poly = poly * t + _f(1.421413741)
    poly = poly * t - _f(0.284496736)
    poly = poly * t + _f(0.254829592)
    erfc_ax = poly * t * exp_approx(-ax * ax)
    phi = torch.where(x < 0, _f(0.5) * erfc_ax, _f(1.0) - _f(0.5) * erfc_ax)
    return z * phi


# ---- one FFN sublayer under a variant -------------------------------------------

class LayerCfg:
    """How one layer's FFN runs. None for a field = float32 there.

    xmode/hmode: activation quantizer of W1's / W2's input ("asym8" is the library's);
    w1q/w2q: int8 weights; keep_x/keep_h: channels of x / h left in fp32 (with their
    weight columns); smooth_x/smooth_h: SmoothQuant per-channel divisors;
    tau: tokens with max|x|/rms(x) > tau run the whole FFN in fp32; tau_h: tokens
    with max|h|/rms(h) > tau_h run the W2 product in fp32; cls_fp32: token 0 in fp32;
    w2_group: W2's scales per row and group of that many columns (CHUNK: one per
    row and hidden chunk, which the per-chunk dequantization can apply for free);
    ends_fp32: the first and last token ([CLS], [SEP]) in fp32; short_fp32: a
    sequence of at most that many tokens runs its FFNs in fp32.
    """

    def __init__(self, xmode="asym8", hmode="asym8", w1q=True, w2q=True, keep_x=None, keep_h=None,
                 smooth_x=None, smooth_h=None, tau=None, tau_h=None, cls_fp32=False, w2_group=None,
                 ends_fp32=False, short_fp32=0):
        self.xmode, self.hmode, self.w1q, self.w2q = xmode, hmode, w1q, w2q
        self.keep_x, self.keep_h, self.smooth_x, self.smooth_h = keep_x, keep_h, smooth_x, smooth_h
        self.tau, self.tau_h, self.cls_fp32 = tau, tau_h, cls_fp32
        self.w2_group = w2_group
        self.ends_fp32, self.short_fp32 = ends_fp32, short_fp32


class Ffn:
    """Weights of one layer's FFN, their int8 forms cached per variant key."""

    def __init__(self, layer):
        self.w1 = layer.intermediate.dense.weight.detach().float().clone()
        self.b1 = layer.intermediate.dense.bias.detach().float().clone()
        self.w2 = layer.output.dense.weight.detach().float().clone()
        self.b2 = layer.output.dense.bias.detach().float().clone()
        self.ln = layer.output.LayerNorm
        self.cache = {}

    def weights(self, which, keep, smooth, group=None):
        key = (which, None if keep is None else tuple(keep), None if smooth is None else smooth.numpy().tobytes(),
               group)
        if key not in self.cache:
            w = (self.w1 if which == 1 else self.w2).clone()
            if smooth is not None:
                w = w * smooth[None, :]
            if keep is not None and len(keep):
                w[:, keep] = 0.0
            self.cache[key] = (w, quant_weight(w, group))
        return self.cache[key]

    def first(self, x, c):
        w, wq = self.weights(1, c.keep_x, c.smooth_x)
        v = x if c.smooth_x is None else x / c.smooth_x[None, :]
        if c.keep_x is not None and len(c.keep_x):
            v = v.clone()
            v[:, c.keep_x] = 0.0
        z = product(v, c.xmode, w, wq if c.w1q else None, self.b1)
        if c.keep_x is not None and len(c.keep_x):
            z = (z.double() + x[:, c.keep_x].double() @ self.w1[:, c.keep_x].T.double()).float()
        return z

    def second(self, h, c):
        w, wq = self.weights(2, c.keep_h, c.smooth_h, c.w2_group)
        v = h if c.smooth_h is None else h / c.smooth_h[None, :]
        if c.keep_h is not None and len(c.keep_h):
            v = v.clone()
            v[:, c.keep_h] = 0.0
        zero = torch.zeros(h.shape[0], self.w2.shape[0])
        if c.hmode:
            # The fused path's order: d_ff split in GROUPS groups of whole chunks, each
            # group's chunks summed in order from 0, then the groups added, then b2.
            q, sw = wq
            chunks = (h.shape[1] + CHUNK - 1) // CHUNK
            o = None
            for g in range(GROUPS):
                part = zero
                for ci in range(chunks * g // GROUPS, chunks * (g + 1) // GROUPS):
                    cs = slice(ci * CHUNK, (ci + 1) * CHUNK)
                    assert sw.dim() == 1 or c.w2_group == CHUNK, "grouped W2 scales with quantized h: one per chunk"
                    swc = sw[:, ci] if sw.dim() == 2 else sw
                    part = product(v[:, cs], c.hmode, w[:, cs], (q[:, cs], swc) if c.w2q else None, part)
                o = part if o is None else o + part
        else:
            if c.w2q and wq[1].dim() == 2:  # grouped scales: dequantized weights, fp32 h
                q, sw = wq
                o = product(v, None, q * sw.double().repeat_interleave(c.w2_group, dim=1)[:, :q.shape[1]], None, zero)
            else:
                o = product(v, None, w, wq if c.w2q else None, zero)
        if c.keep_h is not None and len(c.keep_h):
            o = (o.double() + h[:, c.keep_h].double() @ self.w2[:, c.keep_h].T.double()).float()
        return o + self.b2

    def fp32(self, x):
        h = F.gelu(x @ self.w1.T + self.b1)
        return h, h @ self.w2.T + self.b2

    def forward(self, x, c, stats):
        """x [T, d] → the FFN output before the residual and LayerNorm."""
        if c is None:
            return self.fp32(x)[1]
        fb = torch.zeros(x.shape[0], dtype=torch.bool)
        if c.tau is not None:
            ratio = x.abs().amax(1) / x.pow(2).mean(1).sqrt()
            fb |= ratio > c.tau
        if c.cls_fp32 or c.ends_fp32:
            fb[0] = True
        if c.ends_fp32:
            fb[-1] = True
        if x.shape[0] <= c.short_fp32:
            fb[:] = True
        h = gelu_cpp(self.first(x, c))
        y = self.second(h, c)
        if c.tau_h is not None:
            ratio_h = h.abs().amax(1) / h.pow(2).mean(1).sqrt()
            fbh = (ratio_h > c.tau_h) & ~fb
            if fbh.any():
                y[fbh] = h[fbh] @ self.w2.T + self.b2
            stats["h_fallback"] += int(fbh.sum())
        if fb.any():
            y[fb] = self.fp32(x[fb])[1]
        stats["fallback"] += int(fb.sum())
        stats["tokens"] += x.shape[0]
        return y


class Sim:
    def __init__(self, model):
        self.model = model
        self.ffn = [Ffn(layer) for layer in model.encoder.layer]
        self.cfg = [None] * len(self.ffn)
        self.stats = None
        self.capture = None  # list per layer of (x, h) when capturing
        for l, layer in enumerate(model.encoder.layer):
            layer.feed_forward_chunk = self._chunk(l)

    def _chunk(self, l):
        def run(attention_output):
            b, t, d = attention_output.shape
            assert b == 1
            x = attention_output[0]
            if self.capture is not None:
                h, _ = self.ffn[l].fp32(x)
                self.capture[l].append((x.clone(), h.clone()))
            y = self.ffn[l].forward(x, self.cfg[l], self.stats)
            return self.ffn[l].ln(y + x)[None]
        return run

    @torch.no_grad()
    def embed(self, ids_list, cfg=None):
        self.cfg = list(cfg) if cfg is not None else [None] * len(self.ffn)
        self.stats = {"fallback": 0, "h_fallback": 0, "tokens": 0}
        out = []
        for ids in ids_list:
            ids_t = torch.tensor(ids, dtype=torch.long)[None]
            hs = self.model(input_ids=ids_t, attention_mask=torch.ones_like(ids_t),
                            token_type_ids=torch.zeros_like(ids_t)).last_hidden_state[0]
            e = hs.mean(0)
            out.append(e / torch.clamp(e.norm(), min=1e-12))
        return torch.stack(out).double()


def cosines(a, b):
    return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))


# ---- calibration sentences (not the test ones) ----------------------------------

def calibration_sentences(n=200, seed=20261123):
    rng = random.Random(seed)
    subj = ["The old man", "A young girl", "My neighbor", "The committee", "Our team", "A small dog", "The teacher",
            "Scientists", "The company", "Two children", "The pilot", "A farmer", "The mayor", "Her brother",
            "The orchestra", "Every student", "The nurse", "A tourist", "The engineers", "My grandmother"]
    verb = ["walked to", "talked about", "bought", "repaired", "painted", "visited", "studied", "cooked", "found",
            "lost", "described", "ignored", "photographed", "cleaned", "designed", "sold", "borrowed", "watched"]
    obj = ["the red car", "a new house", "the river bank", "an old book", "the city museum", "some fresh bread",
           "the broken window", "a wooden chair", "the mountain trail", "the quarterly report", "a blue umbrella",
           "the train station", "a strange noise", "the garden fence", "an expensive watch", "the final exam"]
    tail = ["yesterday", "last week", "in the morning", "before dinner", "after the storm", "on Sunday",
            "with great care", "for the first time", "without a word", "near the lake", "", "", ""]
    place = ["pharmacy", "bus stop", "library", "hotel", "bakery", "hospital", "post office", "beach"]
    task = ["renew my passport", "update the app", "cancel my order", "fix a flat tire", "learn Spanish",
            "bake sourdough bread", "change the oil", "open a bank account"]
    short = ["yes", "no", "ok", "thanks", "hello world", "?", "!", "...", "—", "hi", "Good morning",
             "see you", "why?", "wow!", "maybe", "coffee", "Berlin", "42", ":)", "Done."]
    words = [w for s in subj + verb + obj for w in s.split()]

    def statement():
        s = f"{rng.choice(subj)} {rng.choice(verb)} {rng.choice(obj)} {rng.choice(tail)}".strip() + "."
        return s.upper() if rng.random() < 0.05 else s

    out = []
    while len(out) < n:
        r = rng.random()
        if r < 0.50:
            s = statement()
        elif r < 0.65:
            s = rng.choice([f"Where is the nearest {rng.choice(place)}?", f"How do I {rng.choice(task)}?",
                            f"Can you tell me how to {rng.choice(task)}?", f"Is the {rng.choice(place)} open today?"])
        elif r < 0.75:
            s = rng.choice(short)
        elif r < 0.85:
            s = rng.choice([f"Order {rng.randint(1, 9999)} costs ${rng.uniform(1, 500):.2f} (incl. tax).",
                            f"Meet me at {rng.randint(1, 12)}:{rng.randint(0, 59):02d} on {rng.randint(1, 28)}/{rng.randint(1, 12)}!",
                            f"See https://example.net/{rng.choice(words).lower()}?id={rng.randint(1, 99)} for details.",
                            f"{rng.randint(2, 99)}% of {rng.randint(100, 999)} is about {rng.randint(1, 99)}...",
                            " ".join(rng.choice(words) for _ in range(rng.randint(3, 9)))])
        else:
            s = " ".join(statement() for _ in range(rng.randint(4, 12)))
        out.append(s)
    return out


# ---- the C++ check (optional: an existing ffn binary; nothing is built) ------------

def check_cpp(ffn_bin, sim, ids, sentences, ref, e8, workdir):
    """Runs `ffn run --dtype int8` on each layer's fp32 FFN inputs of a few test
    sentences (bit-exact comparison with Ffn.forward) and `ffn embed --dtype int8`
    on the 72 sentences (embedding cosines). Returns lines for the report."""
    import subprocess
    import tempfile
    from safetensors.numpy import save_file
    out = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        pick = [48, 42, 59, 17, 0]
        sim.capture = [[] for _ in sim.ffn]
        sim.embed([ids[i] for i in pick])
        cap, sim.capture = sim.capture, None
        meta = {"format": "pt", "ffn.activation": "gelu", "ffn.norm": "none", "ffn.norm_type": "layernorm",
                "ffn.eps": "9.99999975e-06"}
        exact, total, worst = 0, 0, 0.0
        for l, ff in enumerate(sim.ffn):
            wpath, xpath, ypath = (os.path.join(tmp, n) for n in ("w.safetensors", "x.npy", "y.npy"))
            save_file({"linear1.weight": ff.w1.numpy(), "linear1.bias": ff.b1.numpy(),
                       "linear2.weight": ff.w2.numpy(), "linear2.bias": ff.b2.numpy()}, wpath, metadata=meta)
            x = torch.cat([x for x, _ in cap[l]])
            np.save(xpath, x.numpy())
            subprocess.run([ffn_bin, "run", "--weights", wpath, "--input", xpath, "--output", ypath, "--dtype",
                            "int8", "--threads", "1"], check=True)
            yc = torch.from_numpy(np.load(ypath))
            ys = ff.forward(x, LayerCfg(), {"fallback": 0, "h_fallback": 0, "tokens": 0})
            exact += int((yc == ys).sum())
            total += yc.numel()
            worst = max(worst, (yc - ys).abs().max().item())
        out.append(f"`ffn run --dtype int8` on the fp32 FFN inputs of sentences {pick} ({x.shape[0]} tokens) in "
                   f"each of the 6 layers: {exact}/{total} outputs bit-identical to the simulation "
                   f"(max |difference| {worst:.1e})")
        # embeddings: texts without a newline through --input-file, the others as arguments
        lines = [i for i, t in enumerate(sentences) if "\n" not in t]
        path = os.path.join(tmp, "lines.txt")
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write("".join(sentences[i] + "\n" for i in lines))
        E = {}
        for dt in ("fp32", "int8"):
            e = np.zeros((len(sentences), ref.shape[1]), np.float32)
            o = os.path.join(tmp, "e.npy")
            subprocess.run([ffn_bin, "embed", "--threads", "1", "--dtype", dt, "--input-file", path, "--output", o],
                           check=True)
            e[lines] = np.load(o)
            for i in sorted(set(range(len(sentences))) - set(lines)):
                subprocess.run([ffn_bin, "embed", "--threads", "1", "--dtype", dt, "--output", o, sentences[i]],
                               check=True)
                e[i] = np.load(o)[0]
            E[dt] = torch.from_numpy(e).double()
    c_cpp = cosines(E["int8"], E["fp32"])
    agree = cosines(E["int8"], e8)
    c_sim = cosines(e8, ref)
    same = int((1 - agree < 1e-9).sum())
    out.append(f"`ffn embed --dtype int8` vs `ffn embed` (fp32): worst cosine {c_cpp.min().item():.6f} "
               f"(sentence {int(c_cpp.argmin())}), mean {c_cpp.mean().item():.6f}; the simulation: worst "
               f"{c_sim.min().item():.6f} (sentence {int(c_sim.argmin())}), mean {c_sim.mean().item():.6f}")
    out.append(f"C++ int8 vs simulated int8 embeddings: {same} of {len(sentences)} sentences agree to 1 − cos < 1e-9; "
               f"the others differ by up to 1 − cos = {(1 - agree).max().item():.1e} (fp32 differences of ~1e-7 "
               f"in attention/LayerNorm flip a rounding somewhere, and the flip propagates)")
    return out


# ---- main ----------------------------------------------------------------------

def cpu_model():
    name, n = "unknown", 0
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    n += 1
    except OSError:
        return platform.processor() or "unknown"
    return f"{name} ({n} logical CPUs)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ffn-bin", help="an existing ffn binary (e.g. build/bin/ffn) to check the simulation against")
    ap.add_argument("--out", default=DEFAULT_OUT, help="Markdown report (default %(default)s)")
    ap.add_argument("--no-held-out", action="store_true", help="skip the second synthetic set (faster)")
    args = ap.parse_args()
    t_start = time.time()

    f = safe_open(GOLDEN, "pt")
    sentences = json.loads(f.metadata()["sentences"])
    ids = [f.get_tensor("ids.%03d" % i).long().tolist() for i in range(len(sentences))]
    golden = f.get_tensor("embeddings").double()
    model = BertModel.from_pretrained(MODEL_DIR).eval().float()
    tok = BertTokenizerFast.from_pretrained(MODEL_DIR)
    sim = Sim(model)
    L, d, dff = len(sim.ffn), sim.ffn[0].w1.shape[1], sim.ffn[0].w1.shape[0]
    tokenize = lambda texts: [tok(t.strip(), truncation=True, max_length=256)["input_ids"] for t in texts]  # noqa: E731

    ref = sim.embed(ids)
    print(f"fp32 vs golden (sentence-transformers): worst cosine {cosines(ref, golden).min().item():.9f}")

    # calibration set and a second, held-out synthetic set (other seed); neither holds a test sentence
    test_set = set(sentences)
    calib = [t for t in calibration_sentences(200, seed=20261123) if t not in test_set]
    held = [t for t in calibration_sentences(100, seed=7) if t not in test_set]
    calib_ids, held_ids = tokenize(calib), tokenize(held)
    sim.capture = [[] for _ in range(L)]
    sim.embed(calib_ids)
    cap, sim.capture = sim.capture, None
    X = [torch.cat([x for x, _ in cap[l]]) for l in range(L)]
    H = [torch.cat([h for _, h in cap[l]]) for l in range(L)]
    xmax = [x.abs().amax(0) for x in X]
    hmax = [h.abs().amax(0) for h in H]
    # who the outliers are: per channel above 6, the share of calibration tokens and of [CLS] tokens
    cls = torch.cat([torch.arange(len(x)) == 0 for x, _ in cap[0]])
    outlier_notes = []
    for l in range(L):
        kx = torch.nonzero(xmax[l] > 6.0).flatten().tolist()
        kh = torch.nonzero(hmax[l] > 6.0).flatten().tolist()
        w2 = sim.ffn[l].w2
        ratio = w2.abs().amax(1) / w2.pow(2).mean(1).sqrt()
        heavy = torch.nonzero(ratio > 15).flatten().tolist()
        outlier_notes.append(
            f"layer {l}: x " + ", ".join(
                f"{j} (max {xmax[l][j]:.1f}; above 6 on {(X[l][:, j].abs() > 6).float().mean():.1%} of tokens, "
                f"{(X[l][cls, j].abs() > 6).float().mean():.0%} of [CLS])" for j in kx)
            + "; h " + (", ".join(
                f"{j} (max {hmax[l][j]:.1f}; above 6 on {int((H[l][:, j].abs() > 6).sum())} tokens, "
                f"{int((H[l][cls, j].abs() > 6).sum())} of them [CLS])" for j in kh) or "none")
            + "; W2 rows with max/rms > 15: " + (", ".join(
                f"{i} (max/rms {ratio[i]:.0f}, largest weight {w2[i].abs().max():.2f} in column "
                f"{int(w2[i].abs().argmax())})" for i in heavy) or "none"))
    print("\n".join("  " + n for n in outlier_notes))
    del X, H, cap
    href = None if args.no_held_out else sim.embed(held_ids)
    print(f"calibration: {len(calib)} sentences, {sum(map(len, calib_ids))} tokens; held-out: {len(held)} sentences, "
          f"{sum(map(len, held_ids))} tokens")

    rows = {}  # key -> (group, name, share, worst, mean, argmin, held worst, note)
    order = []

    def run(key, group, name, cfg, share, note=""):
        t0 = time.time()
        e = sim.embed(ids, cfg)
        st = dict(sim.stats)
        c = cosines(e, ref)
        hw = None
        if href is not None:
            hw = cosines(sim.embed(held_ids, cfg), href).min().item()
        if callable(share):
            share = share(st)
        rows[key] = (group, name, share, c.min().item(), c.mean().item(), int(c.argmin()), hw, note)
        order.append(key)
        print(f"  {name:55s} worst {c.min().item():.6f} mean {c.mean().item():.6f} (s{int(c.argmin())})"
              + (f" held-out worst {hw:.6f}" if hw is not None else "") + f" | fp32 {share} {note} "
              f"[{time.time() - t0:.1f}s]", flush=True)
        return e

    every = lambda c: [c] * L  # noqa: E731
    tok_share = lambda st: f"{st['fallback'] / st['tokens']:.1%} of tokens"  # noqa: E731

    print("1. the library's int8 FFN (every layer)")
    e8 = run("base", "baseline", "int8 FFN in every layer (the library's scheme)", every(LayerCfg()), "0")
    cpp_lines = []
    if args.ffn_bin:
        cpp_lines = check_cpp(args.ffn_bin, sim, ids, sentences, ref, e8, os.path.dirname(args.out) or ".")
        for line in cpp_lines:
            print("  " + line)

    print("2. decomposition")
    run("a", "split", "(a) weights int8, activations fp32", every(LayerCfg(xmode=None, hmode=None)), "0")
    run("b", "split", "(b) activations int8 (x and h), weights fp32", every(LayerCfg(w1q=False, w2q=False)), "0")
    run("c", "split", "(c) only W1's input x quantized", every(LayerCfg(hmode=None, w1q=False, w2q=False)), "0")
    run("d", "split", "(d) only W2's input h quantized", every(LayerCfg(xmode=None, w1q=False, w2q=False)), "0")
    run("aw1", "split", "only W1 int8 (x, h, W2 fp32)", every(LayerCfg(xmode=None, hmode=None, w2q=False)), "0")
    run("aw2", "split", "only W2 int8 (x, h, W1 fp32)", every(LayerCfg(xmode=None, hmode=None, w1q=False)), "0")
    run("aw2c", "split", "only W2 int8, one scale per row and 256-column chunk",
        every(LayerCfg(xmode=None, hmode=None, w1q=False, w2_group=CHUNK)), "0")
    run("p1", "split", "W1 product int8 (x, W1), W2 product fp32", every(LayerCfg(hmode=None, w2q=False)), "0")
    run("p2", "split", "W2 product int8 (h, W2), W1 product fp32", every(LayerCfg(xmode=None, w1q=False)), "0")
    for l in range(L):
        cfg = [None] * L
        cfg[l] = LayerCfg()
        run(f"only{l}", "layer", f"int8 in layer {l} only", cfg, "0")
    for l in range(L):
        cfg = every(LayerCfg())
        cfg[l] = None
        run(f"but{l}", "layer", f"int8 everywhere but layer {l}", cfg, f"1/6 (layer {l})")
    cfg = every(LayerCfg())
    cfg[2] = cfg[4] = None
    run("but24", "layer", "int8 everywhere but layers 2 and 4", cfg, "2/6 (layers 2, 4)")

    print("3. fixes (channel sets and scales from the calibration set)")
    keep_x = [torch.nonzero(xmax[l] > 6.0).flatten().tolist() for l in range(L)]
    keep_h = [torch.nonzero(hmax[l] > 6.0).flatten().tolist() for l in range(L)]
    print("  x channels with |x| > 6:", keep_x)
    print("  h channels with |h| > 6:", keep_h)

    def share_of(kx, kh):  # fp32 fraction of the FFN multiply-adds
        return sum(len(a) * dff + len(b) * d for a, b in zip(kx, kh)) / (2 * d * dff * L)

    none = [[] for _ in range(L)]
    cnt = lambda ks: ",".join(str(len(k)) for k in ks)  # noqa: E731
    nx, nh = f"x: {cnt(keep_x)} of {d}", f"h: {cnt(keep_h)} of {dff}"
    run("llm_x", "llm.int8", "LLM.int8(): x channels |x|>6 fp32", [LayerCfg(keep_x=keep_x[l]) for l in range(L)],
        f"{share_of(keep_x, none):.2%}", nx)
    run("llm_h", "llm.int8", "LLM.int8(): h channels |h|>6 fp32", [LayerCfg(keep_h=keep_h[l]) for l in range(L)],
        f"{share_of(none, keep_h):.2%}", nh)
    run("llm_xh", "llm.int8", "LLM.int8(): x and h channels |.|>6 fp32",
        [LayerCfg(keep_x=keep_x[l], keep_h=keep_h[l]) for l in range(L)], f"{share_of(keep_x, keep_h):.2%}",
        f"{nx}; {nh}")
    for thr in (3.0, 2.0):
        kh = [torch.nonzero(hmax[l] > thr).flatten().tolist() for l in range(L)]
        run(f"llm_xh{thr:g}", "llm.int8", f"LLM.int8(): x |x|>6 and h |h|>{thr:g} fp32",
            [LayerCfg(keep_x=keep_x[l], keep_h=kh[l]) for l in range(L)], f"{share_of(keep_x, kh):.2%}",
            f"h: {cnt(kh)}")

    w1colmax = [ffn.w1.abs().amax(0) for ffn in sim.ffn]
    w2colmax = [ffn.w2.abs().amax(0) for ffn in sim.ffn]

    def smooth(amax, wmax, alpha):  # s_j = max|X_j|^α / max|W_j|^(1−α)
        return (amax.clamp(min=1e-5).pow(alpha) / wmax.clamp(min=1e-5).pow(1 - alpha)).float()

    for alpha in (0.5, 0.7, 0.8):
        sx = [smooth(xmax[l], w1colmax[l], alpha) for l in range(L)]
        sh = [smooth(hmax[l], w2colmax[l], alpha) for l in range(L)]
        run(f"sq{alpha}", "smoothquant", f"SmoothQuant α={alpha}, W1's input",
            [LayerCfg(smooth_x=sx[l]) for l in range(L)], "0")
        run(f"sqh{alpha}", "smoothquant", f"SmoothQuant α={alpha}, W1's and W2's inputs",
            [LayerCfg(smooth_x=sx[l], smooth_h=sh[l]) for l in range(L)], "0")

    for tau in (8.0, 12.0):
        run(f"tau{tau:g}", "fallback", f"tokens with max|x|/rms(x) > {tau:g} fp32", every(LayerCfg(tau=tau)),
            tok_share)
    for tau_h in (12.0, 20.0):
        run(f"tauh{tau_h:g}", "fallback", f"tokens with max|h|/rms(h) > {tau_h:g}: W2 product fp32",
            every(LayerCfg(tau_h=tau_h)), lambda st: f"{st['h_fallback'] / st['tokens'] / 2:.1%} of products")
    run("cls", "fallback", "[CLS] (token 0) fp32", every(LayerCfg(cls_fp32=True)), tok_share)
    run("ends", "fallback", "[CLS] and [SEP] (first, last token) fp32", every(LayerCfg(ends_fp32=True)), tok_share)

    run("sym8", "other", "activations per-token symmetric int8 (±127)", every(LayerCfg(xmode="sym8", hmode="sym8")),
        "0")
    run("sym9", "other", "activations per-token symmetric 9-bit (±255)", every(LayerCfg(xmode="sym9", hmode="sym9")),
        "0", "int16 operand")
    run("x16", "other", "x 16-bit (±32767), h 8-bit", every(LayerCfg(xmode="sym16")), "0", "int16 operand")
    run("h16", "other", "h 16-bit, x 8-bit", every(LayerCfg(hmode="sym16")), "0", "int16 operand")
    run("xh16", "other", "x and h 16-bit", every(LayerCfg(xmode="sym16", hmode="sym16")), "0", "int16 operands")
    run("w2fp32", "other", "W2 product fp32 (h and W2), W1 int8", every(LayerCfg(hmode=None, w2q=False)), "50%")
    run("w2c", "other", "W2 scales per row and 256-chunk", every(LayerCfg(w2_group=CHUNK)), "0", "free")

    R = [LayerCfg(keep_x=keep_x[l], w2_group=CHUNK) for l in range(L)]
    RH = [LayerCfg(keep_x=keep_x[l], keep_h=keep_h[l], w2_group=CHUNK) for l in range(L)]
    sx_, sxh_ = share_of(keep_x, none), share_of(keep_x, keep_h)
    run("R", "combined", "W2 chunk scales + x channels |x|>6 fp32", R, f"{sx_:.2%}")
    run("RH", "combined", "W2 chunk scales + x, h channels |.|>6 fp32", RH, f"{sxh_:.2%}")
    run("RH16", "combined", "the same + x 16-bit",
        [LayerCfg(keep_x=keep_x[l], keep_h=keep_h[l], w2_group=CHUNK, xmode="sym16") for l in range(L)],
        f"{sxh_:.2%}", "int16 operand for x")
    run("RHends", "combined", "the same (8-bit x) + [CLS], [SEP] fp32",
        [LayerCfg(keep_x=keep_x[l], keep_h=keep_h[l], w2_group=CHUNK, ends_fp32=True) for l in range(L)],
        lambda st: f"{sxh_:.2%} + {st['fallback'] / st['tokens']:.1%} of tokens")
    run("RHshort", "combined", "W2 chunk scales + x, h channels fp32 + texts ≤ 4 tokens fp32",
        [LayerCfg(keep_x=keep_x[l], keep_h=keep_h[l], w2_group=CHUNK, short_fp32=4) for l in range(L)],
        lambda st: f"{sxh_:.2%} + {st['fallback'] / st['tokens']:.1%} of tokens")

    # ---- report ----
    hdr = "| group | variant | fp32 share of FFN products | worst cos | mean cos | worst sentence |" + \
          (" held-out worst |" if href is not None else "") + " note |"
    lines = [hdr, "|" + "---|" * hdr.count(" |")]
    for k in order:
        g, name, share, worst, mean, am, hw, note = rows[k]
        mark = " **≥ 0.999**" if worst >= TARGET else ""
        hcol = f" {hw:.5f} |" if hw is not None else ""
        esc = lambda t: str(t).replace("|", "\\|")  # noqa: E731
        lines.append(f"| {g} | {esc(name)} | {share} | {worst:.5f}{mark} | {mean:.5f} | {am} |{hcol} {esc(note)} |")
    table = "\n".join(lines)
    print()
    print(table)

    W = lambda k: f"{rows[k][3]:.5f}"  # noqa: E731
    Hh = lambda k: f"{rows[k][6]:.5f}" if rows[k][6] is not None else "n/a"  # noqa: E731
    cmd = "/work/main/.venv/bin/python bench/analysis/minilm_int8_analysis.py" + "".join(
        f" {a}" for a in sys.argv[1:])
    import transformers
    md = f"""# all-MiniLM-L6-v2 with int8 FFNs: where the error comes from, and fixes ({datetime.date.today().isoformat()})

CPU: {cpu_model()}; PyTorch {torch.__version__}, transformers {transformers.__version__}, one thread; {time.time() - t_start:.0f} s. Command:

    {cmd}

The script simulates the library's int8 FFN (src/backends/cpu/quantize.hpp, src/ops/fused_forward.cpp: per-row int8 weights,
per-token asymmetric 8-bit activations with x quantized over all d = {d} channels and h per 256-unit chunk, exact
integer sums, the fused path's dequantization order and its GELU approximation) inside Hugging Face's BertModel;
attention, LayerNorms and pooling stay float32. Metric: cosine of each sentence embedding (mean pooling, L2
normalization) against float32, worst and mean over the 72 sentences of tests/data/minilm_golden.safetensors.
Channel sets and SmoothQuant scales come from {len(calib)} seeded synthetic sentences ({sum(map(len, calib_ids))}
tokens), none of them a test sentence; "held-out worst" is the worst cosine over {len(held)} more synthetic
sentences from another seed (same generator, so a few short items such as "!" recur). A sentence's cosine is
uncertain by a few percent of its 1 − cos: fp32 differences of 1e-7 flip a rounding somewhere and the flip
propagates (the C++ and this simulation, equal bit for bit on equal FFN inputs, differ by up to 7.5% of 1 − cos,
6e-5, on single sentences of the test set), so differences in the fourth decimal between variants are noise.

"""
    if cpp_lines:
        md += "Simulation against the C++ (`--ffn-bin`, an existing binary; nothing built):\n\n" + \
              "".join(f"- {x}\n" for x in cpp_lines) + "\n"
    md += table + "\n\n"
    md += "Outliers on the calibration set (|value| > 6), per layer:\n\n" + "".join(f"- {n}\n" for n in outlier_notes)
    md += f"""
So the model has one massive feature, x[99] ≈ 13-30 on every [CLS] and above 6 nowhere else, and the FFNs keep
writing it: in layers 0-3 one GELU unit fires only on [CLS] (856, 607, 1004, 358) and feeds row 99 of W2, whose
largest weight sits in that unit's column. Other channels exceed 6 on most [SEP] tokens (223 from layer 1 on, 267,
127) or on 2-43% of all tokens (223, 63, 127).

**Which layers and why.** One layer at a time, layers 2 and 4 cost the most (int8 in layer 2 only: {W('only2')},
layer 4 only: {W('only4')}; the others ≥ {min(rows[f'only{l}'][3] for l in (0, 1, 3, 5)):.4f}), but no single fp32
layer fixes it (all but layers 2 and 4: {W('but24')}). The worst sentences are the shortest (48 ".", 42/43 empty,
49 one [UNK]): with 2-3 tokens the mean pooling averages nothing, and those tokens are [CLS]/[SEP], which carry the
outliers. The error has two main sources, and h's activation quantization is not one of them (only h
quantized: {W('d')}): (1) W2's per-row weight scale: row 99 (and a few others) holds one weight 33-39x the row's
rms, so its other 1535 weights get a step of 0.3x their rms, about 9% error against 1% in an ordinary row (only W2
int8: {W('aw2')}; with one scale per row and 256-column chunk: {W('aw2c')}); (2) x's per-token range, set on [CLS]
by x[99] ≈ 28 while the row's rms is ~1.5 (only x quantized: {W('c')}). W1's weights matter less (only W1 int8:
{W('aw1')}). SmoothQuant does not reach the target (best {max(rows[k][3] for k in rows if k.startswith('sq')):.5f}):
it moves x's outlier channels into W1's columns, and on h it scales the already huge W2 columns of the [CLS] units
further up, while W2's problem is in its own weights. Per-token fp32 fallback needs
τ = 8 and then sends {rows['tau8'][2]} to fp32 ({W('tau8')}); 16-bit activations alone leave the W2 weight error
({W('xh16')}); symmetric 8-bit activations are worse than the library's asymmetric ones ({W('sym8')}).

**What reaches ≥ 0.999.** LLM.int8() on both inputs (x and h channels with |.| > 6 in fp32, {rows['llm_xh'][2]} of
the FFN products): {W('llm_xh')}, but {Hh('llm_xh')} on the held-out set. W2 scales per row and 256-column chunk
(zero runtime cost: the dequantization already runs once per chunk) plus x's channels |x| > 6 in fp32: {W('R')} at
{rows['R'][2]} (held-out {Hh('R')}); adding the h channels changes nothing measurable ({W('RH')}, held-out
{Hh('RH')}). That is the fix to implement; its margin (about 3e-4 here, 4e-5 on the held-out set) is of the order
of the rounding noise above. For margin, on top of it (with the h channels): 16-bit x where the int16 operand is
free (AVX2's vpmaddwd; not on VNNI or AMX, which take u8): {W('RH16')} (held-out {Hh('RH16')}); or fp32 for texts
of at most 4 tokens, which costs nothing on longer texts: {W('RHshort')} (held-out {Hh('RHshort')}); or fp32 [CLS]
and [SEP]: {W('RHends')} at {rows['RHends'][2]}. Per-token fallback alone (τ = 8: {rows['tau8'][2]}) and fp32 layers (2 and 4: 1/3 of the
products, {W('but24')}) cost far more.
"""
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(md)
    print(f"\nwrote {args.out} ({time.time() - t_start:.0f} s)")


if __name__ == "__main__":
    main()
