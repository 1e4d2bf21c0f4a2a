"""--isa on every command, checked with the kernel report (issue 63).

Every command of the registry (read from `ffn --help`, so a new command
without a case here fails) runs once on small inputs with `--isa scalar` and
FFN_KERNEL_REPORT=1; the line it prints on exit, "ffn: kernels run: ...",
must name scalar alone (or none, for a command that computes nothing). The
report records every execution context's kernel set (ffn::isas_run,
include/ffn/diagnostics.hpp), so a call below a command that chose its own
ISA shows up as a second name. A control run without --isa must name this
CPU's best ISA, which shows the report can fail (skipped, saying so, on a
CPU whose best is scalar).

Usage: test_isa_flag.py FFN DATA   (DATA: tests/data)
Exits 77 (skipped) without numpy.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy is not installed")
    sys.exit(77)

FFN, DATA = sys.argv[1], sys.argv[2]
LLAMA = os.path.join(DATA, "llama", "gqa2_untied")
MARIAN = os.path.join(DATA, "marian", "swish_shared")
MINILM = os.environ.get("FFN_MODEL_DIR", os.path.expanduser("~/.cache/ffn/all-MiniLM-L6-v2"))
CROSS_ENCODER = os.path.join(DATA, "cross_encoder", "logits")
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def report(stderr):
    m = re.findall(r"^ffn: kernels run: (.*)$", stderr, re.M)
    return m[-1].split(", ") if m else None


def run(args, stdin=None, cwd=None):
    env = dict(os.environ, FFN_KERNEL_REPORT="1")
    env.pop("FFN_ISA", None)
    return subprocess.run([FFN, *args], capture_output=True, text=True, errors="replace", input=stdin, env=env,
                          cwd=cwd, timeout=300)


def serve_case(tmp):
    """ffn serve --isa scalar: one completion, then SIGTERM; the report on its exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, FFN_KERNEL_REPORT="1")
    env.pop("FFN_ISA", None)
    p = subprocess.Popen([FFN, "serve", "--model", LLAMA, "--port", str(port), "--isa", "scalar"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.2)
        body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 2}).encode()
        req = urllib.request.Request(base + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            answered = r.status == 200
    except Exception as e:  # noqa: BLE001
        answered = False
        print("serve:", e)
    p.send_signal(signal.SIGTERM)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    return p.returncode if answered else -1, err


def main():
    commands = re.findall(r"^  (\S+)\s{2,}", run(["--help"]).stdout.split("Subcommands:")[1], re.M)
    with tempfile.TemporaryDirectory() as tmp:
        p = lambda name: os.path.join(tmp, name)  # noqa: E731
        rng = np.random.default_rng(0)
        np.save(p("x.npy"), rng.standard_normal((6, 16)).astype(np.float32))
        np.save(p("dy.npy"), rng.standard_normal((6, 16)).astype(np.float32))
        np.save(p("x3.npy"), rng.standard_normal((2, 3, 16)).astype(np.float32))
        np.save(p("t.npy"), rng.standard_normal((64, 16)).astype(np.float32))
        np.save(p("tx.npy"), rng.standard_normal((64, 16)).astype(np.float32))
        # decoder_golden's case000: one layer, d_model 16, 4 heads; any target and memory of its width.
        dec = "case000."
        golden = os.path.join(DATA, "decoder_golden.safetensors")
        np.save(p("dx.npy"), rng.standard_normal((3, 6, 16)).astype(np.float32))
        np.save(p("ddy.npy"), rng.standard_normal((3, 6, 16)).astype(np.float32))
        np.save(p("mem.npy"), rng.standard_normal((3, 5, 16)).astype(np.float32))
        with open(p("ids.txt"), "w") as f:
            f.write("5 6 7\n8 9\n")
        with open(p("chat.jinja"), "w") as f:
            f.write("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
        setup = [["init", "--d-model", "16", "--d-ff", "24", "--norm", "pre", "--output", p("w.safetensors")],
                 ["init", "--encoder", "--d-model", "16", "--d-ff", "24", "--heads", "2", "--output", p("e.safetensors")]]
        for a in setup:
            r = run(a)
            check(r.returncode == 0, "setup: ffn " + " ".join(a[:2]) + " " + r.stderr.strip())
        W, E = p("w.safetensors"), p("e.safetensors")
        decoder = ["--weights", golden, "--prefix", dec, "--heads", "4", "--activation", "relu", "--norm", "post", "--input", p("dx.npy"), "--memory", p("mem.npy")]
        small = ["--repeats", "1", "--warmup", "0", "--d-model", "16", "--d-ff", "24"]
        # command -> its runs (argument lists after the command name); None: skipped, with the reason.
        cases = {
            "run": [["--weights", W, "--input", p("x.npy"), "--output", p("y.npy")],
                    ["--weights", W, "--input", p("x.npy"), "--output", p("y8.npy"), "--dtype", "int8"]],
            "grad": [["--weights", W, "--input", p("x.npy"), "--grad-output", p("dy.npy"), "--output-dir", p("g")]],
            "init": [["--d-model", "8", "--d-ff", "8", "--output", p("w2.safetensors")]],
            "quantize": [["--weights", W, "--dtype", "int8", "--calibrate", p("x.npy"), "--output", p("q.safetensors")]],
            "bench": [["--tokens", "16", *small], ["--tokens", "16", *small, "--dtype", "int8"],
                      ["--encoder", "--heads", "2", "--batch", "1", "--seq", "4", *small],
                      ["--generate", "--model", LLAMA, "--prompt-tokens", "4", "--new-tokens", "2", "--repeats", "1",
                       "--warmup", "0"],
                      ["--translate", "--model", MARIAN, "--input-file", p("ids.txt"), "--max-new-tokens", "3",
                       "--repeats", "1", "--warmup", "0"]],
            "train": [["--data", p("tx.npy"), "--targets", p("t.npy"), "--epochs", "1", "--d-ff", "8",
                       "--output", p("trained.safetensors")]],
            "demo": [["approximate", "--steps", "3", "--plot", p("a.svg")],
                     ["interaction", "--epochs", "1", "--train", "64", "--test", "32", "--plot", p("i.svg")],
                     ["translate", "--steps", "2", "--held-out", "8", "--d-model", "16", "--heads", "2", "--d-ff", "16",
                      "--layers", "1", "--batch", "4", "--model-dir", p("nt"), "--loss-plot", p("l.svg"),
                      "--attention-plot", p("att.svg")],
                     ["number-words", "3"]],
            "encode": [["--weights", E, "--input", p("x3.npy"), "--output", p("ey.npy")]],
            "encode-grad": [["--weights", E, "--input", p("x3.npy"), "--grad-output", p("x3.npy"), "--output-dir", p("eg")]],
            "decode": [[*decoder, "--output", p("dy_out.npy")]],
            "decode-grad": [[*decoder, "--grad-output", p("ddy.npy"), "--output-dir", p("dg")]],
            "embed": ([["--model", MINILM, "a short text"], ["--model", MINILM, "--dtype", "int8", "a short text"]]
                      if os.path.isfile(os.path.join(MINILM, "model.safetensors"))
                      else None),
            "rerank": [["--model", CROSS_ENCODER, "--query", "where is the cat", "the cat", "a dog"]],
            "translate": [["--model", MARIAN, "--ids", "--input-file", p("ids.txt"), "--max-new-tokens", "3"]],
            "generate": [["--model", LLAMA, "--ids", "1 2 3", "--max-new-tokens", "3"]],
            "tokenize": [["--model", LLAMA, "hello"]],
            "chat": [["--model", LLAMA, "--chat-template", p("chat.jinja"), "--max-new-tokens", "2"]],
        }
        for c in commands:
            if c == "serve":
                rc, err = serve_case(tmp)
                isas = report(err)
                check(rc == 0 and isas is not None and set(isas) <= {"scalar", "none"},
                      f"serve --isa scalar: one completion answered; kernels run: {isas} {err.strip()[-300:]}")
                continue
            if c not in cases:
                check(False, f"{c}: a command without a case in test_isa_flag.py (add one)")
                continue
            if cases[c] is None:
                print(f"SKIPPED {c}: no model at {MINILM} (scripts/setup.sh installs all-MiniLM-L6-v2)")
                continue
            for a in cases[c]:
                if c == "demo":
                    a = [a[0], "--isa", "scalar", *a[1:]]
                else:
                    a = [*a, "--isa", "scalar"]
                r = run([c, *a], stdin="hello\n" if c == "chat" else None, cwd=tmp)
                isas = report(r.stderr)
                check(r.returncode == 0 and isas is not None and set(isas) <= {"scalar", "none"},
                      f"{c} {' '.join(a[:3])} ...: exit {r.returncode}, kernels run: {isas}"
                      + ("" if r.returncode == 0 else " " + r.stderr.strip()[-300:]))
        # The control: without --isa the best ISA runs, and the report says so.
        r = run(["run", "--weights", W, "--input", p("x.npy"), "--output", p("y_auto.npy")])
        isas = report(r.stderr)
        if isas == ["scalar"]:
            print("SKIPPED control: this CPU's best ISA is scalar, so a run without --isa reports scalar too")
        else:
            check(r.returncode == 0 and isas is not None and "scalar" not in isas,
                  f"control: ffn run without --isa reports the best ISA, not scalar: {isas}")
        # An unknown ISA is refused before any work, naming the flag.
        r = run(["run", "--weights", W, "--input", p("x.npy"), "--output", p("never.npy"), "--isa", "turbo"])
        check(r.returncode == 2 and r.stderr.startswith("ffn: error: --isa") and not os.path.exists(p("never.npy")),
              "--isa turbo: refused, naming the flag: " + r.stderr.strip())
    print("FAILED: " + "; ".join(failures) if failures else "PASSED")
    sys.exit(1 if failures else 0)


main()
