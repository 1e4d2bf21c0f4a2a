#!/usr/bin/env python3
"""A multi-turn conversation two ways, in one process, alternating turn by
turn: CausalLM.chat() (the cache of the shared prefix kept between turns)
and generate(messages, chat=True) on the whole conversation from scratch
(what Python users did before issue 49). Prints, per turn, the prompt
tokens, how many each way read, the seconds each took and whether the
replies are the same tokens.

    PYTHONPATH=build/python python3 bench/chat_turns.py --model M.gguf [--turns 6] [--threads 2]
"""
import argparse
import json
import time

import ffn

QUESTIONS = [
    "What is the capital of France?",
    "And what river runs through it?",
    "Name three famous museums there.",
    "Which of them holds the Mona Lisa?",
    "How old is that painting, roughly?",
    "Who painted it?",
    "Name another of his works.",
    "Where is that one kept?",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--system", default="You are a helpful assistant. Answer in one or two sentences.")
    a = ap.parse_args()
    lm = ffn.CausalLM.load(a.model)
    chat = lm.chat(system=a.system)
    history = [{"role": "system", "content": a.system}]
    rows = []
    for q in QUESTIONS[:a.turns]:
        t0 = time.perf_counter()
        r = chat.say(q, max_new_tokens=a.max_new_tokens, threads=a.threads)
        t1 = time.perf_counter()
        history.append({"role": "user", "content": q})
        prompt = lm.tokenize(lm.chat_prompt(history))
        t2 = time.perf_counter()
        ids = lm.generate(prompt, max_new_tokens=a.max_new_tokens, threads=a.threads)
        t3 = time.perf_counter()
        history.append(chat.messages[-1])
        rows.append({"prompt_tokens": r["prompt_tokens"], "session_read": r["prompt_tokens"] - r["reused_tokens"],
                     "new_tokens": len(r["ids"]), "session_s": t1 - t0, "scratch_s": t3 - t2,
                     "same_tokens": ids == r["ids"]})
    print("| turn | prompt tokens | read: session | read: from scratch | new tokens | session s | from scratch s | same tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for k, x in enumerate(rows, 1):
        print(f"| {k} | {x['prompt_tokens']} | {x['session_read']} | {x['prompt_tokens']} | {x['new_tokens']} | "
              f"{x['session_s']:.3f} | {x['scratch_s']:.3f} | {'yes' if x['same_tokens'] else 'NO'} |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
