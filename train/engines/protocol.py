"""What every engine implements, and the capabilities an engine declares beyond it.

An engine never sees the facade: it gets a frozen `RunInputs` (inputs/run.py) with everything the
facade checked. An engine class subclasses `Engine`, so that what it leaves out (`checks`, `sft`)
has the defaults below, and says what it can do in `capabilities` rather than being probed for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from aworld_train.core.errors import ConfigError

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig
    from aworld_train.inputs.policy_plan import PolicyPlan
    from aworld_train.inputs.run import NativeInputs, RenderedRun, RunInputs
    from aworld_train.prerun.checks import Check
    from aworld_train.rollout.samples.sft_data import SFTData


@dataclass(frozen=True)
class Capabilities:
    """What an engine does beyond training a GRPO run."""

    sft: bool = False  # `aworld-train sft`: supervised fine-tuning on trajectories
    # `rollout.engine: vllm`: vLLM's own server samples its rollouts (local; verl's and AReaL's CPU
    # runs: on a GPU their own config names the inference engine)
    vllm_sampler: bool = False
    # a plan of a policy per agent (`policies:`): each agent of a team sampled and trained by a LoRA
    # adapter (or a model) of its own; an engine without it takes a plan of one policy only
    policy_per_agent: bool = False
    # algorithm.advantage gigpo / discounted: an advantage per turn, on that turn's tokens
    turn_advantages: bool = False


class Engine(Protocol):
    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    def native_inputs(self, config: TrainConfig) -> NativeInputs:
        """What the config's native section for this engine supplies (reward, data files)."""
        ...

    def validate(self, config: TrainConfig) -> None:
        """Refuse what the engine would refuse in its native section (unknown keys, settings it
        cannot run with), before any model loads or server starts."""
        ...

    def checks(self, inputs: RunInputs, run: RenderedRun | None = None) -> list[Check]:
        """`check`'s lines of this engine's own (beside every run's); given `run`, the render
        about to launch."""
        return []

    def render(self, inputs: RunInputs) -> RenderedRun | None:
        """Write the run folder; None for an engine that needs none (local)."""
        ...

    def train(self, inputs: RunInputs, resume: bool = False) -> dict[str, Any]:
        """Train to the end; a summary of the run."""
        ...

    def sft(
        self, cfg: TrainConfig, data: SFTData, run_dir: Path, render_only: bool = False
    ) -> dict[str, Any]:
        """Supervised fine-tuning on `data` (engines whose capabilities say `sft`)."""
        raise ConfigError(f"sft.backend: {self.name} does not fine-tune; use local or verl")


def refuse_what_it_cannot(engine: Engine, config: TrainConfig, plan: PolicyPlan) -> None:
    """Settings of the common config an engine has no capability for, refused before anything loads
    (the one place an engine that trains one policy refuses a plan of a policy per agent)."""
    if config.rollout.engine == "vllm" and not engine.capabilities.vllm_sampler:
        raise ConfigError(
            f"rollout.engine: vllm: backend {engine.name} samples with its own rollout settings: remove "
            "rollout.engine"
        )
    if plan.per_agent and not engine.capabilities.policy_per_agent:
        raise ConfigError(
            f"policies: backend {engine.name} trains one policy (one actor, one optimizer) for every agent "
            "of a team; remove policies to share it (rollout.frozen_agents keeps an agent from training), "
            "or use backend: local, which trains an adapter per policy"
        )
    if config.algorithm.advantage != "grpo" and not engine.capabilities.turn_advantages:
        raise ConfigError(
            f"algorithm.advantage: {config.algorithm.advantage}: backend {engine.name} gives each row one "
            "reward, so a turn cannot get an advantage of its own; use algorithm.advantage: grpo, or "
            "backend: local or verl, which train an advantage per turn"
        )
