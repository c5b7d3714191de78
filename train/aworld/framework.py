"""Imports AWorld quietly and offline. Import AWorld through this module only.

AWorld 0.3.2 logs every message to the console and into `./logs`: before AWorld is
imported its logs are pointed into our cache. What this package changes inside
AWorld is in `patches.py`, applied by `aworld_train.aworld.install()`.
"""

from __future__ import annotations

import asyncio

import aworld_train.aworld.episode_state as episode_state
from aworld_train.aworld.console import quiet_aworld_console
from aworld_train.core.protocol import TURN_HEADER

quiet_aworld_console()

# The agent module must come first: importing aworld.models.llm alone hits a circular import.
from aworld.agents.llm_agent import Agent  # noqa: E402
from aworld.config import AgentConfig  # noqa: E402
from aworld.core.agent.swarm import HandoffSwarm, HybridSwarm, Swarm, TeamSwarm, WorkflowSwarm  # noqa: E402
from aworld.core.llm_provider import LLMProviderBase  # noqa: E402
from aworld.core.task import Task as AworldTask  # noqa: E402
from aworld.memory.main import MemoryFactory  # noqa: E402
from aworld.models.llm import register_llm_provider  # noqa: E402
from aworld.models.model_response import Function, ModelResponse, ToolCall  # noqa: E402
from aworld.models.openai_message_sanitizer import sanitize_openai_messages  # noqa: E402
from aworld.runner import Runners  # noqa: E402

# a SwarmSpec's kind -> the AWorld class that builds it
SWARM_CLASSES = {"workflow": WorkflowSwarm, "team": TeamSwarm, "handoff": HandoffSwarm, "hybrid": HybridSwarm}


def release_session(session_id: str) -> None:
    """Forget the history of one finished episode."""
    store = MemoryFactory.instance().memory_store
    if hasattr(store, "purge_session"):
        store.purge_session(session_id)


# session id -> what its turns made that AWorld keys by something else: the AWorld task ids
# (event queues) and the asyncio task running the turn (cancelled if the episode was).
_turns: dict[str, dict] = {}


async def release_episode(agents: list, session_id: str) -> None:
    """Leave nothing of a finished episode behind, whatever way it ended.

    A turn still running (the episode timed out or was cancelled) is cancelled first; then the
    agents, their sandboxes and MCP sessions, the state nodes, event queues and history go.
    """
    record = _turns.pop(session_id, None) or {"tasks": set(), "runner": None}
    runner = record["runner"]
    if runner is not None and runner is not asyncio.current_task() and not runner.done():
        runner.cancel()
        await asyncio.wait({runner}, timeout=episode_state.RELEASE_TIMEOUT_S)
    try:
        await episode_state.release_episode_state(agents, session_id, record["tasks"])
    finally:
        release_session(session_id)


def registry_sizes() -> dict[str, int]:
    """Entries in AWorld's process-wide registries and our own per-episode tables, now."""
    store = MemoryFactory.instance().memory_store
    items = getattr(store, "memory_items", None)
    return {
        **episode_state.registry_sizes(),
        "history_items": len(items) if items is not None else 0,
        "tracked_sessions": len(_turns),
    }


def set_turn(agent, turn: int) -> None:
    """Tell the agent's MCP servers that user turn `turn` has begun, and list its tools anew.

    AWorld's sandbox keeps its own copy of the MCP config and caches the tool list
    of its first listing: both are updated so a server that reveals tools per turn
    (BFCL miss_func) is asked again with the new turn header.
    """
    mcpservers = getattr(getattr(agent, "sandbox", None), "mcpservers", None)
    configs = [getattr(agent, "mcp_config", None), getattr(mcpservers, "mcp_config", None)]
    changed = False
    for config in configs:
        for conf in ((config or {}).get("mcpServers") or {}).values():
            headers = conf.get("headers") if isinstance(conf, dict) else None
            if isinstance(headers, dict) and TURN_HEADER in headers:
                changed = changed or headers[TURN_HEADER] != str(turn)
                headers[TURN_HEADER] = str(turn)
    if changed and mcpservers is not None:
        mcpservers.tool_list = None


async def run_turn(swarm, agents: list, text: str, session_id: str):
    """One user turn of `swarm` (its `agents` named) in session `session_id`.

    `Runners.run` gives each call a fresh context whose history scope is the task,
    so a second user turn would not see the first. An episode is one session:
    scoping the history to it keeps every turn of a multi-turn task in view. What each
    call sees of that history is its agent's own memory_config (`history.context_config`).
    """
    from aworld_train.aworld.history import context_config

    config = context_config(agents)
    for agent in agents:
        agent.task = text
    task = AworldTask(
        input=text, swarm=swarm, event_driven=swarm.event_driven, session_id=session_id, context_config=config
    )
    record = _turns.setdefault(session_id, {"tasks": set(), "runner": None})
    record["tasks"].add(task.id)
    record["runner"] = asyncio.current_task()
    for agent in agents:
        episode_state.claim_sandbox(agent, task.id)
    return (await Runners.run_task(task))[task.id]


__all__ = [
    "Agent",
    "AgentConfig",
    "Function",
    "LLMProviderBase",
    "ModelResponse",
    "Runners",
    "SWARM_CLASSES",
    "Swarm",
    "ToolCall",
    "register_llm_provider",
    "registry_sizes",
    "release_episode",
    "release_session",
    "run_turn",
    "set_turn",
    "sanitize_openai_messages",
]
