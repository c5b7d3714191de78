"""What every episode of a run shares: its policies' router, the chat template and the rollout settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from aworld_train.rollout.episodes.settings import RolloutSettings
from aworld_train.rollout.policies.router import PolicyRouter
from aworld_train.rollout.tokens.calls.forcing import CallControl, read_control
from aworld_train.rollout.tokens.calls.probes import probe_tools
from aworld_train.rollout.tokens.calls.resolution import CallFormat
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer


@dataclass
class RolloutRuntime:
    router: PolicyRouter  # which policy samples each agent's calls (a run of one policy: a router of one)
    renderer: ChatRenderer
    stop_token_ids: list[int]
    settings: RolloutSettings
    # the worker processes of `rollout.workers` > 1, started by the first batch (workers.py)
    pool: Any = field(default=None, repr=False, compare=False)

    @property
    def calls(self) -> CallFormat:
        """How the policy's tool calls are read: `rollout.tool_parser` resolved for the chat template."""
        return self.renderer.call_format(self.settings.tool_parser)

    @cached_property
    def call_control(self) -> CallControl:
        """How the template's call text meets a client's tool_choice and parallel_tool_calls."""
        history, tools = [{"role": "user", "content": "zqhi"}], probe_tools()
        return read_control(
            lambda message: self.renderer.turn_text(history, message, tools), self.renderer._probe_call_id
        )

    def close(self) -> None:
        """End the worker processes, if any; a later batch starts new ones."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.close()
