"""The calculator agent as a plain loop on the `openai` SDK: no agent framework, no aworld-train.

Per user turn: call the model with the calculate tool, run each tool call against the calculator
MCP server (the `mcp` client), send the results back, until the model answers without a call.
The trainer speaks to it in JSON lines (turns.py); episodes run concurrently.
"""

from __future__ import annotations

import asyncio
import json
import os

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from openai import AsyncOpenAI
from turns import serve

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


async def run_turn(turn: dict, state: dict) -> str:
    """One user turn of an episode; its conversation so far lives in `state`."""
    history = state.setdefault("history", [{"role": "system", "content": SYSTEM_PROMPT}])
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


if __name__ == "__main__":
    asyncio.run(serve(run_turn))
