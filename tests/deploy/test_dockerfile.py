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


def test_one_stage_on_python_312_slim():
    froms = instructions("FROM")
    assert [f.value[0] for f in froms] == ["python:3.12-slim"]


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


def test_the_install_is_one_plain_pip_install_of_the_project():
    pip_runs = [r for r in instructions("RUN") if "pip install" in r.value[0]]
    assert len(pip_runs) == 1
    words = shlex.split(pip_runs[0].value[0].split("&&")[0])
    assert words[:2] == ["pip", "install"]
    targets = words[2:]
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
    assert instructions("ENTRYPOINT")[0].value == ("sandgate-entrypoint",)
    assert instructions("CMD")[0].value == ("serve",)
    env = {}
    for e in instructions("ENV"):
        env.update(dict(zip(e.value[::2], e.value[1::2])))
    assert copied["deploy/sandgate.toml"] == env["SANDGATE_CONFIG"]
    runs = " ".join(" ".join(r.value) for r in instructions("RUN"))
    uid = instructions("USER")[-1].value[0].split(":")[0]
    assert f"install -d -o {uid} -g {uid} -m 0700 {env['SANDGATE_DATA_DIR']}" in runs


def test_the_images_default_config_listens_on_every_address_on_the_exposed_ports(tmp_path):
    from gateway.config import load_config

    cfg = load_config(DEPLOY / "sandgate.toml", tmp_path, environ={})
    assert cfg.proxy_listen == ("0.0.0.0", 8080) and cfg.api_listen == ("0.0.0.0", 8700)
    assert {str(cfg.proxy_listen[1]), str(cfg.api_listen[1])} == set(instructions("EXPOSE")[0].value)
