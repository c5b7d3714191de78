"""What a local run trains with, built once before its first step from its policy plan: the tokenizer
(its chat template checked before the model loads), the model (a LoRA adapter on it, an adapter per
policy, or every weight), the KL reference, the policy that samples, the router that serves each
agent's calls and the runner its episodes go through, the learner, and the failure streaks that stop
a run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import aworld_train.engines.local.lora as lora
import aworld_train.engines.local.team as team
from aworld_train.engines.local.display import console
from aworld_train.engines.local.learner import GRPOLearner
from aworld_train.engines.local.team import TeamLearner
from aworld_train.rollout.episodes.runner import EpisodeRunner, local_runner
from aworld_train.rollout.policies.checkpoint_layout import holds_model, policy_folder
from aworld_train.rollout.policies.router import PolicyRouter
from aworld_train.rollout.samples.failure_streak import FailureStreak, TrainedSoFar

if TYPE_CHECKING:
    from aworld_train.inputs.policy_plan import PolicyPlan
    from aworld_train.inputs.run import RunInputs
    from aworld_train.rollout.policies.local import LocalPolicy
    from aworld_train.rollout.policies.vllm_policy import VLLMPolicy


@dataclass
class Parts:
    tokenizer: Any
    model: Any
    runner: EpisodeRunner
    policy: LocalPolicy | VLLMPolicy  # the sampler of the run's model: its weights' version and lock
    router: PolicyRouter  # what samples the run's episodes: each agent's calls to its plan's policy
    learner: GRPOLearner | TeamLearner
    failures: FailureStreak
    trained: TrainedSoFar
    frozen_agents: list[str]  # whose tokens carry no loss: rollout.frozen_agents and a frozen policy's

    def close(self) -> None:
        """What the run started to sample with (vLLM's server), stopped."""
        close = getattr(self.policy, "close", None)  # a scripted stand-in may have none
        if close is not None:
            close()


def load_trained_model(inputs: RunInputs, checkpoint: Path | None) -> tuple[Any, Any, Any]:
    """The tokenizer, the model that trains (from `checkpoint` where the run resumes) and the KL
    reference (None: none, or the LoRA base with its adapters switched off)."""
    from aworld_train.rollout.episodes.template_check import require_usable_template, template_report
    from aworld_train.rollout.policies.models import load_model, load_tokenizer

    cfg, plan = inputs.config, inputs.plan
    torch.manual_seed(cfg.trainer.seed)
    # a checkpoint keeps the tokenizer beside its weights; one of adapters alone keeps the run model's
    saved_model = checkpoint is not None and holds_model(checkpoint)
    tokenizer = load_tokenizer(str(checkpoint) if saved_model else cfg.model)
    template = template_report(tokenizer, cfg.rollout)
    require_usable_template(template, cfg.model)  # before the model loads
    console.print(f"chat template: {template.line()}")
    # a LoRA run resumes its adapter(s) on the base; a full-weight run resumes the saved weights (a
    # full model per policy: the first policy's here, the others' with their samplers)
    source = cfg.model
    if checkpoint and plan.kind == "full":
        source = str(policy_folder(checkpoint, plan.first.name, "full") if plan.per_agent else checkpoint)
    model = load_model(source)
    reference = None
    if plan.kind == "adapter":
        # the adapters train, the base stays; the KL reference is the base (adapters switched off)
        model = _with_adapters(model, plan, checkpoint)
    elif cfg.algorithm.kl_coef > 0:
        reference = load_model(cfg.model)
        reference.eval().requires_grad_(False)
    model.eval()
    return tokenizer, model, reference


def _with_adapters(model, plan: PolicyPlan, checkpoint: Path | None):
    """`model` (the base) holding the plan's adapter(s): fresh, or as `checkpoint` saved them."""
    if plan.per_agent:
        model = (
            team.load_adapters(model, checkpoint, plan) if checkpoint else team.attach_adapters(model, plan)
        )
        console.print(f"policies: {', '.join(plan.names)}, an adapter each; {lora.trainable_line(model)}")
        return model
    model = lora.load(model, checkpoint) if checkpoint else lora.attach(model, plan.first.lora)
    console.print(f"LoRA: {lora.trainable_line(model)}")
    return model


def vllm_sampler(inputs: RunInputs, runner: EpisodeRunner, model, tokenizer):
    """vLLM's server on the trainer's own weights (a resumed run's included), sampling for `runner`
    (rollout.engine: vllm); a LoRA run's base is the run's model, its adapter (a run with a policy
    per agent: every policy's) pushed beside it."""
    from aworld_train.rollout.policies.models import resolve_model_path
    from aworld_train.rollout.policies.vllm_policy import VLLMPolicy

    cfg, plan = inputs.config, inputs.plan
    policy = VLLMPolicy.start(
        model,
        tokenizer,
        runner.stop_token_ids,
        str(resolve_model_path(cfg.model)),
        inputs.run_dir / "vllm.log",
        max_model_len=cfg.rollout.max_total_tokens,
        seed=cfg.trainer.seed,
        kv_cache_gib=cfg.rollout.vllm_kv_cache_gib,
        lora_rank=plan.lora_rank,  # the largest of the plan's adapters'
        adapters=len(plan.policies),
    )
    server = policy.server
    console.print(
        f"sampler: vLLM's server at {server.url}, ready in {server.started_s:.0f}s (log {server.log_path})"
    )
    return policy


def build_parts(inputs: RunInputs, checkpoint: Path | None) -> Parts:
    cfg, plan = inputs.config, inputs.plan
    tokenizer, model, reference = load_trained_model(inputs, checkpoint)
    if cfg.rollout.engine == "vllm":
        runner = EpisodeRunner(inputs.spec, tokenizer, cfg.rollout, inputs.reward)
        policy = vllm_sampler(inputs, runner, model, tokenizer)
    else:
        runner, policy = local_runner(
            inputs.spec, cfg.model, cfg.rollout, inputs.reward, model=model, tokenizer=tokenizer
        )
    samplers = team.policy_samplers(plan, policy, checkpoint, cfg.model)
    router = PolicyRouter.of(samplers, plan.owner)  # once: every batch of the run goes through it
    temperature = cfg.rollout.temperature
    if not plan.per_agent:
        # each update is a new weight version
        learner = GRPOLearner(
            model, cfg.algorithm, temperature, policy.pad_id, reference, lock=policy.weights_update
        )
    elif plan.kind == "full":
        learner = TeamLearner.of_models(samplers, plan, cfg.algorithm, temperature, reference)
    else:
        learner = TeamLearner.of_adapters(model, plan, cfg.algorithm, temperature, policy.pad_id, policy)
    failures = FailureStreak(cfg.trainer.stop_after_failed_steps)
    frozen = plan.frozen_agents(cfg.rollout.frozen_agents)
    return Parts(tokenizer, model, runner, policy, router, learner, failures, TrainedSoFar(), frozen)
