"""Red team: DNS rebinding between the address check and the dial, end to end, in a loopback-only network
namespace (tests/support/rebind_probe.py): a real DNS server answers the allowed address first and the metadata
address next. A connection is dialled to the address it checked (one query); the next connection asks again and
the rebound answer is refused by name."""
from __future__ import annotations

import json
import os
import shutil

from tests.conftest import need
from tests.support import netns
from tests.support.gateway import ROOT


def test_a_name_rebound_to_the_metadata_address_between_check_and_dial_is_refused(tmp_path):
    need(os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("ip") is not None,
         "root, unshare and ip for a loopback-only network namespace")
    proc = netns.run_probe(str(ROOT / "tests/support/rebind_probe.py"), str(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    netns.assert_isolated(out["isolation"])     # the probe and its sandgate had loopback only
    first, second = out["first"], out["second"]
    # checked and dialled with one answer: one query, and the request reached the address that was checked
    assert first["a_queries"] == 1 and first["status"] == 200 and first["upstream_saw"] == 1
    # the next connection asks again (TTL 0): the rebound answer is refused by name, nothing more reaches anyone
    assert second["a_queries"] == 2
    assert second["status"] == 403 and json.loads(second["body"])["code"] == "address.link_local"
    assert second["upstream_saw"] == 1
    assert out["events"][-1]["action"] == "deny" and out["events"][-1]["codes"] == ["address.link_local"]
