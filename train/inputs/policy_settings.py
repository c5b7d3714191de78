"""What trains: a LoRA adapter's settings (`algorithm.lora`), and a team's policies (`policies:`),
each agent of a swarm served and trained by the policy that names it.

`policies:` maps a policy's name to the agents it serves, its adapter and its learning rate:

    policies:
      planner: {agents: [planner], lora: {rank: 16}}
      solver: {agents: [calculator], lr: 5.0e-5}   # algorithm.lora's adapter, its own rate

Unset, every agent shares the run's one policy (the config's `model`, `algorithm.lora`). Set, each
policy is a LoRA adapter of its own on the one shared base model (where the policies or
`algorithm.lora` name one), or a full copy of the model of its own (where none does), trained on
its own agents' tokens only, with its own GRPO groups and optimizer. These settings resolve once
into the run's plan (`inputs/policy_plan.py`), which checks them against each other, the rollout and
the swarm; what an engine can run, the engine (`engines/protocol.py`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


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
