"""Store down: audit rows wait in memory up to audit.max_pending, then new requests get 503
audit.unavailable; /healthz shows degraded; a metric counts the refusals; nothing recorded is lost."""
from __future__ import annotations

import time

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG, need
from tests.support.gateway import Sandgate
from tests.support.pg import PG_DB, pg_available
from tests.support.relay import Relay
from tests.support.tunnel import open_tunnel

MAX_PENDING = 25


def test_store_down_caps_pending_audit_then_refuses(tmp_path, upstream):
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    with Relay(("127.0.0.1", 5432)) as relay:
        cfg = {**LOOPBACK_CONFIG, "store": {"url": f"postgresql+psycopg://postgres@127.0.0.1:{relay.port}/{PG_DB}"},
               "audit": {"max_pending": MAX_PENDING}}
        with Sandgate(tmp_path, cfg) as sg:
            sess = sg.session(allow=["allowed.test"])
            tool = {"session": sess["id"], "tool": "read_file", "args": {"path": "/workspace/a"}}
            url = f"http://allowed.test:{upstream.port}/during"
            assert requests.get(url, proxies=sess["proxies"], timeout=10).status_code == 200
            relay.cut()
            statuses = []
            for _ in range(3 * MAX_PENDING):
                statuses.append(requests.get(url, proxies=sess["proxies"], timeout=20).status_code)
                if statuses[-1] == 503:
                    break
            assert statuses[-1] == 503, statuses
            assert all(s == 200 for s in statuses[:-1]) and len(statuses) > MAX_PENDING // 2
            forwarded = len([r for r in upstream.recorder.requests if r.path == "/during"])
            refused = requests.get(url, proxies=sess["proxies"], timeout=20)
            assert refused.status_code == 503 and refused.json()["code"] == "audit.unavailable"
            assert len([r for r in upstream.recorder.requests if r.path == "/during"]) == forwarded
            with pytest.raises(AssertionError, match=" 503 "):
                open_tunnel(sg.proxy_port, sess["token"], f"allowed.test:{upstream.port}")
            assert sg.call("POST", "/v1/toolcalls", json=tool).json()["error"] == "audit.unavailable"
            health = requests.get(sg.api + "/healthz", timeout=10)
            assert health.status_code == 200 and health.json()["status"] == "degraded"   # alive: no restart
            assert health.json()["audit"] == {"status": "refusing", "pending": health.json()["audit"]["pending"],
                                              "max_pending": MAX_PENDING}
            assert health.json()["audit"]["pending"] >= MAX_PENDING
            assert requests.get(sg.api + "/readyz", timeout=10).status_code == 503
            metrics = requests.get(sg.api + "/metrics", timeout=10).text
            assert 'sandgate_audit_refused_total{kind="egress"}' in metrics
            assert 'sandgate_audit_refused_total{kind="toolcall"} 1.0' in metrics

            relay.restore()
            deadline = time.time() + 20
            while requests.get(sg.api + "/healthz", timeout=10).json()["status"] != "ok":
                assert time.time() < deadline, "audit did not recover"
                time.sleep(0.2)
            assert requests.get(url, proxies=sess["proxies"], timeout=10).status_code == 200
            assert requests.get(sg.api + "/readyz", timeout=10).status_code == 200
            rows = [e for e in sg.events(sess["id"]) if e["kind"] == "egress" and e["path"] == "/during"]
            assert len(rows) == forwarded + 1, "every forwarded request was recorded once the store came back"


@pytest.mark.parametrize("pending, writing, status", [
    (0, True, "ok"), (10, False, "degraded"), (99, False, "degraded"), (100, False, "refusing"),
    (100, True, "refusing"), (150, False, "refusing"),
])
def test_audit_status(pending, writing, status):
    from gateway.audit.log import audit_status

    assert audit_status(pending, 100, writing) == status
