"""The deliverer: a background task that POSTs the outbox's events to `notify.webhook_url`.

It takes the oldest due events with a lease (gateway/store/outbox.py: one replica per event), POSTs each (signed,
with its delivery id) and deletes it once the receiver answered 2xx. A failure (no answer in `timeout_s`, a
refused connection, a non-2xx status, the signing key unreadable) is audited (`notify.failed`, never the URL or
the key), the event is retried later with exponential backoff, and this round stops: the receiver is likely
down for the others too. It wakes when an approval changes (here or on another replica) and polls once a second
otherwise. Nothing on the decision path waits for it: filing only wrote the outbox row.
"""
from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
from typing import Awaitable, Callable

import aiohttp

from broker.sources import SecretUnavailable
from gateway.audit.log import AuditLog
from gateway.config import NotifySettings
from gateway.notify.messages import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, render, sign
from gateway.runtime.metrics import Metrics
from gateway.store import StoreError
from gateway.store.outbox import Claimed, Outbox

log = logging.getLogger("sandgate.notify")

POLL_S = 1.0
TRIM_EVERY_S = 5.0
BATCH = 20
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0


def backoff(failures: int) -> float:
    """Seconds before the next attempt after `failures` failures in a row: 0.5, 1, 2, ... 30, with +-20% jitter."""
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** max(0, failures - 1)) * random.uniform(0.8, 1.2)


class DeliveryFailed(Exception):
    """One attempt failed; the message names the cause (never the URL or the key)."""


class Notifier:
    def __init__(self, settings: NotifySettings, outbox: Outbox, audit: AuditLog,
                 key: Callable[[], Awaitable[str]] | None, tls: ssl.SSLContext | None = None,
                 metrics: Metrics | None = None):
        self.settings = settings
        self.outbox = outbox
        self._audit = audit
        self._key = key                   # reads notify.secret (a secret source) at each delivery
        self._tls = tls
        self._metrics = metrics

    async def run(self, wakeups: asyncio.Queue | None = None) -> None:
        """Deliver until cancelled. `wakeups`: anything put there starts a round at once."""
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False,
                                         connector=aiohttp.TCPConnector(ssl=self._tls or True)) as http:
            failures, trimmed = 0, 0.0
            while True:
                if time.monotonic() - trimmed >= TRIM_EVERY_S:
                    trimmed = time.monotonic()
                    await self._trim()
                try:
                    outcome = await self.round(http)
                except StoreError as exc:
                    log.warning("notifications: the store is unreachable (%s); retrying", exc)
                    outcome = "failed"
                except Exception:  # noqa: BLE001 - a bug must not end notifications for the process's life
                    log.exception("notifications: a delivery round failed; retrying")
                    outcome = "failed"
                if outcome == "failed":
                    failures += 1
                    await asyncio.sleep(backoff(failures))
                    _drain(wakeups)
                    continue
                failures = 0
                if outcome == "idle":
                    await _wait(wakeups, POLL_S)

    async def round(self, http: aiohttp.ClientSession) -> str:
        """Deliver the due events: "sent" (some were), "idle" (none due) or "failed" (one failed; the rest of the
        round was given back)."""
        rows = await self.outbox.claim(BATCH)
        if not rows:
            return "idle"
        held = [r.id for r in rows]
        try:
            for row in rows:
                try:
                    await self._post(http, row)
                except Exception as exc:  # noqa: BLE001 - any failure of one event is that event's (audited, retried)
                    if not isinstance(exc, DeliveryFailed):
                        log.exception("notification %s: delivery failed unexpectedly", row.delivery)
                    held.remove(row.id)
                    await self._failed(row, str(exc) if isinstance(exc, DeliveryFailed) else "internal error")
                    return "failed"
                held.remove(row.id)               # delivered: never given back (a stop now would send it twice)
                await asyncio.shield(self.outbox.delivered(row.id))
                self._count("delivered")
            return "sent"
        finally:
            if held:                          # failed, or cancelled (a stop): the others are retried at once
                await asyncio.shield(self.outbox.release(held))

    async def _post(self, http: aiohttp.ClientSession, row: Claimed) -> None:
        s = self.settings
        try:
            body = render(s.format, row.event, row.delivery, row.created_at, row.payload, s.public_url)
        except (KeyError, TypeError, ValueError) as exc:         # a row this version cannot read: it waits (max_age_s)
            raise DeliveryFailed(f"the event cannot be rendered ({type(exc).__name__})") from None
        headers = {"Content-Type": "application/json", DELIVERY_HEADER: row.delivery, EVENT_HEADER: row.event,
                   "User-Agent": "sandgate-notify"}
        if self._key is not None:
            try:
                headers[SIGNATURE_HEADER] = sign((await self._key()).encode(), body)
            except SecretUnavailable as exc:
                raise DeliveryFailed(f"the signing key is unavailable ({exc.code})") from None
        try:
            async with http.post(s.webhook_url, data=body, headers=headers, allow_redirects=False) as resp:
                if not 200 <= resp.status < 300:
                    raise DeliveryFailed(f"the receiver answered {resp.status}")
        except asyncio.TimeoutError:
            raise DeliveryFailed(f"no answer within {s.timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            raise DeliveryFailed(f"could not deliver ({type(exc).__name__})") from None

    async def _failed(self, row: Claimed, error: str) -> None:
        attempt = row.attempts + 1
        self._count("failed")
        await asyncio.shield(self.outbox.failed(row.id, time.time() + backoff(attempt), error))
        # Not in the session's trail (its steps on the page): the webhook failed, not anything the session did.
        self._audit.record("notify.failed", action="retry", reasons=[error],
                           detail={"delivery": row.delivery, "event": row.event, "approval_id": row.payload.get("id"),
                                   "session": row.payload.get("session"), "attempt": attempt})
        if attempt == 1:
            log.warning("notification %s (%s) failed: %s; retrying with backoff", row.delivery, row.event, error)

    async def _trim(self) -> None:
        try:
            dropped = await self.outbox.trim(self.settings.max_outbox, self.settings.max_age_s)
        except Exception as exc:  # noqa: BLE001 - the next trim tries again
            log.warning("notifications: trimming the outbox failed (%s)", type(exc).__name__)
            return
        if self._metrics is not None:
            try:
                self._metrics.notify_outbox.set(await self.outbox.count())
            except Exception:  # noqa: BLE001 - a gauge is not worth a failure
                pass
        if dropped:
            self._count("dropped", len(dropped))
        for why in sorted({w for _, _, w in dropped}):
            some = [(d, e) for d, e, w in dropped if w == why]
            self._audit.record("notify.dropped", action="drop", reasons=[f"{len(some)} undelivered events: {why}"],
                               detail={"count": len(some), "why": why,
                                       "deliveries": [d for d, _ in some[:20]]})
            log.warning("notifications: %d undelivered events dropped (%s)", len(some), why)

    def _count(self, result: str, n: int = 1) -> None:
        if self._metrics is not None:
            self._metrics.notify.labels(result).inc(n)


def _drain(q: asyncio.Queue | None) -> None:
    while q is not None and not q.empty():
        q.get_nowait()


async def _wait(q: asyncio.Queue | None, timeout: float) -> None:
    if q is None:
        await asyncio.sleep(timeout)
        return
    try:
        await asyncio.wait_for(q.get(), timeout)
    except asyncio.TimeoutError:
        return
    _drain(q)
