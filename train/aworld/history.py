"""What an AWorld agent's own context settings do to what each of its LLM calls sees.

AWorld 0.3.2 runs every task in an Amni context, and the context's agent config, not the agent's
`memory_config`, cuts the history each call gets (`LLMAgent.async_messages_transform`): an agent's
`history_rounds` or `enable_summary` did nothing. `context_config` makes each agent's context config
from its own `memory_config`, so that what it sets takes effect.

A due summary is written before the next call is built, by the agent itself: its LLM is the policy
(through our provider), so the summary is one of the agent's own answers and trains as one
(docs/REWRITING_AGENTS.md). AWorld starts it in a background task (its timing, and so what the next
call sees, would depend on the machine's load) with the memory's own LLM (none here):
`EpisodeMemory` awaits it and asks the agent's LLM, and an agent that summarises writes its history
DIRECT (`agent_spec.episode_llm`), so that the write is awaited in the agent's own task.
"""

from __future__ import annotations

import contextvars
from typing import Any

# The memory_config fields that decide what a call sees (the history's length and its summary),
# carried where an agent sets them apart from AWorld's default. Tool results are compacted by AWorld
# when they are written, before any call sees them (no rewrite), at its own fixed thresholds.
CARRIED = (
    "history_rounds",
    "enable_summary",
    "summary_rounds",
    "summary_context_length",
    "summary_prompts",
    "summary_summaried",
    "summary_role",
)


class _PerAgent(dict):
    """Agent id -> its context config; an id not listed (a swarm's sub-task) gets the first."""

    def get(self, key: Any, default: Any = None) -> Any:
        return super().get(key) or next(iter(self.values()), default)


def context_config(agents: list) -> Any:
    """The Amni config of one user turn: AWorld's default, with each agent's own context settings,
    its history kept per session (every user turn of an episode sees the earlier ones)."""
    from aworld.config.conf import AgentMemoryConfig
    from aworld.core.context.amni import AmniConfigFactory

    config = AmniConfigFactory.create()
    default = AgentMemoryConfig()

    def own(agent: Any) -> Any:
        mine = agent.memory_config
        changed = {f: getattr(mine, f) for f in CARRIED if getattr(mine, f) != getattr(default, f)}
        return config.agent_config.model_copy(update={**changed, "history_scope": "session"})

    per_agent = _PerAgent((agent.id(), own(agent)) for agent in agents)
    config.agent_config = next(iter(per_agent.values())) if len(per_agent) == 1 else per_agent
    return config


# The agent whose history is being summarised (the memory's summary knows only its messages)
_summarising: contextvars.ContextVar[str | None] = contextvars.ContextVar("summarising", default=None)


def episode_memory(config: Any, memory_store: Any) -> Any:
    """AWorld's memory ("aworld" provider), its summaries awaited and written by the summarised
    agent's own LLM."""
    from aworld.memory.main import AworldMemory

    class EpisodeMemory(AworldMemory):
        async def _add(self, memory_item, filters=None, agent_memory_config=None):
            # AworldMemory._add with the summary awaited, not started in a background task: the call
            # after this write sees it, and two writes never summarise the same messages twice
            self.memory_store.add(memory_item)
            self._save_to_vector_db(memory_item)
            if (
                agent_memory_config
                and agent_memory_config.enable_summary
                and memory_item.memory_type == "message"
            ):
                token = _summarising.set(memory_item.agent_id)
                try:
                    await self._summary_agent_task_memory(memory_item, agent_memory_config)
                finally:
                    _summarising.reset(token)

        async def _call_llm_summary(self, summary_messages, agent_memory_config):
            from aworld.core.agent.base import AgentFactory
            from aworld.models.llm import acall_llm_model

            agent = AgentFactory.agent_instance(_summarising.get())
            if agent is None:
                raise RuntimeError(f"agent {_summarising.get()!r} is gone: no LLM to write its summary")
            return (await acall_llm_model(agent.llm, messages=summary_messages, stream=False)).content

    return EpisodeMemory(memory_store=memory_store, config=config)
