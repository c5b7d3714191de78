"""The four-tool assistant: an AWorld Agent with calculator, weather_query, search and get_current_time."""

from __future__ import annotations

import json

from aworld_train.agents.mcp_config import env_url, streamable_http
from aworld_train.protocol import url_variable

URL_VARIABLE = url_variable("four-tools")
DEFAULT_URL = "http://127.0.0.1:8768/mcp"

# The tools in one line each: a small model reads a short list better than a long JSON schema.
SYSTEM_PROMPT = (
    "You are a helpful assistant with four tools: calculator(expression), weather_query(city, date), "
    "search(query), get_current_time(). For arithmetic, weather, facts or the time, call the tool, then "
    "answer briefly with its result. Answer greetings and small talk directly, without a tool."
)


def _call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


# Worked examples as real chat turns, two tool calls answered with their results: a 135M model copies
# the call format from them far more often than from a description (a direct-answer example made it
# answer everything directly, tools never called, so GRPO had no tool use to reinforce).
FEW_SHOT = [
    {"role": "user", "content": "What is 12 * 7?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [_call("example_1", "calculator", {"expression": "12 * 7"})],
    },
    {"role": "tool", "content": "84", "tool_call_id": "example_1"},
    {"role": "assistant", "content": "12 * 7 is 84."},
    {"role": "user", "content": "What is the temperature in Paris on 2025-07-03?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [_call("example_2", "weather_query", {"city": "Paris", "date": "2025-07-03"})],
    },
    {
        "role": "tool",
        "content": "Paris on 2025-07-03: sunny, 24°C, humidity 41%",
        "tool_call_id": "example_2",
    },
    {"role": "assistant", "content": "It is 24°C and sunny in Paris."},
]


def mcp_config(url: str | None = None, timeout_s: float = 30.0) -> dict:
    """The agent's MCP config. The URL stays an env reference until a worker runs it."""
    return streamable_http("four-tools", url or env_url(URL_VARIABLE, DEFAULT_URL), timeout_s)


def build_agent(url: str | None = None, provider: str = "aworld_train"):
    from aworld_train.aworld.runtime import Agent, AgentConfig

    agent = Agent(
        name="four_tools_agent",
        desc="Answers with calculator, weather, search and clock tools when they are needed",
        system_prompt=SYSTEM_PROMPT,
        mcp_config=mcp_config(url),
        mcp_servers=["four-tools"],
        conf=AgentConfig(llm_provider=provider),
    )
    agent.few_shot = FEW_SHOT  # read by aworld-train's agent spec
    return agent
