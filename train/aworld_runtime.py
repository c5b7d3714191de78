"""Imports AWorld quietly and offline. Import AWorld through this module only.

AWorld 0.3.2 logs every message to the console and into `./logs`, and counts
tokens for its own context display with a tiktoken encoding that it downloads at
run time for model names it does not know. Training runs go offline and need a
readable console, so before AWorld is imported we point its logs into our cache
(or the run folder) and make its counter use the vocabulary its wheel ships.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from aworld_train.paths import cache_dir

os.environ.setdefault("AWORLD_DISABLE_CONSOLE_LOG", "true")
os.environ.setdefault("AWORLD_LOG_PATH", str(Path(cache_dir()) / "aworld-logs"))
os.environ.setdefault("AWORLD_MEMORY_ROOT", str(Path(cache_dir()) / "aworld-memory"))

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


_patch_token_counters()
_quiet_loggers()


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
    "run_turn",
    "sanitize_openai_messages",
]
