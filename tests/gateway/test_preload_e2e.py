"""A sandgate whose configuration has databases or AWS credentials imports the SQL grammars (pglast, sqlglot) and
botocore's signers at start-up, on a thread, never on the event loop.

Before: the first wire statement (or shell `psql -c` decided inline) imported gateway/toolcalls/sql.py, pglast's
and sqlglot's modules, and the first AWS-signed request botocore, on the loop: 0.1-0.3 s of CPU with every
request of the proxy, the API and the PostgreSQL gateway stalled behind it. Checked in a fresh interpreter (this
process has imported them long ago): an audit hook records every import made while an event loop runs on the
importing thread, and gateway/app.py's own open_gateway starts everything.
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
from gateway.app import open_gateway
from gateway.config import load_config

cfg = load_config(sys.argv[1], sys.argv[2])


async def main():
    async with AsyncExitStack() as stack:
        await open_gateway(cfg, stack)
        return sorted(m for m in ("sqlglot.dialects.mysql", "pglast.parser", "botocore.auth",
                                  "gateway.toolcalls.sql") if m in sys.modules)


loaded = asyncio.run(main())
print(json.dumps({"on_loop": sorted(on_loop), "loaded": loaded}))
"""


def start(tmp_path, config: dict) -> dict:
    base = {"proxy": {"listen": f"127.0.0.1:{free_port()}"}, "api": {"listen": f"127.0.0.1:{free_port()}"},
            "policy": {"isolation": "thread", "workers": 1}}
    write_toml(tmp_path / "sandgate.toml", {**base, **config,
                                             "proxy": {**base["proxy"], **config.get("proxy", {})}})
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "sandgate.toml"), str(tmp_path / "data")],
                          cwd=ROOT, capture_output=True, text=True, timeout=180,
                          env={"PATH": "/usr/bin:/bin", "DB_PASSWORD": "pw", "AWS_KEY": "AKIAEXAMPLE",
                               "AWS_SECRET": "secret"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


DATABASES = {"proxy": {"postgres_listen": "127.0.0.1:0"},
             "databases": {"prod": {"upstream": "127.0.0.1:5432", "dbname": "app", "user": "app",
                                    "password": "env:DB_PASSWORD", "tls": "disable"}}}
AWS = {"secrets": {"aws": {"kind": "aws", "access_key_id": "env:AWS_KEY", "secret_access_key": "env:AWS_SECRET",
                           "hosts": ["*.amazonaws.com"]}}}


@pytest.mark.parametrize("config, expected", [
    pytest.param(DATABASES, ["gateway.toolcalls.sql", "pglast.parser", "sqlglot.dialects.mysql"], id="databases"),
    pytest.param(AWS, ["botocore.auth"], id="aws"),
    pytest.param({}, [], id="neither"),            # a start without them does not pay for them
])
def test_parsers_are_imported_at_start_up_off_the_loop(tmp_path, config, expected):
    got = start(tmp_path, config)
    assert got["on_loop"] == [], got
    assert got["loaded"] == expected, got
