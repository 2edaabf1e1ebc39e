"""Fail closed: mitmproxy logs an exception raised in a hook and lets the flow go on; sandgate's hooks deny."""
from __future__ import annotations

import functools
import logging
from typing import Awaitable, Callable, Protocol, TypeVar

from mitmproxy import http

log = logging.getLogger("sandgate.egress")


class Denies(Protocol):
    def deny(self, flow: http.HTTPFlow, code: str, reason: str) -> None: ...


A = TypeVar("A", bound=Denies)


def fail_closed(hook: Callable[[A, http.HTTPFlow], Awaitable[None]]) -> Callable[[A, http.HTTPFlow], Awaitable[None]]:
    """Wrap an async flow hook so that any exception answers the flow 403 `internal_error` (and is logged)."""
    @functools.wraps(hook)
    async def wrapper(self: A, flow: http.HTTPFlow) -> None:
        try:
            await hook(self, flow)
        except Exception:  # noqa: BLE001 - any failure in a security hook is a deny
            log.exception("internal_error in %s", hook.__name__)
            self.deny(flow, "internal_error", "sandgate could not decide this request")
    return wrapper
