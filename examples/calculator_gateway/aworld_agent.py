"""The calculator agent as its own program: AWorld's Agent and runner, AWorld's stock `openai`
provider pointed at each episode's gateway session. It imports nothing of aworld-train.

The trainer starts it once per process and talks to it in JSON lines (one per user turn on stdin,
one answer per turn on stdout: turns.py). Episodes run concurrently, each an Agent of its own. The MCP
server's URL comes from CALCULATOR_MCP_URL, which `aworld-train run` exports for its `env:` server.
"""

from __future__ import annotations

import asyncio
import os

from aworld.agents.llm_agent import Agent
from aworld.config import AgentConfig
from aworld.runner import Runners
from turns import serve

SYSTEM_PROMPT = (
    "You are a careful calculator assistant. Call the calculate tool with the expression, "
    "then answer with the number."
)
MCP_CONFIG = {
    "mcpServers": {
        "calculator": {
            "type": "streamable-http",
            "url": os.environ.get("CALCULATOR_MCP_URL", "http://127.0.0.1:8765/mcp"),
            "timeout": 30,
        }
    }
}


def build(turn: dict) -> Agent:
    conf = AgentConfig(
        llm_provider="openai",
        llm_base_url=turn["base_url"],
        llm_api_key=turn["api_key"],
        llm_model_name=turn["model"],
    )
    return Agent(
        name="calculator_agent",
        desc="Answers arithmetic questions with the calculator tool",
        system_prompt=SYSTEM_PROMPT,
        mcp_config=MCP_CONFIG,
        mcp_servers=["calculator"],
        conf=conf,
    )


async def run_turn(turn: dict, state: dict) -> str:
    """One user turn of an episode; its Agent (and AWorld's history of it) lives in `state`."""
    if "agent" not in state:
        state["agent"] = build(turn)
    agent = state["agent"]
    result = await Runners.run(input=turn["text"], agent=agent, session_id=turn["episode_id"])
    return str(result.answer or "")


if __name__ == "__main__":
    asyncio.run(serve(run_turn))
