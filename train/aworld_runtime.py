"""Imports AWorld quietly and offline. Import AWorld through this module only.

AWorld 0.3.2 logs every message to the console and into `./logs`, and counts
tokens for its own context display with a tiktoken encoding that it downloads at
run time for model names it does not know. Training runs go offline and need a
readable console, so before AWorld is imported we point its logs into our cache
(or the run folder) and make its counter use the vocabulary its wheel ships.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

from aworld_train.paths import cache_dir

os.environ.setdefault("AWORLD_DISABLE_CONSOLE_LOG", "true")
os.environ.setdefault("AWORLD_LOG_PATH", str(Path(cache_dir()) / "aworld-logs"))

# The agent module must come first: importing aworld.models.llm alone hits a circular import.
from aworld.agents.llm_agent import Agent  # noqa: E402
from aworld.config import AgentConfig  # noqa: E402
from aworld.core.agent.swarm import Swarm  # noqa: E402
from aworld.core.context.amni import AmniConfigFactory  # noqa: E402
from aworld.core.llm_provider import LLMProviderBase  # noqa: E402
from aworld.core.task import Task as AworldTask  # noqa: E402
from aworld.models import utils as _model_utils  # noqa: E402
from aworld.models.llm import register_llm_provider  # noqa: E402
from aworld.models.model_response import Function, ModelResponse, ToolCall  # noqa: E402
from aworld.models.openai_message_sanitizer import sanitize_openai_messages  # noqa: E402
from aworld.runner import Runners  # noqa: E402

_BUNDLED_VOCABS = {"openai", "qwen"}


def _offline_counter(original):
    def count(value, model="openai"):
        return original(value, model if str(model).lower() in _BUNDLED_VOCABS else "openai")

    return count


def _patch_token_counters() -> None:
    import aworld.logs.prompt_log as prompt_log

    for module in (_model_utils, prompt_log):
        for name in ("num_tokens_from_string", "num_tokens_from_messages"):
            fn = getattr(module, name, None)
            if fn is not None and not getattr(fn, "_aworld_train_offline", False):
                patched = _offline_counter(fn)
                patched._aworld_train_offline = True
                setattr(module, name, patched)


def _quiet_loggers() -> None:
    # The mcp client logs a full traceback for every broken stream; episodes record it as a status.
    for name in ("mcp", "mcp.client", "mcp.client.streamable_http", "httpx"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


async def _wait_for_node(self, timeout: float = 60.0) -> None:
    """MessageFuture's wait, polling with a short interval that backs off to AWorld's 100 ms.

    AWorld checks its state store every 100 ms for each message it waits on, and one
    agent step waits on several: that fixed cost, not the model or the tools, was most of
    an episode's wall time against a fast policy. Same contract: the future gets the
    finished node, the error, or a TimeoutError after `timeout` seconds.
    """
    deadline = time.monotonic() + (timeout if timeout is not None else 60.0)
    interval = 0.002
    while time.monotonic() < deadline:
        try:
            node = self.state_mng.get_node(self.msg_id)
            if node is not None and node.has_finished():
                if not self.future.done():
                    self.future.set_result(node)
                return
        except Exception as exc:
            if not self.future.done():
                self.future.set_exception(exc)
            return
        await asyncio.sleep(interval)
        interval = min(interval * 1.5, 0.1)
    if not self.future.done():
        self.future.set_exception(
            TimeoutError(f"Message {self.msg_id} did not complete within {timeout} seconds")
        )


def _use_in_memory_history() -> None:
    """AWorld's default history store is a folder of JSON files that every history lookup
    reads in full: rollouts slowed down with every episode ever run. Episodes keep their
    history in memory instead, and `release_session` drops it when they end."""
    from aworld.memory.main import InMemoryMemoryStore, MemoryFactory

    class EpisodeHistoryStore(InMemoryMemoryStore):
        # InMemoryMemoryStore only marks deleted items; lookups would still scan them.
        def purge_session(self, session_id: str) -> None:
            self.memory_items = [item for item in self.memory_items if item.session_id != session_id]

    MemoryFactory.init(custom_memory_store=EpisodeHistoryStore())


def release_session(session_id: str) -> None:
    """Forget the history of one finished episode."""
    from aworld.memory.main import MemoryFactory

    store = MemoryFactory.instance().memory_store
    if hasattr(store, "purge_session"):
        store.purge_session(session_id)


def _patch_message_wait() -> None:
    from aworld.core.event.message_future import MessageFuture

    MessageFuture._wait_internal = _wait_for_node


_patch_token_counters()
_patch_message_wait()
_use_in_memory_history()
_quiet_loggers()


def set_turn(agent, turn: int) -> None:
    """Tell the agent's MCP servers that user turn `turn` has begun, and list its tools anew.

    AWorld's sandbox keeps its own copy of the MCP config and caches the tool list
    of its first listing: both are updated so a server that reveals tools per turn
    (BFCL miss_func) is asked again with the new turn header.
    """
    from aworld_train.agent_spec import TURN_HEADER

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


async def run_turn(agent, text: str, session_id: str):
    """One user turn of `agent` in session `session_id`.

    `Runners.run` gives each call a fresh context whose history scope is the task,
    so a second user turn would not see the first. An episode is one session:
    scoping the history to it keeps every turn of a multi-turn task in view.
    """
    config = AmniConfigFactory.create()
    config.agent_config.history_scope = "session"
    agent.task = text
    swarm = Swarm(agent)
    task = AworldTask(
        input=text, swarm=swarm, event_driven=swarm.event_driven, session_id=session_id, context_config=config
    )
    return (await Runners.run_task(task))[task.id]


__all__ = [
    "Agent",
    "AgentConfig",
    "Function",
    "LLMProviderBase",
    "ModelResponse",
    "Runners",
    "ToolCall",
    "register_llm_provider",
    "release_session",
    "run_turn",
    "set_turn",
    "sanitize_openai_messages",
]
