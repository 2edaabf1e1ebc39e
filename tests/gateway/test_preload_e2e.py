"""A sandgate whose configuration has databases or AWS credentials imports the SQL grammars (pglast, sqlglot) and
botocore's signers at start-up, on a thread, never on the event loop.

Before: the first wire statement (or shell `psql -c` decided inline) imported gateway/toolcalls/sql.py, pglast's
and sqlglot's modules, and the first AWS-signed request botocore, on the loop: 0.1-0.3 s of CPU with every
request of the proxy, the API and the PostgreSQL gateway stalled behind it. Checked in a fresh interpreter (this
process has imported them long ago): an audit hook records every import made while an event loop runs on the
importing thread, and gateway/app.py's own open_gateway starts everything. One interpreter imports what the
script imports first (gateway.app, gateway.config: neither imports the parsers) and forks a child per
configuration, which then reads it and starts: the state each start begins from is a fresh interpreter's after
those imports, and the imports are paid once, not three times (~2 s of CPU each).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.gateway import ROOT, write_toml
from tests.support.upstream import free_port

SCRIPT = r"""
import asyncio, json, sys
from contextlib import AsyncExitStack

WATCH = ("sqlglot", "pglast", "botocore", "gateway.toolcalls.sql")
on_loop = set()


def hook(event, args):
    if event == "import" and args[0].startswith(WATCH):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return                                       # not on an event loop's thread
        on_loop.add(args[0].split(".")[0] if not args[0].startswith("gateway") else args[0])


sys.addaudithook(hook)
import os
from gateway.app import open_gateway
from gateway.config import load_config


async def main(cfg):
    async with AsyncExitStack() as stack:
        await open_gateway(cfg, stack)
        return sorted(m for m in ("sqlglot.dialects.mysql", "pglast.parser", "botocore.auth",
                                  "gateway.toolcalls.sql") if m in sys.modules)


# what the imports made goes to the collector's permanent generation, as the test zygote does before it forks
# (tests/support/zygote.py): a child's collections then never walk, and so never copy, the heap it shares with this
# process
import gc
gc.collect()
gc.freeze()
# one child per (name, config, data dir), one after the other; each prints its line and ends through the
# interpreter's own shutdown (the SystemExit leaves the loop)
for name, config, data in zip(sys.argv[1::3], sys.argv[2::3], sys.argv[3::3]):
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        cfg = load_config(config, data)
        loaded = asyncio.run(main(cfg))
        print(json.dumps({"name": name, "on_loop": sorted(on_loop), "loaded": loaded}), flush=True)
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"the start of {name} exited with {os.waitstatus_to_exitcode(status)}")
"""


def start_all(tmp_path, configs: dict[str, dict]) -> dict[str, dict]:
    argv = []
    for name, config in configs.items():
        base = {"proxy": {"listen": f"127.0.0.1:{free_port()}"}, "api": {"listen": f"127.0.0.1:{free_port()}"},
                "policy": {"isolation": "thread", "workers": 1}}
        write_toml(tmp_path / f"{name}.toml", {**base, **config,
                                                "proxy": {**base["proxy"], **config.get("proxy", {})}})
        argv += [name, str(tmp_path / f"{name}.toml"), str(tmp_path / f"data-{name}")]
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, env={"PATH": "/usr/bin:/bin", "DB_PASSWORD": "pw", "AWS_KEY": "AKIAEXAMPLE",
                                            "AWS_SECRET": "secret"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = [json.loads(line) for line in proc.stdout.strip().splitlines() if line.startswith("{")]
    return {r.pop("name"): r for r in results}


DATABASES = {"proxy": {"postgres_listen": "127.0.0.1:0"},
             "databases": {"prod": {"upstream": "127.0.0.1:5432", "dbname": "app", "user": "app",
                                    "password": "env:DB_PASSWORD", "tls": "disable"}}}
AWS = {"secrets": {"aws": {"kind": "aws", "access_key_id": "env:AWS_KEY", "secret_access_key": "env:AWS_SECRET",
                           "hosts": ["*.amazonaws.com"]}}}


CONFIGS = {"databases": DATABASES, "aws": AWS, "neither": {}}


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    return start_all(tmp_path_factory.mktemp("preload"), CONFIGS)


@pytest.mark.parametrize("name, expected", [
    pytest.param("databases", ["gateway.toolcalls.sql", "pglast.parser", "sqlglot.dialects.mysql"], id="databases"),
    pytest.param("aws", ["botocore.auth"], id="aws"),
    pytest.param("neither", [], id="neither"),            # a start without them does not pay for them
])
def test_parsers_are_imported_at_start_up_off_the_loop(started, name, expected):
    got = started[name]
    assert got["on_loop"] == [], got
    assert got["loaded"] == expected, got
