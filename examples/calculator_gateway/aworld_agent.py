"""The calculator agent as its own program: AWorld's Agent and runner, AWorld's stock `openai`
provider pointed at each episode's gateway session. It imports nothing of aworld-train.

The trainer starts it once per process and talks to it in JSON lines (one per user turn on stdin,
one answer per turn on stdout). Episodes run concurrently, each an Agent of its own. The MCP
server's URL comes from CALCULATOR_MCP_URL, which `aworld-train run` exports for its `env:` server.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from aworld.agents.llm_agent import Agent
from aworld.config import AgentConfig
from aworld.runner import Runners

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


async def answer(turn: dict, agents: dict[str, Agent], out: asyncio.Lock) -> None:
    episode = turn["episode_id"]
    reply = {"episode_id": episode, "user_turn": turn["user_turn"]}
    try:
        agent = agents.setdefault(episode, build(turn))
        result = await Runners.run(input=turn["text"], agent=agent, session_id=episode)
        reply["answer"] = str(result.answer or "")
    except Exception as exc:  # reported to the trainer, which ends the episode as an error
        reply["error"] = f"{type(exc).__name__}: {exc}"
    async with out:
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


async def main() -> None:
    loop = asyncio.get_running_loop()
    agents: dict[str, Agent] = {}
    out, running = asyncio.Lock(), set()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        message = json.loads(line)
        if message["type"] == "turn":
            task = asyncio.ensure_future(answer(message, agents, out))
            running.add(task)
            task.add_done_callback(running.discard)
        elif message["type"] == "end":
            agents.pop(message["episode_id"], None)
    await asyncio.gather(*running)


if __name__ == "__main__":
    asyncio.run(main())
