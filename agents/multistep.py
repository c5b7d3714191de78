"""The multi-step arithmetic agent: an AWorld Agent on the multistep MCP server, whose calculator
does one operation per call, so a question of n operations takes n dependent calls."""

from __future__ import annotations

import json

from aworld_train.agents.mcp_config import AgentText, env_url, one_server_agent, streamable_http
from aworld_train.core.protocol import url_variable

URL_VARIABLE = url_variable("multistep")
DEFAULT_URL = "http://127.0.0.1:8766/mcp"

SYSTEM_PROMPT = (
    "The calculate tool does one operation per call. Call it on the first two numbers, then on "
    "each result with the next operation, left to right. Answer with the final number."
)


def _call(call_id: str, expression: str) -> dict:
    arguments = json.dumps({"expression": expression})
    return {"id": call_id, "type": "function", "function": {"name": "calculate", "arguments": arguments}}


def worked_example(question: str, steps: list[tuple[str, str]], name: str) -> list[dict]:
    """A question solved one operation a call: (expression, result) per step, then the answer."""
    turns: list[dict] = [{"role": "user", "content": question}]
    for i, (expression, result) in enumerate(steps):
        call_id = f"{name}_{i + 1}"
        turns.append({"role": "assistant", "content": "", "tool_calls": [_call(call_id, expression)]})
        turns.append({"role": "tool", "content": f"{expression} = {result}", "tool_call_id": call_id})
    turns.append({"role": "assistant", "content": f"The answer is {steps[-1][1]}."})
    return turns


# Two worked examples as real chat turns (a 135M model copies a format from turns, not from a
# description; given one, it rarely calls the tool at all): chains of two and three operations.
FEW_SHOT = worked_example(
    "What is 12 + 7 * 3, computed left to right?", [("12 + 7", "19"), ("19 * 3", "57")], "example_a"
) + worked_example(
    "What is 40 - 15 * 2 + 9, computed left to right?",
    [("40 - 15", "25"), ("25 * 2", "50"), ("50 + 9", "59")],
    "example_b",
)


def mcp_config(url: str | None = None, timeout_s: float = 30.0) -> dict:
    """The agent's MCP config. The URL stays an env reference until a worker runs it."""
    return streamable_http("multistep", url or env_url(URL_VARIABLE, DEFAULT_URL), timeout_s)


AGENT = AgentText(
    "multistep_agent", "Solves arithmetic one operation per calculator call", SYSTEM_PROMPT, FEW_SHOT
)


def build_agent(url: str | None = None, provider: str = "aworld_train"):
    return one_server_agent(AGENT, mcp_config(url), provider)
