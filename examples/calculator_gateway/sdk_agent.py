"""The calculator agent as a plain loop on the `openai` SDK: no agent framework, no aworld-train.

Per user turn: call the model with the calculate tool, run each tool call against the calculator
MCP server (the `mcp` client), send the results back, until the model answers without a call.
The trainer speaks to it in JSON lines (see aworld_agent.py); episodes run concurrently.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from openai import AsyncOpenAI

SYSTEM_PROMPT = (
    "You are a careful calculator assistant. Call the calculate tool with the expression, "
    "then answer with the number."
)
MCP_URL = os.environ.get("CALCULATOR_MCP_URL", "http://127.0.0.1:8765/mcp")
MAX_CALLS = 8


async def tools_of(session: ClientSession) -> list[dict]:
    listed = await session.list_tools()
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description or "", "parameters": t.inputSchema},
        }
        for t in listed.tools
    ]


async def run_turn(turn: dict, history: list[dict]) -> str:
    client = AsyncOpenAI(base_url=turn["base_url"], api_key=turn["api_key"], max_retries=0)
    history.append({"role": "user", "content": turn["text"]})
    async with streamablehttp_client(MCP_URL) as (read, write, _), ClientSession(read, write) as mcp:
        await mcp.initialize()
        tools = await tools_of(mcp)
        for _ in range(MAX_CALLS):
            response = await client.chat.completions.create(
                model=turn["model"], messages=history, tools=tools
            )
            message = response.choices[0].message
            history.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return message.content or ""
            for call in message.tool_calls:
                result = await mcp.call_tool(call.function.name, json.loads(call.function.arguments or "{}"))
                text = "".join(getattr(part, "text", "") for part in result.content)
                history.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return ""


async def answer(turn: dict, histories: dict[str, list[dict]], out: asyncio.Lock) -> None:
    episode = turn["episode_id"]
    history = histories.setdefault(episode, [{"role": "system", "content": SYSTEM_PROMPT}])
    reply = {"episode_id": episode, "user_turn": turn["user_turn"]}
    try:
        reply["answer"] = await run_turn(turn, history)
    except Exception as exc:
        reply["error"] = f"{type(exc).__name__}: {exc}"
    async with out:
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


async def main() -> None:
    loop = asyncio.get_running_loop()
    histories: dict[str, list[dict]] = {}
    out, running = asyncio.Lock(), set()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        message = json.loads(line)
        if message["type"] == "turn":
            task = asyncio.ensure_future(answer(message, histories, out))
            running.add(task)
            task.add_done_callback(running.discard)
        elif message["type"] == "end":
            histories.pop(message["episode_id"], None)
    await asyncio.gather(*running)


if __name__ == "__main__":
    asyncio.run(main())
