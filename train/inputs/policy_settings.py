"""What trains: a LoRA adapter's settings (`algorithm.lora`), and a team's policies (`policies:`),
each agent of a swarm served and trained by the policy that names it.

`policies:` maps a policy's name to the agents it serves, its adapter and its learning rate:

    policies:
      planner: {agents: [planner], lora: {rank: 16}}
      solver: {agents: [calculator], lr: 5.0e-5}   # algorithm.lora's adapter, its own rate

Unset, every agent shares the run's one policy (the config's `model`, `algorithm.lora`). Set, each
policy is a LoRA adapter of its own on the one shared base model (where the policies or
`algorithm.lora` name one), or a full copy of the model of its own (where none does), trained on
its own agents' tokens only, with its own GRPO groups and optimizer. Which agents a swarm has is
checked against the agent itself (facade/trainer.py); what an engine can run, by the engine.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from aworld_train.rollout.episodes.settings import RolloutSettings


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraConfig(_Section):
    """algorithm.lora: train a LoRA adapter (peft) instead of every weight, on every engine."""

    rank: int = Field(
        16, ge=1, description="the adapter's rank r: its capacity, and its size; 16, a common middle"
    )
    alpha: float = Field(
        32.0, gt=0, description="its scale is alpha / rank; 32, twice the rank, the usual ratio"
    )
    dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="dropout on the adapter's input while training; 0.0, since verl and AReaL build none "
        "(they refuse more)",
    )
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear",
        description="the model's module names to adapt (e.g. [q_proj, v_proj]), or all-linear: every "
        "linear layer but the output head, which fits any model",
    )

    @field_validator("target_modules")
    @classmethod
    def _some_modules(cls, value: list[str] | str) -> list[str] | str:
        if isinstance(value, list) and not [name for name in value if name.strip()]:
            raise ValueError(
                "names no module: list module names such as [q_proj, v_proj], or write all-linear"
            )
        return value


class PolicyConfig(_Section):
    """policies.NAME: one policy of a team, the agents it serves and how it trains."""

    agents: list[str] = Field(min_length=1, description="the swarm's agents this policy samples for")
    lora: LoraConfig | None = Field(
        None, description="its adapter (default: algorithm.lora; neither: a full model of its own)"
    )
    lr: float | None = Field(None, gt=0, description="its learning rate (default: algorithm.lr)")
    frozen: bool = Field(False, description="served, never trained (its agents' tokens carry no loss)")


def policy_of_agents(policies: dict[str, PolicyConfig]) -> dict[str, str]:
    """Each agent's policy name."""
    return {agent: name for name, policy in policies.items() for agent in policy.agents}


def policy_problem(
    policies: dict[str, PolicyConfig],
    default_lora: LoraConfig | None,
    max_staleness: int,
    rollout: RolloutSettings,
) -> str | None:
    """Why `policies` cannot run beside algorithm.lora `default_lora`, algorithm.max_staleness and
    the rollout's settings, naming the field and the fix; None when they can."""
    if not policies:
        return None
    seen: dict[str, str] = {}
    for name, policy in policies.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name) or name == "default":
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
    with_adapter = [name for name, policy in policies.items() if (policy.lora or default_lora) is not None]
    if with_adapter and len(with_adapter) < len(policies):
        bare = next(name for name in policies if name not in with_adapter)
        return (
            f"policies: {with_adapter[0]!r} is an adapter on the shared base but {bare!r} is a full model of its "
            "own; a run's policies are all adapters or all full models: give every policy lora (or set "
            "algorithm.lora), or none"
        )
    if not with_adapter and rollout.engine == "vllm":
        return (
            "rollout.engine: vllm with a full model per policy: one vLLM server holds one model (it serves a "
            "policy's adapters side by side); give the policies lora, or remove rollout.engine"
        )
    if all(policy.frozen for policy in policies.values()):
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


def team_problem(policies: dict[str, PolicyConfig], agents: list[str], elsewhere: list[str]) -> str | None:
    """Why `policies` do not fit the swarm whose agents are `agents` (`elsewhere`: those another
    endpoint answers, rollout.agent_endpoints); None when every agent the policy serves has one."""
    from aworld_train.core.validation import did_you_mean

    if not policies:
        return None
    if len(agents) < 2:
        return (
            f"policies: a policy per agent needs a team, and the agent is one ({agents[0]!r}): remove "
            "policies (algorithm.lora trains one adapter for it)"
        )
    owner = policy_of_agents(policies)
    for name, policy in policies.items():
        for agent in policy.agents:
            if agent not in agents:
                return (
                    f"policies.{name}.agents names {agent!r}, which is not an agent of the team "
                    f"({', '.join(agents)}){did_you_mean(agent, agents)}"
                )
            if agent in elsewhere:
                return (
                    f"policies.{name}.agents names {agent!r}, which rollout.agent_endpoints answers with "
                    "another endpoint: a policy serves only agents the run samples; remove it from one"
                )
    unserved = [agent for agent in agents if agent not in owner and agent not in elsewhere]
    if unserved:
        return (
            f"policies: no policy serves agent(s) {', '.join(map(repr, unserved))}: with policies set, every "
            "agent the run samples names its policy; list each under one policy's agents"
        )
    return None


def frozen_agents(policies: dict[str, PolicyConfig], rollout: RolloutSettings) -> list[str]:
    """The agents whose tokens carry no loss: rollout.frozen_agents and a frozen policy's."""
    frozen = [agent for policy in policies.values() if policy.frozen for agent in policy.agents]
    return list(dict.fromkeys([*rollout.frozen_agents, *frozen]))
