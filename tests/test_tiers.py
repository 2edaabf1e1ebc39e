"""The end-to-end tier is decided by where a test file lives (tests/conftest.py), never by a mark a file gives
itself: a file elsewhere that declares `pytestmark = ... e2e` would be a tier the rule does not show."""
from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import is_e2e

TESTS = Path(__file__).resolve().parent


def test_no_file_outside_the_e2e_names_and_folders_marks_itself_end_to_end():
    marked = [str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
              if not is_e2e(p) and re.search(r"^pytestmark\s*=.*\be2e\b", p.read_text(), re.M)]
    assert marked == [], "name the file *_e2e.py (or put it in an E2E_FOLDERS folder) instead"


def test_the_tier_follows_the_name_and_the_folder():
    assert is_e2e(TESTS / "gateway" / "test_run_e2e.py") and is_e2e(TESTS / "gateway" / "test_policy_cli.py")
    assert is_e2e(TESTS / "deploy" / "test_netns_script.py")
    assert not is_e2e(TESTS / "gateway" / "test_config.py") and not is_e2e(TESTS / "test_tiers.py")


def test_a_test_outside_the_tier_cannot_start_a_sandgate(tmp_path):
    from tests.support.gateway import Sandgate

    sg = Sandgate(tmp_path)
    try:
        sg.start()
    except RuntimeError as refused:
        assert "outside the end-to-end tier" in str(refused) and sg.proc is None      # refused before any process
    else:
        sg.stop()
        raise AssertionError("a sandgate started for a test of the fast tier")
