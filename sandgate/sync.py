"""A thin synchronous wrapper of `sandgate.client.Client`: the same calls, run on a private event loop thread.

    with SyncClient() as sg, sg.session(allow=["pypi.org"]) as session:
        @session.guard()
        def shell(command: str) -> str: ...
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from contextlib import contextmanager
from typing import Any, Awaitable, Callable, Iterator, Mapping, TypeVar

from sandgate.client import Client, call_args
from sandgate.types import Approval, Decision, Event, NotFound, SessionInfo, ToolDenied

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class SyncClient:
    def __init__(self, *args: Any, **kwargs: Any):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sandgate-client", daemon=True)
        self._thread.start()
        self.client = Client(*args, **kwargs)

    def _run(self, coro: Awaitable[T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()
            raise

    def close(self) -> None:
        if self._loop.is_running():
            self._run(self.client.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()

    def __enter__(self) -> "SyncClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def health(self) -> dict:
        return self._run(self.client.health())

    def create_session(self, **spec: Any) -> "SyncSession":
        return SyncSession(self, self._run(self.client.create_session(**spec)).info)

    @contextmanager
    def session(self, **spec: Any) -> Iterator["SyncSession"]:
        session = self.create_session(**spec)
        try:
            yield session
        finally:
            try:
                self.end_session(session.id)
            except NotFound:
                pass

    def get_session(self, sid: str) -> SessionInfo:
        return self._run(self.client.get_session(sid))

    def patch_session(self, sid: str, **values: Any) -> SessionInfo:
        return self._run(self.client.patch_session(sid, **values))

    def renew_session(self, sid: str, ttl_s: int) -> SessionInfo:
        return self._run(self.client.renew_session(sid, ttl_s))

    def end_session(self, sid: str) -> None:
        self._run(self.client.end_session(sid))

    def check(self, sid: str, tool: str, args: Mapping[str, Any] | None = None, **kw: Any) -> Decision:
        """`Client.check`, blocking (the same keywords: step, mcp, wait_s, on_ask; `on_ask` is a plain
        function here, called with the approval's id and page URL before the wait)."""
        return self._run(self.client.check(sid, tool, args, **kw))

    def wait_approval(self, aid: str, timeout_s: float) -> Approval:
        return self._run(self.client.wait_approval(aid, timeout_s))

    def events(self, sid: str, **kw: Any) -> list[Event]:
        return self._run(self.client.events(sid, **kw))

    def stream_events(self, sid: str, *, after: int = 0) -> Iterator[Event]:
        while True:
            for event in self.events(sid, after=after, wait_s=25.0):
                after = max(after, event.seq)
                yield event

    def guard(self, sid: str, tool: str | None = None, *, wait_s: float = 600.0,
              on_ask: Callable[[str, str], Any] | None = None) -> Callable[[F], F]:
        """Decorate a sync tool function: checked before each call as `Client.guard` describes (its bound
        arguments are the args); a deny raises `ToolDenied` and the function does not run."""
        def decorate(fn: F) -> F:
            name, signature = tool or fn.__name__, inspect.signature(fn)

            @functools.wraps(fn)
            def guarded(*args: Any, **kwargs: Any) -> Any:
                decision = self.check(sid, name, call_args(signature, args, kwargs), wait_s=wait_s, on_ask=on_ask)
                if not decision.allowed:
                    raise ToolDenied(decision)
                return fn(*args, **kwargs)
            return guarded  # type: ignore[return-value]
        return decorate


class SyncSession:
    def __init__(self, sync: SyncClient, info: SessionInfo):
        self.sync, self.info = sync, info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def env(self) -> dict[str, str]:
        return dict(self.info.env)

    def check(self, tool: str, args: Mapping[str, Any] | None = None, **kw: Any) -> Decision:
        """`SyncClient.check` for this session (the same keywords: step, mcp, wait_s, on_ask)."""
        return self.sync.check(self.id, tool, args, **kw)

    def guard(self, tool: str | None = None, *, wait_s: float = 600.0,
              on_ask: Callable[[str, str], Any] | None = None) -> Callable[[F], F]:
        """`SyncClient.guard` for this session."""
        return self.sync.guard(self.id, tool, wait_s=wait_s, on_ask=on_ask)

    def events(self, **kw: Any) -> list[Event]:
        return self.sync.events(self.id, **kw)

    def renew(self, ttl_s: int) -> SessionInfo:
        return self.sync.renew_session(self.id, ttl_s)

    def end(self) -> None:
        self.sync.end_session(self.id)
