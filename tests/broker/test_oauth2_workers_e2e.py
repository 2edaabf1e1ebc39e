"""OAuth2 refreshes are single-flight across processes: `sandgate serve --workers 2` on PostgreSQL, a token endpoint
that rotates refresh tokens (a refresh token used twice is refused, as real providers do) and tokens issued for 2 s,
many clients on fresh connections (spread over both workers). Every call succeeds and no refresh token is ever
spent twice. The API accepts a token a minute past the expiry it announced: sandgate refreshes by the announced
lifetime, and a busy machine's late use of a token is not what this test checks."""
from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
import requests

from broker.local import LocalBackend
from tests.conftest import LOOPBACK_CONFIG, need
from tests.support.gateway import Sandgate
from tests.support.oauth_server import OAuthServer
from tests.support.pg import PG_URL, pg_available
from tests.support.upstream import make_cert


def test_two_workers_never_spend_one_refresh_token_twice(tmp_path):
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    cert = make_cert(tmp_path / "certs", ["auth.test", "api.test"])
    with OAuthServer(cert, "cid", "cs-" + "W" * 24, lifetime_s=2, grace_s=60) as auth:
        asyncio.run(LocalBackend(tmp_path / "gw" / "data").put("rt", auth.state.new_refresh_token(), []))
        cfg = {"store": {"url": PG_URL},
               "egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert,
                          "resolve": {"auth.test": ["127.0.0.1"], "api.test": ["127.0.0.1"]}},
               "secrets": {"crm": {"kind": "oauth2", "token_url": f"https://auth.test:{auth.port}/token",
                                   "grant": "refresh_token", "client_id": "env:SG_CID", "client_secret": "env:SG_CS",
                                   "refresh_token": "local:rt", "hosts": ["api.test"]}}}
        env = {"SG_CID": "cid", "SG_CS": "cs-" + "W" * 24}
        with Sandgate(tmp_path / "gw", cfg, env=env, serve_args=("--workers", "2")) as sg:
            assert len(json.loads((sg.data_dir / "listen.json").read_text())["workers"]) == 2
            sess = sg.session(allow=["api.test"], secrets=["crm"])
            ph = sess["env"]["CRM"]
            statuses: list[int] = []
            lock = threading.Lock()

            def client() -> None:
                for _ in range(12):
                    resp = requests.get(f"https://api.test:{auth.port}/api/x", timeout=30, verify=sess["ca_file"],
                                        headers={"Authorization": f"Bearer {ph}", "Connection": "close"},
                                        proxies=sess["proxies"])
                    with lock:
                        statuses.append(resp.status_code)
                    time.sleep(0.4)
            threads = [threading.Thread(target=client) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        assert statuses == [200] * 72, sorted(set(statuses))
        assert auth.state.refused_grants == 0
        assert 401 not in auth.state.api_status            # every token was minted before its use, none after a 401
        assert len(auth.state.grants) >= 2                 # tokens used for 1.6 s, each client's calls span 4.4 s
