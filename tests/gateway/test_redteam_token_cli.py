"""Red team: `sandgate token --ttl-s` with a huge value was a Python traceback (OverflowError); now one line
and exit 2. A zero or negative one minted a token that was already expired (exit 0); now one line and exit 2.
The tokens it does mint always carry a usable `exp`."""
from __future__ import annotations

import subprocess
import sys

import jwt
import pytest


def mint(tmp_path, ttl: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", "token", "--role", "harness", "--name", "x",
                           "--ttl-s", ttl, "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("ttl", ["100000000000000000000", str(10 ** 30), "315360001"])
def test_huge_ttl_is_a_clean_error(tmp_path, ttl):
    proc = mint(tmp_path, ttl)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "Traceback" not in proc.stderr and "ttl" in proc.stderr.lower()
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("ttl", ["0", "-5"])
def test_zero_or_negative_ttl_is_a_clean_error(tmp_path, ttl):
    proc = mint(tmp_path, ttl)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert "Traceback" not in proc.stderr and "--ttl-s must be from 1" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("ttl", ["1.5", "abc", "nan", "1e9"])
def test_non_integer_ttl_is_refused(tmp_path, ttl):
    proc = mint(tmp_path, ttl)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr


def test_ten_years_is_the_longest(tmp_path):
    proc = mint(tmp_path, "315360000")
    assert proc.returncode == 0, proc.stderr
    claims = jwt.decode(proc.stdout.strip(), options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 315360000
