"""Red team: DNS rebinding between the address check and the dial, end to end, in a loopback-only network
namespace (tests/support/rebind_probe.py): a real DNS server answers the allowed address first and the metadata
address after. Each request dials the address that was vetted, or is refused: never the rebound one."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from tests.conftest import need
from tests.support.gateway import ROOT


def test_a_name_rebound_to_the_metadata_address_between_check_and_dial_is_refused(tmp_path):
    need(os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("ip") is not None,
         "root, unshare and ip for a loopback-only network namespace")
    proc = subprocess.run(["unshare", "-n", "-m", "--", sys.executable, str(ROOT / "tests/support/rebind_probe.py"),
                           str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["a_queries"] >= 2, out                  # the name was looked up again after it changed
    for status, body in out["answers"]:
        # Dialled the address that was vetted (200 from the loopback upstream), or refused by sandgate: never a
        # dial to the rebound address (the namespace has no route there: it would fail as "unreachable").
        assert status in (200, 403, 502), (status, body)
        assert "unreachable" not in body.lower() and "169.254.169.254" not in body or "link_local" in body
        if status == 502:
            assert "sandgate refused rebind.test: address.link_local" in body
        if status == 403:
            assert "address.link_local" in body
    assert out["answers"][0][0] == 200 and out["upstream_saw"] == [a[0] for a in out["answers"]].count(200)
    assert any(status != 200 for status, _ in out["answers"]), "the rebound name was never refused"
