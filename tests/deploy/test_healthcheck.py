"""deploy/healthcheck.py's address logic (the whole check runs against real replicas in test_recipe_e2e.py)."""
from __future__ import annotations

import importlib.util
import json

import pytest

from tests.deploy.recipes import DEPLOY

_spec = importlib.util.spec_from_file_location("sandgate_healthcheck", DEPLOY / "healthcheck.py")
healthcheck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(healthcheck)


@pytest.mark.parametrize("api,url", [
    ("0.0.0.0:8700", "http://127.0.0.1:8700/healthz"),
    ("127.0.0.1:9000", "http://127.0.0.1:9000/healthz"),
    ("10.1.2.3:8700", "http://10.1.2.3:8700/healthz"),
    ("[::]:8700", "http://[::1]:8700/healthz"),
    ("::1:8700", "http://[::1]:8700/healthz"),
    ("[fd00::5]:8700", "http://[fd00::5]:8700/healthz"),
    (":8700", "http://127.0.0.1:8700/healthz"),
])
def test_health_url(api, url):
    assert healthcheck.health_url(json.dumps({"api": api, "proxy": "0.0.0.0:8080"})) == url


@pytest.mark.parametrize("text", ["", "{}", '{"api": "nohostport"}', '{"api": "h:notaport"}', "[1]"])
def test_bad_listen_files_raise_what_the_check_catches(text):
    with pytest.raises((ValueError, KeyError, TypeError)):
        healthcheck.health_url(text)
