"""An AWorld agent for an AgentGym environment, through the agentgym bridge's MCP tools."""

from __future__ import annotations

import json

from aworld_train.agents.mcp_config import AgentText, env_url, one_server_agent, streamable_http
from aworld_train.core.protocol import url_variable

URL_VARIABLE = url_variable("agentgym")
DEFAULT_URL = "http://127.0.0.1:8770/mcp"

SYSTEM_PROMPT = (
    "You act in a text environment through the act tool: call act with one action at a time, read the "
    "observation, and go on until the environment says the task is done. The task is in the user's "
    "message; the instruction tool repeats it."
)

TEXTCRAFT_HINT = (
    " In TextCraft the actions are 'get N ITEM', 'craft N ITEM using N A, N B' (only with the crafting "
    "commands given) and 'inventory'."
)


def _call(call_id: str, action: str) -> dict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "act", "arguments": json.dumps({"action": action})},
    }


# One worked TextCraft episode as real chat turns (an item of its own, not in the examples' splits).
TEXTCRAFT_FEW_SHOT = [
    {
        "role": "user",
        "content": "Crafting commands:\ncraft 4 oak planks using 1 oak logs\ncraft 1 oak button using 1 oak planks"
        "\n\nGoal: craft oak button.",
    },
    {"role": "assistant", "content": "", "tool_calls": [_call("example_1", "get 1 oak logs")]},
    {"role": "tool", "content": "Got 1 oak logs", "tool_call_id": "example_1"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [_call("example_2", "craft 4 oak planks using 1 oak logs")],
    },
    {"role": "tool", "content": "Crafted 4 minecraft:oak_planks", "tool_call_id": "example_2"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [_call("example_3", "craft 1 oak button using 1 oak planks")],
    },
    {
        "role": "tool",
        "content": "Crafted 1 minecraft:oak_button\n[environment] reward=1 done=true",
        "tool_call_id": "example_3",
    },
    {"role": "assistant", "content": "Done: I crafted the oak button."},
]


def mcp_config(url: str | None = None, timeout_s: float = 60.0) -> dict:
    """The agent's MCP config. The URL stays an env reference until a worker runs it."""
    return streamable_http("agentgym", url or env_url(URL_VARIABLE, DEFAULT_URL), timeout_s)


def build_agent(url: str | None = None, provider: str = "aworld_train", env: str = "textcraft"):
    textcraft = env == "textcraft"
    text = AgentText(
        f"agentgym_{env}_agent",
        f"Solves AgentGym {env} tasks by acting in the environment",
        SYSTEM_PROMPT + (TEXTCRAFT_HINT if textcraft else ""),
        TEXTCRAFT_FEW_SHOT if textcraft else None,
    )
    return one_server_agent(text, mcp_config(url), provider)


def build_textcraft_agent(url: str | None = None, provider: str = "aworld_train"):
    return build_agent(url, provider, "textcraft")


def build_babyai_agent(url: str | None = None, provider: str = "aworld_train"):
    return build_agent(url, provider, "babyai")
