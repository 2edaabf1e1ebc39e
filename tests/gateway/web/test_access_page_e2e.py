"""An access request on the approval page: what is asked and the agent's reason (escaped), narrowed in the form
through accessible names; the narrowed grant is what the sandbox gets, and a widening is refused."""
from __future__ import annotations

import time

import requests
from playwright.sync_api import expect

from tests.gateway.web.conftest import login

ENDPOINT = "http://sandgate.internal/v1/access-requests"


def test_approver_narrows_an_access_request_on_the_page(sg, upstream, page):
    sess = sg.session(allow=[])
    base = f"http://allowed.test:{upstream.port}"
    assert requests.get(f"{base}/v1/x", proxies=sess["proxies"], timeout=10).status_code == 403
    reason = "<script>alert(1)</script> need the partner API"
    filed = requests.post(ENDPOINT, json={"host": "allowed.test", "reason": reason, "ttl_s": 600},
                          proxies=sess["proxies"], timeout=10)


    assert filed.status_code == 202, filed.text
    aid = filed.json()["id"]
    login(page, sg, sg.approver, f"/approvals/{aid}")
    expect(page.get_by_text(reason, exact=True)).to_be_visible()        # shown as text, never run
    assert page.dialogs == []
    # narrow: GET only, under /v1/, for 3 s
    for method in ("DELETE", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"):
        page.get_by_label(f"Allow {method}").uncheck()
    page.get_by_label("Path prefix").fill("/v1/")
    page.get_by_label("Lasts (seconds)").fill("3")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#status")).to_have_text("approved")
    grant = sg.call("GET", f"/v1/approvals/{aid}", sg.approver).json()["grant"]
    assert grant["methods"] == ["GET"] and grant["path_prefix"] == "/v1/"
    assert requests.get(f"{base}/v1/x", proxies=sess["proxies"], timeout=10).status_code == 200
    assert requests.post(f"{base}/v1/x", data=b"x", proxies=sess["proxies"], timeout=10).status_code == 403
    assert requests.get(f"{base}/admin", proxies=sess["proxies"], timeout=10).status_code == 403
    deadline = time.time() + 10
    while requests.get(f"{base}/v1/x", proxies=sess["proxies"], timeout=10).status_code != 403:
        assert time.time() < deadline, "the grant never expired"
        time.sleep(0.2)


def test_the_page_refuses_a_widening(sg, page):
    sess = sg.session(allow=[])
    aid = requests.post(ENDPOINT, json={"host": "other.test", "reason": "x", "methods": ["GET"],
                                        "path_prefix": "/v1/", "ttl_s": 60},
                        proxies=sess["proxies"], timeout=10).json()["id"]
    login(page, sg, sg.approver, f"/approvals/{aid}")
    page.get_by_label("Path prefix").fill("/")
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("alert")).to_contain_text("never widen")
    assert sg.call("GET", f"/v1/approvals/{aid}", sg.approver).json()["status"] == "pending"
