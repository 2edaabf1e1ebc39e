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


def test_the_page_shows_the_hosts_denials_and_the_reason_as_inert_text(sg, upstream, page):
    """The agent's reason is untrusted: markup stays text, an onerror never runs, bidi and zero-width controls are
    shown as code points; the session's recent denials of the host are listed; the note says what approving does."""
    sess = sg.session(allow=[])
    base = f"http://secure.test:{upstream.port}"
    for path in ("/v1/a", "/v1/b"):
        assert requests.get(f"{base}{path}", proxies=sess["proxies"], timeout=10).status_code == 403
    reason = ('<img src=x onerror="alert(1)"><b>bold</b> \u202egnp.exe\u202c and\u200b hidden '
              '"><script>alert(2)</script>')
    aid = requests.post(ENDPOINT, json={"host": "secure.test", "reason": reason, "ttl_s": 120},
                        proxies=sess["proxies"], timeout=10).json()["id"]
    login(page, sg, sg.approver, f"/approvals/{aid}")
    quote = page.locator("blockquote.untrusted")
    expect(quote).to_have_text('<img src=x onerror="alert(1)"><b>bold</b> \\u{202E}gnp.exe\\u{202C} and\\u{200B} '
                               'hidden "><script>alert(2)</script>')
    assert quote.locator("img, b, script").count() == 0
    page.wait_for_timeout(300)
    assert page.dialogs == []
    denials = page.get_by_role("table", name="Recent denials of secure.test in this session")
    expect(denials.get_by_role("row")).to_have_count(3)           # a header and the two denials
    expect(denials).to_contain_text("GET secure.test/v1/a")
    expect(denials).to_contain_text("GET secure.test/v1/b")
    expect(page.locator("#approve-note")).to_contain_text("reusable until it expires")


def test_crafted_form_fields_cannot_widen(sg, upstream, page):
    """An approver's browser posting fields the form does not offer (a method not asked for, another host, a
    shorter prefix, a longer TTL) is refused, and nothing is granted."""
    sess = sg.session(allow=[])
    aid = requests.post(ENDPOINT, json={"host": "allowed.test", "reason": "x", "methods": ["GET"],
                                        "path_prefix": "/v1/", "ttl_s": 60},
                        proxies=sess["proxies"], timeout=10).json()["id"]
    login(page, sg, sg.approver, f"/approvals/{aid}")
    for field, value, text in (("grant_method", "DELETE", "never widen"), ("grant_path_prefix", "/v1/../", "never widen"),
                               ("grant_ttl_s", "61", "longer"), ("grant_ttl_s", "1e9", "max_grant_ttl_s"),
                               ("grant_ttl_s", "0", "ttl_s")):
        page.goto(f"{sg.api}/approvals/{aid}")
        page.evaluate("""([field, value]) => {
            const form = document.querySelector('form.decide');
            for (const el of form.querySelectorAll('[name=' + field + ']')) { if (el.type !== 'checkbox') el.remove(); }
            const input = document.createElement('input');
            input.type = 'hidden'; input.name = field; input.value = value; form.appendChild(input);
            form.noValidate = true;
        }""", [field, value])
        page.get_by_role("button", name="Approve").click()
        expect(page.get_by_role("alert")).to_contain_text(text)
    page.goto(f"{sg.api}/approvals/{aid}")
    page.evaluate("""() => { const f = document.querySelector('form.decide');
        const i = document.createElement('input'); i.type = 'hidden'; i.name = 'grant_host'; i.value = 'evil.test';
        f.appendChild(i); }""")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#status")).to_have_text("approved")
    grant = sg.call("GET", f"/v1/approvals/{aid}", sg.approver).json()["grant"]
    assert grant["host"] == "allowed.test" and grant["methods"] == ["GET"] and grant["path_prefix"] == "/v1/"
    assert grant["expires_at"]
    # the decided page shows the grant; once withdrawn, when
    expect(page.locator("#grant")).to_contain_text("GET under /v1/, until ")
    assert sg.call("DELETE", f"/v1/sessions/{sess['id']}/grants/{aid}", sg.approver).status_code == 200
    page.reload()
    expect(page.get_by_text("Withdrawn", exact=True)).to_be_visible()
    expect(page.locator("#grant")).to_have_count(0)
