"""Red team: DNS rebinding between the address check and the dial, end to end, in a loopback-only network
namespace (tests/support/rebind_probe.py): a real DNS server answers the allowed address first and the metadata
address next. The dial is refused by name; the upstream on the first address is never reached either."""
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
    assert out["a_queries"] >= 2                       # checked once, resolved again for the dial
    assert out["status"] == 502 and "sandgate refused rebind.test: address.link_local" in out["body"]
    assert "unreachable" not in out["body"].lower()    # refused by sandgate, not by the namespace's lack of routes
    assert out["upstream_saw"] == 0
    assert out["events"] and "address.link_local" in out["events"][-1]["detail"]["error"]
