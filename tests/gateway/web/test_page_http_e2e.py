"""The approval page as a non-browser client sees it: HTML structure (parsed), SSE, quorum, shutdown."""
from __future__ import annotations

import threading

import requests

from tests.gateway.web.conftest import (csrf_of, file_toolcall, http_login, label_for, page_config,
                                        parse_html)
from tests.support.gateway import Sandgate


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
