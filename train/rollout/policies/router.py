"""Which policy serves an agent's LLM call: the seam between a run's agents and its policies.

Every call an episode serves names its agent (a team's role, or "" for a lone agent's); the
runtime asks the router for the policy that samples it. A run with one policy is the one-entry
case: every agent is served by the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aworld_train.rollout.policies.client import PolicyClient


@dataclass(frozen=True)
class PolicyRouter:
    default: PolicyClient
    by_agent: Mapping[str, PolicyClient] = field(default_factory=dict)  # agents served by another

    def route(self, agent: str) -> PolicyClient:
        """The policy that samples `agent`'s calls."""
        return self.by_agent.get(agent, self.default)
