"""The calculator agent on smolagents, as its users write it: the default `ToolCallingAgent`
(which asks for a tool call on every step, `tool_choice: "required"`, and ends with its
`final_answer` tool) on `OpenAIServerModel`, the calculator's MCP tools through smolagents' own
`ToolCollection.from_mcp`. Nothing here knows aworld-train: the gateway session is an OpenAI base
URL. The trainer starts it once and sends it each user turn (turns.py); smolagents runs a turn
synchronously, so each runs on a thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading

from smolagents import OpenAIServerModel, ToolCallingAgent, ToolCollection
from turns import serve

MCP_URL = os.environ.get("CALCULATOR_MCP_URL", "http://127.0.0.1:8765/mcp")
MAX_STEPS = 4
_tools: list = []
_opened = contextlib.ExitStack()  # the MCP connection, open for the process's life once made
_lock = threading.Lock()


def tools() -> list:
    """The calculator's tools, connected on the first turn (the trainer may start this process
    before the run's MCP server is up)."""
    with _lock:
        if not _tools:
            collection = ToolCollection.from_mcp(
                {"url": MCP_URL, "transport": "streamable-http"}, trust_remote_code=True
            )
            _tools.extend(_opened.enter_context(collection).tools)
    return _tools


def answer(turn: dict, state: dict) -> str:
    if "agent" not in state:
        model = OpenAIServerModel(
            model_id=turn["model"],
            api_base=turn["base_url"],
            api_key=turn["api_key"],
            client_kwargs={"max_retries": 0},
        )
        state["agent"] = ToolCallingAgent(tools=tools(), model=model, max_steps=MAX_STEPS, verbosity_level=0)
    first = not state.setdefault("turns", 0)
    state["turns"] += 1
    return str(state["agent"].run(turn["text"], reset=first))


async def run_turn(turn: dict, state: dict) -> str:
    return await asyncio.to_thread(answer, turn, state)


if __name__ == "__main__":
    with _opened:
        asyncio.run(serve(run_turn))
