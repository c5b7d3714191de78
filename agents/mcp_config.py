"""The MCP config shape AWorld agents take, for one streamable-HTTP server, and the agent built on
one such server that most ready builders are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def env_url(variable: str, default: str) -> str:
    """A URL that stays an env reference until a worker runs the agent."""
    return "${" + variable + ":-" + default + "}"


def streamable_http(name: str, url: str, timeout_s: float, headers: dict[str, str] | None = None) -> dict:
    """`{"mcpServers": {name: {...}}}` with the same timeout for the call, the stream and the session."""
    server = {"type": "streamable-http", "url": url}
    if headers:
        server["headers"] = dict(headers)
    server.update(timeout=timeout_s, sse_read_timeout=timeout_s, client_session_timeout_seconds=timeout_s)
    return {"mcpServers": {name: server}}


@dataclass(frozen=True)
class AgentText:
    """What an agent says about itself: its name, description, system prompt and worked examples
    (real chat turns, read by aworld-train's agent spec)."""

    name: str
    desc: str
    system_prompt: str
    few_shot: list[dict[str, Any]] | None = None


def one_server_agent(text: AgentText, mcp_config: dict, provider: str, memory: dict[str, Any] | None = None):
    """An AWorld agent on the one MCP server of `mcp_config`, its LLM calls through `provider`;
    `memory`: its AWorld `memory_config` (what each call sees of its history), AWorld's default if
    None."""
    from aworld_train.aworld.framework import Agent, AgentConfig

    conf = AgentConfig(llm_provider=provider, **({"memory_config": memory} if memory else {}))
    agent = Agent(
        name=text.name,
        desc=text.desc,
        system_prompt=text.system_prompt,
        mcp_config=mcp_config,
        mcp_servers=list(mcp_config["mcpServers"]),
        conf=conf,
    )
    if text.few_shot:
        agent.few_shot = text.few_shot
    return agent
