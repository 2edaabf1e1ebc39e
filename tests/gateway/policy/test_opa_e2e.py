"""`policy.engine = "opa"` end to end: a real sandgate process deciding through an OPA REST server (the real OPA
Go engine behind it), for proxied requests and /v1/toolcalls; with the server gone, everything is denied."""
from __future__ import annotations

import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import ROOT, Sandgate
from tests.support.opa import OpaServer


def toolcall(sg, sess, tool, args):
    resp = sg.call("POST", "/v1/toolcalls", json={"session": sess["id"], "tool": tool, "args": args, "step": 1})
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_opa_engine_through_proxy_and_toolcalls_timeouts_and_fail_closed(tmp_path, upstream):
    """One OPA server and one sandgate (each start costs seconds of CPU): decisions through it, then its timeout
    and undefined faults, then the server gone."""
    with OpaServer(tmp_path / "opa") as opa:
        cfg = {**LOOPBACK_CONFIG, "policy": {"engine": "opa", "opa_url": opa.url, "dir": str(ROOT / "policies"),
                                             "timeout_s": 1.0}}
        with Sandgate(tmp_path / "gw", cfg) as sg:
            health = sg.call("GET", "/healthz").json()
            assert health["policy"]["engine"] == "opa" and health["policy"]["state"] == "ok"
            sess = sg.session(allow=["allowed.test"])
            proxies = sess["proxies"]
            ok = requests.get(f"http://allowed.test:{upstream.port}/a", proxies=proxies, timeout=30)
            assert ok.status_code == 200
            denied = requests.get(f"http://other.test:{upstream.port}/b", proxies=proxies, timeout=30)
            assert denied.status_code == 403 and denied.json()["code"] == "egress.not_allowlisted"
            assert toolcall(sg, sess, "read_file", {"path": "/workspace/a"})["decision"] == "allow"
            assert toolcall(sg, sess, "delete_file", {"path": "/etc/passwd"})["decision"] == "deny"
            served = opa.stats()["decisions"]
            assert served >= 4, "the decisions came from the OPA server"

            # an OPA that does not answer in time, or answers without a result: denied (the server's slow fault
            # sleeps 30 s, far past the 1 s timeout)
            faulty = sg.session(allow=["allowed.test"])
            opa.fault("slow")
            resp = requests.get(f"http://allowed.test:{upstream.port}/slow", proxies=faulty["proxies"], timeout=30)
            assert resp.status_code == 403 and resp.json()["code"] == "policy.timeout"
            opa.fault("no_result")
            resp = requests.get(f"http://allowed.test:{upstream.port}/none", proxies=faulty["proxies"], timeout=30)
            assert resp.status_code == 403 and resp.json()["code"] == "policy.undefined"
            opa.fault("")

            opa.stop()                                            # the OPA server goes away
            gone = requests.get(f"http://allowed.test:{upstream.port}/c", proxies=proxies, timeout=30)
            assert gone.status_code == 403 and gone.json()["code"] == "policy.error"
            assert not any(r.path in ("/c", "/slow", "/none") for r in upstream.recorder.requests)
            tc = toolcall(sg, sess, "read_file", {"path": "/workspace/b"})
            assert tc["decision"] == "deny" and tc["codes"] == ["policy.error"]
            health = sg.call("GET", "/healthz").json()
            assert health["policy"]["state"] == "unreachable"
            assert opa.url not in sg.call("GET", "/healthz").text      # no addresses or error texts served


def test_opa_engine_unreachable_at_start_refuses_to_start(tmp_path):
    from tests.support.upstream import free_port

    cfg = {**LOOPBACK_CONFIG, "policy": {"engine": "opa", "opa_url": f"http://127.0.0.1:{free_port()}",
                                         "timeout_s": 0.5}}
    sg = Sandgate(tmp_path / "gw", cfg)
    try:
        sg.start()                          # it exits: the wait ends then, however slow the machine
    except RuntimeError as exc:
        assert "cannot push the policy to OPA" in str(exc)
    else:
        sg.stop()
        raise AssertionError("sandgate started without its policy engine")
