"""The ToolBench agent: an AWorld Agent whose tools are one task's APIs plus Finish, served per episode."""

from __future__ import annotations

from aworld_train.agents.mcp_config import AgentText, env_url, one_server_agent, streamable_http
from aworld_train.core.protocol import url_variable
from aworld_train.env.toolbench.data import SYSTEM_PROMPT

URL_VARIABLE = url_variable("toolbench")
DEFAULT_URL = "http://127.0.0.1:8767/mcp"


def mcp_config(url: str | None = None, timeout_s: float = 60.0) -> dict:
    """The agent's MCP config. The URL stays an env reference until a worker runs it."""
    return streamable_http("toolbench", url or env_url(URL_VARIABLE, DEFAULT_URL), timeout_s)


AGENT = AgentText(
    "toolbench_agent", "Solves ToolBench queries with the task's APIs and ends with Finish", SYSTEM_PROMPT
)


def build_agent(url: str | None = None, provider: str = "aworld_train"):
    return one_server_agent(AGENT, mcp_config(url), provider)
