"""The transport sandgate's own HTTP clients dial with: token endpoints (broker/oauth2.py, through authlib) and the
retry of a request after an upstream 401 (oauth_retry.py).

A name in `token_url` is resolved with the egress resolver and every address vetted as a sandbox's destination would
be; the connection goes to the vetted address (TLS still verifies the name, sent as SNI), so the address dialled is
the address classified. An address literal in `token_url` is the operator's own choice and is dialled as
configured (DESIGN: operator endpoints). Answers are capped.

With `egress.upstream_proxy` (and the destination not bypassed) the connection goes by CONNECT through the proxy,
handed the vetted address ("local") or the name ("proxy": no local resolution), with the proxy's credentials.
"""
from __future__ import annotations

import ssl
from typing import Awaitable, Callable

import httpx2 as httpx

from gateway.net.addresses import AddressVerdict, parse_ip_literal
from gateway.net.hosts import normalise_host
from gateway.net.upstream_proxy import UpstreamProxy, bypassed
from gateway.egress.resolver import Resolver

MAX_ANSWER_BYTES = 65536


class VettedTransport(httpx.AsyncBaseTransport):
    def __init__(self, resolver: Resolver, vet: Callable[[list[str], int], AddressVerdict], tls: ssl.SSLContext,
                 max_bytes: int = MAX_ANSWER_BYTES, truncate: bool = False, proxy: UpstreamProxy | None = None,
                 proxy_auth: Callable[[], Awaitable[str | None]] | None = None):
        self._resolver = resolver
        self._vet = vet
        self._tls = tls
        self._max = max_bytes
        self._truncate = truncate           # stop reading past max_bytes (the caller sees it) instead of raising
        self._proxy = proxy
        self._proxy_auth = proxy_auth
        self._inner = httpx.AsyncHTTPTransport(verify=tls, trust_env=False)

    async def _via_proxy(self, proxy: UpstreamProxy) -> httpx.AsyncHTTPTransport:
        auth = await self._proxy_auth() if self._proxy_auth is not None else None
        host, port = proxy.address
        url = f"{proxy.scheme}://{f'[{host}]' if ':' in host else host}:{port}"
        return httpx.AsyncHTTPTransport(verify=self._tls, trust_env=False, proxy=httpx.Proxy(
            url, headers={"Proxy-Authorization": auth} if auth else None))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        proxy = self._proxy if self._proxy is not None and not bypassed(self._proxy, normalise_host(host), port) \
            else None
        if parse_ip_literal(host) is None and not (proxy is not None and proxy.resolve == "proxy"):
            verdict = self._vet(await self._resolver.resolve(host, port), port)
            if not verdict.allowed or not verdict.addresses:
                raise httpx.ConnectError(f"sandgate refused the token endpoint's address: {verdict.code}")
            request.url = request.url.copy_with(host=verdict.addresses[0])
            request.extensions = {**request.extensions, "sni_hostname": host}
        inner = self._inner if proxy is None else await self._via_proxy(proxy)
        try:
            response = await inner.handle_async_request(request)
            return await self._read(response)
        finally:
            if inner is not self._inner:
                await inner.aclose()

    async def _read(self, response: httpx.Response) -> httpx.Response:
        body = bytearray()
        try:
            async for chunk in response.stream:          # type: ignore[union-attr]
                body += chunk
                if len(body) > self._max:
                    if self._truncate:
                        break
                    raise httpx.DecodingError("the answer is too large")
        finally:
            await response.aclose()
        return httpx.Response(response.status_code, headers=response.headers, content=bytes(body),
                              extensions=response.extensions)

    async def aclose(self) -> None:
        await self._inner.aclose()


def tls_context(bundle: str) -> ssl.SSLContext:
    """Public roots plus egress.upstream_ca (the bundle proxy.py writes for mitmproxy)."""
    return ssl.create_default_context(cafile=bundle)
