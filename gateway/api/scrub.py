"""POST /v1/sessions/{sid}/scrub: the session's real secret values replaced by its placeholders in texts.

For harness-side relays that carry data back to the sandbox without passing the egress proxy (the MCP proxy:
tool results, resources, prompts). The relay never holds a real value: it sends text here and gets it back
scrubbed, in every form the proxy scrubs HTTP responses in (raw, percent-, JSON- and base64-encoded). A lookup
that fails is 503: the caller must then not pass the text on.
"""
from __future__ import annotations

import asyncio

from aiohttp import web

from broker.backends import SecretUnavailable
from broker.scrub import Scrubber, replacements_for, scrubber_for
from gateway.api.auth import require
from gateway.api.bodies import SCRUB, read_body
from gateway.api.errors import ApiError
from gateway.api.owned import owned_session
from gateway.api.state import AUDIT, BROKER, path_param, read_json

routes = web.RouteTableDef()

OFF_LOOP_BYTES = 64 * 1024


def scrub_texts(scrubber: Scrubber, texts: list[str]) -> tuple[list[str], int]:
    out, changed = [], 0
    for text in texts:
        clean = scrubber.sub_text(text)
        changed += clean != text
        out.append(clean)
    return out, changed


@routes.post("/v1/sessions/{sid}/scrub")
async def scrub(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    row = await owned_session(request, principal, path_param(request, "sid"))
    texts = read_body(await read_json(request), SCRUB).texts
    placeholders = dict(row.placeholders or {})
    if not placeholders or not texts:
        return web.json_response({"texts": texts, "scrubbed": 0})
    try:
        broker = request.app[BROKER]
        bindings = await asyncio.wait_for(broker.bindings(placeholders), broker.lookup_timeout_s + 1)
        replacements = replacements_for(bindings)
        aws = {n: p for n, p in placeholders.items() if "#" in n or getattr(broker.specs.get(n), "kind", "") == "aws"}
        if aws:                                     # an aws secret's secret access key and session token too
            replacements |= await asyncio.wait_for(broker.scrub_replacements(aws), broker.lookup_timeout_s + 1)
    except (SecretUnavailable, asyncio.TimeoutError):
        raise ApiError(503, "secret_unavailable", "the secret store is unavailable; nothing was scrubbed") from None
    scrubber = scrubber_for(replacements)
    if sum(len(t) for t in texts) > OFF_LOOP_BYTES:
        clean, changed = await asyncio.to_thread(scrub_texts, scrubber, texts)
    else:
        clean, changed = scrub_texts(scrubber, texts)
    if changed:
        request.app[AUDIT].record("secret.scrub", session=row.id, action="scrub",
                        detail={"texts": changed, "by": principal.ident})
    return web.json_response({"texts": clean, "scrubbed": changed})
