"""Which policy serves an agent's LLM call: the seam between a run's agents and its policies.

Every call an episode serves names its agent (a team's role, or "" for a lone agent's); the
runtime asks the router for the policy that samples it. The router is the only thing an episode is
served by: a run with one policy is a router of one (`PolicyRouter(policy)`), every agent served
by the default. A run builds its router once, before its first episode.
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

    @classmethod
    def of(cls, policies: Mapping[str, PolicyClient], owner: Mapping[str, str]) -> PolicyRouter:
        """Each agent's calls (`owner`: agent -> policy name) to its policy of `policies` (by name);
        any other agent's to the first."""
        return cls(next(iter(policies.values())), {agent: policies[name] for agent, name in owner.items()})
