"""The one training config: pydantic models, YAML loading, `a.b=value` overrides.

Unknown keys are errors (with a "did you mean" hint), never silently ignored.
The `verl:` and `areal:` sections are free-form: they hold the engines' native keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

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
from aworld_train.inputs.overrides import apply_overrides
from aworld_train.inputs.policy_settings import LoraConfig, PolicyConfig, policy_problem
from aworld_train.rollout.episodes.settings import RolloutSettings

DEFAULT_MODEL = "embedded:smollm2-135m"


def ray_address_problem(value: str) -> str | None:
    """None for an address `ray.init` joins (host:port, ray://host:port, auto); else why not."""
    if value == "auto":
        return None
    rest = value.removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    if host.strip("[]") and port.isdigit() and 0 < int(port) < 65536 and "/" not in rest:
        return None
    return (
        f"{value!r} is not a Ray address: give the head node's host:port (e.g. 10.0.0.1:6379), "
        "ray://host:10001 for Ray Client, or auto"
    )


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class AlgorithmConfig(_Section):
    name: Literal["grpo"] = "grpo"
    group_size: int = Field(4, description="samples per task (n); GRPO compares them, so 2 or more")
    lr: float = Field(1.0e-5, gt=0)
    kl_coef: float = Field(0.0, ge=0)
    clip_low: float = Field(0.2, ge=0)
    clip_high: float = Field(0.28, ge=0)
    norm_adv_by_std: bool = True
    advantage: Literal["grpo", "gigpo", "discounted"] = Field(
        "grpo",
        description="grpo: the episode's return on every token; gigpo: plus a step-level advantage over "
        "turns that acted on the same state across the group (arXiv 2505.10978); discounted: each "
        "turn's discounted return-to-go against the group (docs/BACKENDS.md, Credit per turn)",
    )
    gamma: float = Field(
        1.0, gt=0, le=1, description="discount per turn of the returns gigpo and discounted compare"
    )
    step_advantage_weight: float = Field(
        1.0, ge=0, description="gigpo: the weight of the step-level advantage beside the episode's"
    )
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean"] = "token-mean"
    warmup_steps: int = Field(0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    micro_batch_tokens: int = Field(4096, ge=64, description="token budget of one forward/backward")
    mini_batches: int = Field(
        1, ge=1, description="optimizer steps per rollout batch (>1 makes clipping matter)"
    )
    gradient_checkpointing: bool = False
    max_staleness: int = Field(
        0,
        ge=0,
        description="0 samples a step, then trains it (synchronous); N > 0 keeps episodes running while the "
        "learner trains and trains a group only if its oldest token is at most N weight versions behind "
        "(verl: trainer.v1.trainer_mode colocate_async and sampler.max_off_policy_threshold; AReaL: "
        "rollout.max_head_offpolicyness)",
    )
    importance_cap: float = Field(
        2.0,
        ge=1.0,
        description="the largest weight a token sampled by older weights gets in the loss (truncated "
        "importance sampling of the proximal over the behaviour policy; verl: "
        "algorithm.rollout_correction.rollout_is_threshold; AReaL: actor.rejection_sampling.upper)",
    )
    lora: LoraConfig | None = Field(
        None,
        description="train a LoRA adapter only; unset: every weight trains (verl: "
        "actor_rollout_ref.model.lora_rank, lora_alpha, target_modules; AReaL: actor.use_lora, lora_rank, "
        "lora_alpha, target_modules)",
    )
    mismatch_tolerance: float = Field(
        0.1,
        gt=0,
        description="warn when the rollout's logprobs and the learner's recomputation of them differ "
        "by more than this (mean absolute, per token) before an update; bf16 rounding alone gives "
        "up to about 0.04, float32 under 1e-4. On verl: its training/rollout_probs_diff_mean (the "
        "same tokens' probabilities)",
    )

    @field_validator("group_size")
    @classmethod
    def _a_group_to_compare(cls, value: int) -> int:
        if value < 2:
            raise ValueError(
                f"{value}: GRPO's advantage is a sample's reward against its group's mean, so a group of "
                "one gives every advantage 0 and nothing is learned; use 2 or more"
            )
        return value


class DataConfig(_Section):
    train: str | None = None
    test: str | None = None
    batch_size: int = Field(8, ge=1, description="tasks per training step")
    prompt_key: str = "prompt"
    answer_key: str = "ground_truth"
    max_test: int | None = Field(None, ge=1, description="evaluate on at most this many test rows")


class RewardConfig(_Section):
    fn: str | None = Field(None, description="'module:function' or 'path/to/file.py:function'")
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments the reward function gets on every call"
    )


class EnvServerConfig(_Section):
    name: str
    port: int = Field(0, ge=0, le=65535, description="0 picks a free port")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for the server process")
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


class TrainerConfig(_Section):
    steps: int = Field(
        20, ge=1, description="GRPO steps; a run of none would load the model and train nothing"
    )
    eval_every: int = Field(5, ge=0)
    save_every: int = Field(10, ge=0)
    save_total_limit: int | None = Field(
        1,
        ge=1,
        description="checkpoints a run keeps (Hugging Face's save_total_limit): the last N, and the one "
        "with the best held-out accuracy where an evaluation ran at a checkpoint's step; older ones are "
        "removed after each save, and --resume continues from the last. null keeps every checkpoint "
        "(verl: trainer.max_actor_ckpt_to_keep)",
    )
    run_dir: str = "runs/default"
    ray_address: str | None = Field(
        None,
        description="verl: join the Ray cluster at host:port (RAY_ADDRESS when unset); none: verl starts its own",
    )

    @field_validator("ray_address")
    @classmethod
    def _an_address(cls, value: str | None) -> str | None:
        problem = ray_address_problem(value) if value else None
        if problem is not None:
            raise ValueError(problem)
        return value

    eval_before: bool = True
    eval_after: bool = True
    log_trajectories: int = Field(4, ge=0, description="sampled trajectories written per step")
    stop_after_failed_steps: int = Field(
        3,
        ge=0,
        description="stop after this many steps in a row where every episode failed for one cause; 0 never",
    )
    seed: int = 0


class EvalConfig(_Section):
    """`aworld-train eval`: k samples per task under fixed seeds, over one or more checkpoints."""

    k: int = Field(1, ge=1, description="samples per task; pass@k and mean@k are computed from them")
    seeds: list[int] = Field(
        default_factory=lambda: [0],
        min_length=1,
        description="one evaluation per seed; the spread is reported",
    )
    checkpoints: list[str] = Field(
        default_factory=list,
        description="models to compare: run folders, checkpoint folders or embedded:<name> (empty: `model`)",
    )
    policy_url: str | None = Field(
        None,
        description="an OpenAI-compatible completions endpoint that returns token ids (a vLLM server, "
        "http://host:8000/v1); unset: the local model",
    )
    policy_model: str | None = Field(
        None, description="model name sent to policy_url (default: each checkpoint as given)"
    )
    api_key: str | None = Field(None, description="for policy_url; keep it a ${ENV_VAR} reference")
    request_timeout_s: float = Field(300.0, gt=0)
    temperature: float | None = Field(None, ge=0, description="sampling temperature (default: rollout's)")
    out_dir: str | None = Field(None, description="table, plot and trajectories (default: <run_dir>/eval)")


class SFTConfig(_Section):
    """`aworld-train sft`: supervised fine-tuning on multi-turn trajectories, loss on assistant tokens."""

    data: list[str] = Field(
        default_factory=list,
        description="trajectory files: AgentGym records (item_id, conversations) or `eval`'s JSONL",
    )
    format: Literal["auto", "agentgym", "trajectory"] = "auto"
    only_correct: bool = Field(True, description="keep only trajectories whose reward reaches min_reward")
    min_reward: float = 0.999
    system: str | None = Field(None, description="system prompt put before AgentGym conversations")
    backend: Literal["local", "verl"] = "local"
    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer steps")
    lr: float = Field(1.0e-5, gt=0)
    batch_size: int = Field(8, ge=1, description="sequences per optimizer step")
    micro_batch_tokens: int = Field(4096, ge=64, description="token budget of one forward/backward")
    max_length: int = Field(2048, ge=16, description="longer sequences are left out (and counted)")
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    seed: int = 0
    run_dir: str = "runs/sft"
    eval_after: bool = Field(True, description="evaluate the result on data.test right after training")
    eval_base: bool = Field(False, description="evaluate the starting model too, in the same table")
    verl: dict[str, Any] = Field(default_factory=dict, description="native keys for verl's SFT trainer")


class TrainConfig(_Section):
    backend: str = "local"
    model: str = DEFAULT_MODEL
    agent: str | None = Field(None, description="'module:factory' or an agent YAML path")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    policies: dict[str, PolicyConfig] = Field(
        default_factory=dict,
        description="a team's policies: {name: {agents, lora, lr, frozen}}, each a LoRA adapter of its own "
        "on the shared base (unset: every agent shares one policy); see inputs/policy_settings.py",
    )
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
    data: DataConfig = Field(default_factory=DataConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    env: list[EnvServerConfig] = Field(
        default_factory=list, description="MCP servers the run starts over HTTP on 127.0.0.1"
    )
    eval: EvalConfig = Field(default_factory=EvalConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    verl: dict[str, Any] = Field(default_factory=dict)
    areal: dict[str, Any] = Field(default_factory=dict)

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
        problem = policy_problem(
            self.policies, self.algorithm.lora, self.algorithm.max_staleness, self.rollout
        )
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
