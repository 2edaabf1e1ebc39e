"""Forbidden destinations end to end, in a loopback-only network namespace (no packet can leave)."""
from __future__ import annotations

import json
import os
import shutil

from tests.conftest import need
from tests.support import netns
from tests.support.gateway import ROOT


def test_metadata_private_and_cgnat_destinations_are_refused(tmp_path):
    need(os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("ip") is not None,
         "root, unshare and ip for a loopback-only network namespace")
    proc = netns.run_probe(str(ROOT / "tests/support/forbidden_probe.py"), str(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    netns.assert_isolated(out["isolation"])     # the probe and its sandgate had loopback only
    results = out["results"]
    assert len(results) == 12
    for url, (status, code) in results.items():
        assert status == 403, (url, status, code)
        assert code.startswith("address."), (url, code)
    assert results["http://meta.test/latest/meta-data/"][1] == "address.link_local"
    assert results["http://internal.test/latest/meta-data/"][1] == "address.private"
    assert results["http://cgnat.test/latest/meta-data/"][1] == "address.cgnat"
