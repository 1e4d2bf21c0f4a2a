#!/usr/bin/env bash
# After scripts/setup.sh, `ffn` is on PATH in the activated .venv: .venv/bin/ffn
# links to the program of build/ (README: the bare `ffn` commands work as written).
# Skipped, saying so, where setup made no .venv (no network for PyPI).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build_ffn="$1"
if [ ! -x "$root/.venv/bin/python" ]; then echo "venv_path: SKIPPED: no .venv (scripts/setup.sh makes it when PyPI is reachable)"; exit 77; fi
link="$root/.venv/bin/ffn"
[ -L "$link" ] || { echo "venv_path: FAIL: $link is not a link to the program (scripts/setup.sh makes it)"; exit 1; }
got="$(. "$root/.venv/bin/activate" && command -v ffn && ffn --version)" || { echo "venv_path: FAIL: ffn not runnable from the activated .venv"; exit 1; }
want="$("$build_ffn" --version)"
[ "$(echo "$got" | tail -1)" = "$want" ] || { echo "venv_path: FAIL: activated ffn says '$got', build's says '$want'"; exit 1; }
echo "venv_path: $(echo "$got" | head -1) -> $(readlink "$link"): $want"
