"""The one API transport (sandgate/transport.py) against a real aiohttp server on loopback: JSON in and out, every
failure a SandgateError with the server's code, an unreachable sandgate `Unavailable` with status 0; and how
the commands find the API and the token (an operator command never falls back to the harness token)."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading

import pytest
from aiohttp import web

from sandgate.transport import Transport, command_endpoint, request_once, resolve_endpoint
from sandgate.types import NotFound, SandgateError, Unauthorized, Unavailable
from tests.support.upstream import free_port


async def echo(request: web.Request) -> web.Response:
    body = await request.json() if request.can_read_body else None
    return web.json_response({"method": request.method, "auth": request.headers.get("Authorization"),
                              "type": request.headers.get("Content-Type"), "body": body})


async def gone(request: web.Request) -> web.Response:
    return web.json_response({"error": "not_found", "detail": "no such thing"}, status=404)


async def forbidden(request: web.Request) -> web.Response:
    return web.json_response({"error": "forbidden", "detail": "admin only"}, status=403)


async def broken(request: web.Request) -> web.Response:
    return web.Response(status=502, text="<html>bad gateway</html>")


async def empty(request: web.Request) -> web.Response:
    return web.Response(status=204)


async def approval(request: web.Request) -> web.Response:
    if request.headers.get("Authorization") != "Bearer op":
        return web.json_response({"error": "unauthorized", "detail": "bad token"}, status=401)
    return web.json_response({"id": request.match_info["id"], "status": "pending"})


@pytest.fixture
def api():
    """A server on its own loop thread (request_once runs its own loop, as the CLI does)."""
    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/gone", gone)
    app.router.add_get("/forbidden", forbidden)
    app.router.add_get("/broken", broken)
    app.router.add_delete("/empty", empty)
    app.router.add_get("/v1/approvals/{id}", approval)
    loop = asyncio.new_event_loop()
    port = free_port()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.run_until_complete(runner.cleanup())
    loop.close()


def test_json_in_and_out_with_the_token(api):
    out = request_once(api, "tok", "POST", "/echo", {"a": [1, 2]})
    assert out == {"method": "POST", "auth": "Bearer tok", "type": "application/json", "body": {"a": [1, 2]}}
    assert request_once(api, "tok", "GET", "/echo")["type"] is None           # no body, no content type
    assert request_once(api, "tok", "DELETE", "/empty") is None


@pytest.mark.parametrize("path,cls,status,code", [
    ("/gone", NotFound, 404, "not_found"),
    ("/forbidden", Unauthorized, 403, "forbidden"),
    ("/broken", Unavailable, 502, "bad_response"),
])
def test_every_refusal_is_a_sandgate_error_with_the_servers_code(api, path, cls, status, code):
    with pytest.raises(cls) as err:
        request_once(api, "tok", "GET", path)
    assert (err.value.status, err.value.code) == (status, code)


def test_an_unreachable_sandgate_is_unavailable_with_status_0():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(Unavailable) as err:
        request_once(url, "tok", "GET", "/healthz")
    assert err.value.status == 0 and err.value.code == "unreachable" and url in err.value.detail


async def test_one_transport_serves_many_calls_and_closes(api):
    async with Transport(api, "tok", timeout_s=5) as transport:
        answers = await asyncio.gather(*(transport.request("POST", "/echo", {"i": i}) for i in range(20)))
        assert [a["body"]["i"] for a in answers] == list(range(20))
    with pytest.raises(SandgateError):
        await Transport(api, "tok").request("GET", "/gone")


def test_where_the_commands_find_the_api_and_the_token(tmp_path, monkeypatch):
    monkeypatch.delenv("SANDGATE_TOKEN", raising=False)
    (tmp_path / "harness.token").write_text("harness-tok\n")
    # operator commands (approvals, secrets, token revoke): --token, else $SANDGATE_TOKEN, never the harness token
    assert command_endpoint(None, None, "http://cfg:8700/") == ("http://cfg:8700", "")
    assert command_endpoint("http://flag/", "t", "http://cfg") == ("http://flag", "t")
    # harness commands (run, mcp) fall back to the data dir's harness token
    assert command_endpoint(None, None, "http://cfg", tmp_path) == ("http://cfg", "harness-tok")
    monkeypatch.setenv("SANDGATE_TOKEN", "env-tok")
    assert command_endpoint(None, None, "http://cfg", tmp_path) == ("http://cfg", "env-tok")
    # the SDK: arguments, the environment, then the data dir (listen.json, harness.token)
    monkeypatch.delenv("SANDGATE_TOKEN")
    monkeypatch.delenv("SANDGATE_API_URL", raising=False)
    (tmp_path / "listen.json").write_text(json.dumps({"api": "127.0.0.1:9999"}))
    assert resolve_endpoint(data_dir=tmp_path) == ("http://127.0.0.1:9999", "harness-tok")


def sandgate(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=60,
                          env=env)


def test_the_cli_prints_the_answer_or_one_line_per_failure(api, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDGATE_")}
    shown = sandgate("approvals", "show", "a1", "--api-url", api, "--token", "op", "--data-dir", str(tmp_path),
                     env=env)
    assert shown.returncode == 0 and json.loads(shown.stdout) == {"id": "a1", "status": "pending"}, shown.stderr
    refused = sandgate("approvals", "show", "a1", "--api-url", api, "--token", "nope", "--data-dir",
                       str(tmp_path), env=env)
    assert refused.returncode == 1 and refused.stderr == "sandgate: 401 unauthorized: bad token\n"
    down = f"http://127.0.0.1:{free_port()}"
    unreachable = sandgate("approvals", "ls", "--api-url", down, "--token", "op", "--data-dir", str(tmp_path),
                           env=env)
    assert unreachable.returncode == 1 and unreachable.stderr.startswith(f"sandgate: cannot reach sandgate at {down}")
    (tmp_path / "harness.token").write_text("harness-tok")         # never used by an operator command
    no_token = sandgate("secrets", "ls", "--api-url", api, "--data-dir", str(tmp_path), env=env)
    assert no_token.returncode == 2 and "no token" in no_token.stderr
