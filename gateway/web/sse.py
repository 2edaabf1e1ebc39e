"""`GET /events`: Server-Sent Events for the approval page.

One `approval` event (`{"type": "filed"|"decided"|"voted"|"used", "id"}`) per change in the approval queue, a
comment line every HEARTBEAT_S (keeps proxies from timing the stream out, and re-checks the login: an expired
page session gets a `logout` event and the stream ends), and a clean end on shutdown (`close_streams`, run
from the app's `on_shutdown`, wakes every stream with a sentinel).
"""
from __future__ import annotations

import asyncio
import json

from aiohttp import web

from gateway.api.state import APPROVALS
from gateway.web.respond import PAGE, harden

HEARTBEAT_S = 15.0


async def events(request: web.Request) -> web.StreamResponse:
    state, queue = request.app[PAGE], request.app[APPROVALS]
    if state.sessions.user(request) is None:
        return harden(web.Response(status=401, text="log in first"))
    resp = harden(web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}))
    await resp.prepare(request)
    q = queue.subscribe()
    state.streams.add(q)
    try:
        await resp.write(b"retry: 3000\n\n")
        while True:
            try:
                item = await asyncio.wait_for(q.get(), HEARTBEAT_S)
            except asyncio.TimeoutError:
                if state.sessions.user(request) is None:
                    await resp.write(b"event: logout\ndata: {}\n\n")
                    break
                await resp.write(b": heartbeat\n\n")
                continue
            if item is None:
                break
            await resp.write(f"event: approval\ndata: {json.dumps(item)}\n\n".encode())
    except ConnectionResetError:
        pass  # the browser went away
    finally:
        state.streams.discard(q)
        queue.unsubscribe(q)
    return resp


async def close_streams(app: web.Application) -> None:
    for q in list(app[PAGE].streams):
        while True:
            try:
                q.put_nowait(None)
                break
            except asyncio.QueueFull:
                q.get_nowait()
