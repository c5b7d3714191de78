"""The run's policies, resolved once at start from `policies:` and `algorithm:`: which weights answer
which agent, an adapter or a full model, trained or frozen, at which learning rate.

A run without `policies:` is the one-entry plan: one policy, named `default` (peft's name for a
lone adapter), serving every agent. Startup, sampling, learning, checkpoints, resume, `eval` and the
viewer read the plan; none re-derives it from the config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aworld_train.inputs.algorithm_settings import AlgorithmConfig
from aworld_train.inputs.policy_settings import LoraConfig, PolicyConfig
from aworld_train.rollout.policies.checkpoint_layout import PolicyKind

if TYPE_CHECKING:
    from aworld_train.rollout.episodes.settings import RolloutSettings

SHARED = "default"  # the one policy of a run without `policies:`


@dataclass(frozen=True)
class PlannedPolicy:
    name: str
    agents: tuple[str, ...]  # the agents it samples for; empty: every agent (the run's one policy)
    lora: LoraConfig | None  # its adapter on the shared base; None: a full model of its own
    lr: float
    frozen: bool = False  # served, never trained

    @property
    def kind(self) -> PolicyKind:
        return "full" if self.lora is None else "adapter"


@dataclass(frozen=True)
class PolicyPlan:
    policies: tuple[PlannedPolicy, ...]  # the first one serves any agent no other names
    per_agent: bool = False  # from `policies:`: a checkpoint keeps each in policies/<name>/

    @property
    def names(self) -> list[str]:
        return [policy.name for policy in self.policies]

    @property
    def first(self) -> PlannedPolicy:
        return self.policies[0]

    @property
    def kind(self) -> PolicyKind:
        """Every policy's kind: a run's policies are all adapters or all full models."""
        return self.first.kind

    @property
    def lone_adapter(self) -> bool:
        """A run of one policy trained as a LoRA adapter (its last checkpoint holds the merged model too)."""
        return not self.per_agent and self.kind == "adapter"

    @property
    def trained(self) -> list[PlannedPolicy]:
        return [policy for policy in self.policies if not policy.frozen]

    @property
    def owner(self) -> dict[str, str]:
        """Each named agent's policy; an agent not named is served by the first."""
        return {agent: policy.name for policy in self.policies for agent in policy.agents}

    def policy_of(self, agent: str) -> PlannedPolicy:
        """The policy that samples (and trains on) `agent`'s calls."""
        return next((policy for policy in self.policies if agent in policy.agents), self.first)

    def frozen_agents(self, also: Sequence[str] = ()) -> list[str]:
        """The agents whose tokens carry no loss: `also` (rollout.frozen_agents) and a frozen policy's."""
        frozen = [agent for policy in self.policies if policy.frozen for agent in policy.agents]
        return list(dict.fromkeys([*also, *frozen]))

    @property
    def lora_rank(self) -> int | None:
        """The largest adapter rank (what a sampler serving the adapters reserves); None: full models."""
        ranks = [policy.lora.rank for policy in self.policies if policy.lora is not None]
        return max(ranks) if ranks else None


def resolve_plan(policies: Mapping[str, PolicyConfig], algorithm: AlgorithmConfig) -> PolicyPlan:
    """The plan of `policies:` (each policy's own lora and lr, else algorithm's), or of one policy."""
    if not policies:
        return PolicyPlan((PlannedPolicy(SHARED, (), algorithm.lora, algorithm.lr),))
    planned = tuple(
        PlannedPolicy(
            name,
            tuple(policy.agents),
            policy.lora or algorithm.lora,
            policy.lr or algorithm.lr,
            policy.frozen,
        )
        for name, policy in policies.items()
    )
    return PolicyPlan(planned, per_agent=True)


def saved_plan(run_config: Mapping[str, Any]) -> PolicyPlan:
    """The plan of a saved run, from its run folder's config.yaml (`eval` and the viewer read it)."""
    algorithm = run_config.get("algorithm") or {}
    return resolve_plan(
        {name: PolicyConfig.model_validate(p) for name, p in (run_config.get("policies") or {}).items()},
        AlgorithmConfig.model_validate({key: algorithm[key] for key in ("lr", "lora") if key in algorithm}),
    )


def policy_problem(plan: PolicyPlan, max_staleness: int, rollout: RolloutSettings) -> str | None:
    """Why the plan of `policies:` cannot run beside algorithm.max_staleness and the rollout's
    settings, naming the field and the fix; None when it can."""
    if not plan.per_agent:
        return None
    problem = _naming_problem(plan)
    if problem is not None:
        return problem
    adapters = [policy.name for policy in plan.policies if policy.kind == "adapter"]
    if adapters and len(adapters) < len(plan.policies):
        bare = next(name for name in plan.names if name not in adapters)
        return (
            f"policies: {adapters[0]!r} is an adapter on the shared base but {bare!r} is a full model of its "
            "own; a run's policies are all adapters or all full models: give every policy lora (or set "
            "algorithm.lora), or none"
        )
    if not adapters and rollout.engine == "vllm":
        return (
            "rollout.engine: vllm with a full model per policy: one vLLM server holds one model (it serves a "
            "policy's adapters side by side); give the policies lora, or remove rollout.engine"
        )
    if not plan.trained:
        return "policies: every policy is frozen, so nothing trains; leave frozen off one of them"
    why = "a policy per agent samples and trains in this process, one step at a time"
    if max_staleness:
        return (
            f"algorithm.max_staleness={max_staleness} with policies: {why}; set it to 0, or remove policies"
        )
    if rollout.workers > 1:
        return (
            f"rollout.workers={rollout.workers} with policies: {why}; set it to 1 (raise rollout.concurrency "
            "instead), or remove policies"
        )
    return None


def _naming_problem(plan: PolicyPlan) -> str | None:
    """A policy name that cannot name an adapter and a folder, or an agent listed by two policies."""
    seen: dict[str, str] = {}
    for policy in plan.policies:
        name = policy.name
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name) or name == SHARED:
            return (
                f"policies: {name!r} cannot name a policy (its adapter and checkpoint folder take the name): "
                "use letters, digits, _ and -, starting with a letter, and not 'default'"
            )
        for agent in policy.agents:
            if agent in seen:
                return (
                    f"policies: agent {agent!r} is listed by both {seen[agent]!r} and {name!r}: an agent's "
                    "calls are served by one policy; list it under one of them"
                )
            seen[agent] = name
    return None


def team_problem(plan: PolicyPlan, agents: list[str], elsewhere: list[str]) -> str | None:
    """Why the plan does not fit the swarm whose agents are `agents` (`elsewhere`: those another
    endpoint answers, rollout.agent_endpoints); None when every agent the run samples has a policy."""
    from aworld_train.core.validation import did_you_mean

    if not plan.per_agent:
        return None
    if len(agents) < 2:
        return (
            f"policies: a policy per agent needs a team, and the agent is one ({agents[0]!r}): remove "
            "policies (algorithm.lora trains one adapter for it)"
        )
    for policy in plan.policies:
        for agent in policy.agents:
            if agent not in agents:
                return (
                    f"policies.{policy.name}.agents names {agent!r}, which is not an agent of the team "
                    f"({', '.join(agents)}){did_you_mean(agent, agents)}"
                )
            if agent in elsewhere:
                return (
                    f"policies.{policy.name}.agents names {agent!r}, which rollout.agent_endpoints answers "
                    "with another endpoint: a policy serves only agents the run samples; remove it from one"
                )
    unserved = [agent for agent in agents if agent not in plan.owner and agent not in elsewhere]
    if unserved:
        return (
            f"policies: no policy serves agent(s) {', '.join(map(repr, unserved))}: with policies set, every "
            "agent the run samples names its policy; list each under one policy's agents"
        )
    return None
