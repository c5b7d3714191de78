"""Whether an agent's MCP servers answer and give it tools: asked of the servers themselves, for the
episode that needs to know (rollout/episodes/episode.py)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlparse

from aworld_train.core.mcp_tools import tools_problem
from aworld_train.core.protocol import MissingVariable, resolve_env_refs
from aworld_train.rollout.episodes.driver import AgentRole

# how long a server asked for its tools mid-episode may take (it answered a connect just before)
_ASK_TIMEOUT_S = 5.0


def server_urls(mcp_config: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, URL) of each HTTP server of an agent's mcp_config, its `${VAR}`s resolved."""
    servers = (mcp_config.get("mcpServers") or {}).items()
    return [(n, _resolved(c["url"])) for n, c in servers if isinstance(c, dict) and c.get("url")]


class ToolServers:
    """An episode's view of its agents' MCP servers: each asked for its tools at most once."""

    def __init__(self, mcp_config: dict[str, Any]) -> None:
        self.mcp_config = mcp_config
        self._tools_listed: dict[str, str | None] = {}  # each server asked for its tools: why none

    async def missing(
        self, tools: list[dict[str, Any]] | None, role: AgentRole, first_call: bool
    ) -> tuple[str, str] | None:
        """A configured MCP server that gives the agent no tools: (status, error), or None.

        AWorld drops a server that does not answer and the agent goes on without its tools (every
        call it makes is answered "can not find ... tool"), so this is checked before each agent's
        first LLM call of an episode, and whenever a call carries no tools. A call may carry none
        on purpose (a final-answer, planner, summariser or structured-output call), so a server is
        judged by the server itself: asked for its tools (once an episode), never by one request.
        """
        if not first_call and tools:
            return None
        servers = self.mcp_config.get("mcpServers") or {}
        configured = [n for n in role.mcp_servers if n in servers]
        urls = dict(server_urls(self.mcp_config))
        down = [f"{n!r} at {urls[n]}" for n in configured if n in urls and not await reachable(urls[n])]
        if down:
            return (
                "tool_server_down",
                f"MCP server(s) {', '.join(down)} did not answer: the agent got no tools",
            )
        if tools:
            return None
        for name in (n for n in configured if n in urls):  # a stdio server cannot be asked from here
            if name not in self._tools_listed:
                self._tools_listed[name] = await tools_problem(_resolved_conf(servers[name]), _ASK_TIMEOUT_S)
            problem = self._tools_listed[name]
            if problem is not None:
                status = "error" if problem == "lists no tools" else "tool_server_down"
                return status, f"MCP server {name!r} at {urls[name]} {problem}: the agent got no tools"
        return None


def _resolved_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """A server's mcp_config entry with its `${VAR}` references resolved (left as written where a
    variable is missing: the server is then asked as configured)."""
    try:
        return resolve_env_refs(conf)
    except MissingVariable:
        return conf


def _resolved(url: str) -> str:
    """A URL with its `${VAR}` references resolved, as the agent's MCP client sees it."""
    try:
        return resolve_env_refs(url)
    except MissingVariable:
        return url


# A server that is down refuses the connection at once; a listening one on this machine is
# connected by the kernel even while it is busy, so a connect that takes long is this process's own
# event loop behind (dozens of episodes starting at once on a loaded CPU). Two seconds took busy
# runs' live servers for dead ones (episodes ended tool_server_down beside a vLLM run).
_CONNECT_TIMEOUT_S = 15.0


async def reachable(url: str, timeout: float = _CONNECT_TIMEOUT_S) -> bool:
    """Whether the server at `url` accepts a TCP connection within `timeout` seconds."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(parsed.hostname, port), timeout)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return True
