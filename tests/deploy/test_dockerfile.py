"""deploy/Dockerfile, parsed with BuildKit's own parser (PyPI `dockerfile`).

Not run here: `docker build` (this machine has only the docker client, no engine). What the build would do is
checked piece by piece instead: base image, non-root user, no remote ADD, the one plain `pip install`, the files
it copies exist and are not ignored, and the install step covers every package pyproject.toml ships.
"""
from __future__ import annotations

import fnmatch
import shlex
import tomllib

import dockerfile           # BuildKit's parser, from PyPI

from tests.deploy.recipes import DEPLOY, ROOT

COMMANDS = dockerfile.parse_file(str(DEPLOY / "Dockerfile"))


def instructions(cmd: str) -> list:
    return [c for c in COMMANDS if c.cmd.upper() == cmd]


def copies() -> dict[str, str]:
    """COPY source -> destination (one source per COPY, except the pyproject/README pair)."""
    out = {}
    for c in instructions("COPY"):
        *srcs, dest = c.value
        for src in srcs:
            out[src] = dest
    return out


def test_one_stage_on_python_312_slim_pinned_by_digest():
    froms = instructions("FROM")
    assert len(froms) == 1
    image, _, digest = froms[0].value[0].partition("@")
    assert image == "python:3.12-slim"
    algo, _, hexdigest = digest.partition(":")
    assert algo == "sha256" and len(hexdigest) == 64 and int(hexdigest, 16) >= 0


def test_no_add_and_nothing_fetched_from_urls():
    assert instructions("ADD") == []
    for c in COMMANDS:
        if c.cmd.upper() in ("COPY", "RUN"):
            text = " ".join(c.value)
            assert "http://" not in text and "https://" not in text, c.original
            assert not {"curl", "wget"} & set(shlex.split(text)), c.original


def test_runs_as_a_numeric_non_root_user_created_in_the_image():
    users = instructions("USER")
    assert users, "no USER: the container would run as root"
    final = users[-1].value[0]
    uid, _, gid = final.partition(":")
    assert uid.isdigit() and int(uid) != 0, final          # numeric, so runAsNonRoot can verify it
    assert not gid or (gid.isdigit() and int(gid) != 0)
    runs = " ".join(" ".join(r.value) for r in instructions("RUN"))
    assert f"useradd --system --uid {uid}" in runs
    last_run = max(i for i, c in enumerate(COMMANDS) if c.cmd.upper() == "RUN")
    assert COMMANDS.index(users[-1]) > last_run            # nothing runs as root after the switch


def test_the_install_is_one_plain_pip_install_of_the_project_held_to_the_lock():
    pip_runs = [r for r in instructions("RUN") if "pip install" in r.value[0]]
    assert len(pip_runs) == 1
    words = shlex.split(pip_runs[0].value[0].split("&&")[0])
    assert words[:4] == ["pip", "install", "--constraint", "constraints.txt"]
    assert copies()["deploy/constraints.txt"] == "./"      # beside pyproject.toml in /src
    targets = words[4:]
    assert targets == [".[postgres]"], targets             # the project itself, PostgreSQL driver included
    for forbidden in ("--index-url", "--extra-index-url", "--trusted-host", "--ignore-requires-python",
                      "--no-deps", "-e"):
        assert forbidden not in words


def test_copied_sources_exist_and_are_not_dockerignored():
    ignore = [line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    for src in copies():
        path = ROOT / src
        assert path.exists(), src
        parts = path.relative_to(ROOT).parts
        for pattern in ignore:
            # "**/x" ignores x at any depth; "x" only at the top of the context.
            where = parts if pattern.startswith("**/") else parts[:1]
            assert not any(fnmatch.fnmatch(p, pattern.removeprefix("**/")) for p in where), (src, pattern)


def test_the_install_step_sees_every_package_pyproject_ships():
    """`pip install .` in /src builds from what was copied there: every package directory and the readme."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    copied_to_src = {src.rstrip("/") for src, dest in copies().items() if dest in ("./", f"{src}")}
    assert {"pyproject.toml", project["project"]["readme"]} <= copied_to_src
    package_dir = project["tool"]["setuptools"].get("package-dir", {})
    for package in project["tool"]["setuptools"]["packages"]:
        top = package.split(".")[0]
        directory = package_dir.get(top, top)
        assert directory in copied_to_src, f"package {package} lives in {directory}/, which is not copied"


def test_ports_healthcheck_entrypoint_and_config():
    assert sorted(instructions("EXPOSE")[0].value) == ["8080", "8700"]
    health = instructions("HEALTHCHECK")[0]
    assert health.value == ("CMD", "sandgate-healthcheck")
    copied = copies()
    assert copied["deploy/healthcheck.py"] == "/usr/local/bin/sandgate-healthcheck"
    assert copied["deploy/docker-entrypoint.sh"] == "/usr/local/bin/sandgate-entrypoint"
    assert copied["deploy/sandgate-keys.py"] == "/usr/local/bin/sandgate-keys"
    assert instructions("ENTRYPOINT")[0].value == ("tini", "--", "sandgate-entrypoint")   # tini as PID 1
    runs = " ".join(" ".join(r.value) for r in instructions("RUN"))
    assert "apt-get install -y --no-install-recommends tini" in runs
    assert instructions("CMD")[0].value == ("serve",)
    env = {}
    for e in instructions("ENV"):
        env.update(dict(zip(e.value[::2], e.value[1::2])))
    assert copied["deploy/sandgate.toml"] == env["SANDGATE_CONFIG"]
    uid = instructions("USER")[-1].value[0].split(":")[0]
    assert f"install -d -o {uid} -g {uid} -m 0700 {env['SANDGATE_DATA_DIR']}" in runs


def test_the_images_default_config_listens_on_every_address_on_the_exposed_ports(tmp_path):
    from gateway.config import load_config

    cfg = load_config(DEPLOY / "sandgate.toml", tmp_path, environ={})
    assert cfg.proxy_listen == ("0.0.0.0", 8080) and cfg.api_listen == ("0.0.0.0", 8700)
    assert {str(cfg.proxy_listen[1]), str(cfg.api_listen[1])} == set(instructions("EXPOSE")[0].value)


def test_the_lock_pins_every_runtime_requirement_within_pyprojects_ranges():
    """deploy/constraints.txt (deploy/constraints.py writes it; CI runs that): one exact version per package, every
    dependency of the project and of its postgres extra among them, each inside the range pyproject.toml allows."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    lines = [line for line in (DEPLOY / "constraints.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    pins = {}
    for line in lines:
        name, sep, version = line.partition("==")
        assert sep and version and " " not in line, line
        assert canonicalize_name(name) not in pins, f"{name} pinned twice"
        pins[canonicalize_name(name)] = Version(version)
    assert "sandgate" not in pins                          # the project itself is installed from the source
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for text in project["dependencies"] + project["optional-dependencies"]["postgres"]:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in the lock"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name} {pins[name]} not in {req.specifier}"
    for test_only in ("pytest", "hypothesis", "playwright", "moto"):
        assert test_only not in pins, test_only             # the runtime install only
