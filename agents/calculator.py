"""The calculator agent: an AWorld Agent with one MCP server, the calculator."""

from __future__ import annotations

import json

from aworld_train.agents.mcp_config import AgentText, env_url, one_server_agent, streamable_http
from aworld_train.core.protocol import url_variable

URL_VARIABLE = url_variable("calculator")
DEFAULT_URL = "http://127.0.0.1:8765/mcp"

SYSTEM_PROMPT = (
    "You are a careful calculator assistant. Call the calculate tool with the expression, "
    "then answer with the number."
)


def _example(question: str, expression: str, answer: str, call_id: str) -> list[dict]:
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "calculate", "arguments": json.dumps({"expression": expression})},
    }
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": answer, "tool_call_id": call_id},
        {"role": "assistant", "content": f"The answer is {answer}."},
    ]


# Two worked examples as real chat turns: a 135M model copies the call format from
# them far more often than from a description of the format.
FEW_SHOT = _example("What is 12 * 7?", "12 * 7", "84", "example_1") + _example(
    "What is (5 + 9) - 3?", "(5 + 9) - 3", "11", "example_2"
)


def mcp_config(url: str | None = None, timeout_s: float = 30.0) -> dict:
    """The agent's MCP config. The URL stays an env reference until a worker runs it."""
    return streamable_http("calculator", url or env_url(URL_VARIABLE, DEFAULT_URL), timeout_s)


AGENT = AgentText(
    "calculator_agent", "Answers arithmetic questions with the calculator tool", SYSTEM_PROMPT, FEW_SHOT
)


def build_agent(url: str | None = None, provider: str = "aworld_train"):
    return one_server_agent(AGENT, mcp_config(url), provider)
