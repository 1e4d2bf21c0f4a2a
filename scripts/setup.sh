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
#   scripts/setup.sh [more Debian packages to install first]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake make pkg-config libgomp1 googletest libgtest-dev nlohmann-json3-dev libcli11-dev libpugixml-dev
          python3-dev python3-venv python3-numpy python3-torch python3-pytest "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
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
