"""The package index addon: index documents on registry hosts rewritten so that resolvers skip malicious versions.

Registered after EgressAddon (which decided the request; a package download's facts were in its policy input) and
before InjectionAddon (whose scrubber then sees the rewritten document). A GET on a registry host whose path names
a package the index lists may fetch an index document:
- `requestheaders`: asks upstream for the whole document, unencoded and unconditional (no Accept-Encoding other
  than identity, no If-None-Match / If-Modified-Since / Range): a cached or partial copy would skip the rewrite;
- `responseheaders`: a 200 HTML or JSON document of declared size up to `egress.package_max_bytes` is buffered and
  rewritten off the event loop in `response`; one of unknown size (or of a session whose responses are scrubbed)
  is held in a stream filter up to that size and rewritten at its end; anything larger passes unmodified (the
  download of a malicious file is still denied: that denial is the guarantee). A document that came encoded after
  all (gzip, deflate, br, zstd) is decoded within the same bound and encoded again.
A rewrite that fails leaves the document as it came (and is logged): the download decision does not depend on it.
"""
from __future__ import annotations

import asyncio
import logging
import weakref
import zlib
from dataclasses import dataclass, field

from mitmproxy import http
from mitmproxy.net import encoding as codings

from gateway.egress.flows import StreamFilter, chain, flow_state
from gateway.egress.limits import Claim, HeldLimits
from gateway.packages.firewall import PackageFirewall

log = logging.getLogger("sandgate.packages")
_KEY = "sandgate.packages"
DOCUMENT_TYPES = ("text/html", "application/xhtml+xml", "application/json", "application/vnd.pypi.simple.v1+json",
                  "application/vnd.pypi.simple.v1+html", "application/vnd.npm.install-v1+json")
CODINGS = ("identity", "", "gzip", "x-gzip", "deflate", "br", "zstd")


@dataclass
class IndexFlow:
    ecosystem: str
    buffered: bool = False
    held: bytearray = field(default_factory=bytearray)
    passing: bool = False
    claim: Claim | None = None          # its share of egress.max_held_bytes while it is held (limits.py)


def decode_bounded(data: bytes, coding: str, limit: int) -> bytes | None:
    """`data` decoded from `coding`, or None when it decodes to more than `limit` bytes or does not decode."""
    try:
        if coding in ("", "identity"):
            return data if len(data) <= limit else None
        if coding in ("gzip", "x-gzip", "deflate"):
            wbits = 16 + zlib.MAX_WBITS if coding != "deflate" else zlib.MAX_WBITS
            try:
                d = zlib.decompressobj(wbits)
                out = d.decompress(data, limit + 1)
            except zlib.error:
                if coding != "deflate":
                    return None
                d = zlib.decompressobj(-zlib.MAX_WBITS)         # raw deflate, as some servers send it
                out = d.decompress(data, limit + 1)
            return None if len(out) > limit or d.unconsumed_tail else out
        if coding == "br":
            import brotli                                        # mitmproxy's own dependency

            out = brotli.Decompressor().process(data, output_buffer_limit=limit + 1)
            return None if len(out) > limit else out
        if coding == "zstd":
            try:
                from compression import zstd                     # type: ignore[import-not-found]
            except ImportError:
                from backports import zstd                       # type: ignore[no-redef]
            out = zstd.ZstdDecompressor().decompress(data, max_length=limit + 1)
            return None if len(out) > limit else out
    except Exception:  # noqa: BLE001 - a document that does not decode is passed as it came
        return None
    return None


class PackageIndexAddon:
    def __init__(self, firewall: PackageFirewall, limits: HeldLimits | None = None):
        self._firewall = firewall
        self._limits = limits               # a document is held only within egress.max_held_bytes (all sessions)

    def _admit(self, flow: http.HTTPFlow, mark: IndexFlow, nbytes: int) -> bool:
        """Take `nbytes` of egress.max_held_bytes for holding the document; False when the gateway already holds
        as much as it may (the document then passes unmodified, like one past package_max_bytes)."""
        if self._limits is None:
            return True
        claim = self._limits.admit(None, nbytes)
        if not isinstance(claim, Claim):
            log.warning("an index document passes unmodified: egress.max_held_bytes is in use")
            return False
        mark.claim = claim
        weakref.finalize(flow, self._limits.release, claim)
        return True

    def _release(self, mark: IndexFlow) -> None:
        if self._limits is not None:
            self._limits.release(mark.claim)

    def _rewrite(self, ecosystem: str, content_type: str, coding: str, raw: bytes) -> bytes | None:
        """The rewritten body in the response's own coding, or None to leave it."""
        try:
            body = decode_bounded(raw, coding, self._firewall.max_bytes)
            if body is None:
                return None
            new = self._firewall.rewrite(ecosystem, content_type, body)
            if new is None:
                return None
            return new if coding in ("", "identity") else codings.encode(new, "gzip" if coding == "x-gzip" else coding)
        except Exception:  # noqa: BLE001 - the download decision is the guarantee; never break the response
            log.exception("package index rewrite failed; the document passes as it came")
            return None

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        st = flow_state(flow)
        if st is None or flow.response is not None or flow.request.method != "GET":
            return
        eco = self._firewall.index_ecosystem(flow.request.host, flow.request.method, flow.request.path)
        if eco is None:
            return
        flow.metadata[_KEY] = IndexFlow(eco)
        flow.request.headers["accept-encoding"] = "identity"
        for name in ("if-none-match", "if-modified-since", "range", "if-range"):
            flow.request.headers.pop(name, None)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        mark = flow.metadata.get(_KEY)
        st = flow_state(flow)
        resp = flow.response
        if not isinstance(mark, IndexFlow) or st is None or resp is None or st.denied or resp.status_code != 200:
            return
        ctype = resp.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        coding = resp.headers.get("content-encoding", "").strip().lower()
        if ctype not in DOCUMENT_TYPES or coding not in CODINGS:
            return flow.metadata.pop(_KEY, None)
        size = resp.headers.get("content-length", "")
        limit = self._firewall.max_bytes
        if size.isdigit() and int(size) > limit:
            return flow.metadata.pop(_KEY, None)              # larger than the cap: passes unmodified
        if not self._admit(flow, mark, int(size) if size.isdigit() else limit):
            return flow.metadata.pop(_KEY, None)
        resp.headers.pop("etag", None)
        if size.isdigit() and not st.scrub:
            mark.buffered = True                                 # bounded by its declared size: read whole
            resp.stream = False
            return
        counted: StreamFilter = resp.stream if callable(resp.stream) else st.count_in
        if "content-length" in resp.headers:
            del resp.headers["content-length"]
            if resp.http_version == "HTTP/1.1":
                resp.headers["transfer-encoding"] = "chunked"
        resp.stream = chain(counted, self._holder(mark, ctype, coding))

    def _holder(self, mark: IndexFlow, ctype: str, coding: str) -> StreamFilter:
        limit = self._firewall.max_bytes

        def hold(chunk: bytes) -> list[bytes]:
            if mark.passing:
                return [chunk] if chunk else []
            if chunk:
                mark.held += chunk
                if len(mark.held) > limit:                        # past the cap: everything passes as it came
                    mark.passing = True
                    out, mark.held = bytes(mark.held), bytearray()
                    self._release(mark)
                    return [out]
                return []
            raw, mark.held = bytes(mark.held), bytearray()
            self._release(mark)
            new = self._rewrite(mark.ecosystem, ctype, coding, raw)
            out = raw if new is None else new
            return [out] if out else []
        return hold

    async def response(self, flow: http.HTTPFlow) -> None:
        mark = flow.metadata.get(_KEY)
        resp = flow.response
        if not isinstance(mark, IndexFlow):
            return
        try:
            if not mark.buffered or resp is None or resp.raw_content is None:
                return
            ctype = resp.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            coding = resp.headers.get("content-encoding", "").strip().lower()
            new = await asyncio.to_thread(self._rewrite, mark.ecosystem, ctype, coding, resp.raw_content)
            if new is not None:
                resp.raw_content = new
                if "content-length" in resp.headers:
                    resp.headers["content-length"] = str(len(new))
        finally:
            self._release(mark)

    def error(self, flow: http.HTTPFlow) -> None:
        mark = flow.metadata.get(_KEY)
        if isinstance(mark, IndexFlow):
            self._release(mark)
