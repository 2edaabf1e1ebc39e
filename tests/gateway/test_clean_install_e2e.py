"""A plain `pip install .` into a clean virtualenv (no -e, no extras, no overrides) gives a set that refuses
CVE-2025-43859's malformed chunk: the smuggling test runs against that venv's own sandgate and mitmproxy.

The dependencies' wheels are what `pip wheel .` resolves for this pyproject.toml, kept between runs (WHEELS,
keyed by its dependencies, its build requirements and the Python version): a run installs from them without
asking the registry, so the set installed is the one a plain install resolves, and the test costs one venv and
one offline install instead of a resolution and a download. A changed dependency (or a fresh machine, as in CI) resolves afresh.

The venv is made without pip (ensurepip's own install of pip costs more CPU than the rest of the venv): the test's
pip installs into it (`pip --python VENV install .`), the same resolution and build as the venv's own pip would run."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from tests.conftest import LOOPBACK_CONFIG, need
from tests.gateway.egress.test_robustness_e2e import assert_malformed_chunk_refused
from tests.support.gateway import ROOT, Sandgate

pytestmark = pytest.mark.timeout(1200)

SKIP = shutil.ignore_patterns(".git", ".venv*", "__pycache__", "*.egg-info", "build", "dist", ".sandgate",
                              "test-artifacts", ".pytest_cache", ".hypothesis", "tests")


WHEELS = Path(os.environ.get("SANDGATE_TEST_WHEELS") or Path.home() / ".cache" / "sandgate-tests" / "wheels")


def pip(python: Path, *args: str) -> list[str]:
    """`pip ARGS` run by this environment's pip for the interpreter `python` (its environment is what it changes)."""
    return [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check", *args]


def wheelhouse(python: Path, src: Path, tmp: Path) -> Path:
    """The wheels `pip wheel .` resolves for this pyproject.toml (sandgate's own left out: it is built from the
    checkout each run) and the build requirements, made once per set of requirements and Python version."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    what = [project["project"]["dependencies"], project["build-system"]["requires"], sys.version]
    key = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]
    house = WHEELS / key
    if house.is_dir():
        return house
    part = tmp / "wheels"
    out = subprocess.run(pip(python, "wheel", "--quiet", "--wheel-dir", str(part), str(src)),
                         capture_output=True, text=True, timeout=1100, cwd=tmp)
    need(out.returncode == 0, f"`pip wheel .` (registry reachable): {out.stderr[-600:]}")
    build = project["build-system"]["requires"]
    out = subprocess.run(pip(python, "wheel", "--quiet", "--wheel-dir", str(part), *build),
                         capture_output=True, text=True, timeout=600, cwd=tmp)
    need(out.returncode == 0, f"`pip wheel` of the build requirements (registry reachable): {out.stderr[-600:]}")
    for own in part.glob("sandgate-*.whl"):
        own.unlink()
    house.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copytree(part, house.with_name(house.name + f".{os.getpid()}"))
        os.rename(house.with_name(house.name + f".{os.getpid()}"), house)     # whole or not at all
    except OSError:
        if not house.is_dir():
            raise
    return house


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("clean-install")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)         # build from a copy: the checkout stays clean
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    house = wheelhouse(python, src, tmp)
    # --no-compile: what the test imports is compiled when imported, not every module of every dependency
    out = subprocess.run(pip(python, "install", "--quiet", "--no-compile", "--no-index", "--find-links", str(house),
                             str(src)), capture_output=True, text=True, timeout=1100, cwd=tmp)
    assert out.returncode == 0, f"`pip install .` from the wheels `pip wheel .` resolved: {out.stderr[-600:]}"
    return python


def test_clean_install_pins_a_safe_h11_and_mitmproxy_12(clean_venv):
    probe = ("import gateway, h11, mitmproxy.version as m; "
             "print(h11.__version__, m.VERSION, gateway.__file__)")
    out = subprocess.run([str(clean_venv), "-c", probe], capture_output=True, text=True, timeout=60,
                         cwd=clean_venv.parent)
    assert out.returncode == 0, out.stderr
    h11_version, mitm_version, where = out.stdout.split()
    assert tuple(int(x) for x in h11_version.split(".")[:2]) >= (0, 16)
    assert mitm_version.startswith("12.")
    assert where.startswith(str(clean_venv.parent.parent)), "sandgate must come from the clean venv"


def test_smuggling_refused_by_the_clean_install(clean_venv, tmp_path, upstream):
    with Sandgate(tmp_path, LOOPBACK_CONFIG, python=str(clean_venv)) as sg:
        assert_malformed_chunk_refused(sg, upstream)
    assert sys.executable != str(clean_venv)
