"""Red team: inputs regorus cannot take must deny, never crash the process that evaluates them.

regorus' `set_input` segfaults on a Python string holding a lone surrogate ("\\ud800": what mitmproxy's
surrogateescape makes of invalid UTF-8 in a path, or what a JSON body's "\\ud800" escape decodes to). With
`policy.isolation = "thread"` that killed the whole gateway; with worker processes it killed a worker on every
such call. Each case runs in a child process so a crash fails the test instead of taking pytest down.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import asyncio, json, sys
from gateway.policy.embedded import EmbeddedEngine
from gateway.policy.isolated import IsolatedEngine

async def main():
    cls = {"thread": EmbeddedEngine, "process": IsolatedEngine}[sys.argv[1]]
    engine = cls(sys.argv[2], timeout_s=5.0, workers=1)
    await engine.start()
    try:
        bad = eval(sys.argv[3])
        doc = {"kind": "toolcall", "tool": {"name": "x", "args": bad}}
        first = await engine.decide("toolcall", doc)
        after = await engine.decide("toolcall", {"kind": "toolcall", "tool": {"name": "x", "args": {}}})
        print(json.dumps({"first": [first.action, list(first.codes)], "after": [after.action, list(after.codes)],
                          "exits": getattr(engine, "_pool", None) is not None}))
    finally:
        await engine.close()

asyncio.run(main())
"""

POLICY = ('package sandgate.toolcall\nimport rego.v1\n'
          'decision := {"action": "allow", "reasons": [], "codes": ["ok"]} if count(input.tool.args) == 0\n'
          'decision := {"action": "ask", "reasons": ["args"], "codes": ["args"]} if count(input.tool.args) > 0\n')

BAD_ARGS = [
    "{'a': '\\ud800'}",                   # a lone high surrogate (JSON "\\ud800")
    "{'\\udcff': 1}",                     # a lone low surrogate in a key (surrogateescape of byte 0xff)
    "{'a': ['ok', {'b': 'x\\udc80y'}]}",  # nested
    "{'a': float('nan')}",                # not JSON
    "{'a': float('inf')}",
]


@pytest.mark.parametrize("isolation", ["thread", "process"])
@pytest.mark.parametrize("bad", BAD_ARGS)
def test_unrepresentable_input_denies_without_crashing(tmp_path, isolation, bad):
    (tmp_path / "toolcall.rego").write_text(POLICY)
    (tmp_path / "egress.rego").write_text('package sandgate.egress\nimport rego.v1\n'
                                         'decision := {"action": "deny", "reasons": [], "codes": []}\n')
    proc = subprocess.run([sys.executable, "-c", SCRIPT, isolation, str(tmp_path), bad], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"the evaluating process died ({proc.returncode}): {proc.stderr[-2000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["first"] == ["deny", ["policy.error"]]
    assert out["after"] == ["allow", ["ok"]]           # the engine still answers ordinary inputs
    if isolation == "process":
        assert "policy worker exited" not in proc.stderr and "restarted" not in proc.stderr
