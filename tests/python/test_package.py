"""The package as `pip install .` put it into .venv (scripts/setup.sh): it
imports without the build tree, has its stubs and marker, and is the version
this tree builds."""
import os
import pathlib
import subprocess
import sys

import pytest

import ffn


def test_installed_package_imports_from_site_packages():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", "import ffn, ffn.torch, sys; print(ffn.__file__); print(ffn.__version__)"],
                       capture_output=True, text=True, env=env, cwd="/")
    if r.returncode != 0 and "No module named 'ffn'" in r.stderr:
        pytest.skip(f"ffn is not installed in {sys.executable}'s environment (scripts/setup.sh runs pip install .)")
    assert r.returncode == 0, r.stderr
    path, version = r.stdout.split()
    assert "site-packages" in path, path
    assert version == ffn.__version__
    pkg = pathlib.Path(path).parent
    for name in ("_ffn.pyi", "py.typed", "torch.py"):
        assert (pkg / name).is_file(), name
    assert "class Layer" in (pkg / "_ffn.pyi").read_text()
