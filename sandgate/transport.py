"""The one way to a running sandgate's API: every program that talks to it — the SDK (`sandgate.client.Client`,
`sandgate.sync.SyncClient`), `sandgate run`, `sandgate mcp`, and the CLI's `approvals`, `secrets` and
`token revoke` — sends its requests through a `Transport` (aiohttp, JSON in and out, a `SandgateError` for
every failure), and finds the API and its token with the functions below."""
from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import aiohttp

from sandgate.types import SandgateError, Unavailable, error_for

DEFAULT_API_URL = "http://127.0.0.1:8700"


class Transport:
    """JSON requests to one sandgate with one token; `close()` (or `async with`) releases the connections."""

    def __init__(self, api_url: str, token: str, timeout_s: float = 30.0):
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "Transport":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def request(self, method: str, path: str, body: Any = None, *, timeout_s: float | None = None) -> Any:
        """One API call: the decoded JSON (None for 204). Raises a `SandgateError` subclass otherwise
        (`Unavailable` with status 0 when sandgate was not reached)."""
        if self._http is None:
            self._http = aiohttp.ClientSession(headers={"Authorization": f"Bearer {self.token}"})
        timeout = aiohttp.ClientTimeout(total=timeout_s or self.timeout_s)
        data = json.dumps(body, default=str) if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else None
        try:
            async with self._http.request(method, self.api_url + path, data=data, headers=headers,
                                          timeout=timeout) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise Unavailable(0, "unreachable", f"cannot reach sandgate at {self.api_url}: "
                                                f"{exc.__class__.__name__}") from None
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = {"error": "bad_response", "detail": raw[:200].decode(errors="replace")}
        if status >= 400:
            raise error_for(status, payload)
        return payload


def request_once(api_url: str, token: str, method: str, path: str, body: Any = None) -> Any:
    """One call from synchronous code with no event loop of its own (the CLI): `Transport.request`, then closed."""
    async def once() -> Any:
        async with Transport(api_url, token) as transport:
            return await transport.request(method, path, body)
    return asyncio.run(once())


def resolve_endpoint(api_url: str | None = None, token: str | None = None,
                     data_dir: str | os.PathLike | None = None) -> tuple[str, str]:
    """(API URL, token) for the SDK: the arguments, the environment (`SANDGATE_API_URL`, `SANDGATE_TOKEN`), then
    the data dir (`data_dir` / `SANDGATE_DATA_DIR` / `./.sandgate`: its `listen.json` and `harness.token`)."""
    ddir = Path(data_dir or os.environ.get("SANDGATE_DATA_DIR") or ".sandgate")
    url = api_url or os.environ.get("SANDGATE_API_URL", "")
    if not url:
        try:
            url = "http://" + json.loads((ddir / "listen.json").read_text())["api"]
        except (OSError, ValueError, KeyError, TypeError):
            url = DEFAULT_API_URL
    tok = token or os.environ.get("SANDGATE_TOKEN", "")
    if not tok:
        tok = harness_token(ddir)
    return url.rstrip("/"), tok


def command_endpoint(api_url: str | None, token: str | None, configured_url: str,
                     data_dir: Path | None = None, listen_dir: Path | None = None,
                     token_file: str | os.PathLike | None = None) -> tuple[str, str]:
    """(API URL, token) for a CLI command: `--api-url`, else the API a sandgate serving from `listen_dir` (the
    data dir) wrote to its `listen.json`, as the SDK finds it, else the configured API; `--token`, else
    `SANDGATE_TOKEN`, else — for the harness commands (`run`, `mcp`), which pass `data_dir` — the harness token:
    the file `token_file` names (`api.harness_token_file`), or the data dir's `harness.token`. The operator
    commands (`approvals`, `secrets`, `token revoke`) never fall back to it."""
    tok = token or os.environ.get("SANDGATE_TOKEN", "")
    if not tok and data_dir is not None:
        tok = _read_token(Path(token_file)) if token_file else harness_token(data_dir)
    found = listen_url(listen_dir or data_dir) if not api_url and (listen_dir or data_dir) else None
    return (api_url or found or configured_url).rstrip("/"), tok


def listen_url(data_dir: str | os.PathLike) -> str | None:
    """The API URL in `data_dir/listen.json` (a wildcard address asks loopback), None when there is none."""
    try:
        host, _, port = json.loads((Path(data_dir) / "listen.json").read_text())["api"].rpartition(":")
        int(port)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "[::]": "[::1]", "::": "[::1]"}.get(host, host)
    return f"http://{host}:{port}"


def harness_token(data_dir: str | os.PathLike) -> str:
    """The token `sandgate serve` wrote for the harness in its data dir ("" when there is none)."""
    return _read_token(Path(data_dir) / "harness.token")


def _read_token(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


__all__ = ["Transport", "SandgateError", "request_once", "resolve_endpoint", "command_endpoint", "listen_url",
           "harness_token",
           "DEFAULT_API_URL"]
