"""What every engine receives (the protocol it implements is engines/protocol.py).

An engine never sees the facade: it gets a frozen `RunInputs` with everything the
facade checked (config, its policy plan, agent spec, reward, tasks, run folder) and the common
fields the user set, which decide whether a native key may differ from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aworld_train.aworld.specs import Spec
    from aworld_train.inputs.config import TrainConfig
    from aworld_train.inputs.policy_plan import PolicyPlan
    from aworld_train.inputs.reward import RewardFunction
    from aworld_train.rollout.episodes.trajectory import Task


@dataclass(frozen=True)
class NativeInputs:
    """What an engine's native config section supplies instead of our common fields."""

    reward: str | None = None  # a 'path:function' reference the native section names
    has_train_files: bool = False  # the native section names its own training data
    # keyword arguments for the reward that the native section holds (verl: reward_model weights)
    reward_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunInputs:
    config: TrainConfig
    spec: Spec
    reward: RewardFunction
    train_tasks: tuple[Task, ...]
    test_tasks: tuple[Task, ...]
    run_dir: Path
    plan: PolicyPlan  # the config's policies, resolved once (inputs/policy_plan.py)
    # dotted common fields the user set (`algorithm.group_size`, `data.train`, ...)
    user_set: frozenset[str] = field(default_factory=frozenset)

    def explicit(self, common: str) -> bool:
        """Did the user set this common field (or, for a bare section name, that section)?"""
        return common in self.user_set


@dataclass(frozen=True)
class RenderedRun:
    """A run folder an engine wrote, and the command that launches it."""

    engine: str
    folder: Path
    config_path: Path
    command: tuple[str, ...]
    final: Any = None  # the engine's final config object, for inspection
    env: dict[str, str] = field(default_factory=dict)  # variables the command runs with

    def config_text(self) -> str:
        return self.config_path.read_text()
