"""A test server speaking the part of OPA's REST API sandgate uses, with the real OPA Go engine behind it.

The OPA Go engine comes from `opa-golib-python-bindings` (test-only; installed by the Makefile). Run as a
process: `python -m tests.support.opa_server PORTFILE` listens on 127.0.0.1 (an ephemeral port written to
PORTFILE). Endpoints, as OPA answers them:
  PUT/GET/DELETE /v1/policies/{id}   a module (compiled with every other module first; 400 if it does not)
  GET /v1/policies                   {"result": [{"id", "raw"}]}
  PUT /v1/data/{path}                204; GET /v1/data/{path} and POST /v1/data/{path} ({"input": ...}) give
                                     {"result": value}, or {} when undefined
  GET /health                        {}
A control endpoint for fail-closed tests: PUT /__test/fault {"fault": "" | "slow" | "error" | "no_result" |
"garbage"}, and GET /__test/stats {"decisions": n, "puts": n}; PUT /__test/reset puts the server back as it started
(no modules, no data, no fault, counts 0), so that one process serves a module's tests one after the other.
"""
from __future__ import annotations

import asyncio
import json
import sys
from collections import OrderedDict
from typing import Any

from aiohttp import web


def _set(doc: dict, path: list[str], value: Any) -> None:
    node = doc
    for part in path[:-1]:
        node = node.setdefault(part, {})
    if path:
        node[path[-1]] = value


# How many compiled engines (or refusals) the server keeps by content (below).
BUILT = 16


class OpaState:
    def __init__(self) -> None:
        self.modules: dict[str, str] = {}
        self.data: dict = {}
        self.engine: Any = None
        self.fault = ""
        self.decisions = 0
        self.puts = 0
        self.generation = 0         # bumped by each reset: an answer held across one (slow) is dropped, uncounted
        # The last engines built, by their modules' ids and texts and their data: a push of a policy directory PUTs
        # its modules one at a time, each compiled with those before it, and a module's tests push the same ones
        # after every reset (about 0.45 s of CPU a push, compiled afresh). An engine is only evaluated once built,
        # so one built from the same content is the engine a new build would give (and a refusal the same refusal).
        self.built: OrderedDict[tuple, Any] = OrderedDict()
        self.rebuild(self.modules, self.data)

    def rebuild(self, modules: dict[str, str], data: dict) -> None:
        from opa_bindings import OpaError

        key = (tuple(sorted(modules.items())), json.dumps(data, sort_keys=True))
        engine = self.built.get(key)
        if engine is None:
            try:
                engine = self._build(modules, data)
            except OpaError as exc:             # refused: refused again, with the same error, without compiling
                engine = exc
            self.built[key] = engine
        self.built.move_to_end(key)
        while len(self.built) > BUILT:
            self._close(self.built.popitem(last=False)[1])
        if isinstance(engine, OpaError):
            raise OpaError(engine.code, engine.message)
        old, self.engine, self.modules, self.data = self.engine, engine, modules, data
        self._close(old)

    def _close(self, engine: Any) -> None:
        """Close an engine neither in use nor kept."""
        if engine is not None and not isinstance(engine, Exception) and engine is not self.engine \
                and all(e is not engine for e in self.built.values()):
            engine.close()

    @staticmethod
    def _build(modules: dict[str, str], data: dict) -> Any:
        from opa_bindings import OpaEngine

        engine = OpaEngine()
        engine.print_handler = lambda *_: None
        for pid, text in modules.items():
            engine.add_policy(pid, text)
        engine.add_data(data)
        if modules:
            engine.eval_query("data")          # compile now: a broken module is refused, as OPA does
        return engine


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"code": code, "message": message}, status=status)


def create_app() -> web.Application:
    from opa_bindings import OpaError, OpaUndefinedError

    state = OpaState()
    lock = asyncio.Lock()
    routes = web.RouteTableDef()

    @routes.put("/v1/policies/{id:.+}")
    async def put_policy(request: web.Request) -> web.Response:
        text = await request.text()
        async with lock:
            try:
                await asyncio.to_thread(state.rebuild, {**state.modules, request.match_info["id"]: text},
                                        state.data)
            except OpaError as exc:
                return _error(400, "invalid_parameter", str(exc))
            state.puts += 1
        return web.json_response({})

    @routes.get("/v1/policies")
    async def list_policies(_: web.Request) -> web.Response:
        return web.json_response({"result": [{"id": k, "raw": v} for k, v in state.modules.items()]})

    @routes.get("/v1/policies/{id:.+}")
    async def get_policy(request: web.Request) -> web.Response:
        pid = request.match_info["id"]
        if pid not in state.modules:
            return _error(404, "resource_not_found", f"storage_not_found_error: policy id {pid!r}")
        return web.json_response({"result": {"id": pid, "raw": state.modules[pid]}})

    @routes.delete("/v1/policies/{id:.+}")
    async def delete_policy(request: web.Request) -> web.Response:
        pid = request.match_info["id"]
        async with lock:
            if pid not in state.modules:
                return _error(404, "resource_not_found", f"storage_not_found_error: policy id {pid!r}")
            try:
                await asyncio.to_thread(state.rebuild, {k: v for k, v in state.modules.items() if k != pid},
                                        state.data)
            except OpaError as exc:
                return _error(400, "invalid_parameter", str(exc))
        return web.json_response({})

    @routes.put("/v1/data/{path:.*}")
    @routes.put("/v1/data")
    async def put_data(request: web.Request) -> web.Response:
        try:
            value = await request.json()
        except ValueError:
            return _error(400, "invalid_parameter", "body is not JSON")
        path = [p for p in request.match_info.get("path", "").split("/") if p]
        data = json.loads(json.dumps(state.data))
        if path:
            _set(data, path, value)
        elif isinstance(value, dict):
            data = value
        async with lock:
            try:
                await asyncio.to_thread(state.rebuild, state.modules, data)
            except OpaError as exc:
                return _error(400, "invalid_parameter", str(exc))
            state.puts += 1
        return web.Response(status=204)

    async def query(request: web.Request, input_doc: Any) -> web.Response:
        path = ".".join(p for p in request.match_info.get("path", "").split("/") if p)
        fault = state.fault
        if fault == "slow":
            generation = state.generation
            await asyncio.sleep(30)
            if state.generation != generation:
                return _error(500, "internal_error", "the server was reset while this answer was held")
        if fault == "error":
            return _error(500, "internal_error", "injected failure")
        if fault == "garbage":
            return web.Response(text="<html>not json</html>", content_type="text/html")
        state.decisions += 1
        if fault == "no_result":
            return web.json_response({})
        try:
            value = await asyncio.to_thread(state.engine.eval_document, path, input_doc)
        except OpaUndefinedError:
            return web.json_response({})
        except OpaError as exc:
            return _error(500, "internal_error", str(exc))
        return web.json_response({"result": value})

    @routes.post("/v1/data/{path:.*}")
    async def post_data(request: web.Request) -> web.Response:
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return _error(400, "invalid_parameter", "body is not JSON")
        return await query(request, body.get("input") if isinstance(body, dict) else None)

    @routes.get("/v1/data/{path:.*}")
    async def get_data(request: web.Request) -> web.Response:
        return await query(request, None)

    @routes.get("/health")
    async def health(_: web.Request) -> web.Response:
        return web.json_response({})

    @routes.put("/__test/fault")
    async def set_fault(request: web.Request) -> web.Response:
        state.fault = (await request.json()).get("fault", "")
        return web.json_response({"fault": state.fault})

    @routes.put("/__test/reset")
    async def reset(_: web.Request) -> web.Response:
        state.generation += 1
        state.fault, state.decisions, state.puts = "", 0, 0
        await asyncio.to_thread(state.rebuild, {}, {})
        return web.Response(status=204)

    @routes.get("/__test/stats")
    async def stats(_: web.Request) -> web.Response:
        return web.json_response({"decisions": state.decisions, "puts": state.puts})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.add_routes(routes)
    return app


async def _serve(port_file: str) -> None:
    runner = web.AppRunner(create_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    with open(port_file + ".tmp", "w") as fh:
        fh.write(str(port))
    import os

    os.replace(port_file + ".tmp", port_file)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1]))
