#!/usr/bin/env python3
"""Beam search as transformers does it, on the repository's small LLaMA
models (tests/data/llama, made by make_llama_golden.py), for the decoding
engine's test (tests/models/test_causal_lm.cpp, CausalLM.BeamSearchMatchesTransformers).

Run with the project's virtual environment (transformers 4.46.3 on Debian's torch):
    .venv/bin/python scripts/make_llama_beam_golden.py tests/data/llama

Writes beams.json: per model, for prompts 1-3 of cases.json, the best
hypothesis of generate(num_beams=K, do_sample=False, length_penalty=L,
max_new_tokens=12, eos_token_id=2) for K in 2, 3 and L in 1.0, 0.6, and the
gap between the two best final beam scores (a difference where the gap is
below 1e-5 would be a tie, not an error).
"""
import json
import os
import sys

import torch
import transformers.generation.utils as gu

# Debian's torch 1.13 cannot import torch.distributed.fsdp on Python 3.11;
# generate only asks whether the model is FSDP-managed (it is not).
gu.is_fsdp_managed_module = lambda module: False
from transformers import LlamaForCausalLM  # noqa: E402

NEW_TOKENS = 12


def main(root):
    with open(os.path.join(root, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)["models"]
    out = {"new_tokens": NEW_TOKENS, "models": {}}
    smallest = float("inf")
    for name, entry in cases.items():
        model = LlamaForCausalLM.from_pretrained(os.path.join(root, name), torch_dtype=torch.float32).eval()
        runs = []
        for k in (1, 2, 3):
            prompt = entry["prompts"][k]
            ids = torch.tensor([prompt])
            for beams in (2, 3):
                for lp in (1.0, 0.6):
                    with torch.no_grad():
                        o = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                           num_beams=beams, length_penalty=lp, max_new_tokens=NEW_TOKENS,
                                           eos_token_id=2, pad_token_id=0, num_return_sequences=2,
                                           output_scores=True, return_dict_in_generate=True)
                    scores = o.sequences_scores.tolist()
                    smallest = min(smallest, abs(scores[0] - scores[1]))
                    runs.append({"prompt": k, "beams": beams, "length_penalty": lp,
                                 "tokens": o.sequences[0, len(prompt):].tolist()})
        out["models"][name] = runs
    for runs in out["models"].values():  # the pad tokens after an early EOS are not generated
        for r in runs:
            t = r["tokens"]
            if 2 in t:
                r["tokens"] = t[: t.index(2) + 1]
    with open(os.path.join(root, "beams.json"), "w", encoding="utf-8") as f:
        json.dump(out, f)
    print(f"smallest gap between the two best hypotheses: {smallest:.3g}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/llama")
