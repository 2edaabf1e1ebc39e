"""A plain `pip install .` into a clean virtualenv (no -e, no extras, no overrides) gives a set that refuses
CVE-2025-43859's malformed chunk: the smuggling test runs against that venv's own sandgate and mitmproxy.

The dependencies' wheels are what `pip wheel .` resolves for this pyproject.toml, kept between runs (WHEELS,
keyed by its dependencies, its build requirements and the Python version): a run installs from them without
asking the registry, so the set installed is the one a plain install resolves, and the test costs one venv and
one offline install instead of a resolution and a download. A changed dependency (or a fresh machine, as in CI) resolves afresh.

The venv is made without pip (ensurepip's own install of pip costs more CPU than the rest of the venv): the test's
pip installs into it (`pip --python VENV install .`), the same resolution and build as the venv's own pip would run.

The venv goes on tmpfs (/dev/shm) when it has room: the install writes about 8,000 files (210 MiB), which cost
about 2.5 s of system CPU on this machine's ext4 and 0.3 s on tmpfs.

Bytecode: pip compiles what it installs (the test skips it with --no-compile: every module of every dependency),
and a venv's processes keep what they compile in its `__pycache__` directories (PYTHONPYCACHEPREFIX is emptied for
them). What the venv's processes compiled in one run is kept (BYTECODE, hash-checked: PEP 552) and laid into the
next run's fresh venv where pip's compile step would have put it; the interpreter checks each file against the
source's hash before using it and compiles again a module whose source changed (sandgate's own, at every commit).
Compiling what `sandgate serve` imports cost about 3 s of CPU a run."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import secrets
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
BYTECODE = WHEELS.parent / "bytecode" / importlib.util.MAGIC_NUMBER.hex()     # by site-packages path, per Python
SHM = Path("/dev/shm")
SHM_ROOM = 1 << 30          # what tmpfs must have free for the venv (about 210 MiB installed) and then some


def scratch(tmp_path_factory) -> tuple[Path, bool]:
    """A directory for the copy and the venv: on tmpfs when it has room (the caller removes it), else pytest's.
    One a killed run left on tmpfs (its process gone) is removed here."""
    try:
        room = os.statvfs(SHM)
    except OSError:
        room = None
    if room is None or room.f_bavail * room.f_frsize < SHM_ROOM:
        return tmp_path_factory.mktemp("clean-install"), False
    for old in SHM.glob("sandgate-clean-install-*"):
        if not Path("/proc", old.name.split("-")[3]).exists():
            shutil.rmtree(old, ignore_errors=True)
    tmp = SHM / f"sandgate-clean-install-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    return tmp, True


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


# what the clean venv's processes run with on top of this environment: bytecode in the venv's own __pycache__
OWN_BYTECODE = {"PYTHONPYCACHEPREFIX": ""}


def site_packages(python: Path) -> Path:
    return python.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def lay_bytecode(site: Path) -> int:
    """The kept bytecode, into the __pycache__ directories of the packages the venv has; the time (of the venv's
    file system) after which a file there is one the venv's processes wrote."""
    for pyc in BYTECODE.rglob("*.pyc"):
        dest = site / pyc.relative_to(BYTECODE)
        if dest.parent.parent.is_dir():
            dest.parent.mkdir(exist_ok=True)
            shutil.copyfile(pyc, dest)
    mark = site.parent / "bytecode-laid"
    mark.touch()
    return mark.stat().st_mtime_ns


def keep_bytecode(site: Path, laid: int) -> None:
    """What the venv's processes compiled, kept hash-checked: a timestamp-checked file is made so (PEP 552's
    header, the source's hash instead of its time and size)."""
    for pyc in site.rglob("__pycache__/*.pyc"):
        if pyc.stat().st_mtime_ns <= laid:
            continue
        data = pyc.read_bytes()
        if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
            continue
        if not int.from_bytes(data[4:8], "little") & 1:
            try:
                source = (pyc.parent.parent / (pyc.name.split(".", 1)[0] + ".py")).read_bytes()
            except OSError:
                continue
            data = data[:4] + (0b11).to_bytes(4, "little") + importlib.util.source_hash(source) + data[16:]
        kept = BYTECODE / pyc.relative_to(site)
        kept.parent.mkdir(parents=True, exist_ok=True)
        part = kept.with_name(f"{kept.name}.{os.getpid()}")
        part.write_bytes(data)
        os.replace(part, kept)


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory):
    tmp, own = scratch(tmp_path_factory)
    try:
        python = install(tmp)
        laid = lay_bytecode(site_packages(python))
        yield python
        keep_bytecode(site_packages(python), laid)
    finally:
        if own:
            shutil.rmtree(tmp, ignore_errors=True)


def install(tmp: Path) -> Path:
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
                         cwd=clean_venv.parent, env={**os.environ, **OWN_BYTECODE})
    assert out.returncode == 0, out.stderr
    h11_version, mitm_version, where = out.stdout.split()
    assert tuple(int(x) for x in h11_version.split(".")[:2]) >= (0, 16)
    assert mitm_version.startswith("12.")
    assert where.startswith(str(clean_venv.parent.parent)), "sandgate must come from the clean venv"


def test_smuggling_refused_by_the_clean_install(clean_venv, tmp_path, upstream):
    with Sandgate(tmp_path, LOOPBACK_CONFIG, env=OWN_BYTECODE, python=str(clean_venv)) as sg:
        assert_malformed_chunk_refused(sg, upstream)
    assert sys.executable != str(clean_venv)
