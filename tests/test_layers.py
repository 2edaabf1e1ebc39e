"""The layering is written down as import-linter contracts (pyproject.toml) and checked on every run; a wrong
import breaks it (checked on a copy of the tree with one import added)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    assert LINT.exists(), "import-linter is a test dependency: pip install -e '.[test]'"
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=env)


def test_import_contracts_are_kept():
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert " 0 broken" in out.stdout, out.stdout


# (module the import is added to, the import, the contract it breaks)
WRONG = [
    ("gateway/store/bulk.py", "import gateway.sessions.spec", "Layers:"),                 # a service reaching up
    ("gateway/runtime/ids.py", "import gateway.app", "Only the CLI imports the composition root"),
    ("broker/specs.py", "import gateway.config", "The broker never imports the gateway"),
    ("sandgate/types.py", "import gateway.sessions.spec", "The harness side (sandgate)"),
    ("gateway/approvals/rules.py", "import sqlalchemy", "Pure cores import no service"),
    ("gateway/audit/log.py", "import aiohttp", "Services import neither aiohttp"),
    ("gateway/api/errors.py", "import gateway.egress.targets", "Layers:"),               # siblings: independent
    ("gateway/store/bulk.py", "import gateway.store.store", "No import cycles"),           # store.py imports bulk
]


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory):
    """One copy of the tree for the wrong-import tests (each adds its import, lints, and puts the file back): linted
    clean before the first and after the last, so a broken contract comes from the added import, and the copy,
    not the checkout, is what is read."""
    tmp = tmp_path_factory.mktemp("tree")
    for package in ("gateway", "broker", "sandgate"):
        shutil.copytree(ROOT / package, tmp / package, ignore=shutil.ignore_patterns("__pycache__", "static",
                                                                                      "templates"))
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    env = {**os.environ, "PYTHONPATH": str(tmp)}
    clean = lint(tmp, env)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    yield tmp, env
    clean = lint(tmp, env)
    assert clean.returncode == 0, "the copy was left with a wrong import: " + clean.stdout


@pytest.mark.parametrize("path,line,contract", WRONG, ids=[w[0] + ": " + w[1] for w in WRONG])
def test_a_wrong_import_breaks_a_contract(tree_copy, path, line, contract):
    tmp, env = tree_copy
    target = tmp / path
    original = target.read_text()
    target.write_text(original + f"\n{line}  # noqa: E402\n")
    try:
        out = lint(tmp, env)
    finally:
        target.write_text(original)
    assert out.returncode != 0, out.stdout
    broken = [ln for ln in out.stdout.splitlines() if " BROKEN" in ln]
    assert len(broken) >= 1 and any(ln.startswith(contract) for ln in broken), out.stdout


def test_every_part_of_the_gateway_has_a_layer():
    """A package or top-level module the layers contract does not name is not checked by it: name it."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in config if c["type"] == "layers")["layers"]
    named = {m.strip() for layer in layers for m in layer.replace(":", "|").split("|")}
    parts = {f"gateway.{p.stem}" for p in (ROOT / "gateway").iterdir()
             if (p.suffix == ".py" and p.stem not in ("__init__", "__main__")) or (p / "__init__.py").exists()}
    assert parts - named == set(), "add these to the layers contract in pyproject.toml"
    assert {"broker", "sandgate"} <= named
