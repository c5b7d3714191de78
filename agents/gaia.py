"""The GAIA agent: an AWorld Agent that answers GAIA questions with the gateway's tools."""

from __future__ import annotations

from aworld_train.agents.gaia_client import GATEWAY_NAME, get_agent_tool_env_and_servers

SYSTEM_PROMPT = """You are a general assistant that answers questions with tools.
Think step by step. Use the tools to read attached files, run Python, calculate, and search.
Attached files are given by name; pass that name to read_document.
When you know the answer, reply with it inside <answer></answer> tags, for example <answer>42</answer>.
The answer is a number, as few words as possible, or a comma separated list of numbers and/or strings.
Write numbers with digits, without commas, units, $ or % unless asked.
Write strings without articles or abbreviations, and spell out digits in strings unless asked otherwise."""


def build_agent(
    url: str | None = None,
    servers: list[str] | None = None,
    authorization: str | None = None,
    provider: str = "verl",
):
    """The GAIA agent over the gateway at `url` (see `get_agent_tool_env_and_servers`)."""
    from aworld_train.aworld.framework import Agent, AgentConfig

    mcp_config, _ = get_agent_tool_env_and_servers(url, servers, authorization)
    return Agent(
        name="gaia_agent",
        desc="Answers GAIA questions with document, Python, calculator and search tools",
        system_prompt=SYSTEM_PROMPT,
        mcp_config=mcp_config,
        mcp_servers=[GATEWAY_NAME],
        conf=AgentConfig(llm_provider=provider),
    )
