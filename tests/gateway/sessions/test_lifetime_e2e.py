"""Session lifetimes through a real sandgate: a persistent session renews past the old 30-day ceiling and its
token carries no expiry of its own before the session's ceiling; `sessions.max_lifetime_s` and
`sessions.ephemeral_max_lifetime_s` bound renewals and the token alike."""
from __future__ import annotations

import base64
import json
import time

import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate

DAY = 86400


def claims(token: str) -> dict:
    part = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def test_lifetimes(tmp_path, upstream):
    cfg = {**LOOPBACK_CONFIG, "sessions": {"ephemeral_max_lifetime_s": 2 * DAY}}
    with Sandgate(tmp_path / "none", cfg) as sg:
        sess = sg.session(workload="persistent", allow=["allowed.test"])
        now = time.time()
        # Renewed for 40 days, then 400: past the old 30-day ceiling.
        for days in (40, 400):
            r = sg.call("PATCH", f"/v1/sessions/{sess['id']}", json={"ttl_s": days * DAY})
            assert r.status_code == 200, r.text
        assert claims(sess["token"])["exp"] > now + 90 * 365 * DAY          # no expiry of its own, in effect
        url = f"http://allowed.test:{upstream.port}/still"
        assert requests.get(url, proxies=sess["proxies"], timeout=30).status_code == 200
        # It still dies with the session.
        assert sg.call("DELETE", f"/v1/sessions/{sess['id']}").status_code == 204
        assert requests.get(url, proxies=sess["proxies"], timeout=30).status_code == 407
        # Ephemeral: the configured ceiling (two days here).
        eph = sg.session(allow=["allowed.test"])
        assert abs(claims(eph["token"])["exp"] - (now + 2 * DAY)) < 120
        assert sg.call("PATCH", f"/v1/sessions/{eph['id']}", json={"ttl_s": 3 * DAY}).status_code == 400
        assert sg.call("POST", "/v1/sessions", json={"ttl_s": 3 * DAY}).status_code == 400

    cfg = {**LOOPBACK_CONFIG, "sessions": {"max_lifetime_s": 600}}
    with Sandgate(tmp_path / "ceiling", cfg) as sg:
        sess = sg.session(workload="persistent", allow=["allowed.test"])
        assert claims(sess["token"])["exp"] <= time.time() + 600
        r = sg.call("PATCH", f"/v1/sessions/{sess['id']}", json={"ttl_s": 1200})
        assert r.status_code == 400 and "sessions.max_lifetime_s" in r.text
        assert sg.call("PATCH", f"/v1/sessions/{sess['id']}", json={"ttl_s": 300}).status_code == 200
