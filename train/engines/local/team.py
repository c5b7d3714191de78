"""A policy per agent on the local backend (`policies:`): one base model in memory holding a peft
adapter per policy (or, with no adapter named, a full model per policy, each with its own sampler),
each agent's calls sampled with its policy's, and a learner per trained policy (its own optimizer,
learning rate and GRPO step over its own agents' samples).

Adapters are the cheap kind: the base (most of the memory) is held once, and the learner's KL
reference is that base with the adapters off. Each adapter's weights are the only ones its learner
steps, and peft's `set_adapter` makes them the only ones a forward uses, so a step of one policy
leaves every other agent's logprobs exactly as they were. A full model per policy costs a model,
its optimizer state and a sampler each.

A checkpoint keeps each adapter (or model) in `policies/<name>/` and each learner's state.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aworld_train.engines.local.lora as lora
from aworld_train.core.errors import ConfigError
from aworld_train.engines.local.learner import GRPOLearner
from aworld_train.engines.logprob_mismatch import MAX, MEAN, TOKENS, mismatch_metrics
from aworld_train.inputs.policy_settings import policy_of_agents
from aworld_train.rollout.policies.adapter_policy import POLICIES_DIR, adapter_router, load_policy_adapters
from aworld_train.rollout.policies.router import PolicyRouter

if TYPE_CHECKING:
    from aworld_train.engines.local.samples import Sample
    from aworld_train.inputs.config import LoraConfig, TrainConfig
    from aworld_train.rollout.policies.local import LocalPolicy

MODEL = "config.json"  # what a full model's policy folder holds
# summed over the policies in the step's metrics; the others are per policy only, or merged below
_COUNTS = ("train_tokens", "samples", "samples_with_signal", "micro_batches")


def adapter_settings(cfg: TrainConfig) -> dict[str, LoraConfig]:
    """Each policy's adapter: its own `lora`, or algorithm.lora."""
    settings = {name: policy.lora or cfg.algorithm.lora for name, policy in cfg.policies.items()}
    return {name: value for name, value in settings.items() if value is not None}


def attach_adapters(model, cfg: TrainConfig):
    """`model` holding a fresh adapter per policy (the first one active)."""
    settings = adapter_settings(cfg)
    names = list(settings)
    model = lora.attach(model, settings[names[0]], names[0], f"policies.{names[0]}.lora")
    for name in names[1:]:
        try:
            model.add_adapter(name, lora.peft_settings(settings[name]), autocast_adapter_dtype=False)
        except ValueError as exc:
            raise ConfigError(
                f"policies.{name}.lora: {exc}; name modules the model has, or write all-linear"
            ) from exc
    return model


def load_adapters(model, checkpoint: Path, cfg: TrainConfig):
    """`model` (the base) holding every policy's adapter as `checkpoint` saved it, trainable."""
    folders = {name: policy_folder(checkpoint, name) for name in adapter_settings(cfg)}
    return load_policy_adapters(model, folders, trainable=True)


def policy_folder(checkpoint: Path, name: str, marker: str = "adapter_config.json") -> Path:
    """Policy `name`'s folder in `checkpoint` holding `marker` (its adapter's adapter_config.json,
    or a full model's config.json); ConfigError where it holds none."""
    folder = Path(checkpoint) / POLICIES_DIR / name
    if not (folder / marker).is_file():
        raise ConfigError(
            f"{checkpoint} holds no {'adapter' if marker == 'adapter_config.json' else 'model'} of policy "
            f"{name!r} ({POLICIES_DIR}/{name}/{marker}): the run trained other policies, or the other kind; "
            "resume it with the policies it saved, or start a new run folder"
        )
    return folder


def router(policy: LocalPolicy, cfg: TrainConfig) -> PolicyRouter:
    """Each agent's calls to its policy's adapter of `policy`'s model."""
    return adapter_router(policy, policy_of_agents(cfg.policies))


def full_models(cfg: TrainConfig) -> bool:
    """A full model per policy (no policy names an adapter, nor does algorithm.lora)."""
    return bool(cfg.policies) and not adapter_settings(cfg)


def policy_samplers(cfg: TrainConfig, first: LocalPolicy, checkpoint: Path | None) -> dict[str, LocalPolicy]:
    """A full model per policy, each with a transformers sampler of its own: `first` (its model
    already loaded) for the first policy; each other's model from the run's `model`, or from
    `checkpoint`'s policies/<name>/ where the run resumes."""
    from aworld_train.rollout.policies.models import load_model

    names = list(cfg.policies)
    samplers = {names[0]: first}
    for name in names[1:]:
        model = load_model(str(policy_folder(checkpoint, name, MODEL)) if checkpoint else cfg.model).eval()
        samplers[name] = first.sibling(model)
    return samplers


def model_router(samplers: dict[str, LocalPolicy], cfg: TrainConfig) -> PolicyRouter:
    """Each agent's calls to its policy's own sampler."""
    owner = policy_of_agents(cfg.policies)
    return PolicyRouter(
        next(iter(samplers.values())), {agent: samplers[name] for agent, name in owner.items()}
    )


class TeamLearner:
    """A GRPOLearner per trained policy, each over its own agents' samples. Adapters on one model:
    stepped in turn with the adapter active, all under one weights update (one new version for the
    model). Full models: each under its own sampler's weights update (its own versions)."""

    def __init__(
        self,
        learners: dict[str, GRPOLearner],
        samplers: dict[str, Any],
        cfg: TrainConfig,
        lock=None,
        adapters_model=None,
    ) -> None:
        self.learners = learners
        self.samplers = samplers  # each policy's sampler (all policies'): its version, its lock
        self.policy_of = policy_of_agents(cfg.policies)
        self.adapters_model = adapters_model  # the one model holding every adapter (None: full models)
        self.lock = lock or contextlib.nullcontext()

    @classmethod
    def of_adapters(cls, model, cfg: TrainConfig, temperature: float, pad_id: int, policy) -> TeamLearner:
        """A learner per trained policy's adapter on `model`, which `policy` samples."""
        learners = {}
        for name, settings in cfg.policies.items():
            if settings.frozen:
                continue
            model.set_adapter(name)  # its weights alone require grad: the ones its optimizer holds
            learners[name] = GRPOLearner(model, _algorithm(cfg, name), temperature, pad_id)
        # one weights update (one new version) for every policy's step
        return cls(learners, dict.fromkeys(cfg.policies, policy), cfg, policy.weights_update, model)

    @classmethod
    def of_models(
        cls, samplers: dict[str, Any], cfg: TrainConfig, temperature: float, reference
    ) -> TeamLearner:
        """A learner per trained policy's own model (`samplers[name].model`)."""
        learners = {
            name: GRPOLearner(
                sampler.model,
                _algorithm(cfg, name),
                temperature,
                sampler.pad_id,
                reference,
                lock=sampler.weights_update,
            )
            for name, sampler in samplers.items()
            if not cfg.policies[name].frozen
        }
        return cls(learners, samplers, cfg)

    def step(self, samples: list[Sample], version: int | None = None) -> dict[str, float]:
        """Each trained policy's GRPO update over its own agents' samples; the step's metrics, per
        policy (`policy/<name>/...`) and for the whole step. `version` (None: no staleness) is read
        per policy, from its own sampler, as the update starts."""
        per_policy = {}
        with self.lock:
            for name, learner in self.learners.items():
                sampler = self.samplers[name]
                if self.adapters_model is not None:
                    self.adapters_model.set_adapter(name)
                own = [s for s in samples if self.policy_of.get(s.agent) == name]
                per_policy[name] = learner.step(own, None if version is None else sampler.version)
        return merged_metrics(per_policy)

    def save(self, folder: Path) -> None:
        """Every policy's adapter (or model) into `folder/policies/<name>/`."""
        if self.adapters_model is not None:
            with next(iter(self.samplers.values())).lock:
                self.adapters_model.save_pretrained(
                    folder / POLICIES_DIR, selected_adapters=list(self.samplers)
                )
            return
        for name, sampler in self.samplers.items():
            with sampler.lock:
                sampler.model.save_pretrained(folder / POLICIES_DIR / name)

    def drop_optimizer_state(self) -> None:
        for learner in self.learners.values():
            learner.drop_optimizer_state()

    def state_dict(self) -> dict[str, Any]:
        return {
            "learners": {name: learner.state_dict() for name, learner in self.learners.items()},
            "versions": {name: sampler.version for name, sampler in self.samplers.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = sorted(set(self.learners) - set(state.get("learners", {})))
        if missing:
            raise ConfigError(
                f"the checkpoint holds no learner state of policy(ies) {', '.join(missing)}: it was saved by "
                "a run with other policies; resume with those, or start a new run folder"
            )
        for name, learner in self.learners.items():
            learner.load_state_dict(state["learners"][name])
        for name, version in state.get("versions", {}).items():
            if name in self.samplers:
                self.samplers[name].version = version


def _algorithm(cfg: TrainConfig, name: str):
    """algorithm: with policy `name`'s learning rate."""
    return cfg.algorithm.model_copy(update={"lr": cfg.policies[name].lr or cfg.algorithm.lr})


def merged_metrics(per_policy: dict[str, dict[str, float]]) -> dict[str, float]:
    """The step's figures: each policy's under `policy/<name>/`, and for the step as a whole the
    counts summed, the gradient norm of all adapters together, the losses weighted by samples and
    the logprob mismatch over every measured token."""
    out: dict[str, float] = {}
    for name, metrics in per_policy.items():
        out.update({f"policy/{name}/{key}": value for key, value in metrics.items()})
    trained = {name: m for name, m in per_policy.items() if "skipped" not in m}
    if not trained:
        return {**out, "skipped": 1.0}
    for key in _COUNTS:
        out[key] = sum(m[key] for m in trained.values())
    samples = out["samples"]
    for key in ("loss", "pg_loss", "kl", "clip_frac"):
        out[key] = sum(m[key] * m["samples"] for m in trained.values()) / samples
    out["grad_norm"] = math.sqrt(sum(m["grad_norm"] ** 2 for m in trained.values()))
    tokens = sum(m[TOKENS] for m in trained.values())
    mean = sum(m[MEAN] * m[TOKENS] for m in trained.values()) / tokens if tokens else 0.0
    out.update(mismatch_metrics(mean, max(m[MAX] for m in trained.values()), int(tokens)))
    return out
