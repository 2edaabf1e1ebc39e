"""A webhook receiver for the notification tests: a real aiohttp server on loopback, in a thread of its own, that
checks each delivery's signature the way the README shows and records it. It can be stopped and started again on
the same port (a receiver that is down for a while)."""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import ssl
import threading
import time
from dataclasses import dataclass

from aiohttp import web

from tests.support.upstream import free_port


@dataclass
class Delivery:
    id: str
    event: str
    signature: str
    body: bytes
    signed_ok: bool

    @property
    def doc(self) -> dict:
        return json.loads(self.body)


class Receiver:
    def __init__(self, secret: str | None, status: int = 200, tls: tuple[str, str] | None = None):
        self.secret = secret
        self.tls = tls                    # (certificate, key): serve HTTPS
        self.status = status              # what it answers (a failing receiver: 500)
        self.port = free_port()
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/hook"

    async def _hook(self, request: web.Request) -> web.Response:
        body = await request.read()
        sig = request.headers.get("X-Sandgate-Signature", "")
        ok = False
        if self.secret is not None:
            want = "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
            ok = hmac.compare_digest(sig, want)
        with self._lock:
            self.deliveries.append(Delivery(request.headers.get("X-Sandgate-Delivery", ""),
                                            request.headers.get("X-Sandgate-Event", ""), sig, body, ok))
        return web.Response(status=self.status, text="ok")

    def start(self) -> "Receiver":
        ready = threading.Event()

        async def serve() -> None:
            app = web.Application()
            app.router.add_post("/hook", self._hook)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            context = None
            if self.tls:
                context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                context.load_cert_chain(*self.tls)
            site = web.TCPSite(runner, "127.0.0.1", self.port, reuse_address=True, ssl_context=context)
            await site.start()
            self._stop = asyncio.Event()
            ready.set()
            await self._stop.wait()
            await runner.cleanup()

        def main() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(serve())
            self._loop.close()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        assert ready.wait(10), "the receiver did not start"
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        self._thread = None

    def snapshot(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def events(self) -> list[tuple[str, str]]:
        """(approval id, event) of each delivery, in arrival order (json format)."""
        return [(d.doc["approval"]["id"], d.doc["event"]) for d in self.snapshot()]

    def wait_for(self, check, timeout: float = 30.0) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if check(self.snapshot()):
                return True
            time.sleep(0.1)
        return check(self.snapshot())
