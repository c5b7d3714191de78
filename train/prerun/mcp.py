"""The agent's MCP servers answer before any model is loaded (ARCHITECTURE.md invariant 5).

An agent whose server is down gets no tools from AWorld and would train without
them; a run must refuse that at construction, naming the server, its URL and the fix.
Servers a run starts itself (`env:`) are not up yet and are skipped here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass
from typing import Any

from aworld_train.aworld.specs import Spec
from aworld_train.core.errors import ToolServerError
from aworld_train.core.mcp_tools import list_tools, root_cause
from aworld_train.core.protocol import ENV_REF, MissingVariable, resolve_env_refs, url_variable


def started_by_run(name: str, conf: dict[str, Any], env_names: list[str]) -> bool:
    """A server the run starts (`env:`), by name or by its `<NAME>_MCP_URL` reference."""
    url = str(conf.get("url", ""))
    variables = {m.group(1) for m in ENV_REF.finditer(url)}
    return name in env_names or any(url_variable(env) in variables for env in env_names)


@dataclass(frozen=True)
class ServerAnswer:
    """What one HTTP MCP server said when asked for its tools."""

    name: str
    url: str
    tools: list[str]
    problem: str | None  # None: it answered and listed tools

    def fix(self) -> str:
        return (
            f"start it (e.g. `aworld-train env up {self.name}` for a built-in server), list it under `env:` "
            f"so the run starts it, or correct mcp_config.mcpServers.{self.name}.url"
        )


def ask_server(name: str, resolved: dict[str, Any], timeout_s: float) -> ServerAnswer:
    """List one server's tools (its config's `${VAR}` references already resolved)."""
    url = resolved["url"]
    try:
        tools = _run(list_tools(resolved, timeout_s))
    except Exception as exc:
        cause = root_cause(exc)
        reason = "no answer" if isinstance(cause, TimeoutError) else f"{type(cause).__name__}: {cause}"
        return ServerAnswer(
            name, url, [], f"does not answer ({reason}); the agent would run without its tools"
        )
    if not tools:
        return ServerAnswer(name, url, [], "answered but lists no tools")
    return ServerAnswer(name, url, tools, None)


def check_mcp_servers(spec: Spec, env_names: list[str], timeout_s: float = 5.0) -> dict[str, list[str]]:
    """Every HTTP MCP server of the agent whose URL resolves now answers and lists tools.

    Returns the tools each checked server listed; raises ToolServerError otherwise.
    """
    servers = (spec.mcp_config.get("mcpServers") or {}).items()
    listed: dict[str, list[str]] = {}
    for name, conf in servers:
        if spec.mcp_servers and name not in spec.mcp_servers:
            continue
        if not isinstance(conf, dict) or not conf.get("url") or started_by_run(name, conf, env_names):
            continue  # stdio servers are started per call by AWorld; env: servers by the run
        try:
            resolved = resolve_env_refs(conf)
        except MissingVariable:
            continue  # resolved on the worker that runs it
        answer = ask_server(name, resolved, timeout_s)
        if answer.problem is not None:
            raise ToolServerError(
                f"MCP server {name!r} at {answer.url} {answer.problem}. Fix: {answer.fix()}"
            )
        listed[name] = answer.tools
    return listed


def _run(coro):
    """asyncio.run, also from code that already runs an event loop (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
