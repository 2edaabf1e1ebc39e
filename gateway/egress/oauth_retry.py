"""The OAuth2 retry addon: an upstream `401` to a request that carried a token sandgate minted refreshes the token
and sends the request once more, when it can be replayed (its body was held, or it has none).

Registered before the credential addon (injection.py), so that the response the sandbox gets — the retry's, or
the 401 — is scrubbed like any other. The retry goes to the same destination, dialled at a vetted address (the
egress address check, token_transport.VettedTransport), with the request exactly as it left except the new token.
Its answer is held (capped at inspect_max_bytes); a larger one is 502 `secret.retry_too_large`. With an upstream
proxy the retry goes through it as the request did.
"""
from __future__ import annotations

import logging
import ssl
from typing import Awaitable, Callable, Protocol

import httpx2 as httpx
from mitmproxy import http

from broker.oauth2 import OAuth2Tokens
from broker.sources import SecretUnavailable
from gateway.egress.flows import FlowState, flow_state
from gateway.egress.resolver import Resolver
from gateway.egress.token_transport import VettedTransport
from gateway.net.addresses import AddressVerdict
from gateway.net.upstream_proxy import UpstreamProxy

log = logging.getLogger("sandgate.broker")

HOP_BY_HOP = ("connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer",
              "content-length")
RETRY_TIMEOUT_S = 30.0


class Recorder(Protocol):
    def deny(self, flow: http.HTTPFlow, code: str, reason: str, status: int = 403) -> None: ...

    def record(self, kind: str, **fields: object) -> None: ...


def used_tokens(tokens: OAuth2Tokens, st: FlowState, request: http.Request) -> list[tuple[str, str]]:
    """(secret, access token) for each minted token the request left with."""
    names = {use.partition("@")[0] for use in st.secrets_used or ()}
    head = "\n".join(f"{k}: {v}" for k, v in request.headers.items(multi=True)) + "\n" + request.path
    return [(name, token) for name in sorted(names) if name in tokens.specs
            for token in tokens.recent(name) if token in head]


def replayable(request: http.Request) -> bool:
    """The body was held (or there is none), so the request can be sent again as it was."""
    return not request.stream


class OAuth2RetryAddon:
    def __init__(self, tokens: OAuth2Tokens, resolver: Resolver, vet: Callable[[list[str], int], AddressVerdict],
                 tls: ssl.SSLContext, recorder: Recorder, max_bytes: int, proxy: UpstreamProxy | None,
                 proxy_auth: Callable[[], Awaitable[str | None]] | None):
        self.tokens = tokens
        self.resolver = resolver
        self.vet = vet
        self.tls = tls
        self.recorder = recorder
        self.max_bytes = max_bytes
        self.proxy = proxy
        self.proxy_auth = proxy_auth

    def deny(self, flow: http.HTTPFlow, code: str, reason: str, status: int = 403) -> None:
        """Answer `status` instead of the 401, whose body mitmproxy still reads (and this drops)."""
        self.recorder.deny(flow, code, reason, status=status)
        if flow.response is not None:
            body = flow.response.content or b""
            flow.response.stream = lambda chunk: [] if chunk else [body]

    async def responseheaders(self, flow: http.HTTPFlow) -> None:
        try:
            await self.retry(flow)
        except Exception:  # noqa: BLE001 - fail closed
            log.exception("internal_error in the oauth2 retry")
            self.deny(flow, "internal_error", "sandgate could not decide this request", status=502)

    async def retry(self, flow: http.HTTPFlow) -> None:
        st = flow_state(flow)
        if st is None or flow.response is None or st.denied or flow.response.status_code != 401:
            return
        used = used_tokens(self.tokens, st, flow.request)
        if not used:
            return
        for name, token in used:
            self.tokens.invalidate(name, token)          # refused upstream: never used again
        if not replayable(flow.request):
            return
        try:
            fresh = {token: await self.tokens.token(name) for name, token in used}
        except SecretUnavailable as exc:
            log.warning("oauth2: no fresh token after a 401 (%s)", exc.code)
            return                                       # the 401 goes back as it came (scrubbed)
        request = flow.request.copy()
        own = st.placeholders
        for (name, old), new in zip(used, fresh.values()):
            swap(request, old, new)
            # the new token is scrubbed from what comes back, like the one it replaces
            st.scrub = {**(st.scrub or {}), new.encode(): own[name].encode()}
        self.recorder.record("secret.use", session=st.session_id, action="refresh", request_id=flow.id,
                             method=flow.request.method, host=flow.request.host, path=st.path,
                             detail={"secret": sorted({n for n, _ in used}), "reason": "upstream 401"})
        answer = await self.send(request)
        if answer is None:
            return self.deny(flow, "secret.retry_failed", "the request could not be sent again with a fresh token",
                             status=502)
        status, headers, body = answer
        if len(body) > self.max_bytes:
            return self.deny(flow, "secret.retry_too_large", "the answer to the retried request is too large to "
                             "hold", status=502)
        # (httpx decoded any content coding: the body goes as it was decoded)
        response = http.Response.make(status, b"", [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers
                                                    if k.lower() not in HOP_BY_HOP + ("content-encoding",)])
        response.http_version = flow.response.http_version
        if flow.response.http_version == "HTTP/1.1":
            response.headers["transfer-encoding"] = "chunked"
        flow.response = response
        # mitmproxy goes on reading the 401's body: drop it, and send the retry's body in its place at the end.
        flow.response.stream = lambda chunk: [] if chunk else [body]

    async def send(self, request: http.Request) -> tuple[int, list[tuple[str, str]], bytes] | None:
        transport = VettedTransport(self.resolver, self.vet, self.tls, max_bytes=self.max_bytes + 1,
                                    truncate=True, proxy=self.proxy, proxy_auth=self.proxy_auth)
        headers = [(k, v) for k, v in request.headers.items(multi=True) if k.lower() not in HOP_BY_HOP]
        try:
            async with httpx.AsyncClient(transport=transport, timeout=RETRY_TIMEOUT_S, trust_env=False,
                                         follow_redirects=False) as client:
                answer = await client.request(request.method, request.url, headers=headers,
                                              content=request.raw_content or b"")
                return answer.status_code, list(answer.headers.multi_items()), answer.content
        except Exception as exc:  # noqa: BLE001 - refused address, network, TLS: no details out
            log.warning("oauth2: the retry failed (%s)", type(exc).__name__)
            return None


def swap(request: http.Request, old: str, new: str) -> None:
    """The new token wherever the old one went (headers, query, body)."""
    old_b, new_b = old.encode(), new.encode()
    request.headers = http.Headers([(k, v.replace(old_b, new_b)) for k, v in request.headers.fields])
    if old in request.path:
        request.path = request.path.replace(old, new)
    body = request.raw_content
    if body and old.encode() in body:
        request.raw_content = body.replace(old.encode(), new.encode())
        if "content-length" in request.headers:
            request.headers["content-length"] = str(len(request.raw_content))
