"""Red team: SQL that sent sqlglot into an endless loop.

With `ErrorLevel.RAISE` sqlglot keeps parsing after an error, and on a malformed COPY (`COPY #`,
`COPY t TO PROGRAM $$rm -rf ~$$` in the default dialect) it never stops, gathering error texts until memory runs
out: one `psql -c '...'` or `sql` tool call grew the gateway past 20 GB and the kernel killed it (the enrichment
timeout cannot stop a thread). Each case runs in a child process with a memory cap, so the old behaviour fails
the test instead of the machine.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1536 * 1024 ** 2, 1536 * 1024 ** 2))
from gateway.toolcalls.enrich import enrich_toolcall
from gateway.toolcalls.sql import describe_sql
S = {"id": "s", "workload": "persistent", "created_at": 0.0, "labels": {}, "frozen": False, "allow": [],
     "workspace": "/workspace", "secrets": []}
query = sys.argv[1]
out = {"sql": describe_sql(query)}
for tool, args in (("sql", {"query": query}), ("shell", {"command": "psql -c " + json.dumps(query)})):
    doc = enrich_toolcall(session=S, tool=tool, args=args, step=0, now=1.0, history=[], links={}, files={}).doc
    out[tool] = doc.get("sql") or {}
print(json.dumps(out))
"""

HOSTILE = [
    "COPY #",
    "COPY t TO PROGRAM $$rm -rf ~$$",
    "COPY DELETE */",
    "COPY */ E'\\x' ) PARTITION $$",
    "COPY JOIN TO } 'x'",
    "$$rm -rf ~$$ ; ; COPY }",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_malformed_copy_ends(query):
    try:
        proc = subprocess.run([sys.executable, "-c", SCRIPT, query], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"describing {query!r} did not end")
    assert proc.returncode == 0, proc.stderr[-1500:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(out["sql"]) >= {"parsed", "kinds"}
