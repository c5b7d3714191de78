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
from aworld_train.engines.local.display import console
from aworld_train.engines.local.learner import GRPOLearner
from aworld_train.rollout.episodes.runner import EpisodeRunner, local_runner
from aworld_train.rollout.samples.failure_streak import FailureStreak, TrainedSoFar

if TYPE_CHECKING:
    from aworld_train.inputs.run import RunInputs
    from aworld_train.rollout.policies.local import LocalPolicy


@dataclass
class Parts:
    tokenizer: Any
    model: Any
    runner: EpisodeRunner
    policy: LocalPolicy
    learner: GRPOLearner
    failures: FailureStreak
    trained: TrainedSoFar


def load_trained_model(inputs: RunInputs, checkpoint: Path | None) -> tuple[Any, Any, Any]:
    """The tokenizer, the model that trains (from `checkpoint` where the run resumes) and the KL
    reference (None: none, or the LoRA base with its adapter switched off)."""
    from aworld_train.rollout.episodes.template_check import require_usable_template, template_report
    from aworld_train.rollout.policies.models import load_model, load_tokenizer

    cfg = inputs.config
    lora_settings = cfg.algorithm.lora
    torch.manual_seed(cfg.trainer.seed)
    tokenizer = load_tokenizer(str(checkpoint) if checkpoint else cfg.model)
    template = template_report(tokenizer, cfg.rollout)
    require_usable_template(template, cfg.model)  # before the model loads
    console.print(f"chat template: {template.line()}")
    # a LoRA run resumes its adapter on the base; a full-weight run resumes the saved weights
    model = load_model(str(checkpoint) if checkpoint and lora_settings is None else cfg.model)
    reference = None
    if lora_settings is not None:
        # the adapter trains, the base stays; the KL reference is the base (adapter switched off)
        model = lora.load(model, checkpoint) if checkpoint else lora.attach(model, lora_settings)
        console.print(f"LoRA: {lora.trainable_line(model)}")
    elif cfg.algorithm.kl_coef > 0:
        reference = load_model(cfg.model)
        reference.eval().requires_grad_(False)
    model.eval()
    return tokenizer, model, reference


def build_parts(inputs: RunInputs, checkpoint: Path | None) -> Parts:
    cfg = inputs.config
    tokenizer, model, reference = load_trained_model(inputs, checkpoint)
    runner, policy = local_runner(
        inputs.spec, cfg.model, cfg.rollout, inputs.reward, model=model, tokenizer=tokenizer
    )
    learner = GRPOLearner(
        model,
        cfg.algorithm,
        cfg.rollout.temperature,
        policy.pad_id,
        reference,
        lock=policy.weights_update,  # each update is a new weight version
    )
    failures = FailureStreak(cfg.trainer.stop_after_failed_steps)
    return Parts(tokenizer, model, runner, policy, learner, failures, TrainedSoFar())
