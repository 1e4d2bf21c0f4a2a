#!/usr/bin/env python3
"""`ffn generate` and `ffn tokenize`:

1. On the random LLaMA models of tests/data/llama (scripts/make_llama_golden.py,
   always): --ids greedy continuations equal transformers' generate, tokenize
   (positional, --input-file, --output) equals its ids, --logits writes the
   logits transformers gave (2e-3 of each position's largest |logit|), sampling
   is reproducible under a seed and top-k 1 is greedy, --beams equals
   transformers' beam search (beams.json), bad input gets one
   line, exit 2 and no output file.
2. On SmolLM2-135M-Instruct.Q4_1.gguf (installed by scripts/setup.sh;
   FFN_SMOLLM2_GGUF overrides; skipped, saying so, when absent or when
   transformers cannot be imported): ids equal to what transformers' tokenizer
   makes of the same GGUF, with SmolLM2's own pre-tokenizer (single digits,
   then GPT-2's expression), on text with Unicode, emoji, code, numbers,
   whitespace runs, control bytes and special tokens, also through the
   tokenizer.json transformers saves from it; logits after every position of
   prompts of 1 to 512 tokens within 2e-3 of each position's largest |logit|
   of transformers' float32 model from the same file; greedy continuations
   token for token; --chat, --chat --system and --messages equal to
   apply_chat_template(add_generation_prompt=True) + generate; ffn chat's turns
   equal to generating each from scratch, later turns reading only new tokens;
   --stop.

    python tests/tools/test_generate_cli.py FFN_BINARY DATA_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # an interpreter without numpy (a sanitizer build's): Debian's has it
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    print("SKIPPED: generate_cli: numpy is not importable")
    sys.exit(77)

FFN, DATA = sys.argv[1], sys.argv[2]
LLAMA = os.path.join(DATA, "llama")
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def ffn(*args, stdin=None):
    return subprocess.run([FFN, *args], capture_output=True, text=True, input=stdin)


def refused(r, words, path=None):
    return (r.returncode == 2 and r.stderr.count("\n") == 1 and all(w in r.stderr for w in words)
            and (path is None or not os.path.exists(path)))


def worst_relative(got, want):
    return float((np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)).max())


def read_safetensors(path):
    """The F32 tensors of a safetensors file (its format is a JSON header, then the bytes)."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", name
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(t["shape"])
    return out


def random_models(tmp):
    cases = json.load(open(os.path.join(LLAMA, "cases.json"), encoding="utf-8"))["models"]
    golden = read_safetensors(os.path.join(LLAMA, "cases.safetensors"))
    for name, c in cases.items():
        d = os.path.join(LLAMA, name)
        ok = True
        for prompt, want in zip(c["prompts"], c["greedy"]):
            r = ffn("generate", "--model", d, "--ids", " ".join(map(str, prompt)), "--max-new-tokens", str(len(want)))
            ok &= r.returncode == 0 and r.stdout.split() == [str(x) for x in want]
        check(ok, f"{name}: --ids greedy equals transformers' generate on {len(c['prompts'])} prompts")
        r = ffn("tokenize", "--model", d, c["texts"][0])
        check(r.returncode == 0 and r.stdout.split() == [str(x) for x in c["text_ids"][0]], f"{name}: tokenize TEXT")
        lines = [t for t in c["texts"] if "\n" not in t]
        with open(os.path.join(tmp, "in.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        out = os.path.join(tmp, name + ".ids")
        r = ffn("tokenize", "--model", d, "--input-file", os.path.join(tmp, "in.txt"), "--output", out)
        want = [" ".join(map(str, c["text_ids"][c["texts"].index(t)])) for t in lines]
        check(r.returncode == 0 and open(out).read().split("\n")[:-1] == want,
              f"{name}: tokenize --input-file --output, one line of ids per line ({len(lines)} lines)")
        npy = os.path.join(tmp, name + ".npy")
        r = ffn("generate", "--model", d, "--ids", " ".join(map(str, c["prompts"][3])), "--max-new-tokens", "0",
                "--logits", npy)
        got = np.load(npy) if r.returncode == 0 else None
        want = golden[f"{name}.3"]
        check(got is not None and got.shape == want.shape and worst_relative(got, want) <= 2e-3,
              f"{name}: --logits [prompt, vocab] within 2e-3 of transformers' ({r.stderr.strip()})")
    d = os.path.join(LLAMA, "gqa2_untied")
    p = " ".join(map(str, cases["gqa2_untied"]["prompts"][2]))
    a = ffn("generate", "--model", d, "--ids", p, "--temperature", "0.9", "--top-p", "0.9", "--seed", "7")
    b = ffn("generate", "--model", d, "--ids", p, "--temperature", "0.9", "--top-p", "0.9", "--seed", "7")
    c2 = ffn("generate", "--model", d, "--ids", p, "--temperature", "0.9", "--top-p", "0.9", "--seed", "8")
    check(a.returncode == 0 and a.stdout == b.stdout and a.stdout != c2.stdout and len(a.stdout.split()) == 128,
          "sampling: the same seed gives the same 128 tokens, another seed others")
    g = ffn("generate", "--model", d, "--ids", p, "--max-new-tokens", "16")
    k1 = ffn("generate", "--model", d, "--ids", p, "--max-new-tokens", "16", "--temperature", "1.5", "--top-k", "1")
    check(g.returncode == 0 and g.stdout == k1.stdout, "sampling with --top-k 1 is greedy")
    # --beams: the best hypothesis of transformers' beam search (tests/data/llama/beams.json).
    beams = json.load(open(os.path.join(LLAMA, "beams.json")))
    run = next(r for r in beams["models"]["gqa2_untied"] if r["beams"] == 3 and r["length_penalty"] == 0.6)
    prompt = " ".join(map(str, cases["gqa2_untied"]["prompts"][run["prompt"]]))
    r = ffn("generate", "--model", d, "--ids", prompt, "--beams", "3", "--length-penalty", "0.6",
            "--max-new-tokens", str(beams["new_tokens"]))
    check(r.returncode == 0 and r.stdout.split() == [str(x) for x in run["tokens"]],
          f"--beams 3 --length-penalty 0.6 equals transformers' beam search ({r.stderr.strip()})")
    check(refused(ffn("generate", "--model", d, "--ids", p, "--beams", "2", "--temperature", "0.5"),
                  ["--beams 2 with --temperature"]), "beam sampling is refused")
    t1 = ffn("generate", "--model", d, "--ids", p, "--max-new-tokens", "16", "--threads", "1")
    check(t1.stdout == g.stdout, "1 thread and all threads give the same tokens")
    rp = ffn("generate", "--model", d, "--ids", p, "--max-new-tokens", "16", "--repeat-penalty", "1.3")
    check(rp.returncode == 0 and len(set(rp.stdout.split())) >= len(set(g.stdout.split())),
          "--repeat-penalty 1.3 repeats no more tokens than greedy")
    # The FFN's int8 and bf16 modes on a Hugging Face checkpoint: the same
    # greedy tokens as fp32 on these prompts (the random model's top-2 gaps
    # are large), and --dtype refused where native compute keeps GGUF blocks.
    for dt in ("int8", "bf16"):
        r = ffn("generate", "--model", d, "--ids", p, "--max-new-tokens", "16", "--dtype", dt)
        check(r.returncode == 0 and r.stdout == g.stdout, f"--dtype {dt} on a Hugging Face checkpoint: greedy as fp32")
    gguf_q = os.path.join(DATA, "gguf", "llama_q.gguf")
    check(refused(ffn("generate", "--model", gguf_q, "hi", "--dtype", "int8"), ["--dtype int8", "--compute fp32"]),
          "--dtype int8 with native compute on a GGUF is refused")
    r = ffn("generate", "--model", gguf_q, "--ids", "5 6 7", "--max-new-tokens", "4", "--dtype", "int8", "--compute", "fp32")
    check(r.returncode == 0 and len(r.stdout.split()) >= 1, "--dtype int8 with --compute fp32 on a GGUF runs")
    # Bad input: one line, exit 2, no output file.
    npy = os.path.join(tmp, "bad.npy")
    check(refused(ffn("generate", "--model", d, "--ids", p, "--logits", npy), ["--logits", "--max-new-tokens 0"], npy),
          "--logits without --max-new-tokens 0 is refused before any work")
    check(refused(ffn("generate", "--model", d, "--ids", "1 2 99999"), ["99999", "outside the vocabulary"]),
          "an id outside the vocabulary is named")
    # Chat flags on a file with a template (llama_q.gguf's ChatML): one line, exit 2, before any work.
    msgs = os.path.join(tmp, "messages.json")
    check(refused(ffn("generate", "--model", gguf_q, "--system", "be brief", "hi"), ["--system", "only with --chat"]),
          "generate: --system without --chat is refused")
    check(refused(ffn("generate", "--model", gguf_q, "--ids", "1 2", "--stop", "x"), ["--stop", "--ids"]),
          "generate: --stop with --ids is refused")
    check(refused(ffn("generate", "--model", gguf_q, "hi", "--stop", ""), ["--stop", "empty"]),
          "generate: an empty --stop is refused")
    for var, words in [("enable_thinking", ["--template-var", "KEY=VALUE"]), ("bad key=1", ["not an identifier"]),
                       ("x=unquoted", ["not one JSON value"]), ('x=1, "messages": []', ["not one JSON value"]), ("messages=[]", ["set by ffn"])]:
        check(refused(ffn("generate", "--model", gguf_q, "--chat", "hi", "--template-var", var), words),
              f"generate: --template-var {var!r} is refused: {words}")
    check(refused(ffn("generate", "--model", gguf_q, "hi", "--template-var", "x=1"), ["--template-var", "--chat"]),
          "generate: --template-var without a chat is refused")
    for body, words in [("[{\"role\": \"user\"", ["--messages", "not valid JSON"]),
                        ("{\"role\": \"user\"}", ["--messages", "messages: expected a list of"]),
                        ("[{\"content\": \"hi\"}]", ["--messages", "messages[0].role: expected a string"])]:
        open(msgs, "w", encoding="utf-8").write(body)
        check(refused(ffn("generate", "--model", gguf_q, "--messages", msgs), words),
              f"generate: --messages {body!r} is refused: {words}")
    check(refused(ffn("generate", "--model", gguf_q, "--messages", os.path.join(tmp, "absent.json")),
                  ["--messages", "cannot open"]), "generate: a missing --messages file is refused")
    check(refused(ffn("generate", "--model", os.path.join(LLAMA, "mha_odd"), "--chat", "hi"), ["no chat template"]),
          "generate: --chat on a model without a template is refused")
    r = subprocess.run([FFN, "chat", "--model", gguf_q, "--context", "60", "--max-new-tokens", "4"], capture_output=True,
                       input=("hi\n" + "x " * 200 + "\n").encode())  # (a random model's replies are stray bytes)
    r.stderr = r.stderr.decode()
    check(r.returncode == 2 and "past the context of 60" in r.stderr and r.stderr.count("[turn") == 1,
          f"chat: a conversation past --context is refused by how many tokens, after the turns that fit: "
          f"{r.stderr.strip()[-160:]!r}")

    check(refused(ffn("generate", "--model", d, "--ids", "1 x"), ["'x' is not a token id"]), "a non-id is named")
    check(refused(ffn("generate", "--model", d, "--ids", p, "--top-p", "0"), ["--top-p"]), "--top-p 0 is refused")
    check(refused(ffn("generate", "--model", d, "--ids", p, "--temperature", "-1"), ["--temperature"]),
          "a negative --temperature is refused")
    check(refused(ffn("generate", "--model", d, "hi", "--chat", "hi"), ["exactly one of"]),
          "PROMPT and --chat together are refused")
    check(refused(ffn("generate", "--model", d, "--chat", "hi"), ["no chat template"]),
          "--chat on a model without a chat template is refused, naming it")
    check(refused(ffn("generate", "--model", d, "--ids", p, "--compute", "int3"), ["--compute", "int3"]),
          "an unknown --compute is named")
    check(refused(ffn("generate", "--model", os.path.join(tmp, "nothing"), "hi"), ["nothing"]),
          "a missing model is named")
    check(refused(ffn("generate", "--model", d, "--ids", p, "--max-new-tokens", "1000"), ["context", "256"]),
          "a prompt plus --max-new-tokens past the model's context is refused")
    out = os.path.join(tmp, "t.ids")
    check(refused(ffn("tokenize", "--model", d, "--input-file", os.path.join(tmp, "missing.txt"), "--output", out),
                  ["missing.txt"], out), "tokenize: a missing --input-file is named, no --output written")
    check(refused(ffn("tokenize", "--model", d, "ok", "--input-file", "x"), ["exactly one of"]),
          "tokenize: TEXT and --input-file together are refused")


def smollm2(tmp):
    path = os.environ.get("FFN_SMOLLM2_GGUF",
                          os.path.expanduser("~/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not os.path.exists(path):
        print(f"SKIPPED: SmolLM2 checks: {path} is not installed (scripts/setup.sh installs it)")
        return
    try:
        import torch  # noqa: PLC0415
        import transformers.generation.utils as gu  # noqa: PLC0415
        gu.is_fsdp_managed_module = lambda module: False  # Debian's torch 1.13 lacks torch.distributed.fsdp
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415
        import accelerate  # noqa: F401,PLC0415 (transformers' GGUF loader needs it)
    except ImportError as e:
        print(f"SKIPPED: SmolLM2 checks: the transformers reference is not importable ({e})")
        return
    d, f = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    # transformers' GGUF loader builds GPT-2's expression for every byte-level file, whatever
    # tokenizer.ggml.pre says; SmolLM2's own tokenizer.json (tokenizer.ggml.pre "smollm") splits
    # digits one by one first. The oracle is transformers' tokenizer with that pre-tokenizer.
    from tokenizers import pre_tokenizers  # noqa: PLC0415
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    texts = ["Hello world 12345", "emoji 🙂🚀👩‍👩‍👧 ok", "  multiple   spaces\tand\ttabs  ", "\n\n\nnewlines\r\n",
             "def f(x):\n    return x**2  # squared\n", "Größe naïve café 東京 Привет мир العربية",
             "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<jupyter_code>x = 1<file_sep>",
             "3.14159, 2718, 1e-5; 100000 and ١٢٣", "ctrl \x04\x07 bytes", "'s 're 've 'll 'd I'M", "",
             "a" * 300, "The quick brown fox jumps over the lazy dog. " * 3]
    ok = True
    for t in texts:
        want = tok(t, add_special_tokens=False)["input_ids"]
        r = ffn("tokenize", "--model", path, t)
        if r.returncode != 0 or r.stdout.split() != [str(x) for x in want]:
            ok = False
            print(f"  differs on {t!r}: {r.stdout.strip()[:200]} vs {want[:40]} {r.stderr.strip()}")
    check(ok, f"SmolLM2 GGUF: tokenize equals transformers' ids on {len(texts)} texts")
    tok.save_pretrained(os.path.join(tmp, "smol_tok"))
    ok = all(ffn("tokenize", "--model", os.path.join(tmp, "smol_tok"), t).stdout.split() ==
             [str(x) for x in tok(t, add_special_tokens=False)["input_ids"]] for t in texts[:8])
    check(ok, "SmolLM2 tokenizer.json (transformers' save_pretrained): the same ids")

    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32).eval()
    model.lm_head.weight = model.model.embed_tokens.weight  # transformers 4.46 leaves the tied GGUF head untied
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md"),
                encoding="utf-8").read()
    long_ids = tok(text, add_special_tokens=False)["input_ids"]
    worst = 0.0
    for n in (1, 5, 64, 512):
        ids = long_ids[:n]
        with torch.no_grad():
            want = model(torch.tensor([ids])).logits[0].numpy()
        npy = os.path.join(tmp, f"smol{n}.npy")
        r = ffn("generate", "--model", path, "--compute", "fp32", "--ids", " ".join(map(str, ids)),
                "--max-new-tokens", "0", "--logits", npy)
        got = np.load(npy) if r.returncode == 0 else np.zeros_like(want)
        worst = max(worst, worst_relative(got, want) if got.shape == want.shape else 1.0)
    check(worst <= 2e-3, f"SmolLM2: logits after every position of 1, 5, 64, 512-token prompts within 2e-3 of "
                         f"transformers' (worst {worst:.2g} of the position's max |logit|)")
    ok = True
    for start in (0, 700, 1500):
        ids = long_ids[start:start + 40]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=32)
        want = out[0, len(ids):].tolist()
        r = ffn("generate", "--model", path, "--compute", "fp32", "--ids", " ".join(map(str, ids)),
                "--max-new-tokens", "32")
        ok &= r.stdout.split() == [str(x) for x in want]
    check(ok, "SmolLM2: greedy continuations (32 tokens after 3 prompts) equal transformers' generate")
    # Native compute against fp32 over 2,048 tokens of README, design notes,
    # C++ and CLI docs (bench/llm_quality.py): the issue asks for >= 97 %
    # top-1 agreement and perplexity within 2 %. With 16-bit activations
    # (src/backends/cpu/qgemm.hpp) 99.95 % and 0.0004 % were measured on
    # 4,096 tokens (8-bit activations, llama.cpp's rule: 96.3 %, which this
    # test's 99 % would fail); perplexity held within 0.2 %.
    r = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                                                     "llm_quality.py"), "--ffn", FFN, "--model", path,
                        "--windows-per-file", "1"], capture_output=True, text=True)
    q = json.loads(r.stdout.strip().split("\n")[-1]) if r.returncode == 0 else {}
    check(q.get("top1_agreement", 0) >= 0.99 and abs(q.get("ppl_ratio", 9) - 1) <= 0.002,
          f"SmolLM2 native vs fp32 over {q.get('tokens')} tokens: top-1 agreement {q.get('top1_agreement', 0):.4f}, "
          f"perplexity {q.get('ppl_native', 0):.3f} vs {q.get('ppl_fp32', 0):.3f} ({r.stderr.strip()[-200:]})")
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=40)
    want = tok.decode(out[0, len(ids):], skip_special_tokens=True)
    r = ffn("generate", "--model", path, "--compute", "fp32", "--chat", msgs[0]["content"], "--max-new-tokens", "40")
    check(r.returncode == 0 and r.stdout == want + "\n",
          f"SmolLM2 --chat equals apply_chat_template + generate: {r.stdout.strip()!r}")
    # A system message and several turns: --system and --messages against
    # apply_chat_template + generate, then an ffn chat session whose replies
    # are each turn generated from scratch, its later turns reading only the
    # new tokens.
    conv = [{"role": "system", "content": "You are a terse geography assistant."},
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Germany?"}]
    for messages in (conv[:2], conv):
        ids = tok.apply_chat_template(messages, add_generation_prompt=True)
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=24)
        want = tok.decode(out[0, len(ids):], skip_special_tokens=True)
        mfile = os.path.join(tmp, "conv.json")
        json.dump(messages, open(mfile, "w", encoding="utf-8"))
        r = ffn("generate", "--model", path, "--compute", "fp32", "--messages", mfile, "--max-new-tokens", "24")
        check(r.returncode == 0 and r.stdout == want + "\n",
              f"SmolLM2 --messages ({len(messages)} messages) equals apply_chat_template + generate: {r.stdout.strip()!r}")
        if len(messages) == 2:
            r = ffn("generate", "--model", path, "--compute", "fp32", "--chat", messages[1]["content"], "--system",
                    messages[0]["content"], "--max-new-tokens", "24")
            check(r.returncode == 0 and r.stdout == want + "\n", f"SmolLM2 --chat --system: {r.stdout.strip()!r}")
    turns = ["What is the capital of France?", "And of Germany?", "And of Italy?"]
    r = ffn("chat", "--model", path, "--system", conv[0]["content"], "--max-new-tokens", "24",
            stdin="\n".join(turns) + "\n")
    replies = r.stdout.split("\n")[:-1]
    counts = [line for line in r.stderr.split("\n") if line.startswith("[turn")]
    history = [conv[0]]
    same = r.returncode == 0 and len(replies) == 3
    for turn, reply in zip(turns, replies):
        history.append({"role": "user", "content": turn})
        json.dump(history, open(mfile, "w", encoding="utf-8"))
        g = ffn("generate", "--model", path, "--messages", mfile, "--max-new-tokens", "24")
        same &= g.stdout == reply + "\n"
        history.append({"role": "assistant", "content": reply})
    check(same, f"SmolLM2 ffn chat: 3 turns, each reply what ffn generate --messages gives from scratch: {replies!r}")
    import re  # noqa: PLC0415
    nums = [tuple(map(int, re.findall(r"prompt (\d+) tokens, (\d+) kept from the cache, (\d+) read in [0-9.]+ s; (\d+) new", c)[0]))
            for c in counts]
    ok = len(nums) == 3 and nums[0][1] == 0
    for (p0, _, _, n0), (p1, k1, r1, _) in zip(nums, nums[1:]):
        ok &= k1 >= p0 and r1 == p1 - k1 and r1 < p1 - p0 + n0  # the last turn's prompt kept; only new tokens read
    check(ok, f"SmolLM2 ffn chat: later turns read only the new tokens: {counts}")
    r = ffn("generate", "--model", path, "--chat", "Count from 1 to 20, separated by commas.", "--max-new-tokens", "60",
            "--stop", "7")
    full = ffn("generate", "--model", path, "--chat", "Count from 1 to 20, separated by commas.", "--max-new-tokens", "60")
    check(r.returncode == 0 and "7" in full.stdout and r.stdout == full.stdout[:full.stdout.index("7")] + "\n",
          f"SmolLM2 --stop 7 ends the text before the first 7: {r.stdout!r}")


def rss_of(args):
    """(exit status, peak resident bytes) of one run of ffn."""
    p = subprocess.Popen([FFN, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_maxrss * 1024


def new_user(tmp):
    """Issue 62: what a new user hit in generate and chat, each check failing before its fix."""
    # Refused before any model loads (the path need not exist): one line, exit 2, naming the flag.
    nomodel = os.path.join(tmp, "absent.gguf")
    check(refused(ffn("generate", "--model", nomodel, "x", "--stop", "\\ud800"), ["--stop", "\\ud800", "UTF-16 pair"]),
          "generate: --stop with a lone \\ud800 is refused naming the flag")
    check(refused(ffn("generate", "--model", nomodel, "--chat", "x", "--system", "\\udc00"), ["--system", "first half", "--no-escape"]),
          "generate: --system with a lone \\udc00 is refused naming the flag and --no-escape")
    check(refused(ffn("generate", "--model", nomodel, "x", "--seed", "-2"), ["--seed", "-1", "got -2"]),
          "generate: --seed -2 is refused (-1 is random; other negatives are errors, not wrapped)")
    for text, words in (("[]", ["messages: the list is empty"]),
                        ('[{"role": "user"}]', ["messages[0].content: required"]),
                        ('[{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]',
                         ["messages[1].role", "got \"bot\""]),
                        ('[{"role": "user", "content": 3}]', ["messages[0].content", "got number"]),
                        ('[{"role": "user", "content": [{"type": "image_url"}]}]', ["messages[0].content[0]"])):
        mfile = os.path.join(tmp, "bad_messages.json")
        open(mfile, "w", encoding="utf-8").write(text)
        check(refused(ffn("generate", "--model", nomodel, "--messages", mfile), [mfile, *words]),
              f"generate --messages {text}: refused before the model loads, naming {words[0]}")
    tpl = os.path.join(tmp, "broken.jinja")
    open(tpl, "w", encoding="utf-8").write("{% if %}")
    check(refused(ffn("generate", "--model", nomodel, "--chat", "x", "--chat-template", tpl), ["--chat-template", tpl, "line 1"]),
          "generate --chat-template with a syntax error is refused naming the file and line")
    r = subprocess.run([FFN, "generate", "--chat", "x"], capture_output=True, text=True,
                       env={**os.environ, "FFN_SMOLLM2_GGUF": nomodel})
    check(refused(r, ["--model: not given", nomodel, "scripts/setup.sh"]),
          "generate without --model and no installed SmolLM2: the error says where it looked")
    archs = ffn("generate", "--help").stdout + ffn("chat", "--help").stdout + ffn("bench", "--help").stdout
    check(all(archs.count(a) >= 3 for a in ("qwen3", "phi3", "gemma2", "mistral")),
          "generate, chat and bench --help list every registered architecture")

    path = os.environ.get("FFN_SMOLLM2_GGUF",
                          os.path.expanduser("~/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not os.path.exists(path):
        print(f"SKIPPED: issue 62's SmolLM2 checks: {path} is not installed (scripts/setup.sh installs it)")
        return
    # The README's language-model examples, run as written by bash, ffn on PATH, in a directory with conv.json.
    readme = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md"),
                  encoding="utf-8").read()
    block = readme[readme.index("M=~/.cache/ffn/smollm2/"):]
    block = block[:block.index("```")].strip().split("\n")
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    if not os.path.exists(os.path.join(bindir, "ffn")):
        os.symlink(os.path.abspath(FFN), os.path.join(bindir, "ffn"))
    json.dump([{"role": "user", "content": "Write a short poem with two stanzas."}],
              open(os.path.join(tmp, "conv.json"), "w", encoding="utf-8"))
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ["PATH"]}
    if os.path.realpath(os.path.expanduser(block[0].split("=", 1)[1])) != os.path.realpath(path):
        print(f"SKIPPED: the README's examples: they name {block[0]}, the model here is {path}")
        return

    def sh(line, stdin=""):
        return subprocess.run(["bash", "-c", block[0] + "\n" + line], capture_output=True, text=True, cwd=tmp, env=env,
                              input=stdin)
    for line in block[1:]:
        if not line.startswith("ffn "):
            continue
        r = sh(line, "Hi\n" if line.startswith("ffn chat") else "")
        comment = line.split("#", 1)[1].strip() if "#" in line else ""
        ok = r.returncode == 0
        if "--chat \"What is the capital" in line or line.startswith("ffn tokenize"):
            ok &= r.stdout == comment + "\n"  # the comment is the output
        if "--stop" in line:
            full = sh(line.split("--stop")[0])
            ok &= "\n\n" in full.stdout.rstrip("\n") and r.stdout == full.stdout[:full.stdout.index("\n\n")] + "\n"
        if line.startswith("ffn bench --generate"):
            ok &= "median of 3 runs" in r.stdout
            if not ok and (os.environ.get("ASAN_OPTIONS") or os.environ.get("TSAN_OPTIONS")):
                # A sanitizer build runs ~10x slower: the README's 4 runs pass the 60 s limit, and the
                # command's answer is then its estimate after one measured run (exit 2, nothing on stdout).
                ok = refused(r, ["--generate", "4 runs", "over the 60 s limit", "--yes"]) and r.stdout == ""
                if ok:
                    print("NOTE: README's bench --generate under a sanitizer: over the 60 s limit, refused with "
                          "the estimate (the median is checked in the plain build)")
        check(ok, f"README as written: {line} -> exit {r.returncode}, {r.stdout[-160:]!r} {r.stderr[-200:]!r}")
    # --no-escape keeps the backslash and the n: the text runs past the blank line.
    r = ffn("generate", "--model", path, "--messages", os.path.join(tmp, "conv.json"), "--stop", "\\n\\n", "--no-escape")
    check(r.returncode == 0 and "\n\n" in r.stdout, "--no-escape: --stop '\\n\\n' is a backslash and an n")
    # --seed -1: a random seed on standard error; giving it back repeats the run.
    args = ["generate", "--model", path, "Once upon a time", "--temperature", "1", "--max-new-tokens", "12"]
    r = ffn(*args, "--seed", "-1")
    import re  # noqa: PLC0415
    m = re.search(r"--seed -1: seed (\d+) \(give --seed \1 to repeat the run\)", r.stderr)
    again = ffn(*args, "--seed", m.group(1)) if m else None
    check(r.returncode == 0 and m is not None and again.stdout == r.stdout,
          f"--seed -1 prints the seed it drew, and that seed repeats the text: {r.stderr.strip()!r}")
    # --show-prompt: the template rendered and its ids, as transformers' apply_chat_template gives them.
    r = ffn("generate", "--model", path, "--chat", "Hi\\tthere C:\\users\\me", "--system", "Be brief.", "--show-prompt")
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi\tthere C:\\users\\me"}]
    try:
        from transformers import AutoTokenizer  # noqa: PLC0415
        tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
        want_text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        want_ids = tok.apply_chat_template(msgs, add_generation_prompt=True)
    except ImportError:
        print("SKIPPED: --show-prompt against transformers (not importable); checked against ffn's own ids")
        want_text = r.stdout.rsplit("\n--- ids", 1)[0]
        want_ids = [int(x) for x in ffn("tokenize", "--model", path, want_text).stdout.split()]
    check(r.returncode == 0 and r.stdout == f"{want_text}\n--- ids ({len(want_ids)} tokens):\n{' '.join(map(str, want_ids))}\n",
          f"--show-prompt prints the rendered prompt (\\t unescaped, \\u without hex digits and \\m kept) and its ids: "
          f"{r.stdout[-120:]!r}")
    # --chat-template FILE replaces the model's.
    tpl = os.path.join(tmp, "plain.jinja")
    open(tpl, "w", encoding="utf-8").write("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:")
    r = ffn("generate", "--model", path, "--chat", "Hi", "--chat-template", tpl, "--show-prompt")
    check(r.returncode == 0 and r.stdout.startswith("user: Hi\nassistant:\n--- ids"), f"--chat-template FILE: {r.stdout!r}")
    r = ffn("chat", "--model", path, "--system", "S", "--chat-template", tpl, "--show-prompt", stdin="\n  \nHello\n")
    check(r.returncode == 0 and r.stdout.startswith("system: S\nuser: Hello\nassistant:\n--- ids"),
          f"chat --show-prompt: the first turn's prompt (blank lines skipped): {r.stdout!r}")
    r = ffn("chat", "--model", path, "--chat-template", tpl, "--show-prompt", stdin="\x1b[200~Pasted one\n\nthree\x1b[201~ typed\n")
    check(r.returncode == 0 and r.stdout.startswith("user: Pasted one\n\nthree typed\nassistant:\n--- ids"),
          f"chat: a bracketed paste is one message, up to the Enter after it: {r.stdout!r}")
    # chat: --context 80 takes a 37-token first turn and cuts the reply at the context (finish: length).
    r = ffn("chat", "--model", path, "--context", "40", "--max-new-tokens", "128", "--json",
            stdin="What is the capital of France?\n")
    j = [json.loads(x) for x in r.stdout.splitlines()] if r.returncode == 0 else []
    check(len(j) == 1 and j[0]["prompt_tokens"] == 37 and j[0]["new_tokens"] == 3 and j[0]["finish_reason"] == "length",
          f"chat --context 40: a 37-token first turn gets the 3 positions left, finish length: {r.stdout!r} {r.stderr!r}")
    r = ffn("chat", "--model", path, "--context", "30", stdin="What is the capital of France?\n")
    check(refused(r, ["37 tokens", "past the context of 30", "--context-shift"]),
          f"chat: a prompt past the context alone is refused, naming --context-shift: {r.stderr!r}")
    # Multi-line messages, blank lines skipped, --json, the stderr line's rate and finish reason.
    stdin = 'Say hi.\n   \n"""First line\n\nthird line."""\nTwo \\\nlines.\n\x1b[200~a\nb\x1b[201~\n'
    r = ffn("chat", "--model", path, "--json", "--max-new-tokens", "8", stdin=stdin)
    j = [json.loads(x) for x in r.stdout.splitlines()] if r.returncode == 0 else []
    lines = [x for x in r.stderr.splitlines() if x.startswith("[turn")]
    check(len(j) == 4 and [x["turn"] for x in j] == [1, 2, 3, 4] and len(lines) == 4 and
          all(re.search(r"read in [0-9.]+ s; \d+ new tokens, [0-9.]+ tokens/s; finish: (stop|length);", x) for x in lines),
          f"chat: a \"\"\" block and a \\ continuation are one message each, blank lines skipped, one JSON a turn: "
          f"{[x.get('reply') for x in j]} {lines}")
    history = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": j[0]["reply"] if j else ""},
               {"role": "user", "content": "First line\n\nthird line."}]
    mfile = os.path.join(tmp, "multi.json")
    json.dump(history, open(mfile, "w", encoding="utf-8"))
    g = ffn("generate", "--model", path, "--messages", mfile, "--max-new-tokens", "8")
    check(len(j) == 4 and g.stdout == j[1]["reply"] + "\n", "chat: the \"\"\" block is the message its lines make")
    # An invalid UTF-8 line is named as standard input's line, not blamed on the model file.
    r = subprocess.run([FFN, "chat", "--model", path, "--max-new-tokens", "4"], capture_output=True,
                       input=b"Hi\n\xff\xfe\n")
    err = r.stderr.decode("utf-8", "replace")
    check(r.returncode == 2 and "standard input: line 2: not valid UTF-8" in err and path not in err.split("error:")[-1],
          f"chat: a bad UTF-8 line names standard input's line: {err.strip()[-160:]!r}")
    # --context-shift drops the oldest turns and says so; the session goes on.
    r = ffn("chat", "--model", path, "--context", "120", "--max-new-tokens", "30", "--context-shift",
            stdin="Hi\nTell me about Paris.\nAnd London?\nAnd Rome?\n")
    check(r.returncode == 0 and len(r.stdout.splitlines()) == 4 and "--context-shift dropped the oldest" in r.stderr,
          f"chat --context-shift: 4 turns in a 120-position context: {r.stderr.strip()[-300:]!r}")
    # bench --generate: 1 warmup and 3 runs by default (the README line above); past a minute it stops
    # with the estimate; its peak memory is generate's, not twice it (the bandwidth is read before the
    # model loads).
    r = ffn("bench", "--generate", "--model", path, "--repeats", "400")
    check(refused(r, ["--generate", "401 runs", "over the 60 s limit", "--yes"]) and r.stdout == "",
          f"bench --generate: 400 repeats stop after the first run with the estimate: {r.stderr.strip()!r}")
    if os.environ.get("ASAN_OPTIONS") or os.environ.get("TSAN_OPTIONS"):
        print("SKIPPED: bench --generate's peak memory: a sanitizer's allocator keeps freed memory (quarantine)")
        return
    rc_b, rss_b = rss_of(["bench", "--generate", "--model", path, "--prompt-tokens", "64", "--new-tokens", "8"])
    rc_g, rss_g = rss_of(["generate", "--model", path, "x", "--max-new-tokens", "8"])
    check(rc_b == 0 and rc_g == 0 and rss_b <= 1.25 * rss_g,
          f"bench --generate peaks at {rss_b / 2**20:.0f} MiB, generate at {rss_g / 2**20:.0f} MiB")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        random_models(tmp)
        smollm2(tmp)
        new_user(tmp)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
