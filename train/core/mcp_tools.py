"""Asking an HTTP MCP server for its tools with the `mcp` SDK's client: how both the checks before
a run (`prerun/mcp.py`) and a running episode (`rollout/episodes/episode.py`) judge a tool server
by the server itself."""

from __future__ import annotations

import asyncio
from typing import Any


async def list_tools(conf: dict[str, Any], timeout_s: float) -> list[str]:
    """The tool names one HTTP MCP server lists (`conf`: its mcp_config entry, `${VAR}`s resolved)."""
    from mcp import ClientSession

    headers = conf.get("headers") or None
    if conf.get("type") == "sse":
        from mcp.client.sse import sse_client

        client = sse_client(conf["url"], headers=headers, timeout=timeout_s)
    else:
        from mcp.client.streamable_http import streamablehttp_client

        client = streamablehttp_client(conf["url"], headers=headers, timeout=timeout_s)

    async def run() -> list[str]:
        async with client as streams, ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            return [tool.name for tool in (await session.list_tools()).tools]

    return await asyncio.wait_for(run(), timeout_s)


def root_cause(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio wraps a refused connection in two of them)."""
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]
    return exc


async def tools_problem(conf: dict[str, Any], timeout_s: float) -> str | None:
    """Why a server gives an agent no tools ("no answer", the client's error, "lists no tools"),
    or None: it answered and listed some."""
    try:
        tools = await list_tools(conf, timeout_s)
    except Exception as exc:
        cause = root_cause(exc)
        return "no answer" if isinstance(cause, TimeoutError) else f"{type(cause).__name__}: {cause}"
    return None if tools else "lists no tools"
