"""Fixtures for the approval page: a real sandgate process, a real Chromium (Debian's) driven by Playwright."""
from __future__ import annotations

import os
import re
import shutil
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG, need
from tests.support.gateway import ROOT, Sandgate, record_start

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def page_config(**extra) -> dict:
    cfg = {**LOOPBACK_CONFIG, "egress": {**LOOPBACK_CONFIG["egress"], "hold_timeout_s": 120}}
    cfg.update(extra)
    return cfg


@pytest.fixture(scope="module")
def sg(tmp_path_factory):
    with Sandgate(tmp_path_factory.mktemp("web"), page_config()) as gate:
        gate.approver = gate.token("approver", "alice")
        yield gate


@pytest.fixture(scope="module")
def browser():
    need(os.path.exists(CHROMIUM), f"Debian Chromium at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        began = time.monotonic()
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        record_start("chromium", time.monotonic() - began)      # SANDGATE_TEST_STARTS
        yield chromium
        chromium.close()
    finally:
        pw.stop()


@pytest.fixture(scope="module")
def module_tab(browser):
    """One browser context and tab per module, handed to each test emptied (`context`). A new context and tab cost
    Chromium about 1.5 s of CPU (a renderer process starting), a test's own use of the tab a fraction of that."""
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    ctx.set_default_timeout(15000)
    tab = ctx.new_page()
    tab.dialogs = []

    def on_dialog(dialog):
        tab.dialogs.append(dialog.message)
        dialog.dismiss()
    tab.on("dialog", on_dialog)
    cdp = ctx.new_cdp_session(tab)
    yield ctx, tab, cdp
    ctx.close()


@pytest.fixture
def context(module_tab):
    """The module's browser context as a new one is: no page loaded, no cookie, nothing cached."""
    ctx, tab, cdp = module_tab
    tab.goto("about:blank")                  # the last test's page (its scripts, its event stream) is gone
    ctx.clear_cookies()
    cdp.send("Network.clearBrowserCache")
    tab.dialogs.clear()
    assert ctx.cookies() == [] and ctx.pages == [tab]
    return ctx


@pytest.fixture
def page(context, module_tab):
    """A tab that records every JavaScript dialog (alert/confirm/prompt) it is asked to show (`page.dialogs`)."""
    return module_tab[1]


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def login(page, sg, token: str, path: str = "/") -> None:
    page.goto(sg.api + path)
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Log in").click()


def http_login(sg, token: str) -> requests.Session:
    """A requests session logged in to the page (cookie set), as a non-browser client."""
    s = requests.Session()
    r = s.post(sg.api + "/login", data={"token": token, "next": "/"}, allow_redirects=False)
    assert r.status_code == 303, r.text
    return s


def file_toolcall(sg, sid: str, args: dict, tool: str = "deploy") -> str:
    r = sg.call("POST", "/v1/toolcalls", json={"session": sid, "tool": tool, "args": args})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["decision"] == "ask", body
    return body["approval_id"]


# -- HTML as a tree (stdlib parser), for structural assertions -------------------------------------
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict, parent: "Node | None"):
        self.tag, self.attrs, self.parent, self.children, self.texts = tag, attrs, parent, [], []

    def text(self) -> str:
        return "".join(self.texts) + "".join(c.text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def find_all(self, tag: str, **attrs) -> list["Node"]:
        return [n for n in self.iter() if n.tag == tag and all(n.attrs.get(k) == v for k, v in attrs.items())]

    def find(self, tag: str, **attrs) -> "Node | None":
        found = self.find_all(tag, **attrs)
        return found[0] if found else None


class TreeBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.cur = Node("#root", {}, None)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: (v if v is not None else "") for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.texts.append(data)


def parse_html(text: str) -> Node:
    builder = TreeBuilder()
    builder.feed(text)
    builder.close()
    return builder.root


def label_for(doc: Node, text: str) -> Node:
    """The form control a <label> with exactly this text points at."""
    label = next(n for n in doc.find_all("label") if n.text().strip() == text)
    target = label.attrs["for"]
    return next(n for n in doc.iter() if n.attrs.get("id") == target)


def csrf_of(html: str) -> str:
    return parse_html(html).find("input", name="csrf_token").attrs["value"]


def need_curl() -> str:
    path = shutil.which("curl")
    need(path is not None, "the curl binary")
    return path


def approval_link(name: str):
    return re.compile(re.escape(name))
