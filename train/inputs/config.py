"""The one training config: pydantic models, YAML loading, `a.b=value` overrides.

Unknown keys are errors (with a "did you mean" hint), never silently ignored.
The `verl:` and `areal:` sections are free-form: they hold the engines' native keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from aworld_train.core.errors import ConfigError
from aworld_train.core.protocol import is_env_reference
from aworld_train.core.validation import did_you_mean, explain_validation, read_yaml
from aworld_train.inputs.algorithm_settings import AlgorithmConfig
from aworld_train.inputs.data_settings import DataConfig, RewardConfig
from aworld_train.inputs.eval_command import EvalConfig
from aworld_train.inputs.overrides import apply_overrides
from aworld_train.inputs.policy_plan import policy_problem, resolve_plan
from aworld_train.inputs.policy_settings import (
    LoraConfig as LoraConfig,  # re-exported: callers import it from here
)
from aworld_train.inputs.policy_settings import PolicyConfig
from aworld_train.inputs.sft_settings import SFTConfig
from aworld_train.inputs.trainer_settings import TrainerConfig
from aworld_train.rollout.episodes.settings import RolloutSettings

DEFAULT_MODEL = "embedded:smollm2-135m"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EnvServerConfig(_Section):
    name: str = Field(
        description="which server: a name of env/launcher.py's SERVERS (calculator, gaia, bfcl, agentgym, "
        "...); its URL is exported as <NAME>_MCP_URL for the agent's ${...} reference"
    )
    port: int = Field(
        0, ge=0, le=65535, description="0 picks a free port, so that runs side by side never clash"
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="extra environment for the server process; a key or token as a ${VAR} reference, since "
        "the config is saved in the run folder",
    )
    per_node: bool = Field(
        True,
        description="on a Ray cluster, also start it on every other node that runs episodes (each worker "
        "uses its own node's, on loopback); false: only the launching node's, which other nodes cannot reach",
    )

    @field_validator("env")
    @classmethod
    def _secrets_stay_references(cls, value: dict[str, str]) -> dict[str, str]:
        # a config is written to the run folder: a key in it must be a ${VAR} reference (invariant 4)
        for name, text in value.items():
            secret = any(word in name.upper() for word in ("KEY", "TOKEN", "SECRET", "PASSWORD"))
            if secret and text and not is_env_reference(text):
                raise ValueError(
                    f"env.{name} holds a literal secret; write it as a reference, {name}: '${{{name}}}', "
                    "and export the variable"
                )
        return value

    @field_validator("name")
    @classmethod
    def _known_server(cls, value: str) -> str:
        from aworld_train.env.launcher import SERVERS

        return _one_of(value, sorted(SERVERS), "env server")

    @model_validator(mode="after")
    def _agentgym_needs_env_and_server(self) -> EnvServerConfig:
        # The bridge takes its environment and AgentGym server from these variables (the
        # server's own `env:` or the run's environment); without them it would exit at start.
        import os

        if self.name == "agentgym":
            missing = [
                k for k in ("AGENTGYM_ENV", "AGENTGYM_SERVER") if not (self.env.get(k) or os.environ.get(k))
            ]
            if missing:
                raise ValueError(
                    f"env server 'agentgym' needs {' and '.join(missing)}: "
                    "env: [{name: agentgym, env: {AGENTGYM_ENV: textcraft, AGENTGYM_SERVER: http://127.0.0.1:36001}}]"
                )
        return self


class TrainConfig(_Section):
    backend: str = Field(
        "local",
        description="the engine that trains: local (built in: this process, a CPU or one GPU), verl or "
        "areal (their own trainers, rendered from this config); local needs no cluster",
    )
    model: str = Field(
        DEFAULT_MODEL,
        description="the policy to train: a local transformers folder, or embedded:<name> (a small model "
        "installed with the package, so that a run works offline on a CPU)",
    )
    agent: str | None = Field(
        None,
        description="the AWorld agent or team whose LLM calls train: 'module:factory' or an agent YAML path "
        "(or AgentTrainer's agent)",
    )
    algorithm: AlgorithmConfig = Field(
        default_factory=AlgorithmConfig,
        description="how the policy learns: GRPO's loss, its optimizer, credit per turn, LoRA, staleness",
    )
    policies: dict[str, PolicyConfig] = Field(
        default_factory=dict,
        description="a team's policies: {name: {agents, lora, lr, frozen}}, each a LoRA adapter of its own "
        "on the shared base (unset: every agent shares one policy); see inputs/policy_settings.py",
    )
    rollout: RolloutSettings = Field(
        default_factory=RolloutSettings,
        description="what every episode obeys: turn and token limits, sampling, timeouts, the tool-call "
        "format, concurrency",
    )
    data: DataConfig = Field(
        default_factory=DataConfig, description="the train and held-out tasks, and the batch"
    )
    reward: RewardConfig = Field(
        default_factory=RewardConfig, description="the function that scores each episode"
    )
    trainer: TrainerConfig = Field(
        default_factory=TrainerConfig,
        description="the run: its steps, evaluations, checkpoints, folder and seed",
    )
    env: list[EnvServerConfig] = Field(
        default_factory=list, description="MCP servers the run starts over HTTP on 127.0.0.1"
    )
    eval: EvalConfig = Field(
        default_factory=EvalConfig,
        description="`aworld-train eval`: the checkpoints, samples and seeds; unset: the run's own held-out "
        "settings",
    )
    sft: SFTConfig = Field(
        default_factory=SFTConfig, description="`aworld-train sft`: fine-tuning on multi-turn trajectories"
    )
    verl: dict[str, Any] = Field(
        default_factory=dict,
        description="verl's own keys (backend verl), filling what the facade leaves: one that agrees with "
        "a facade key is kept, one that contradicts a facade key you set is refused",
    )
    areal: dict[str, Any] = Field(
        default_factory=dict,
        description="AReaL's own keys (backend areal), under the same rules as verl's",
    )

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        from aworld_train.inputs.engine_names import ENGINE_NAMES

        return _one_of(value, ENGINE_NAMES, "backend")

    @field_validator("trainer")
    @classmethod
    def _cluster_is_verls(cls, value: TrainerConfig, info: ValidationInfo) -> TrainerConfig:
        backend = info.data.get("backend")
        if value.ray_address and backend != "verl":
            raise ValueError(
                f"ray_address: backend {backend!r} does not join a Ray cluster (verl does); "
                "remove it, or use backend: verl"
            )
        return value

    @model_validator(mode="after")
    def _staleness_in_one_process(self) -> TrainConfig:
        """The local backend's asynchronous loop runs its episodes in this process."""
        if self.backend == "local" and self.algorithm.max_staleness and self.rollout.workers > 1:
            raise ValueError(
                f"algorithm.max_staleness={self.algorithm.max_staleness} with rollout.workers="
                f"{self.rollout.workers}: asynchronous training runs its episodes in this process; "
                "set rollout.workers: 1 (raise rollout.concurrency instead), or algorithm.max_staleness: 0"
            )
        return self

    @model_validator(mode="after")
    def _policies_can_run(self) -> TrainConfig:
        plan = resolve_plan(self.policies, self.algorithm)
        problem = policy_problem(plan, self.algorithm.max_staleness, self.rollout)
        if problem is not None:
            raise ValueError(problem)
        return self

    def fields_set(self) -> frozenset[str]:
        """Dotted names of the fields the user set: sections (`rollout`) and their fields (`rollout.temperature`)."""
        out = set()
        for name in self.model_fields_set:
            out.add(name)
            node = getattr(self, name)
            if isinstance(node, BaseModel):
                out.update(f"{name}.{field}" for field in node.model_fields_set)
        return frozenset(out)

    def render(self) -> str:
        """The final config as YAML, as a run folder stores it."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def _one_of(value: str, choices: Any, what: str) -> str:
    """`value` if it is one of `choices`; else an error listing them, with a "did you mean"."""
    if value not in choices:
        raise ValueError(
            f"unknown {what} {value!r}; choose one of {', '.join(choices)}{did_you_mean(value, choices)}"
        )
    return value


_VERL_ONLY_KEYS = ("actor_rollout_ref", "critic", "reward_model", "custom_reward_function")


def is_native_verl(data: dict[str, Any]) -> bool:
    """A config written in verl's own layout rather than ours."""
    return any(key in data for key in _VERL_ONLY_KEYS) or "adv_estimator" in (data.get("algorithm") or {})


def load_config(
    source: str | Path | dict[str, Any] | TrainConfig | None = None, overrides: list[str] | None = None
) -> TrainConfig:
    """Build a validated TrainConfig from a YAML path, a dict, a model or nothing (defaults)."""
    if isinstance(source, TrainConfig):
        data = source.model_dump()
    elif source is None:
        data = {}
    elif isinstance(source, dict):
        data = dict(source)
    elif isinstance(source, str | Path):
        data = read_yaml(source)
    else:
        raise ConfigError(f"config must be a YAML path, a dict or a TrainConfig, not {type(source).__name__}")
    if is_native_verl(data):
        # A verl YAML (the grpo_trainer.yaml AWorld users have) is accepted as is: it becomes
        # the native section of a verl run, and its blanks are filled when the run is rendered.
        data = {"backend": "verl", "verl": data}
    data = apply_overrides(data, list(overrides or []))
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(explain_validation(exc, TrainConfig)) from None
