"""The approval page end to end: a real sandgate, real held requests (curl through the proxy), real tool calls,
and Debian's Chromium driven by Playwright through accessible names (the contract); then the page as a non-browser
client sees it on the same sandgate: HTML structure (parsed), SSE, CSRF, history; quorum and shutdown on one of
their own."""
from __future__ import annotations

import json
import re
import subprocess
import threading
import time

import jwt
import requests
from playwright.sync_api import expect

from tests.gateway.web.conftest import (csrf_of, file_toolcall, http_login, label_for, login, need_curl,
                                        page_config, parse_html)
from tests.support.gateway import Sandgate
from tests.support.threads import background




def held_curl(sess: dict, url: str) -> subprocess.Popen:
    return subprocess.Popen([need_curl(), "-sS", "-x", sess["proxy_url"], "-X", "DELETE", "-w", "\n%{http_code}",
                             "--max-time", "60", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def curl_result(proc: subprocess.Popen) -> tuple[int, str]:
    out, err = proc.communicate(timeout=30)
    body, _, code = out.rpartition("\n")
    return int(code), body


def test_queue_updates_live_and_decisions_release_callers(sg, upstream, page, artifacts):
    login(page, sg, sg.approver)
    expect(page.get_by_role("heading", name="Pending approvals")).to_be_visible()
    page.evaluate("window.__notReloaded = true")
    sess = sg.session(allow=["allowed.test"], labels={"team": "payments"})

    # A tool call filed through the API shows up without a reload.
    aid = file_toolcall(sg, sess["id"], {"target": "prod", "version": "1.4.2"})
    expect(page.get_by_role("link", name=re.compile("deploy prod"))).to_be_visible()
    # A held egress DELETE (curl through the proxy) shows up too.
    url = f"http://allowed.test:{upstream.port}/items/42"
    curl = held_curl(sess, url)
    expect(page.get_by_role("link", name=f"DELETE {url}")).to_be_visible()
    assert page.evaluate("window.__notReloaded") is True, "the queue must update without a reload"
    page.screenshot(path=str(artifacts / "approval-queue.png"))
    assert not any(r.method == "DELETE" for r in upstream.recorder.requests), "held, not forwarded"

    # Approving the tool call on the page releases a waiting long-poll at once.
    poll, polled = background(lambda: sg.call("GET", f"/v1/approvals/{aid}?wait=30", timeout=40))
    time.sleep(0.3)
    page.get_by_role("link", name=re.compile("deploy prod")).click()
    expect(page.get_by_label("Reason")).to_be_visible()
    expect(page.get_by_text('"target": "prod"')).to_be_visible()
    page.screenshot(path=str(artifacts / "approval-detail.png"), full_page=True)
    page.get_by_label("Reason").fill("release window, change CHG-1234")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#status")).to_have_text("approved")
    expect(page.get_by_role("definition").filter(has_text="release window, change CHG-1234")).to_be_visible()
    poll.join(15)
    assert polled["value"].status_code == 200
    assert polled["value"].json()["status"] == "approved"
    assert polled["value"].json()["decided_by"] == "approver:alice"

    # Approving the held DELETE lets curl through (200 from the upstream).
    page.get_by_role("link", name="Queue").click()
    page.get_by_role("link", name=f"DELETE {url}").click()
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#status")).to_have_text("approved")
    code, _ = curl_result(curl)
    assert code == 200
    assert [r.path for r in upstream.recorder.requests if r.method == "DELETE"] == ["/items/42"]

    # Denying needs a reason; the reason reaches the held client.
    url2 = f"http://allowed.test:{upstream.port}/items/43"
    curl2 = held_curl(sess, url2)
    page.get_by_role("link", name="Queue").click()
    page.get_by_role("link", name=f"DELETE {url2}").click()
    page.get_by_role("button", name="Deny").click()
    expect(page.get_by_role("alert")).to_contain_text("needs a reason")
    expect(page.locator("#status")).to_have_text("pending")
    page.get_by_label("Reason").fill("no deletes during the freeze")
    page.get_by_role("button", name="Deny").click()
    expect(page.locator("#status")).to_have_text("denied")
    code, body = curl_result(curl2)
    assert code == 403
    assert "no deletes during the freeze" in json.loads(body)["reason"]
    assert not any(r.path == "/items/43" for r in upstream.recorder.requests)

    # History lists both decisions with who and why, and filters by state.
    page.get_by_role("link", name="History").click()
    expect(page.get_by_role("link", name=f"DELETE {url2}")).to_be_visible()
    page.get_by_label("State").select_option("denied")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_role("link", name=f"DELETE {url2}")).to_be_visible()
    expect(page.get_by_role("link", name=f"DELETE {url}")).to_have_count(0)
    expect(page.get_by_role("cell", name="no deletes during the freeze")).to_be_visible()
    assert page.dialogs == []


def test_a_decided_item_answers_a_second_decision_kindly(sg, page):
    sess = sg.session(allow=[])
    aid = file_toolcall(sg, sess["id"], {"target": "staging"})
    login(page, sg, sg.approver, f"/approvals/{aid}")
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    # Somebody else denies it through the API while the page is open.
    other = sg.token("approver", "carol")
    assert sg.call("POST", f"/v1/approvals/{aid}/deny", other, json={"reason": "carol says no"}).status_code == 200
    expect(page.get_by_role("status").filter(has_text="changed elsewhere")).to_be_visible()
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("alert")).to_contain_text("already decided")
    expect(page.locator("#status")).to_have_text("denied")
    expect(page.get_by_role("definition").filter(has_text="carol says no")).to_be_visible()
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)


def test_attacker_controlled_arguments_render_as_inert_text(sg, page):
    script, img = "<script>alert(1)</script>", "<img src=x onerror=alert(2)>"
    sess = sg.session(allow=[], labels={"team": "<img src=y onerror=alert(3)>"})
    aid = file_toolcall(sg, sess["id"], {"target": script, "notes": img, "file": "invoice\u202etxt.exe"})
    login(page, sg, sg.approver)
    link = page.get_by_role("link", name=f"deploy {script}")
    expect(link).to_be_visible()
    link.click()
    expect(page).to_have_url(re.compile(f"/approvals/{aid}$"))
    expect(page.get_by_role("heading", name=f"deploy {script}")).to_be_visible()
    args = page.get_by_label("Arguments (JSON)")
    expect(args).to_contain_text(script)
    expect(args).to_contain_text(img)
    expect(args).to_contain_text("invoice\\u{202E}txt.exe")  # bidi override shown, not obeyed
    expect(page.get_by_text("team=<img src=y onerror=alert(3)>")).to_be_visible()
    assert page.locator("main img, main script").count() == 0
    page.wait_for_timeout(500)
    assert page.dialogs == [], f"a dialog fired: {page.dialogs}"


def test_keyboard_only_decision(sg, page):
    sess = sg.session(allow=[])
    file_toolcall(sg, sess["id"], {"target": "keyboard"})
    page.goto(sg.api + "/")
    page.get_by_label("Token").focus()
    page.keyboard.type(sg.approver)
    page.keyboard.press("Enter")
    link = page.get_by_role("link", name="deploy keyboard")
    link.focus()
    page.keyboard.press("Enter")
    reason = page.get_by_label("Reason")
    reason.focus()
    page.keyboard.type("checked by keyboard")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Approve")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#status")).to_have_text("approved")


def test_session_token_cannot_log_in(sg, page, context):
    sess = sg.session(allow=[])
    login(page, sg, sess["token"])
    expect(page.get_by_role("alert")).to_contain_text("may not log in")
    expect(page.get_by_role("button", name="Log in")).to_be_visible()
    login(page, sg, sg.harness_token)
    expect(page.get_by_role("alert")).to_contain_text("may not log in")
    login(page, sg, "not-a-token")
    expect(page.get_by_role("alert")).to_contain_text("invalid or expired")
    assert context.cookies() == []


def test_expired_approver_token_is_sent_back_to_login(sg, page):
    # The token must still be good when the form is sent and expired when the page is asked for again. A short
    # life first; a machine too slow to log in inside it gets a longer one (the login, not the check, is tried
    # again). Then the test waits until the token's own exp has passed on this clock, which the gateway shares.
    heading, refused = page.get_by_role("heading", name="Pending approvals"), page.get_by_role("alert")
    for ttl_s in (3, 10, 30):
        token = sg.token("approver", "bob", ttl_s=ttl_s)
        exp = jwt.decode(token, options={"verify_signature": False})["exp"]
        login(page, sg, token)
        expect(heading.or_(refused).first).to_be_visible()
        if heading.is_visible() or time.time() < exp:
            break                                   # logged in, or refused while still good (the check below fails)
    expect(heading).to_be_visible()
    expect(page.get_by_text("approver:bob")).to_be_visible()
    while time.time() <= exp:
        time.sleep(exp - time.time() + 0.05)
    assert sg.call("GET", "/v1/approvals", token).status_code == 401      # the gateway too calls it expired
    page.goto(sg.api + "/history")
    expect(page).to_have_url(re.compile(r"/login\?next=/history$"))
    expect(page.get_by_label("Token")).to_be_visible()


def test_cookie_flags_and_csrf(sg, page, context):
    sess = sg.session(allow=[])
    aid = file_toolcall(sg, sess["id"], {"target": "csrf-check"})
    login(page, sg, sg.approver, f"/approvals/{aid}")
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    cookies = context.cookies()
    assert len(cookies) == 1
    c = cookies[0]
    assert c["httpOnly"] is True and c["sameSite"] == "Strict" and c["path"] == "/"
    assert c["secure"] is False  # plain http on loopback; Secure (and the __Host- name) when served over TLS
    assert page.evaluate("document.cookie") == "", "the page's script cannot read the session cookie"

    # The rendered form carries the per-login token (parsed, not grepped).
    doc = parse_html(page.content())
    form = next(f for f in doc.find_all("form") if f.find("textarea", name="reason") is not None)
    token = form.find("input", name="csrf_token").attrs["value"]
    assert form.find("input", name="csrf_token").attrs["type"] == "hidden" and len(token) >= 32
    assert {b.text().strip() for b in form.find_all("button")} == {"Approve", "Deny"}

    jar = {c["name"]: c["value"]}
    # The page cookie is not an API token.
    assert sg.call("POST", f"/v1/approvals/{aid}/approve", c["value"], json={}).status_code == 401
    url = f"{sg.api}/approvals/{aid}/approve"
    assert requests.post(url, cookies=jar, data={"reason": "x"}, allow_redirects=False).status_code == 403
    assert requests.post(url, cookies=jar, data={"reason": "x", "csrf_token": "0" * 32},
                         allow_redirects=False).status_code == 403
    assert requests.post(url, cookies=jar, data={"csrf_token": token}, headers={"Sec-Fetch-Site": "cross-site"},
                         allow_redirects=False).status_code == 403
    assert requests.post(url, cookies=jar, data={"csrf_token": token}, headers={"Origin": "http://evil.test"},
                         allow_redirects=False).status_code == 403
    assert requests.post(f"{sg.api}/logout", cookies=jar, allow_redirects=False).status_code == 403
    assert sg.call("GET", f"/v1/approvals/{aid}", sg.approver).json()["status"] == "pending"
    # With the token (and same-origin headers) the same request works.
    ok = requests.post(url, cookies=jar, data={"csrf_token": token},
                       headers={"Origin": sg.api, "Sec-Fetch-Site": "same-origin"}, allow_redirects=False)
    assert ok.status_code == 303
    assert sg.call("GET", f"/v1/approvals/{aid}", sg.approver).json()["status"] == "approved"

    # Logging out (the button, with its token) ends the login, and the old cookie is refused afterwards.
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_label("Token")).to_be_visible()
    assert context.cookies() == []
    assert requests.get(sg.api + "/", cookies=jar, allow_redirects=False).status_code == 303


# -- the page as a non-browser client sees it (after the browser tests: items of their own, named apart) --------
def test_login_page_structure_and_security_headers(sg):
    r = requests.get(sg.api + "/", allow_redirects=False)
    assert r.status_code == 303 and r.headers["Location"] == "/login?next=/"
    r = requests.get(sg.api + "/login")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    doc = parse_html(r.text)
    field = label_for(doc, "Token")
    assert field.tag == "input" and field.attrs["type"] == "password" and field.attrs["name"] == "token"
    form = doc.find("form", action="/login")
    assert form.attrs["method"] == "post" and form.find("button").text().strip() == "Log in"
    csp = r.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    # Every script is a same-origin file; no inline script to smuggle data into.
    assert all(s.attrs.get("src", "").startswith("/static/") for s in doc.find_all("script"))
    assert requests.get(sg.api + "/static/page.js").status_code == 200


def test_unauthenticated_endpoints_refuse(sg):
    assert requests.get(sg.api + "/events", timeout=5).status_code == 401
    assert requests.get(sg.api + "/fragments/queue", timeout=5).status_code == 401
    r = requests.post(sg.api + "/approvals/a_x/approve", data={"csrf_token": "x"}, allow_redirects=False)
    assert r.status_code == 303 and r.headers["Location"].startswith("/login")
    r = requests.get(sg.api + "/approvals/a_x", allow_redirects=False)
    assert r.status_code == 303 and r.headers["Location"] == "/login?next=/approvals/a_x"
    # An open redirect through ?next= is not possible.
    s = requests.Session()
    r = s.post(sg.api + "/login", data={"token": sg.approver, "next": "//evil.test/"}, allow_redirects=False)
    assert r.status_code == 303 and r.headers["Location"] == "/"
    r = s.post(sg.api + "/login", data={"token": sg.approver}, headers={"Origin": "http://evil.test"},
               allow_redirects=False)
    assert r.status_code == 403


def test_unknown_approval_is_a_friendly_404(sg):
    s = http_login(sg, sg.approver)
    r = s.get(sg.api + "/approvals/a_doesnotexist")
    assert r.status_code == 404
    assert "no such approval" in parse_html(r.text).find("p", role="alert").text()
    assert "Traceback" not in r.text


def test_sse_announces_filed_items(sg):
    s = http_login(sg, sg.approver)
    sess = sg.session(allow=[])
    with s.get(sg.api + "/events", stream=True, timeout=20) as r:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        lines = r.iter_lines(decode_unicode=True)
        assert next(lines) == "retry: 3000"
        aid = file_toolcall(sg, sess["id"], {"target": "sse"})
        seen = []
        for line in lines:
            seen.append(line)
            if line.startswith("data:") and aid in line:
                break
        assert "event: approval" in seen and any('"filed"' in x for x in seen)
    frag = parse_html(s.get(sg.api + "/fragments/queue").text)
    assert any(a.text() == "deploy sse" for a in frag.find_all("a"))


def test_page_posts_need_the_login_csrf_token_and_a_same_origin(sg):
    """The CSRF wiring as any HTTP client meets it (the browser test checks the same through Chromium): a POST
    with the login cookie but without the form's token, with another login's token, cross-site or from another
    origin is 403 and decides nothing; with the token it decides."""
    s = http_login(sg, sg.approver)
    other = http_login(sg, sg.approver)
    sess = sg.session(allow=[])
    aid = file_toolcall(sg, sess["id"], {"target": "csrf-http"})
    token = csrf_of(s.get(f"{sg.api}/approvals/{aid}").text)
    foreign = csrf_of(other.get(f"{sg.api}/approvals/{aid}").text)
    assert len(token) >= 32 and token != foreign
    url = f"{sg.api}/approvals/{aid}/approve"
    for data, headers in [({}, {}), ({"csrf_token": ""}, {}), ({"csrf_token": "0" * len(token)}, {}),
                          ({"csrf_token": foreign}, {}),
                          ({"csrf_token": token}, {"Sec-Fetch-Site": "cross-site"}),
                          ({"csrf_token": token}, {"Origin": "http://evil.test"})]:
        r = s.post(url, data={"reason": "x", **data}, headers=headers, allow_redirects=False)
        assert r.status_code == 403, (data, headers, r.status_code)
    assert s.post(f"{sg.api}/logout", allow_redirects=False).status_code == 403
    assert sg.call("GET", f"/v1/approvals/{aid}", sg.approver).json()["status"] == "pending"
    r = s.post(url, data={"csrf_token": token}, headers={"Origin": sg.api, "Sec-Fetch-Site": "same-origin"},
               allow_redirects=False)
    assert r.status_code == 303
    assert sg.call("GET", f"/v1/approvals/{aid}", sg.approver).json()["status"] == "approved"


def test_history_filters_by_session_kind_and_state(sg):
    s = http_login(sg, sg.approver)
    sess_a, sess_b = sg.session(allow=[]), sg.session(allow=[])
    a1 = file_toolcall(sg, sess_a["id"], {"target": "hist-a1"})
    a2 = file_toolcall(sg, sess_a["id"], {"target": "hist-a2"})
    b1 = file_toolcall(sg, sess_b["id"], {"target": "hist-b1"})
    for aid, verdict, why in ((a1, "approve", "fine"), (a2, "deny", "nope <b>bold</b>"), (b1, "approve", "ok")):
        assert sg.call("POST", f"/v1/approvals/{aid}/{verdict}", sg.approver, json={"reason": why}).ok

    def rows(**params):
        doc = parse_html(s.get(sg.api + "/history", params=params).text)
        table = doc.find("table")
        return [[td.text().strip() for td in tr.find_all("td")] for tr in table.find("tbody").find_all("tr")] \
            if table else []

    mine = rows(session=sess_a["id"])
    assert [r[0] for r in mine] == ["deploy hist-a2", "deploy hist-a1"]  # newest decision first
    assert mine[0][1:] == ["denied", "toolcall", sess_a["id"], "approver:alice", mine[0][5], "nope <b>bold</b>"]
    assert [r[0] for r in rows(session=sess_a["id"], state="approved")] == ["deploy hist-a1"]
    assert rows(session=sess_b["id"], kind="egress") == []
    assert [r[0] for r in rows(session=sess_b["id"], kind="toolcall", state="bogus")] == ["deploy hist-b1"]


def test_quorum_progress_and_sse_ends_on_shutdown(tmp_path):
    with Sandgate(tmp_path, page_config(approvals={"quorum": 2})) as gate:
        alice, bob = http_login(gate, gate.token("approver", "alice")), http_login(gate, gate.token("admin", "bob"))
        sess = gate.session(allow=[])
        aid = file_toolcall(gate, sess["id"], {"target": "prod"})
        page = alice.get(f"{gate.api}/approvals/{aid}")
        assert "0 of 2 approvals" in page.text
        r = alice.post(f"{gate.api}/approvals/{aid}/approve", data={"csrf_token": csrf_of(page.text)})
        doc = parse_html(r.text)
        assert doc.find("strong", id="status").text() == "pending"
        assert "1 of 2 approvals" in doc.find("p", **{"class": "meta"}).text()
        assert "Your approval was recorded" in r.text
        again = alice.post(f"{gate.api}/approvals/{aid}/approve", data={"csrf_token": csrf_of(r.text)})
        assert again.status_code == 409 and "already voted" in again.text
        page = bob.get(f"{gate.api}/approvals/{aid}")
        r = bob.post(f"{gate.api}/approvals/{aid}/approve", data={"csrf_token": csrf_of(page.text), "reason": "2nd"})
        assert parse_html(r.text).find("strong", id="status").text() == "approved"
        assert gate.call("GET", f"/v1/approvals/{aid}", gate.token("approver", "x")).json()["decided_by"] == "admin:bob"

        # An open SSE stream must not hold up shutdown: SIGTERM ends it (the stream's clean end, not the connection
        # cut when the server gives up waiting for it) and the process exits cleanly.
        opened, ended = threading.Event(), threading.Event()

        def listen():
            with alice.get(gate.api + "/events", stream=True, timeout=30) as resp:
                opened.set()
                for _ in resp.iter_lines():
                    pass
            ended.set()
        t = threading.Thread(target=listen, daemon=True)
        t.start()
        assert opened.wait(30), "the SSE stream did not open"
        assert gate.stop() == 0
        assert ended.wait(30), "the SSE stream did not end on shutdown"
