"""The calculator agent run out of process, each a `ProcessAgent` for the config's `agent:`:
`examples/calculator_gateway/process_agents.py:aworld_agent` (AWorld's own runner and stock `openai`
provider), `...:sdk_agent` (a plain `openai` SDK loop), and the agent frameworks' own agents,
`...:openai_agents_agent` (the OpenAI Agents SDK, its default Responses model), `...:langgraph_agent`
(LangGraph's ReAct agent with a structured answer) and `...:smolagents_agent` (smolagents'
ToolCallingAgent). The frameworks run in an environment of their own (`make setup-agents`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aworld_train.agents.calculator import FEW_SHOT, mcp_config
from aworld_train.rollout.gateway.process_agent import ProcessAgent

HERE = Path(__file__).resolve().parent
FRAMEWORKS_VENV = HERE.parents[1] / ".venv-agents"


def _process_agent(script: str, python: str = sys.executable) -> ProcessAgent:
    return ProcessAgent(
        name="calculator_agent",
        command=[python, str(HERE / script)],
        mcp_config=mcp_config(),
        mcp_servers=["calculator"],
        few_shot=FEW_SHOT,  # the trainer places them after the system message of every prompt
    )


def frameworks_python() -> str:
    """The Python of the agent frameworks' environment: AWORLD_TRAIN_FRAMEWORKS_PYTHON, else the
    checkout's .venv-agents."""
    python = os.environ.get("AWORLD_TRAIN_FRAMEWORKS_PYTHON") or str(FRAMEWORKS_VENV / "bin" / "python")
    if not Path(python).is_file():
        raise FileNotFoundError(
            f"no agent frameworks' Python at {python}: run `make setup-agents` (it builds {FRAMEWORKS_VENV} "
            f"from {HERE / 'frameworks.txt'}), or set AWORLD_TRAIN_FRAMEWORKS_PYTHON to a Python that has them"
        )
    return python


def aworld_agent() -> ProcessAgent:
    return _process_agent("aworld_agent.py")


def sdk_agent() -> ProcessAgent:
    return _process_agent("sdk_agent.py")


def openai_agents_agent() -> ProcessAgent:
    return _process_agent("openai_agents_agent.py", frameworks_python())


def langgraph_agent() -> ProcessAgent:
    return _process_agent("langgraph_agent.py", frameworks_python())


def smolagents_agent() -> ProcessAgent:
    return _process_agent("smolagents_agent.py", frameworks_python())
