"""The BFCL agent: an AWorld Agent whose tools are one BFCL entry's functions, served per episode."""

from __future__ import annotations

from aworld_train.agents.mcp_config import AgentText, env_url, one_server_agent, streamable_http
from aworld_train.core.protocol import url_variable

URL_VARIABLE = url_variable("bfcl")
DEFAULT_URL = "http://127.0.0.1:8766/mcp"

SYSTEM_PROMPT = (
    "You are an assistant that completes the user's requests by calling the provided functions. "
    "Call functions one step at a time and use their results; when the request is done, or cannot be done "
    "with the functions you have, answer briefly without a function call."
)


def mcp_config(url: str | None = None, timeout_s: float = 60.0) -> dict:
    """The agent's MCP config. The URL stays an env reference until a worker runs it."""
    return streamable_http("bfcl", url or env_url(URL_VARIABLE, DEFAULT_URL), timeout_s)


AGENT = AgentText(
    "bfcl_agent", "Completes multi-turn BFCL requests with the entry's functions", SYSTEM_PROMPT
)


def build_agent(url: str | None = None, provider: str = "aworld_train"):
    return one_server_agent(AGENT, mcp_config(url), provider)
