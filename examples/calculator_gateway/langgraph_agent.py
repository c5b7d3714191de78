"""The calculator agent on LangGraph, as its users write it: the prebuilt ReAct agent on
LangChain's `ChatOpenAI`, the calculator's MCP tools through `langchain-mcp-adapters`, and a
structured final answer (`response_format`: LangGraph's last call asks for the `Answer` schema, with
no tools). Nothing here knows aworld-train: the gateway session is an OpenAI base URL. The trainer
starts it once and sends it each user turn (turns.py).
"""

from __future__ import annotations

import asyncio
import os
import warnings

from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field
from turns import serve

with warnings.catch_warnings():  # LangGraph 1.x moves the prebuilt agent to `langchain.agents`
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

SYSTEM_PROMPT = (
    "You are a careful calculator assistant. Call the calculate tool with the expression, "
    "then answer with the number."
)
MCP_URL = os.environ.get("CALCULATOR_MCP_URL", "http://127.0.0.1:8765/mcp")
MCP = MultiServerMCPClient({"calculator": {"url": MCP_URL, "transport": "streamable_http"}})


class Answer(BaseModel):
    answer: str = Field(description="the number the calculation gave")


async def run_turn(turn: dict, state: dict) -> str:
    """One user turn of an episode; the conversation so far lives in `state`."""
    model = ChatOpenAI(model=turn["model"], base_url=turn["base_url"], api_key=turn["api_key"], max_retries=0)
    agent = create_react_agent(model, await MCP.get_tools(), prompt=SYSTEM_PROMPT, response_format=Answer)
    messages = [*state.get("messages", []), ("user", turn["text"])]
    result = await agent.ainvoke({"messages": messages}, {"recursion_limit": 16})
    state["messages"] = result["messages"]
    return result["structured_response"].answer


if __name__ == "__main__":
    asyncio.run(serve(run_turn))
