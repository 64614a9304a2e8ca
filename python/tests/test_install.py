"""`pip install ./python` works offline, with the system's setuptools."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent


def test_pip_installs_offline(tmp_path):
    src = tmp_path / "src"  # a copy: building writes build/ and *.egg-info beside the sources
    shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    site = tmp_path / "site"
    env = dict(os.environ, PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_ROOT_USER_ACTION="ignore")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                        "--target", str(site), str(src)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-c", "import ckpt; print(ckpt.__file__, ckpt.open.__doc__ is not None)"],
                       capture_output=True, text=True, cwd=tmp_path, env=dict(env, PYTHONPATH=str(site)), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(str(site / "ckpt" / "__init__.py")) and r.stdout.strip().endswith("True")
