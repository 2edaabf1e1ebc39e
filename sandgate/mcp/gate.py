"""What the MCP proxy asks sandgate: which tools to show, whether a call may run, and results scrubbed.

`SandgateGate` does it through the harness API (`sandgate.client`): tool calls go to `POST /v1/toolcalls` with
`mcp = {"server", "annotations"}`, an "ask" waits on the approval, listings go to `POST /v1/mcp/tools`, and
results go through `POST /v1/sessions/{id}/scrub` (the proxy never holds a real secret value).
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol, TypeVar

from pydantic import BaseModel

from sandgate.mcp.walk import collect_strings, replace_strings
from sandgate.client import Client
from sandgate.types import Decision

M = TypeVar("M", bound=BaseModel)


class ToolGate(Protocol):
    server: str

    async def hidden(self, tools: list[tuple[str, dict]]) -> set[str]: ...

    async def decide(self, tool: str, args: Mapping[str, Any], annotations: Mapping[str, Any]) -> Decision: ...

    async def scrub(self, model: M) -> M: ...


class SandgateGate:
    def __init__(self, client: Client, session: str, server: str, *, has_secrets: bool, wait_s: float):
        self.client, self.session, self.server = client, session, server
        self.has_secrets, self.wait_s = has_secrets, wait_s

    async def hidden(self, tools: list[tuple[str, dict]]) -> set[str]:
        if not tools:
            return set()
        rows = await self.client.mcp_tools(self.session, self.server,
                                           [{"name": n, "annotations": a} for n, a in tools])
        return {r["name"] for r in rows if r.get("hidden")}

    async def decide(self, tool: str, args: Mapping[str, Any], annotations: Mapping[str, Any]) -> Decision:
        return await self.client.check(self.session, tool, args,
                                       mcp={"server": self.server, "annotations": dict(annotations)},
                                       wait_s=self.wait_s)

    async def scrub(self, model: M) -> M:
        if not self.has_secrets:
            return model
        data = model.model_dump(by_alias=True, mode="json", exclude_none=True)
        texts = collect_strings(data)
        clean = await self.client.scrub(self.session, texts)
        if clean == texts:
            return model
        return type(model).model_validate(replace_strings(data, clean))
