"""What a local run trains with, built once before its first step: the tokenizer (its chat template
checked before the model loads), the model (a LoRA adapter on it, or every weight), the KL
reference, the policy that samples and the runner its episodes go through, the learner, and the
failure streaks that stop a run."""

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
from aworld_train.rollout.samples.failure_streak import FailureStreak, TrainedSoFar

if TYPE_CHECKING:
    from aworld_train.inputs.run import RunInputs
    from aworld_train.rollout.policies.local import LocalPolicy
    from aworld_train.rollout.policies.router import PolicyRouter
    from aworld_train.rollout.policies.vllm_policy import VLLMPolicy


@dataclass
class Parts:
    tokenizer: Any
    model: Any
    runner: EpisodeRunner
    policy: LocalPolicy | VLLMPolicy
    learner: GRPOLearner | TeamLearner
    failures: FailureStreak
    trained: TrainedSoFar
    router: PolicyRouter | None = None  # a policy per agent: each agent's calls to its policy

    @property
    def serving(self) -> LocalPolicy | VLLMPolicy | PolicyRouter:
        """What samples the run's episodes: the policy, or the router over the team's policies."""
        return self.router or self.policy

    def close(self) -> None:
        """What the run started to sample with (vLLM's server), stopped."""
        close = getattr(self.policy, "close", None)  # a scripted stand-in may have none
        if close is not None:
            close()


def load_trained_model(inputs: RunInputs, checkpoint: Path | None) -> tuple[Any, Any, Any]:
    """The tokenizer, the model that trains (from `checkpoint` where the run resumes) and the KL
    reference (None: none, or the LoRA base with its adapter switched off)."""
    from aworld_train.rollout.episodes.template_check import require_usable_template, template_report
    from aworld_train.rollout.policies.models import load_model, load_tokenizer

    cfg = inputs.config
    lora_settings = cfg.algorithm.lora
    torch.manual_seed(cfg.trainer.seed)
    # a checkpoint keeps the tokenizer beside its weights; one of adapters alone (policies/) keeps
    # the run model's
    saved_model = checkpoint is not None and (checkpoint / "config.json").is_file()
    tokenizer = load_tokenizer(str(checkpoint) if saved_model else cfg.model)
    template = template_report(tokenizer, cfg.rollout)
    require_usable_template(template, cfg.model)  # before the model loads
    console.print(f"chat template: {template.line()}")
    # a LoRA run resumes its adapter(s) on the base; a full-weight run resumes the saved weights (a
    # full model per policy: the first policy's here, the others' with their samplers)
    source = cfg.model
    if checkpoint and team.full_models(cfg):
        source = str(team.policy_folder(checkpoint, next(iter(cfg.policies)), team.MODEL))
    elif checkpoint and lora_settings is None and not cfg.policies:
        source = str(checkpoint)
    model = load_model(source)
    reference = None
    if cfg.policies and not team.full_models(cfg):
        # an adapter per policy on the one base, the KL reference that base (adapters switched off)
        model = team.load_adapters(model, checkpoint, cfg) if checkpoint else team.attach_adapters(model, cfg)
        console.print(f"policies: {', '.join(cfg.policies)}, an adapter each; {lora.trainable_line(model)}")
    elif lora_settings is not None:
        # the adapter trains, the base stays; the KL reference is the base (adapter switched off)
        model = lora.load(model, checkpoint) if checkpoint else lora.attach(model, lora_settings)
        console.print(f"LoRA: {lora.trainable_line(model)}")
    elif cfg.algorithm.kl_coef > 0:
        reference = load_model(cfg.model)
        reference.eval().requires_grad_(False)
    model.eval()
    return tokenizer, model, reference


def vllm_sampler(inputs: RunInputs, runner: EpisodeRunner, model, tokenizer):
    """vLLM's server on the trainer's own weights (a resumed run's included), sampling for `runner`
    (rollout.engine: vllm); a LoRA run's base is the run's model, its adapter (a run with a policy
    per agent: every policy's) pushed beside it."""
    from aworld_train.rollout.policies.models import resolve_model_path
    from aworld_train.rollout.policies.vllm_policy import VLLMPolicy

    cfg = inputs.config
    # a LoRA run's adapter rank (a run with a policy per agent: the largest of its adapters')
    ranks = [settings.rank for settings in team.adapter_settings(cfg).values()]
    if cfg.algorithm.lora is not None and not cfg.policies:
        ranks = [cfg.algorithm.lora.rank]
    policy = VLLMPolicy.start(
        model,
        tokenizer,
        runner.stop_token_ids,
        str(resolve_model_path(cfg.model)),
        inputs.run_dir / "vllm.log",
        max_model_len=cfg.rollout.max_total_tokens,
        seed=cfg.trainer.seed,
        kv_cache_gib=cfg.rollout.vllm_kv_cache_gib,
        lora_rank=max(ranks) if ranks else None,
        adapters=max(len(cfg.policies), 1),
    )
    server = policy.server
    console.print(
        f"sampler: vLLM's server at {server.url}, ready in {server.started_s:.0f}s (log {server.log_path})"
    )
    return policy


def build_parts(inputs: RunInputs, checkpoint: Path | None) -> Parts:
    cfg = inputs.config
    tokenizer, model, reference = load_trained_model(inputs, checkpoint)
    if cfg.rollout.engine == "vllm":
        runner = EpisodeRunner(inputs.spec, tokenizer, cfg.rollout, inputs.reward)
        policy = vllm_sampler(inputs, runner, model, tokenizer)
    else:
        runner, policy = local_runner(
            inputs.spec, cfg.model, cfg.rollout, inputs.reward, model=model, tokenizer=tokenizer
        )
    failures = FailureStreak(cfg.trainer.stop_after_failed_steps)
    if team.full_models(cfg):
        samplers = team.policy_samplers(cfg, policy, checkpoint)
        learner = TeamLearner.of_models(samplers, cfg, cfg.rollout.temperature, reference)
        router = team.model_router(samplers, cfg)
        return Parts(tokenizer, model, runner, policy, learner, failures, TrainedSoFar(), router)
    if cfg.policies:
        learner = TeamLearner.of_adapters(model, cfg, cfg.rollout.temperature, policy.pad_id, policy)
        router = team.router(policy, cfg)
        return Parts(tokenizer, model, runner, policy, learner, failures, TrainedSoFar(), router)
    learner = GRPOLearner(
        model,
        cfg.algorithm,
        cfg.rollout.temperature,
        policy.pad_id,
        reference,
        lock=policy.weights_update,  # each update is a new weight version
    )
    return Parts(tokenizer, model, runner, policy, learner, failures, TrainedSoFar())
