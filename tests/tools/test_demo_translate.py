#!/usr/bin/env python3
"""`ffn demo translate` end to end on a small, short run: it trains, writes a
MarianMT directory that transformers 4.46.3 loads and translates exactly as
`ffn translate` does (text for text and id for id, greedy), writes its two
SVGs, and refuses to replace a model or an output named twice.

The accuracy of the full default run is the demo's own report (README,
docs/cli.md); this test checks the plumbing and the agreement with
transformers, which do not depend on how well a 150-step model translates.

Usage: test_demo_translate.py FFN_BINARY  (skipped, exit 77, without transformers)
"""
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

try:
    import torch
    import transformers.generation.utils as gu
    gu.is_fsdp_managed_module = lambda module: False  # Debian's torch 1.13 on Python 3.11
    from transformers import MarianMTModel, MarianTokenizer
except ImportError as e:
    print(f"SKIPPED: {sys.executable} cannot import {e.name} (scripts/setup.sh installs transformers in .venv)")
    sys.exit(77)


def run(*args, ok=True):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if ok and r.returncode != 0:
        sys.exit(f"{args} failed ({r.returncode}): {r.stderr}")
    return r


def main():
    ffn = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "model")
        loss_svg, att_svg = os.path.join(tmp, "loss.svg"), os.path.join(tmp, "att.svg")
        small = ["--steps", "150", "--warmup", "50", "--held-out", "60", "--d-model", "32", "--heads", "2",
                 "--d-ff", "64", "--layers", "1", "--threads", "2"]
        r = run(ffn, "demo", "translate", "--model-dir", d, "--loss-plot", loss_svg, "--attention-plot", att_svg, *small,
                ok=False)
        if r.returncode == 2 and "built without SentencePiece" in r.stderr:
            print("SKIPPED: this ffn was built without SentencePiece (libsentencepiece-dev): " + r.stderr.strip())
            sys.exit(77)
        assert r.returncode == 0, r.stderr
        m = re.search(r"(\d+) of (\d+) translated exactly", r.stdout)
        assert m and int(m.group(2)) == 60, r.stdout
        print(f"150-step model: {m.group(1)} of 60 held-out numbers exact")
        for f in ("config.json", "generation_config.json", "model.safetensors", "source.spm", "target.spm",
                  "vocab.json", "tokenizer_config.json"):
            assert os.path.exists(os.path.join(d, f)), f
        svg = "{http://www.w3.org/2000/svg}"
        loss = ET.parse(loss_svg).getroot()
        assert len(loss.findall(f".//{svg}polyline")) >= 2
        att = ET.parse(att_svg).getroot()
        maps = [g for g in att.iter(f"{svg}g") if g.get("class") == "heatmap"]
        assert len(maps) >= 1, "no attention map"
        assert any(t.get("class") == "xtick" for t in att.iter(f"{svg}text")), "no token labels"

        # transformers reads the directory and translates as ffn translate does.
        tok = MarianTokenizer.from_pretrained(d)
        model = MarianMTModel.from_pretrained(d).eval()
        texts = ["three hundred seventy-one", "eighty", "ninety-one thousand one hundred one", "zero",
                 "seven hundred seventy-seven thousand seven hundred seventy-seven", "one thousand", "twenty-one",
                 "four hundred eighty thousand two hundred", "sixty-nine", "nine hundred ninety-nine thousand"]
        with torch.no_grad():
            batch = tok(texts, return_tensors="pt", padding=True)
            out = model.generate(**batch)
        hf_text = tok.batch_decode(out, skip_special_tokens=True)
        ffn_text = run(ffn, "translate", "--model", d, *texts).stdout.splitlines()
        assert ffn_text == hf_text, list(zip(texts, hf_text, ffn_text))
        src_ids = [tok(t)["input_ids"] for t in texts]
        hf_ids = []
        for row in out.tolist():
            row = row[1:]  # after the decoder start token
            if 0 in row:
                row = row[:row.index(tok.eos_token_id) + 1]
            hf_ids.append(" ".join(map(str, [i for i in row if i != tok.pad_token_id])))
        ffn_ids = run(ffn, "translate", "--model", d, "--ids", *[" ".join(map(str, s)) for s in src_ids]).stdout.splitlines()
        assert ffn_ids == hf_ids, list(zip(hf_ids, ffn_ids))
        print(f"transformers and ffn translate agree on {len(texts)} texts: e.g. {texts[0]!r} -> {hf_text[0]!r}")

        # Refusals: one line, exit 2, the model left as it was.
        before = open(os.path.join(d, "model.safetensors"), "rb").read()
        for args, needle in (([*small, "--model-dir", d], "already holds config.json; pass --overwrite"),
                             ([*small[:8], "--heads", "3", *small[10:], "--model-dir", os.path.join(tmp, "m4")],
                              "--heads: expected a divisor of --d-model 32, got 3"),
                             ([*small, "--model-dir", os.path.join(tmp, "m2"), "--loss-plot", loss_svg,
                               "--attention-plot", loss_svg], "is the same file as --loss-plot"),
                             (["--model-dir", os.path.join(tmp, "m3"), "--steps", "0"], "--steps: expected")):
            r = run(ffn, "demo", "translate", *args, ok=False)
            assert r.returncode == 2 and needle in r.stderr and r.stderr.count("\n") == 1, (args, r.returncode, r.stderr)
        assert open(os.path.join(d, "model.safetensors"), "rb").read() == before
        left = [f for f in os.listdir(tmp) if f.startswith("m") and f != "model"]
        assert not left, f"a refused run left {left}"
        # --overwrite replaces the model's files, through a sibling directory that is gone afterwards.
        run(ffn, "demo", "translate", "--model-dir", d, "--overwrite", "--loss-plot", loss_svg, "--attention-plot",
            att_svg, *small[:1], "5", *small[2:])
        assert open(os.path.join(d, "model.safetensors"), "rb").read() != before
        assert not [f for f in os.listdir(tmp) if ".partial-" in f]

        # Ctrl-C (or SIGTERM) at random moments of an --overwrite run: the
        # model's files stay all old (or, if it got that far, all new) and no
        # sibling directory or temporary file is left.
        files = ("config.json", "generation_config.json", "model.safetensors", "source.spm", "target.spm",
                 "vocab.json", "tokenizer_config.json", "special_tokens_map.json")

        def snapshot():
            return {f: open(os.path.join(d, f), "rb").read() for f in files}

        rng = random.Random(7)
        stopped = 0
        for i, delay in enumerate([0.3, 1.0] + [rng.uniform(0.05, 4.0) for _ in range(4)]):
            old = snapshot()
            p = subprocess.Popen([ffn, "demo", "translate", "--model-dir", d, "--overwrite", "--seed", str(100 + i),
                                  "--loss-plot", loss_svg, "--attention-plot", att_svg, *small],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(delay)
            p.send_signal(signal.SIGTERM if i % 2 else signal.SIGINT)
            err = p.communicate()[1]
            assert p.returncode in (0, -signal.SIGINT, -signal.SIGTERM), (p.returncode, err)
            now = snapshot()
            if now != old:  # a new model (another seed): complete, so it translates
                assert now["model.safetensors"] != old["model.safetensors"], f"a signal after {delay:.2f} s mixed files"
                run(ffn, "translate", "--model", d, "twenty-one")
            stopped += p.returncode != 0
            left = [f for f in os.listdir(tmp) if ".partial-" in f or ".tmp" in f]
            assert not left, f"a signal after {delay:.2f} s left {left}"
        assert stopped >= 3, f"only {stopped} of 6 runs were stopped by the signal"
        print(f"SIGINT/SIGTERM at 6 moments ({stopped} stopped the run): no partial directory left, "
              "the model's files all old or all new")


if __name__ == "__main__":
    main()
