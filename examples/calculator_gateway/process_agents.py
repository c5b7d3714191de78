"""The calculator agent run out of process: `agent: examples/calculator_gateway/agents.py:aworld_agent`
(AWorld's own runner and stock `openai` provider) or `...:sdk_agent` (a plain `openai` SDK loop)."""

from __future__ import annotations

import sys
from pathlib import Path

from aworld_train.agents.calculator import FEW_SHOT, mcp_config
from aworld_train.rollout.gateway.process_agent import ProcessAgent

HERE = Path(__file__).resolve().parent


def _process_agent(script: str) -> ProcessAgent:
    return ProcessAgent(
        name="calculator_agent",
        command=[sys.executable, str(HERE / script)],
        mcp_config=mcp_config(),
        mcp_servers=["calculator"],
        few_shot=FEW_SHOT,  # the trainer places them after the system message of every prompt
    )


def aworld_agent() -> ProcessAgent:
    return _process_agent("aworld_agent.py")


def sdk_agent() -> ProcessAgent:
    return _process_agent("sdk_agent.py")
