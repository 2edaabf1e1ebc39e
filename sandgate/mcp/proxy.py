"""The MCP proxy: an MCP server (the SDK's lowlevel `Server`) in front of an upstream MCP server (a
`ClientSession`), forwarding initialize's identity, tools, resources, prompts and completions.

- tools/list: tools the policy always denies are left out (a listing probe per tool, see `ToolGate.hidden`).
- tools/call: decided first (the tool, its arguments, the server name and the tool's annotations, which come
  from the server and are untrusted); "ask" waits on the approval; a refusal is an error result the agent can
  read (`isError`), never a call upstream.
- Every result from upstream is scrubbed of the session's real secret values before the agent sees it; if it
  cannot be scrubbed, it is withheld.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, TypeVar

import mcp_types as types
from mcp import ClientSession
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from sandgate.mcp.gate import ToolGate
from sandgate.types import SandgateError

log = logging.getLogger("sandgate.mcp")
INTERNAL_ERROR = -32603
R = TypeVar("R")


def refusal(tool: str, text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class McpProxy:
    def __init__(self, upstream: ClientSession, init: types.InitializeResult, gate: ToolGate):
        self.upstream, self.init, self.gate = upstream, init, gate
        self.annotations: dict[str, dict] = {}

    # -- helpers ---------------------------------------------------------------------------------
    async def _scrubbed(self, model: Any) -> Any:
        try:
            return await self.gate.scrub(model)
        except SandgateError as exc:
            log.warning("cannot scrub an upstream result: %s", exc.code)
            raise MCPError(INTERNAL_ERROR, "sandgate could not scan this result for secrets; it was withheld") \
                from None

    async def _up(self, call: Awaitable[R]) -> R:
        """An upstream call whose JSON-RPC error (message and data come from the server) is scrubbed too."""
        try:
            return await call
        except MCPError as exc:
            try:
                clean = await self.gate.scrub(exc.error)
            except SandgateError:
                raise MCPError(exc.code, "the upstream server reported an error (withheld: sandgate could not "
                                         "scan it for secrets)") from None
            raise MCPError(clean.code, clean.message, clean.data) from None

    def _remember(self, tools: list[types.Tool]) -> None:
        for tool in tools:
            self.annotations[tool.name] = (tool.annotations.model_dump(by_alias=True, mode="json", exclude_none=True)
                                           if tool.annotations is not None else {})

    async def _annotations_of(self, name: str) -> dict:
        if name not in self.annotations:
            cursor = None
            for _ in range(100):
                page = await self._up(self.upstream.list_tools(
                    params=types.PaginatedRequestParams(cursor=cursor) if cursor else None))
                self._remember(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
        return self.annotations.get(name, {})

    # -- tools -----------------------------------------------------------------------------------
    async def list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        result = await self._up(self.upstream.list_tools(params=params))
        self._remember(result.tools)
        try:
            hidden = await self.gate.hidden([(t.name, self.annotations.get(t.name, {})) for t in result.tools])
        except SandgateError as exc:
            log.warning("cannot filter tools/list: %s", exc.code)
            raise MCPError(INTERNAL_ERROR, "sandgate could not decide which tools to show") from None
        result = result.model_copy(update={"tools": [t for t in result.tools if t.name not in hidden]})
        return await self._scrubbed(result)

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name, args = params.name, dict(params.arguments or {})
        try:
            decision = await self.gate.decide(name, args, await self._annotations_of(name))
        except SandgateError as exc:
            log.warning("tool call %s not decided: %s", name, exc.code)
            return refusal(name, f"sandgate could not decide this call to {name} ({exc.code}); it was not run")
        if not decision.allowed:
            why = "; ".join(decision.reasons) or "denied"
            codes = ", ".join(decision.codes)
            return refusal(name, f"sandgate denied this call to {name}: {why}" + (f" [{codes}]" if codes else ""))
        result = await self._up(self.upstream.send_request(types.CallToolRequest(params=params),
                                                           types.CallToolResult))
        try:
            return await self.gate.scrub(result)
        except SandgateError as exc:
            log.warning("cannot scrub the result of %s: %s", name, exc.code)
            return refusal(name, f"sandgate could not scan the result of {name} for secrets; it was withheld")

    # -- resources, prompts, completion: forwarded, results scrubbed ------------------------------
    async def list_resources(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return await self._scrubbed(await self._up(self.upstream.list_resources(params=params)))

    async def list_resource_templates(self, ctx: Any, params: types.PaginatedRequestParams | None
                                      ) -> types.ListResourceTemplatesResult:
        return await self._scrubbed(await self._up(self.upstream.list_resource_templates(params=params)))

    async def read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        result = await self._up(self.upstream.send_request(types.ReadResourceRequest(params=params),
                                                           types.ReadResourceResult))
        return await self._scrubbed(result)

    async def list_prompts(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return await self._scrubbed(await self._up(self.upstream.list_prompts(params=params)))

    async def get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        result = await self._up(self.upstream.send_request(types.GetPromptRequest(params=params),
                                                           types.GetPromptResult))
        return await self._scrubbed(result)

    async def complete(self, ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        result = await self._up(self.upstream.send_request(types.CompleteRequest(params=params),
                                                           types.CompleteResult))
        return await self._scrubbed(result)

    # -- the front server ------------------------------------------------------------------------
    def server(self) -> Server:
        """A lowlevel Server with the upstream's identity and exactly the upstream's capabilities."""
        caps = self.init.capabilities
        info = self.init.server_info
        handlers: dict[str, Any] = {}
        if caps.tools is not None:
            handlers.update(on_list_tools=self.list_tools, on_call_tool=self.call_tool)
        if caps.resources is not None:
            handlers.update(on_list_resources=self.list_resources, on_read_resource=self.read_resource,
                            on_list_resource_templates=self.list_resource_templates)
        if caps.prompts is not None:
            handlers.update(on_list_prompts=self.list_prompts, on_get_prompt=self.get_prompt)
        if caps.completions is not None:
            handlers.update(on_completion=self.complete)
        return Server(info.name, version=info.version, title=info.title, instructions=self.init.instructions,
                      **handlers)
