"""The BFCL multi-turn MCP server.

Every request names its episode and entry in headers the adapter injects:
`X-Episode-Id` (state is keyed by it, never by MCP session: ARCHITECTURE.md invariant 3),
`X-Task-Id` (the BFCL entry id, the dataset row's `id`) and `X-Episode-Turn` (the
index of the current user turn). The tool list is the entry's functions, plus the
functions a `miss_func` entry holds back once their turn has come.

Run: `aworld-train env up bfcl [--port N]`. With AWORLD_TRAIN_BFCL_HINTS=1 in its
environment (in a config: `env: [{name: bfcl, env: {AWORLD_TRAIN_BFCL_HINTS: "1"}}]`)
it gives actionable feedback: a failed or refused call's error ends with the
function's expected parameters.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.types import ContentBlock, TextContent
from mcp.types import Tool as MCPTool

from aworld_train.core.protocol import EPISODE_HEADER, TASK_HEADER, TURN_HEADER
from aworld_train.env.bfcl.catalog import UnknownEntry, input_schema
from aworld_train.env.bfcl.state import ToolCallError, Worlds

HINTS_VARIABLE = "AWORLD_TRAIN_BFCL_HINTS"


class BfclServer(FastMCP):
    def __init__(self, host: str = "127.0.0.1", port: int = 0, hints: bool = False) -> None:
        super().__init__("bfcl", host=host, port=port)
        self.worlds = Worlds(hints=hints)

    def _headers(self) -> tuple[str, str, int]:
        ctx = self.get_context()
        try:
            request = ctx.request_context.request
        except (AttributeError, ValueError, LookupError):
            request = None
        headers = request.headers if request is not None else {}
        episode, entry_id = headers.get(EPISODE_HEADER, ""), headers.get(TASK_HEADER, "")
        if not episode or not entry_id:
            raise ToolCallError(
                f"the BFCL server needs the {EPISODE_HEADER} and {TASK_HEADER} headers (the BFCL entry id, "
                "e.g. multi_turn_base_0); aworld-train episodes send them"
            )
        try:
            turn = int(headers.get(TURN_HEADER, "0"))
        except ValueError:
            raise ToolCallError(f"header {TURN_HEADER} must be an integer turn index") from None
        return episode, entry_id, turn

    def _world(self):
        episode, entry_id, turn = self._headers()
        try:
            return self.worlds.get(episode, entry_id), turn
        except UnknownEntry as exc:
            raise ToolCallError(str(exc.args[0])) from None

    async def list_tools(self) -> list[MCPTool]:
        world, turn = self._world()
        return [
            MCPTool(name=d["name"], description=d.get("description", ""), inputSchema=input_schema(d))
            for d in world.docs(turn)
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Sequence[ContentBlock]:
        world, turn = self._world()
        return [TextContent(type="text", text=world.call(name, dict(arguments or {}), turn))]


def build_server(host: str = "127.0.0.1", port: int = 0, hints: bool | None = None) -> BfclServer:
    if hints is None:
        hints = os.environ.get(HINTS_VARIABLE, "").lower() in ("1", "true", "yes")
    return BfclServer(host, port, hints)


def serve(
    transport: str = "http", host: str = "127.0.0.1", port: int = 8766, hints: bool | None = None
) -> None:
    server = build_server(host, port, hints)
    server.run(transport="streamable-http" if transport == "http" else "stdio")
