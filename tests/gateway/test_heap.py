"""`serve` settles its heap once it is listening: what start-up built is frozen out of the collector's sight and
young collections are spaced out (gateway/app.py, _settle_heap). In a child process: freezing this one would keep
the suite's garbage for good."""
from __future__ import annotations

import subprocess
import sys

from tests.support.gateway import ROOT


def test_settle_heap_freezes_start_up_and_spaces_young_collections():
    code = ("import gc; from gateway.app import GC_YOUNG, _settle_heap; before = gc.get_threshold(); "
            "_settle_heap(); print(gc.get_freeze_count() > 1000, gc.get_threshold() == (GC_YOUNG, *before[1:]), "
            "GC_YOUNG > before[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True"]
