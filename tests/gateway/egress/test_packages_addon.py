"""The package index addon in process (`taddons`/`tflow`), after EgressAddon as in the proxy: index documents of
listed packages are fetched whole and unencoded, rewritten within `egress.package_max_bytes` (declared size: read
whole and rewritten off the loop; unknown size: held in the stream filter), encoded documents decoded within the
same bound and encoded again, anything larger or unreadable passed as it came."""
from __future__ import annotations

import base64
import gzip
import json
import zlib
from contextlib import AsyncExitStack

import brotli
import pytest
from mitmproxy import http
from mitmproxy.net import encoding as codings
from mitmproxy.proxy.layers.http import HttpRequestHeadersHook
from mitmproxy.test import taddons, tflow

from gateway.config import EgressSettings
from gateway.egress.packages import PackageIndexAddon, decode_bounded
from gateway.net.addresses import parse_networks
from gateway.packages.osv import entries_of
from gateway.store.packages import PackageStore
from tests.support.services import egress_addons, open_services

NAMES = {"registry.npmjs.org": ["127.0.0.1"], "pypi.org": ["127.0.0.1"]}
RECORD = {"id": "MAL-9", "affected": [{"package": {"ecosystem": "npm", "name": "@acme/w"}, "versions": ["1.1.0"]}]}
DOC = json.dumps({"name": "@acme/w", "dist-tags": {"latest": "1.1.0"},
                  "versions": {"1.0.0": {"name": "@acme/w"}, "1.1.0": {"name": "@acme/w"}}}).encode()
CAP = 4096


@pytest.fixture
async def world(tmp_path):
    async with AsyncExitStack() as stack:
        svc = await open_services(stack, tmp_path)
        settings = EgressSettings(private_allow=parse_networks(["127.0.0.0/8"]), package_max_bytes=CAP)
        addons = await egress_addons(stack, svc, settings, NAMES)
        await svc.store.run(PackageStore(svc.store).put_entries_sync, [e.row() for e in entries_of(RECORD)])
        firewall = addons.egress.deps.packages
        await firewall.refresh()
        _session, token = await svc.session(allow=list(NAMES))
        yield addons, PackageIndexAddon(firewall), token


async def request(world, url: str, headers: dict | None = None) -> http.HTTPFlow:
    addons, index, token = world
    auth = "Basic " + base64.b64encode(f"sandgate:{token}".encode()).decode()
    flow = tflow.tflow(req=http.Request.make("GET", url, b"", {"Proxy-Authorization": auth, **(headers or {})}))
    flow.client_conn.sni = None
    with taddons.context(addons.egress, addons.hold, index, addons.injection) as tctx:
        await tctx.master.addons.trigger_event(HttpRequestHeadersHook(flow))
    return flow


async def respond(world, flow: http.HTTPFlow, body: bytes, headers: dict, sized: bool = True) -> None:
    """responseheaders as the proxy calls it (egress first), then the body: read whole, or through the stream."""
    addons, index, _token = world
    flow.response = http.Response.make(200, b"")
    flow.response.headers.update(headers)            # make() would drop a content-encoding set with no content
    if sized:
        flow.response.headers["content-length"] = str(len(body))
    else:
        flow.response.headers.pop("content-length", None)
    addons.egress.responseheaders(flow)
    index.responseheaders(flow)
    if callable(flow.response.stream):
        out = []
        for i in range(0, len(body), 1000):
            out += flow.response.stream(body[i:i + 1000])
        out += flow.response.stream(b"")
        flow.response.raw_content = b"".join(out)
    else:
        flow.response.raw_content = body
        await index.response(flow)


def deprecated(body: bytes) -> dict:
    return {v: m.get("deprecated") for v, m in json.loads(body)["versions"].items()}


async def test_a_listed_packages_document_is_asked_for_whole_and_unencoded(world):
    flow = await request(world, "https://registry.npmjs.org/@acme%2fw",
                         {"Accept-Encoding": "gzip, br", "If-None-Match": '"x"', "Range": "bytes=0-10"})
    h = flow.request.headers
    assert flow.response is None and h["accept-encoding"] == "identity"
    assert "if-none-match" not in h and "range" not in h
    clean = await request(world, "https://registry.npmjs.org/lodash", {"Accept-Encoding": "gzip"})
    assert clean.request.headers["accept-encoding"] == "gzip"          # a package no advisory names: untouched
    tarball = await request(world, "https://registry.npmjs.org/@acme/w/-/w-1.1.0.tgz")
    assert tarball.response.status_code == 403                         # the download itself: denied


@pytest.mark.parametrize("sized", [True, False])
async def test_documents_up_to_the_cap_are_rewritten(world, sized):
    flow = await request(world, "https://registry.npmjs.org/@acme%2fw")
    await respond(world, flow, DOC, {"content-type": "application/json", "etag": '"abc"'}, sized=sized)
    body = flow.response.raw_content
    assert deprecated(body) == {"1.0.0": None, "1.1.0": "sandgate: @acme/w 1.1.0 is a known malicious package (MAL-9)"}
    assert json.loads(body)["dist-tags"] == {"latest": "1.0.0"}
    assert "etag" not in flow.response.headers
    if sized:
        assert flow.response.headers["content-length"] == str(len(body))
    else:
        assert "content-length" not in flow.response.headers


@pytest.mark.parametrize("coding, encode", [
    ("gzip", gzip.compress), ("deflate", zlib.compress), ("br", brotli.compress),
    ("zstd", lambda b: codings.encode(b, "zstd")),
])
@pytest.mark.parametrize("sized", [True, False])
async def test_encoded_documents_are_decoded_and_encoded_again(world, coding, encode, sized):
    flow = await request(world, "https://registry.npmjs.org/@acme%2fw")
    await respond(world, flow, encode(DOC), {"content-type": "application/json", "content-encoding": coding},
                  sized=sized)
    assert flow.response.headers["content-encoding"] == coding
    body = codings.decode(flow.response.raw_content, coding)
    assert deprecated(body)["1.1.0"].endswith("(MAL-9)")


@pytest.mark.parametrize("sized", [True, False])
async def test_documents_larger_than_the_cap_pass_unmodified(world, sized):
    big = json.dumps({**json.loads(DOC), "readme": "x" * (CAP * 2)}).encode()
    flow = await request(world, "https://registry.npmjs.org/@acme%2fw")
    await respond(world, flow, big, {"content-type": "application/json"}, sized=sized)
    assert flow.response.raw_content == big


async def test_a_bomb_that_decodes_past_the_cap_passes_as_it_came(world):
    bomb = gzip.compress(b"{" + b" " * (CAP * 50) + b"}")
    assert len(bomb) < CAP and decode_bounded(bomb, "gzip", CAP) is None
    flow = await request(world, "https://registry.npmjs.org/@acme%2fw")
    await respond(world, flow, bomb, {"content-type": "application/json", "content-encoding": "gzip"})
    assert flow.response.raw_content == bomb


@pytest.mark.parametrize("status, ctype, coding", [(404, "application/json", ""), (200, "application/octet-stream", ""),
                                                  (200, "application/json", "gzip, br"), (200, "text/plain", "")])
async def test_other_answers_pass_as_they_came(world, status, ctype, coding):
    flow = await request(world, "https://registry.npmjs.org/@acme%2fw")
    addons, index, _ = world
    headers = {"content-type": ctype, "content-length": str(len(DOC))} | ({"content-encoding": coding} if coding else {})
    flow.response = http.Response.make(status, b"")
    flow.response.headers.update(headers)
    addons.egress.responseheaders(flow)
    index.responseheaders(flow)
    flow.response.raw_content = DOC
    await index.response(flow)
    assert flow.response.raw_content == DOC


@pytest.mark.parametrize("coding", ["identity", "gzip", "deflate", "br", "zstd"])
def test_decode_bounded_refuses_garbage_and_overflow(coding):
    assert decode_bounded(b"\x00garbage\xff" * 3, coding, 100) in (None, b"\x00garbage\xff" * 3)
    assert decode_bounded(codings.encode(b"a" * 1000, coding) if coding != "identity" else b"a" * 1000, coding,
                          999) is None
    assert decode_bounded(codings.encode(b"a" * 1000, coding) if coding != "identity" else b"a" * 1000, coding,
                          1000) == b"a" * 1000


async def test_documents_held_at_once_stay_within_max_held_bytes(world):
    """Index documents being held count against egress.max_held_bytes with the request bodies: past it, a document
    passes unmodified (as one past package_max_bytes does; the download's denial stays the guarantee)."""
    from gateway.egress.limits import HeldLimits

    addons, _index, token = world
    limits = HeldLimits(max_held=8, max_bytes=CAP + 10)
    index = PackageIndexAddon(addons.egress.deps.packages, limits)
    mine = (addons, index, token)
    first = await request(mine, "https://registry.npmjs.org/@acme%2fw")
    first.response = http.Response.make(200, b"")
    first.response.headers.update({"content-type": "application/json"})
    first.response.headers.pop("content-length", None)
    addons.egress.responseheaders(first)
    index.responseheaders(first)                      # of unknown size: held up to package_max_bytes
    assert limits.bytes == CAP
    second = await request(mine, "https://registry.npmjs.org/@acme%2fw")
    await respond(mine, second, DOC, {"content-type": "application/json"})
    assert second.response.raw_content == DOC         # no room: passed as it came
    out = list(first.response.stream(DOC)) + list(first.response.stream(b""))
    assert deprecated(b"".join(out))["1.1.0"].endswith("(MAL-9)") and limits.bytes == 0
    third = await request(mine, "https://registry.npmjs.org/@acme%2fw")
    await respond(mine, third, DOC, {"content-type": "application/json"})
    assert deprecated(third.response.raw_content)["1.1.0"].endswith("(MAL-9)") and limits.bytes == 0
