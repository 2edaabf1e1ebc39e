"""The credential addon: real values in on the way to bound hosts, scrubbed out of what comes back.

Registered after EgressAddon (which decides, and screens the URL and headers for placeholders):
- `requestheaders`: a body that streams (chunked, or too large to hold) leaves with its head right after this hook,
  so its header and query placeholders are swapped here; the body streams with every known placeholder blanked out;
- `request` (body read, capped): the body and trailers are screened too, then each of the session's placeholders
  is replaced by its real value in headers (Basic auth decoded and re-encoded), query and, where the secret
  allows, body;
- `responseheaders` / `response`: every response of a session holding secrets is scrubbed of all of them (status
  line, header names and values, trailers, streamed body), whether or not its request carried one: a host may
  have kept a value and serve it back. What cannot be scanned (a content or transfer coding, a folded header, a
  value left in another case) is answered 502 `secret.unscannable` instead;
- `websocket_message`: no placeholder leaves in a frame, no real value comes back in one.
The real value is never logged or audited: audit records what the sandbox sent.
"""
from __future__ import annotations

import asyncio
import logging
import time

from mitmproxy import http

from broker.backends import SecretUnavailable
from broker.broker import AWS_SECRET_PART, Broker
from broker.sigv4 import SigV4Error
from broker.inject import substitute_body, substitute_headers, substitute_query
from broker.oauth2 import REFRESH_FAILED, TOKEN_TIMEOUT_S as MINT_TIMEOUT_S
from broker.registry import MASK_PREFIX, PlaceholderRegistry
from broker.scrub import Scrubber, StreamScrubber, replacements_for, scrubber_for
from gateway.egress.aws import AwsSigning, Checked
from gateway.egress.flows import FlowState, StreamFilter, chain, flow_state
from gateway.egress.guard import fail_closed
from gateway.egress.recorder import FlowRecorder
from gateway.egress.screen import SecretScreen
from gateway.runtime.metrics import Metrics

log = logging.getLogger("sandgate.broker")

OFF_LOOP_BYTES = 64 * 1024           # bodies larger than this are scanned on a worker thread


class InjectionAddon:
    def __init__(self, broker: Broker, placeholders: PlaceholderRegistry, screen: SecretScreen,
                 recorder: FlowRecorder, metrics: Metrics, aws: AwsSigning):
        self._broker = broker
        self._aws = aws
        self._placeholders = placeholders
        self._screen = screen
        self._recorder = recorder
        self._metrics = metrics

    def deny(self, flow: http.HTTPFlow, code: str, reason: str, status: int = 403) -> None:
        self._recorder.deny(flow, code, reason, status=status)

    # -- request ---------------------------------------------------------------------------------
    @fail_closed
    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        """A streamed body (chunked, or too large to hold) leaves with its headers right after this hook: swap the
        placeholders of the URL and headers now, and blank out any placeholder the body carries."""
        st = flow_state(flow)
        if st is None or flow.response is not None or not callable(flow.request.stream):
            return
        await self.inject(flow, st, set(st.head_secrets), b"")
        if flow.response is None and self._placeholders:
            flow.request.stream = chain(flow.request.stream, self._masking(flow, st))

    def _masking(self, flow: http.HTTPFlow, st: FlowState) -> StreamFilter:
        scrubber = StreamScrubber(self._placeholders.masker())
        seen = [False]

        def scan(chunk: bytes) -> list[bytes]:
            out = scrubber(chunk)
            if not seen[0] and any(MASK_PREFIX in piece for piece in out):
                seen[0] = True
                self._metrics.exfiltration.inc()
                self._recorder.record("exfiltration", session=st.session_id, action="mask",
                                      reasons=["a placeholder in a body too large to inspect was blanked out"],
                                      codes=["secret.exfiltration"], request_id=flow.id,
                                      method=flow.request.method, host=flow.request.host, path=st.path)
            return out
        return scan

    @fail_closed
    async def request(self, flow: http.HTTPFlow) -> None:
        st = flow_state(flow)
        if st is None or flow.response is not None:
            return
        found = set(st.head_secrets)
        body = b"" if flow.request.stream else (flow.request.raw_content or b"")
        if body and self._placeholders:
            if len(body) > OFF_LOOP_BYTES:
                found |= await asyncio.to_thread(self._placeholders.find, body)
            else:
                found |= self._placeholders.find(body)
        trailers = flow.request.trailers
        in_trailers = self._placeholders.find("\n".join(f"{k}: {v}" for k, v in trailers.items(multi=True))) \
            if trailers and self._placeholders else set()
        if in_trailers:
            if flow.request.stream:
                # The body is already on its way and the trailers go after this hook: they never carry a
                # placeholder (none is put into trailers either).
                flow.request.trailers = None
                self._recorder.record("exfiltration", session=st.session_id, action="mask",
                                      reasons=["a placeholder in the request trailers was dropped"],
                                      codes=["secret.exfiltration"], request_id=flow.id,
                                      method=flow.request.method, host=flow.request.host, path=st.path)
            else:
                found |= in_trailers
        if found and self._screen.refuse(flow, st, found):
            return
        if not st.injected:                         # a streamed request was handled at requestheaders
            await self.inject(flow, st, found, body)

    async def inject(self, flow: http.HTTPFlow, st: FlowState, found: set[tuple[str, str]], body: bytes) -> None:
        """Put the real values of the placeholders found in, and arm the response scrubber with every secret the
        session holds: any response may carry a value a host kept from an earlier request (read back from the
        bound host, or from another name it serves under). Scrubbing uses the last value read when the store is
        down; injecting never does (503)."""
        st.injected = True
        own = st.placeholders
        if not own:
            return
        mine = {name: own[name] for _owner, name in found if name in own}
        timeout = self._broker.lookup_timeout_s + 1
        if any(self._broker.minted(name) for name in mine):
            timeout += MINT_TIMEOUT_S               # a token endpoint asked now (or a replica's refresh awaited)
        now = time.time()
        signed: dict[str, Checked] = {}
        for name in mine:
            spec = self._broker.specs.get(name)
            if spec is None or spec.kind != "aws":
                continue
            try:
                # checked before anything in the head changes; None: no signature of this session's key id
                checked = self._aws.check(flow, name, own, None if callable(flow.request.stream) else body, now)
            except SigV4Error as exc:
                return self.deny(flow, exc.code, f"AWS signature refused: {exc}",
                                 status=413 if exc.code == "secret.body_too_large" else 403)
            if checked is not None:
                signed[name] = checked
        try:
            # Values still fresh in the broker's cache are taken without awaiting (what the lookups would answer);
            # anything else goes to the backends, with the timeout.
            bindings = self._broker.fresh_bindings(mine) if mine else []
            if bindings is None:
                bindings = await asyncio.wait_for(self._broker.bindings(mine), timeout)
            scrub = self._broker.fresh_scrub_replacements(own)
            if scrub is None:
                scrub = await asyncio.wait_for(self._broker.scrub_replacements(own), timeout)
            creds = {name: await self._aws.credentials(name) for name in signed}
        except (SecretUnavailable, asyncio.TimeoutError) as exc:
            code = exc.code if isinstance(exc, SecretUnavailable) else "secret.backend_unavailable"
            log.warning("secret lookup failed for session %s: %s", st.session_id, code)
            if code == REFRESH_FAILED:          # the token endpoint said no: the upstream is never asked
                return self.deny(flow, code, f"a fresh token could not be obtained for {', '.join(sorted(mine))}",
                                 status=502)
            return self.deny(flow, code, f"the secret store is unavailable for {', '.join(sorted(mine or own))}",
                             status=503)
        st.scrub = {**scrub, **replacements_for(bindings)} or None
        if st.scrub:
            flow.request.headers["accept-encoding"] = "identity"     # so that the response can be scanned
            for name in ("range", "if-range"):
                # A byte range could cut a kept value in pieces that no scrubber recognises: whole bodies only.
                flow.request.headers.pop(name, None)
        if not bindings and not signed:
            return
        uses: list[tuple[str, str]] = []
        headers, used = substitute_headers(flow.request.headers.items(multi=True), bindings)
        uses += used
        query = flow.request.url.partition("?")[2]
        if query:
            new_query, used = substitute_query(query, bindings)
            if used:
                flow.request.path = flow.request.path.partition("?")[0] + "?" + new_query
            uses += used
        raw = [(k.encode("utf-8", "surrogateescape"), v.encode("utf-8", "surrogateescape")) for k, v in headers]
        flow.request.headers = http.Headers(raw)        # bytes that were not UTF-8 go out as they came
        if body and not flow.request.stream:
            new_body, used = substitute_body(body, bindings, flow.request.headers.get("content-type"))
            if used:
                flow.request.raw_content = new_body
                if "content-length" in flow.request.headers:
                    flow.request.headers["content-length"] = str(len(new_body))
            uses += used
        for name, checked in signed.items():          # last: over the head as it leaves
            self._aws.apply(flow, checked, own[name + AWS_SECRET_PART], creds[name], now)
            uses.append((name, "sigv4"))
        st.secrets_used = tuple(sorted({f"{n}@{where}" for n, where in uses}))
        for name in sorted({n for n, _ in uses}):
            self._recorder.record("secret.use", session=st.session_id, action="inject", request_id=flow.id,
                                  method=flow.request.method, host=flow.request.host, path=st.path,
                                  detail={"secret": name, "where": sorted({w for n, w in uses if n == name})})

    # -- response ----------------------------------------------------------------------------------
    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """Scrub the head (reason phrase, header names and values; a 101's too) and stream the body through the
        scrubber. What sandgate cannot scan (a content-encoding, a transfer coding but chunked, a folded header
        line) is refused with 502, never passed on."""
        st = flow_state(flow)
        if st is None or flow.response is None or st.denied or not st.scrub:
            return
        if any(b"\n" in value or b"\r" in value for _name, value in flow.response.headers.fields):
            # An obsolete line folding splits a value where a client joins it again: no scrubber sees it whole.
            return self.withhold(flow, st)
        scrubber = scrubber_for(st.scrub)
        head = head_bytes(flow.response)
        if scrubber.could_match(head):              # else scrubbing would change no part of it
            scrub_head(flow.response, scrubber)
            head = head_bytes(flow.response)
        if case_variant_in(head, st.scrub):
            return self.withhold(flow, st)          # e.g. a header name, lowercased by HTTP/2
        if flow.response.status_code == 101:
            return
        encoding = flow.response.headers.get("content-encoding", "identity").strip().lower()
        transfer = flow.response.headers.get("transfer-encoding", "").strip().lower()
        if encoding not in ("", "identity") or transfer not in ("", "chunked", "identity"):
            return self.withhold(flow, st)          # e.g. "gzip, chunked": a client would decompress it
        if not has_body(flow):
            return
        counted: StreamFilter = flow.response.stream if callable(flow.response.stream) else st.count_in
        if "content-length" in flow.response.headers:
            del flow.response.headers["content-length"]
            if flow.response.http_version == "HTTP/1.1":
                flow.response.headers["transfer-encoding"] = "chunked"
        flow.response.stream = chain(counted, StreamScrubber(scrubber))

    def withhold(self, flow: http.HTTPFlow, st: FlowState) -> None:
        """Answer 502 instead of a response that cannot be scanned; its body is read and dropped."""
        st.scrub_blocked = True
        self.deny(flow, "secret.unscannable",
                  "the response is encoded so that sandgate cannot scrub the secret from it", status=502)
        body = st.withheld = flow.response.content or b""
        flow.response.stream = lambda chunk: [] if chunk else [body]

    def response(self, flow: http.HTTPFlow) -> None:
        """Trailers (HTTP/1 chunked and HTTP/2) arrive after the body and are sent after this hook: scrub them."""
        st = flow_state(flow)
        if st is None or flow.response is None or not st.scrub:
            return
        if st.scrub_blocked:
            # A body-less response never streamed: mitmproxy put its (empty) body in place of the denial's.
            flow.response.content = st.withheld
            return
        if flow.response.trailers:
            scrubbed = _scrub_fields(flow.response.trailers.fields, scrubber_for(st.scrub))
            if scrubbed is not None:
                flow.response.trailers = http.Headers(scrubbed)
            text = b"\n".join(b"%s: %s" % field for field in flow.response.trailers.fields).lower()
            if any(real.lower() in text for real in st.scrub):
                flow.response.trailers = None       # a case variant is left: the head is sent, drop them all

    # -- websocket frames ------------------------------------------------------------------------
    def websocket_message(self, flow: http.HTTPFlow) -> None:
        st = flow_state(flow)
        if st is None or flow.websocket is None or not flow.websocket.messages:
            return
        message = flow.websocket.messages[-1]
        if message.dropped:
            return
        try:
            if message.from_client:
                if self._placeholders.find(message.content):
                    message.drop()
                    self._recorder.record("exfiltration", session=st.session_id, action="deny",
                                          codes=["secret.exfiltration"], request_id=flow.id,
                                          reasons=["a placeholder was sent in a WebSocket message"],
                                          host=flow.request.host, path=st.path)
            elif st.scrub:
                message.content = scrubber_for(st.scrub).sub(message.content)
        except Exception:  # noqa: BLE001 - fail closed: drop the frame
            log.exception("internal_error in websocket_message")
            message.drop()


def has_body(flow: http.HTTPFlow) -> bool:
    """Whether the response may carry a body at all (not to HEAD, not 1xx, 204 or 304): one that may not keeps its
    framing headers as they are, and never gets a chunked terminator."""
    status = flow.response.status_code if flow.response is not None else 0
    return flow.request.method != "HEAD" and not (100 <= status < 200 or status in (204, 304))


def head_bytes(response: http.Response) -> bytes:
    """The response's reason phrase and header fields ("name: value"), one per line."""
    return b"\n".join([response.data.reason] + [b"%s: %s" % field for field in response.headers.fields])


def case_variant_in(head: bytes, scrub: dict[bytes, bytes]) -> bool:
    """Whether a real value is in `head` in any letter case."""
    lowered = head.lower()
    return any(real.lower() in lowered for real in scrub)


def _scrub_fields(fields: tuple[tuple[bytes, bytes], ...], scrubber: Scrubber,
                  ) -> list[tuple[bytes, bytes]] | None:
    """The header fields with names and values scrubbed, or None when nothing changed."""
    out = [(scrubber.sub(name), scrubber.sub(value)) for name, value in fields]
    return None if out == list(fields) else out


def scrub_head(response: http.Response, scrubber: Scrubber) -> None:
    """Scrub a response's reason phrase and every header name and value."""
    reason = scrubber.sub(response.data.reason)
    if reason != response.data.reason:
        response.data.reason = reason
    fields = _scrub_fields(response.headers.fields, scrubber)
    if fields is not None:
        response.headers = http.Headers(fields)
