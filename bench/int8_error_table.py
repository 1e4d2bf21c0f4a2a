#!/usr/bin/env python3
"""Which layers cost a sentence encoder's int8 its accuracy: a per-layer error table.

    PYTHONPATH=build/python .venv/bin/python bench/int8_error_table.py \
        --model ~/.cache/ffn/all-mpnet-base-v2 --golden tests/data/mpnet/all_mpnet_base_v2.safetensors

Every figure is ffn's own engine (ffn.SentenceEncoder), cosine of each text's
int8 embedding against its float32 one:
  - the golden's texts (the BERT tests' 72 hostile texts) against the golden's
    sentence-transformers fp32 embeddings;
  - HELD_OUT (below; none is in the calibration texts, src/text/calibration.cpp)
    against ffn's fp32 embeddings (which agree with sentence-transformers to
    a worst cosine of 0.9999999 on the golden: tests/models/test_mpnet.cpp).
Rows: the whole model in int8 (FFN only, and FFN + attention projections;
--fp32-layers L,..: also with those layers float32),
then each layer alone in int8 (layers=[l]; the others float32), FFN only and
FFN + attention. A layer whose row is far below the others is where the
error comes from. Markdown on stdout.
"""
import argparse
import json
import os
import struct
import sys
import warnings

import numpy as np

HELD_OUT = [
    "The aquarium reopens next spring after a two-year renovation of its east wing.",
    "Which bus goes to the airport after midnight?",
    "He forgot his umbrella, so he waited under the bridge until the storm passed.",
    "Interest rates were left unchanged at the central bank's March meeting.",
    "Boil the pasta in salted water and keep a cup of it for the sauce.",
    "Our router drops the connection every evening around nine.",
    "The violinist played the last movement faster than anyone expected.",
    "Glaciers in the Alps have lost about a third of their volume since 2000.",
    "The printer on the third floor is out of toner again.",
    "How long should antibiotics be taken after the fever goes?",
    "The children built a raft from old barrels and floated it across the pond.",
    "Le conseil municipal a voté le nouveau budget hier soir.",
    "Die Bibliothek bleibt am Sonntag geschlossen.",
    "A prime number has exactly two divisors: one and itself.",
    "The update fixed the crash but made the battery drain faster.",
    "She trained for months and finished the marathon in under four hours.",
    "Error 404: the page you requested could not be found.",
    "Tickets for the final sold out within ten minutes.",
    "Add the onions once the oil is hot and stir until golden.",
    "Whales communicate over hundreds of kilometres with low-frequency songs.",
    "Nothing.",
    "ok",
    "Why is the sky blue during the day and red at sunset?",
    "The referee showed two yellow cards in the first half.",
]


def golden_texts(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        meta = header["__metadata__"]
        e = header["embeddings"]
        assert e["dtype"] == "F32"
        f.seek(base + e["data_offsets"][0])
        emb = np.frombuffer(f.read(e["data_offsets"][1] - e["data_offsets"][0]), dtype="<f4").reshape(e["shape"])
    return json.loads(meta["sentences"]), emb


def cosines(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--golden", required=True, help="safetensors with __metadata__ sentences and embeddings")
    ap.add_argument("--threshold", type=float, default=8.0, help="outlier_threshold (|x| / rms(row))")
    ap.add_argument("--no-layers", action="store_true", help="the whole-model rows only")
    ap.add_argument("--fp32-layers", default="", help="comma-separated layers kept float32: one more row, all others int8")
    a = ap.parse_args()
    import ffn
    warnings.simplefilter("ignore", UserWarning)  # load notes (e.g. a pooling default) are not the subject
    hostile, golden = golden_texts(a.golden)
    fp32 = ffn.SentenceEncoder.load(a.model)
    ref = np.concatenate([golden, np.asarray(fp32.embed(HELD_OUT))])
    texts = hostile + HELD_OUT
    n_layers = len(fp32.fp32_input_channels)  # one (empty) list per layer

    def row(label, **kw):
        enc = ffn.SentenceEncoder.load(a.model, dtype="int8", outlier_threshold=a.threshold, **kw)
        c = cosines(np.asarray(enc.embed(texts)), ref)
        i = int(np.argmin(c))
        print(f"| {label} | {c[:len(hostile)].min():.6f} | {c[len(hostile):].min():.6f} | {c.mean():.6f} | "
              f"{json.dumps(texts[i][:24], ensure_ascii=False)} |", flush=True)

    print(f"{os.path.basename(os.path.normpath(a.model))}: {len(hostile)} golden texts, {len(HELD_OUT)} held out; "
          f"outlier_threshold {a.threshold}\n")
    print("| int8 | worst cosine, golden | worst, held out | mean | worst text |")
    print("|---|---|---|---|---|")
    row("all layers, FFN", int8_attention=False)
    row("all layers, FFN + attention")
    if a.fp32_layers:
        keep = {int(x) for x in a.fp32_layers.split(",")}
        row(f"all but layers {sorted(keep)}, FFN + attention", layers=[l for l in range(n_layers) if l not in keep])
    if not a.no_layers:
        for l in range(n_layers):
            row(f"layer {l} alone, FFN", int8_attention=False, layers=[l])
            row(f"layer {l} alone, FFN + attention", layers=[l])
    return 0


if __name__ == "__main__":
    sys.exit(main())
