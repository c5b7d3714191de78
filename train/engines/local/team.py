"""A policy per agent on the local backend (`policies:`): one base model in memory holding a peft
adapter per policy (or, with no adapter named, a full model per policy, each with its own sampler),
each agent's calls sampled with its policy's, and a learner per trained policy (its own optimizer,
learning rate and GRPO step over its own agents' samples).

Adapters are the cheap kind: the base (most of the memory) is held once, and the learner's KL
reference is that base with the adapters off. Each adapter's weights are the only ones its learner
steps, and peft's `set_adapter` makes them the only ones a forward uses, so a step of one policy
leaves every other agent's logprobs exactly as they were. A full model per policy costs a model,
its optimizer state and a sampler each.

What the plan (`inputs/policy_plan.py`) names is built here; a checkpoint keeps each adapter (or model)
where `rollout/policies/checkpoint_layout.py` says, and each learner's state.
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
from aworld_train.rollout.policies.adapter_policy import adapter_policies
from aworld_train.rollout.policies.checkpoint_layout import (
    load_policy_adapters,
    policy_folder,
    policy_folders,
    save_policy_adapters,
    save_policy_model,
)

if TYPE_CHECKING:
    from aworld_train.engines.local.samples import Sample
    from aworld_train.inputs.algorithm_settings import AlgorithmConfig
    from aworld_train.inputs.policy_plan import PlannedPolicy, PolicyPlan
    from aworld_train.rollout.policies.client import PolicyClient
    from aworld_train.rollout.policies.local import LocalPolicy
    from aworld_train.rollout.policies.vllm_policy import VLLMPolicy

# summed over the policies in the step's metrics; the others are per policy only, or merged below
_COUNTS = ("train_tokens", "samples", "samples_with_signal", "micro_batches")


def attach_adapters(model, plan: PolicyPlan):
    """`model` holding a fresh adapter per policy of the plan (the first one active)."""
    first, *rest = plan.policies
    model = lora.attach(model, first.lora, first.name, f"policies.{first.name}.lora")
    for policy in rest:
        try:
            model.add_adapter(policy.name, lora.peft_settings(policy.lora), autocast_adapter_dtype=False)
        except ValueError as exc:
            raise ConfigError(
                f"policies.{policy.name}.lora: {exc}; name modules the model has, or write all-linear"
            ) from exc
    return model


def load_adapters(model, checkpoint: Path, plan: PolicyPlan):
    """`model` (the base) holding every policy's adapter as `checkpoint` saved it, trainable."""
    return load_policy_adapters(model, policy_folders(checkpoint, plan.names, "adapter"), trainable=True)


def policy_samplers(
    plan: PolicyPlan, policy: LocalPolicy | VLLMPolicy, checkpoint: Path | None, model_ref: str
) -> dict[str, PolicyClient]:
    """Each policy's sampler: `policy` for a run of one; an adapter of `policy`'s model each; or a
    full model each (`policy` the first's)."""
    if not plan.per_agent:
        return {plan.first.name: policy}
    if plan.kind == "adapter":
        return adapter_policies(policy, plan.names)
    return model_samplers(plan, policy, checkpoint, model_ref)


def model_samplers(
    plan: PolicyPlan, first: LocalPolicy, checkpoint: Path | None, model_ref: str
) -> dict[str, LocalPolicy]:
    """A full model per policy, each with a transformers sampler of its own: `first` (its model
    already loaded) for the first policy; each other's model from `model_ref` (the run's `model`),
    or from `checkpoint`'s folder of it where the run resumes."""
    from aworld_train.rollout.policies.models import load_model

    found = {plan.first.name: first}
    for name in plan.names[1:]:
        model = load_model(str(policy_folder(checkpoint, name, "full")) if checkpoint else model_ref).eval()
        found[name] = first.sibling(model)
    return found


class TeamLearner:
    """A GRPOLearner per trained policy, each over its own agents' samples. Adapters on one model:
    stepped in turn with the adapter active, all under one weights update (one new version for the
    model). Full models: each under its own sampler's weights update (its own versions)."""

    def __init__(
        self,
        learners: dict[str, GRPOLearner],
        samplers: dict[str, Any],
        plan: PolicyPlan,
        lock=None,
        adapters_model=None,
    ) -> None:
        self.learners = learners
        self.samplers = samplers  # each policy's sampler (all policies'): its version, its lock
        self.policy_of = plan.owner
        self.adapters_model = adapters_model  # the one model holding every adapter (None: full models)
        self.lock = lock or contextlib.nullcontext()

    @classmethod
    def of_adapters(
        cls, model, plan: PolicyPlan, algorithm: AlgorithmConfig, temperature: float, pad_id: int, policy
    ) -> TeamLearner:
        """A learner per trained policy's adapter on `model`, which `policy` samples."""
        learners = {}
        for planned in plan.trained:
            model.set_adapter(planned.name)  # its weights alone require grad: the ones its optimizer holds
            learners[planned.name] = GRPOLearner(model, _algorithm(algorithm, planned), temperature, pad_id)
        # one weights update (one new version) for every policy's step
        return cls(learners, dict.fromkeys(plan.names, policy), plan, policy.weights_update, model)

    @classmethod
    def of_models(
        cls,
        samplers: dict[str, Any],
        plan: PolicyPlan,
        algorithm: AlgorithmConfig,
        temperature: float,
        reference,
    ) -> TeamLearner:
        """A learner per trained policy's own model (`samplers[name].model`)."""
        learners = {
            planned.name: GRPOLearner(
                samplers[planned.name].model,
                _algorithm(algorithm, planned),
                temperature,
                samplers[planned.name].pad_id,
                reference,
                lock=samplers[planned.name].weights_update,
            )
            for planned in plan.trained
        }
        return cls(learners, samplers, plan)

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
        """Every policy's adapter (or model) into the checkpoint `folder` (checkpoint_layout.py)."""
        if self.adapters_model is not None:
            with next(iter(self.samplers.values())).lock:
                save_policy_adapters(self.adapters_model, folder, list(self.samplers))
            return
        for name, sampler in self.samplers.items():
            with sampler.lock:
                save_policy_model(sampler.model, folder, name)

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


def _algorithm(algorithm: AlgorithmConfig, policy: PlannedPolicy) -> AlgorithmConfig:
    """algorithm: with `policy`'s learning rate."""
    return algorithm.model_copy(update={"lr": policy.lr})


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
