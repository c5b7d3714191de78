"""The calculator agent on the OpenAI Agents SDK, as its users write it: an `Agent` with the
calculator's MCP server (the SDK's own `MCPServerStreamableHttp`) and the SDK's default model,
which speaks OpenAI's Responses API. Nothing here knows aworld-train: the gateway session is an
OpenAI base URL. The trainer starts it once and sends it each user turn (turns.py).
"""

from __future__ import annotations

import asyncio
import os

from agents import Agent, RunConfig, Runner
from agents.mcp import MCPServerStreamableHttp
from agents.models.openai_provider import OpenAIProvider
from openai import AsyncOpenAI
from turns import serve

SYSTEM_PROMPT = (
    "You are a careful calculator assistant. Call the calculate tool with the expression, "
    "then answer with the number."
)
MCP_URL = os.environ.get("CALCULATOR_MCP_URL", "http://127.0.0.1:8765/mcp")


async def run_turn(turn: dict, state: dict) -> str:
    """One user turn of an episode; the conversation so far lives in `state`."""
    client = AsyncOpenAI(base_url=turn["base_url"], api_key=turn["api_key"], max_retries=0)
    run_config = RunConfig(model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True)
    history = [*state.get("history", []), {"role": "user", "content": turn["text"]}]
    async with MCPServerStreamableHttp({"url": MCP_URL}, name="calculator") as calculator:
        agent = Agent(
            name="calculator_agent", instructions=SYSTEM_PROMPT, model=turn["model"], mcp_servers=[calculator]
        )
        result = await Runner.run(agent, history, run_config=run_config, max_turns=8)
    state["history"] = result.to_input_list()
    return str(result.final_output or "")


if __name__ == "__main__":
    asyncio.run(serve(run_turn))
