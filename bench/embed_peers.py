#!/usr/bin/env python3
"""all-MiniLM-L6-v2 sentence embeddings, end to end from text, against peer
engines on the same threads, texts and batches.

    /usr/bin/python3 bench/embed_peers.py [--rounds 3] [--threads 2] [--engines ffn-fp32,st,...]
        [--quick] [--json] [--ffn build/bin/ffn] [--model ~/.cache/ffn/all-MiniLM-L6-v2]

Engines: ffn fp32 and int8 (the `ffn` CLI), sentence-transformers (torch),
ONNX Runtime fp32 (torch.onnx.export, then ORT's BERT fusion optimizer) and
int8 (quantize_dynamic of that: QInt8 weights, per channel), OpenVINO fp32 (convert_model
of the export; INFERENCE_PRECISION_HINT f32, so no bf16), CTranslate2 fp32 and
int8 (TransformersConverter; compute_type float32 / int8).

Setup (idempotent; nothing in the repository changes): a virtual environment
~/.cache/ffn/peers-venv (`/usr/bin/python3 -m venv --system-site-packages`,
so it sees Debian's torch 1.13 and numpy 1.24.2) with the PINS below installed
--no-deps (with a numpy==1.24.2 constraint), so pip never replaces Debian's
torch or numpy; a group is installed only when its pinned versions are not
already there. A group that fails to install or import is reported in one line
and its engines are left out. The script re-executes itself in that venv.
Models are prepared once under ~/.cache/ffn/peers/ (delete it to redo).

Texts (no downloads; seeded): words are the vocabulary's plain lowercase words,
one token each. short: 2,000 sentences of 5-30 words (8-33 tokens); passages:
300 passages of 8-20-word sentences, 190-210 tokens each; both sorted by
character length, longest first, written to one file each that every engine
reads. --quick: 100 short, 20 passages, 1 round, 1 repeat, 10 latency calls.

Timed, each in its own process with OMP/MKL/OpenBLAS threads = --threads
(ORT intra-op = --threads, inter-op 1; torch.set_num_threads; OpenVINO
INFERENCE_NUM_THREADS; CT2 intra_threads; TOKENIZERS_PARALLELISM=false):
the whole file end to end (tokenize -> model -> mean pooling over the attention
mask -> L2 normalize), batch --batch (32) in file order, after a warm-up batch
(ffn: `ffn bench --embed`, whose warm-up is one whole pass); texts/s from the
median of --repeats (3) passes. Latency: one 16-token sentence ([CLS] and [SEP]
included), median of --calls (50) calls after 5 warm-up calls. Rounds alternate
the engines; the table gives the median over --rounds (min-max). Accuracy (round
1): each engine's embeddings of both sets against sentence-transformers fp32,
worst and mean cosine. Run it on an idle machine.
"""
import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.expanduser("~/.cache/ffn")
PINS = {  # group -> pinned requirements (installed --no-deps)
    "transformers": ["transformers==4.46.3", "tokenizers==0.20.3", "huggingface-hub==0.26.5", "safetensors==0.4.5",
                     "regex==2024.11.6", "tqdm==4.67.1", "filelock==3.16.1", "fsspec==2024.10.0"],
    "sentence-transformers": ["sentence-transformers==3.4.1", "scikit-learn==1.5.2", "scipy==1.13.1",
                              "joblib==1.4.2", "threadpoolctl==3.5.0", "pillow==11.0.0"],
    "onnxruntime": ["onnxruntime==1.20.1", "onnx==1.17.0", "protobuf==5.28.3", "coloredlogs==15.0.1",
                    "humanfriendly==10.0", "flatbuffers==24.3.25"],
    "openvino": ["openvino==2024.6.0", "openvino-telemetry==2024.5.0"],
    "ctranslate2": ["ctranslate2==4.5.0"],
}
LABELS = {"ffn-fp32": "ffn fp32", "ffn-int8": "ffn int8", "ffn-bf16": "ffn bf16", "st": "sentence-transformers",
          "ort-fp32": "ORT fp32", "ort-int8": "ORT int8", "ov-fp32": "OpenVINO fp32", "ov-auto": "OpenVINO default",
          "ct2-fp32": "CT2 fp32", "ct2-int8": "CT2 int8"}
NEEDS = {"st": ["torch", "transformers", "sentence_transformers"], "ort-fp32": ["torch", "transformers", "onnxruntime"],
         "ort-int8": ["torch", "transformers", "onnxruntime"], "ov-fp32": ["torch", "transformers", "openvino"],
         "ov-auto": ["torch", "transformers", "openvino"],
         "ct2-fp32": ["torch", "transformers", "ctranslate2"], "ct2-int8": ["torch", "transformers", "ctranslate2"]}
FP32_PEERS, INT8_PEERS = ["st", "ort-fp32", "ov-fp32", "ct2-fp32"], ["ort-int8", "ct2-int8"]
# ffn bf16 against the fp32 peers and OpenVINO at its default precision (bf16 where the CPU has AMX or
# AVX512_BF16: the issue counts it as OpenVINO's fp32 figure; the table's label names the precision it chose).
BF16_PEERS = FP32_PEERS + ["ov-auto"]

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--engines", default=",".join(LABELS), help="comma-separated subset of " + ",".join(LABELS))
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--repeats", type=int, default=3, help="timed passes per worker (median)")
p.add_argument("--calls", type=int, default=50, help="latency calls per worker (median)")
p.add_argument("--batch", type=int, default=32)
p.add_argument("--short", type=int, default=2000)
p.add_argument("--passages", type=int, default=300)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--quick", action="store_true", help="100 short, 20 passages, 1 round, 1 repeat, 10 calls")
p.add_argument("--json", action="store_true", help="also print every result as one JSON object")
p.add_argument("--ffn", default=os.path.join(HERE, "..", "build", "bin", "ffn"))
p.add_argument("--model", default=os.environ.get("FFN_MODEL_DIR") or os.path.join(CACHE, "all-MiniLM-L6-v2"))
p.add_argument("--venv", default=os.path.join(CACHE, "peers-venv"))
p.add_argument("--peers-dir", default=os.path.join(CACHE, "peers"), help="prepared models")
# internal: the subprocesses the script runs of itself
p.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
p.add_argument("--worker", help=argparse.SUPPRESS)
p.add_argument("--texts", help=argparse.SUPPRESS)
p.add_argument("--out", help=argparse.SUPPRESS)
p.add_argument("--latency-text", help=argparse.SUPPRESS)
a = p.parse_args()
if a.quick:
    a.short, a.passages, a.rounds, a.repeats, a.calls = 100, 20, 1, 1, 10
ENGINES = [e for e in a.engines.split(",") if e]
if any(e not in LABELS for e in ENGINES):
    sys.exit(f"embed_peers.py: unknown engine in --engines {a.engines}; known: {','.join(LABELS)}")


def log(msg):
    print(f"[embed_peers {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def thread_env():
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(a.threads)
    return env


def max_len():
    with open(os.path.join(a.model, "sentence_bert_config.json")) as f:
        return int(json.load(f)["max_seq_length"])


# ---------------------------------------------------------------- the venv
def ensure_venv():
    """Make the venv and install every group whose pins are missing; report failures, go on."""
    py = os.path.join(a.venv, "bin", "python")
    if not os.path.exists(py):
        log(f"creating {a.venv}")
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", a.venv], check=True)
    check = ("import sys\nfrom importlib.metadata import version\n"
             "def v(n):\n  try: return version(n)\n  except Exception: return None\n"
             "sys.exit(any(v(n) != w for n, w in (r.split('==') for r in sys.argv[1:])))")
    constraints = os.path.join(a.venv, "constraints.txt")
    with open(constraints, "w") as f:
        f.write("numpy==1.24.2\n")
    for group, reqs in PINS.items():
        if subprocess.run([py, "-c", check] + reqs).returncode == 0:
            continue
        log(f"pip install --no-deps {' '.join(reqs)}")
        r = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                            "-c", constraints] + reqs, capture_output=True, text=True)
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["?"])[-1]
            print(f"embed_peers: {group} could not be installed ({tail}); going on without it", file=sys.stderr)
    return py


# ---------------------------------------------------------------- texts
def write_texts(d):
    with open(os.path.join(a.model, "vocab.txt"), encoding="utf-8") as f:
        words = [w.strip() for w in f]
    words = [w for w in words if len(w) >= 2 and w.isascii() and w.isalpha() and w.islower()]

    def sentence(rng, n):  # n words -> n + 1 tokens (the full stop)
        body = [rng.choice(words) for _ in range(n)]
        return " ".join([body[0].capitalize()] + body[1:]) + "."

    rng = random.Random(a.seed)
    short = [sentence(rng, rng.randint(5, 30)) for _ in range(a.short)]
    rng = random.Random(a.seed + 1)
    passages = []
    for _ in range(a.passages):
        target, parts, tokens = rng.randint(190, 210), [], 2
        while tokens < target:
            n = min(rng.randint(8, 20), max(target - tokens - 1, 1))
            parts.append(sentence(rng, n))
            tokens += n + 1
        passages.append(" ".join(parts))
    files = {}
    for name, texts in (("short", short), ("passages", passages)):
        files[name] = os.path.join(d, name + ".txt")
        with open(files[name], "w", encoding="utf-8") as f:
            f.writelines(t + "\n" for t in sorted(texts, key=lambda t: -len(t)))
    return files, sentence(random.Random(a.seed + 2), 13)  # 13 words + "." + [CLS] + [SEP] = 16 tokens


# ---------------------------------------------------------------- prepare (in the venv, once)
def prepare():
    """Import every peer, export/convert what the engines need; print one JSON object."""
    from importlib.metadata import version
    out = {"ok": [], "errors": {}, "versions": {}, "notes": {}}
    for n in ("numpy", "torch", "transformers", "tokenizers", "sentence-transformers", "onnxruntime", "onnx",
              "openvino", "ctranslate2"):
        try:
            out["versions"][n] = version(n)
        except Exception:
            pass
    os.makedirs(a.peers_dir, exist_ok=True)
    onnx_path = os.path.join(a.peers_dir, "model.onnx")
    steps = {}

    def step(name, fn):  # run fn once per run; remember its failure
        if name not in steps:
            try:
                fn()
                steps[name] = None
            except Exception as e:  # noqa: BLE001 - an optional peer must not break the run
                steps[name] = f"{name}: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        if steps[name]:
            raise RuntimeError(steps[name])

    def export_onnx():
        if os.path.exists(onnx_path):
            return
        import torch
        from transformers import AutoModel, AutoTokenizer
        # The model's own class (BERT, MPNet, ...), eager attention where the class takes the argument.
        try:
            body = AutoModel.from_pretrained(a.model, attn_implementation="eager").eval()
        except (TypeError, ValueError):
            body = AutoModel.from_pretrained(a.model).eval()
        enc = AutoTokenizer.from_pretrained(a.model)(["a short one", "and a longer second text"], padding=True,
                                                     return_tensors="pt")
        # The tokenizer's inputs: BERT's three, MPNet's two (no token types).
        names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in enc]

        class Hidden(torch.nn.Module):  # last_hidden_state only: no pooler in the graph
            def __init__(self):
                super().__init__()
                self.body = body

            def forward(self, *inputs):
                return self.body(**dict(zip(names, inputs))).last_hidden_state

        axes = {n: {0: "batch", 1: "seq"} for n in names + ["last_hidden_state"]}
        with torch.no_grad():
            torch.onnx.export(Hidden(), tuple(enc[n] for n in names), onnx_path + ".tmp", input_names=names,
                              output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=14)
        os.replace(onnx_path + ".tmp", onnx_path)

    def ort_fp32():
        path = os.path.join(a.peers_dir, "model_opt.onnx")
        if not os.path.exists(path):
            from onnxruntime.transformers.optimizer import optimize_model
            with open(os.path.join(a.model, "config.json")) as f:
                cfg = json.load(f)
            m = optimize_model(onnx_path, model_type="bert", num_heads=cfg["num_attention_heads"],
                               hidden_size=cfg["hidden_size"])
            with open(path + ".fusions.json", "w") as f:
                json.dump(m.get_fused_operator_statistics(), f)
            m.save_model_to_file(path + ".tmp.onnx")
            os.replace(path + ".tmp.onnx", path)
        with open(path + ".fusions.json") as f:
            out["notes"]["ort_fusions"] = {k: v for k, v in json.load(f).items() if v}

    def ort_int8():
        path = os.path.join(a.peers_dir, "model_opt_int8_per_channel.onnx")
        if not os.path.exists(path):
            import onnx
            from onnxruntime.quantization import QuantType, quantize_dynamic
            # Per-channel: per-tensor weight scales gave cosine worst 0.83 / mean 0.93 against sentence-
            # transformers (AVX2 EPYC, 2026-11-24), per-channel 0.985 / 0.991. DefaultTensorType: the fused
            # contrib ops (Attention, SkipLayerNormalization) defeat ONNX shape inference; they are float.
            quantize_dynamic(os.path.join(a.peers_dir, "model_opt.onnx"), path + ".tmp.onnx", per_channel=True,
                             weight_type=QuantType.QInt8,
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
            os.replace(path + ".tmp.onnx", path)

    def openvino():
        path = os.path.join(a.peers_dir, "openvino", "model.xml")
        if not os.path.exists(path):
            import openvino as ov
            os.makedirs(os.path.dirname(path), exist_ok=True)
            ov.save_model(ov.convert_model(onnx_path), path + ".tmp.xml", compress_to_fp16=False)
            os.replace(path + ".tmp.bin", path[:-4] + ".bin")
            os.replace(path + ".tmp.xml", path)

    def ct2():
        path = os.path.join(a.peers_dir, "ct2")
        if not os.path.exists(path):
            import ctranslate2
            ctranslate2.converters.TransformersConverter(a.model).convert(path + ".tmp", force=True)
            os.replace(path + ".tmp", path)

    plan = {"st": [], "ort-fp32": [export_onnx, ort_fp32], "ort-int8": [export_onnx, ort_fp32, ort_int8],
            "ov-fp32": [export_onnx, openvino], "ov-auto": [export_onnx, openvino], "ct2-fp32": [ct2], "ct2-int8": [ct2]}
    for e in [e for e in ENGINES if e in plan]:
        try:
            for mod in NEEDS[e]:
                step("import " + mod, lambda m=mod: __import__(m))
            for fn in plan[e]:
                step(fn.__name__, fn)
            out["ok"].append(e)
        except Exception as err:  # noqa: BLE001
            out["errors"][e] = str(err)
    print(json.dumps(out))


# ---------------------------------------------------------------- worker (one engine, one process)
def make_encoder(engine):
    """encode(texts) -> [n, dim] L2-normalized float32, batches of --batch in the given order."""
    import numpy as np
    if engine == "st":
        import torch
        from sentence_transformers import SentenceTransformer
        torch.set_num_threads(a.threads)
        st = SentenceTransformer(a.model, device="cpu")
        return lambda texts: st.encode(texts, batch_size=a.batch, normalize_embeddings=True, convert_to_numpy=True,
                                       show_progress_bar=False)
    from transformers import AutoTokenizer
    tok, length = AutoTokenizer.from_pretrained(a.model), max_len()

    def pool(h, mask):
        m = mask[..., None].astype(np.float32)
        e = (h * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
        return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)

    def tokens(batch):
        enc = tok(batch, padding=True, truncation=True, max_length=length, return_tensors="np")
        return {k: v.astype(np.int64) for k, v in enc.items()}

    if engine.startswith("ort"):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = a.threads, 1
        name = "model_opt.onnx" if engine == "ort-fp32" else "model_opt_int8_per_channel.onnx"
        sess = ort.InferenceSession(os.path.join(a.peers_dir, name), so, providers=["CPUExecutionProvider"])
        names = {i.name for i in sess.get_inputs()}

        def run(batch):
            enc = tokens(batch)
            return pool(sess.run(None, {k: v for k, v in enc.items() if k in names})[0], enc["attention_mask"])
    elif engine in ("ov-fp32", "ov-auto"):
        import openvino as ov
        config = {"INFERENCE_NUM_THREADS": str(a.threads), "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"}
        if engine == "ov-fp32":
            config["INFERENCE_PRECISION_HINT"] = "f32"
        cm = ov.Core().compile_model(os.path.join(a.peers_dir, "openvino", "model.xml"), "CPU", config)
        precision = str(cm.get_property("INFERENCE_PRECISION_HINT"))
        assert engine == "ov-auto" or "f32" in precision or "float32" in precision, \
            f"OpenVINO inference precision is {precision}"
        WORKER_NOTES["precision"] = precision
        req, names = cm.create_infer_request(), {i.get_any_name() for i in cm.inputs}

        def run(batch):
            enc = tokens(batch)
            return pool(req.infer({k: v for k, v in enc.items() if k in names})[cm.output(0)], enc["attention_mask"])
    else:  # ct2-fp32, ct2-int8
        import ctranslate2
        encoder = ctranslate2.Encoder(os.path.join(a.peers_dir, "ct2"), device="cpu", intra_threads=a.threads,
                                      inter_threads=1, compute_type="float32" if engine == "ct2-fp32" else "int8")

        def run(batch):
            ids = tok(batch, truncation=True, max_length=length)["input_ids"]
            h = np.array(encoder.forward_batch([tok.convert_ids_to_tokens(x) for x in ids]).last_hidden_state)
            mask = np.zeros(h.shape[:2], np.float32)
            for i, x in enumerate(ids):
                mask[i, :len(x)] = 1
            return pool(h, mask)
    return lambda texts: np.concatenate([run(texts[i:i + a.batch]) for i in range(0, len(texts), a.batch)])


WORKER_NOTES = {}  # what a worker's engine chose (OpenVINO's precision), added to its JSON line
PRECISION = {}  # parent: engine -> the precision its worker reported


def worker():
    import numpy as np
    encode = make_encoder(a.worker)
    if a.latency_text:
        for _ in range(5):
            encode([a.latency_text])
        times = []
        for _ in range(a.calls):
            t0 = time.perf_counter()
            encode([a.latency_text])
            times.append(time.perf_counter() - t0)
        print(json.dumps({"latency_ms": statistics.median(times) * 1e3, **WORKER_NOTES}))
        return
    with open(a.texts, encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f]
    encode(texts[:a.batch])  # warm-up
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        emb = encode(texts)
        times.append(time.perf_counter() - t0)
    if a.out:
        np.save(a.out, np.asarray(emb, np.float32))
    print(json.dumps({"texts_per_s": len(texts) / statistics.median(times), **WORKER_NOTES}))


# ---------------------------------------------------------------- parent
def last_json(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, env=thread_env())
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}: " + ((r.stderr.strip().splitlines() or ["?"])[-1])[:300])
    return json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])


def run_engine(engine, files, d, lat_text, first):
    """One round of one engine: {column: value}; embeddings into d on the first round."""
    got = {}
    ffn = engine.startswith("ffn")
    flags = {"ffn-int8": ["--dtype", "int8"], "ffn-bf16": ["--compute", "bf16"]}.get(engine, [])
    me = [sys.executable, os.path.abspath(__file__), "--worker", engine, "--threads", str(a.threads), "--batch",
          str(a.batch), "--repeats", str(a.repeats), "--calls", str(a.calls), "--model", a.model,
          "--peers-dir", a.peers_dir, "--engines", engine]
    for name, path in files.items():
        out = os.path.join(d, f"{engine}.{name}.npy")
        if ffn:
            got[name] = last_json([a.ffn, "bench", "--embed", "--model", a.model, "--input-file", path, "--threads",
                                   str(a.threads), "--embed-batch", str(a.batch), "--repeats", str(a.repeats),
                                   "--warmup", "1", "--json"] + flags)["texts_per_s"]
            if first:
                r = subprocess.run([a.ffn, "embed", "--model", a.model, "--input-file", path, "--output", out,
                                    "--threads", str(a.threads), "--batch", str(a.batch)] + flags,
                                   capture_output=True, text=True, env=thread_env())
                if r.returncode != 0:
                    raise RuntimeError(f"ffn embed: exit {r.returncode}: {r.stderr.strip()[-300:]}")
        else:
            j = last_json(me + ["--texts", path] + (["--out", out] if first else []))
            got[name] = j["texts_per_s"]
            if "precision" in j:
                PRECISION[engine] = j["precision"]
    if ffn:
        got["latency"] = last_json([a.ffn, "bench", "--embed", "--model", a.model, "--text", lat_text, "--threads",
                                    str(a.threads), "--repeats", str(a.calls), "--warmup", "5", "--json"] + flags
                                   )["median_s"] * 1e3
    else:
        got["latency"] = last_json(me + ["--latency-text", lat_text])["latency_ms"]
    return got


def cosines(d, engine):
    import numpy as np
    cos = []
    for name in ("short", "passages"):
        ref, x = np.load(os.path.join(d, f"st.{name}.npy")), np.load(os.path.join(d, f"{engine}.{name}.npy"))
        ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
        cos.append((x * ref).sum(1) / np.linalg.norm(x, axis=1))
    cos = np.concatenate(cos)
    return float(cos.min()), float(cos.mean())


def main():
    if a.prepare:
        return prepare()
    if a.worker:
        return worker()
    if os.path.realpath(sys.prefix) != os.path.realpath(a.venv):
        t0 = time.time()
        py = ensure_venv()
        log(f"venv ready in {time.time() - t0:.0f} s; re-running in it")
        env = dict(os.environ, FFN_PEERS_CMD=shlex.join([sys.executable] + sys.argv))
        os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:], env)
    command = os.environ.get("FFN_PEERS_CMD") or shlex.join([sys.executable] + sys.argv)
    engines = list(ENGINES)
    if any(e.startswith("ffn") for e in engines) and not os.access(a.ffn, os.X_OK):
        print(f"embed_peers: {a.ffn} is not an executable; going on without ffn", file=sys.stderr)
        engines = [e for e in engines if not e.startswith("ffn")]
    t0 = time.time()
    prep = last_json([sys.executable, os.path.abspath(__file__), "--prepare", "--engines", ",".join(engines),
                      "--model", a.model, "--peers-dir", a.peers_dir])
    for e, err in prep["errors"].items():
        print(f"embed_peers: {LABELS[e]} left out ({err})", file=sys.stderr)
    engines = [e for e in engines if e.startswith("ffn") or e in prep["ok"]]
    log(f"models prepared in {time.time() - t0:.0f} s; engines: {', '.join(engines)}")
    results = {e: {"short": [], "passages": [], "latency": []} for e in engines}
    failed = {}
    with tempfile.TemporaryDirectory(prefix="ffn-peers-") as d:
        files, lat_text = write_texts(d)
        for r in range(a.rounds):
            for e in [e for e in engines if e not in failed]:
                t1 = time.time()
                try:
                    for k, v in run_engine(e, files, d, lat_text, r == 0).items():
                        results[e][k].append(v)
                except Exception as err:  # noqa: BLE001 - report, go on with the others
                    failed[e] = str(err)
                    print(f"embed_peers: {LABELS[e]} failed ({err}); left out", file=sys.stderr)
                    continue
                log(f"round {r + 1}/{a.rounds} {LABELS[e]}: {time.time() - t1:.0f} s")
        acc = {e: cosines(d, e) for e in engines if e not in failed and e != "st" and "st" in engines
               and "st" not in failed}
    engines = [e for e in engines if e not in failed]

    def med(e, col):
        return statistics.median(results[e][col]) if results[e][col] else None

    def cell(e, col):
        v = results[e][col]
        fmt = (lambda x: f"{x:.2f}") if col == "latency" else (lambda x: f"{x:.1f}")
        return fmt(statistics.median(v)) + (f" ({fmt(min(v))}–{fmt(max(v))})" if len(v) > 1 else "")

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    rev = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    versions = ", ".join(f"{k} {v}" for k, v in prep["versions"].items())
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; CPU: {cpu}; {a.threads} threads; ffn {rev.stdout.strip() or '?'}; "
          f"{versions}; median of {a.rounds} alternating rounds (min–max), each a median of {a.repeats} passes; "
          f"batch {a.batch}; `{command}`\n")
    print(f"| engine | short ({a.short} texts, 8–33 tokens) texts/s | passages ({a.passages} × ~200 tokens) texts/s"
          f" | 16-token latency ms | cosine vs sentence-transformers worst / mean |")
    print("|---|---|---|---|---|")
    for e in engines:
        c = "reference" if e == "st" else (f"{acc[e][0]:.6f} / {acc[e][1]:.6f}" if e in acc else "n/a")
        label = LABELS[e] + (f" ({PRECISION[e]})" if e in PRECISION else "")
        print(f"| {label} | {cell(e, 'short')} | {cell(e, 'passages')} | {cell(e, 'latency')} | {c} |")
    ratio_rows = [("ffn-fp32", FP32_PEERS, "fp32"), ("ffn-int8", INT8_PEERS, "int8"),
                  ("ffn-bf16", BF16_PEERS, "fp32 (or OpenVINO's default)")]
    if any(f in engines and set(peers) & set(engines) for f, peers, _ in ratio_rows):
        print("\n| ffn speed-up (>1: ffn faster) | short | passages | 16-token latency |\n|---|---|---|---|")
        for f, peers, kind in ratio_rows:
            peers = [e for e in peers if e in engines]
            if f not in engines or not peers:
                continue
            cells = []
            for col in ("short", "passages", "latency"):
                if col == "latency":
                    best = min(peers, key=lambda e: med(e, col))
                    cells.append(f"{med(best, col) / med(f, col):.2f}x vs {LABELS[best]}")
                else:
                    best = max(peers, key=lambda e: med(e, col))
                    cells.append(f"{med(f, col) / med(best, col):.2f}x vs {LABELS[best]}")
            print(f"| {LABELS[f]} / best {kind} peer | " + " | ".join(cells) + " |")
    print(f"\n16-token sentence: {lat_text!r}")
    if prep["notes"].get("ort_fusions"):
        print(f"ORT fusions: {prep['notes']['ort_fusions']}")
    if a.json:
        print(json.dumps({"command": command, "cpu": cpu, "threads": a.threads, "versions": prep["versions"],
                          "ffn_rev": rev.stdout.strip(), "results": results, "cosine_worst_mean": acc,
                          "failed": {**prep["errors"], **failed}, "latency_text": lat_text,
                          "notes": prep["notes"]}))


if __name__ == "__main__":
    main()
