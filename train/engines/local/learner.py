"""The local GRPO update: trajectories in, one or more AdamW steps out.

Samples are the ledger segments of trainable trajectories (failed episodes carry
no loss). Old logprobs are the rollout's own, recorded by the policy when it
sampled; their mismatch with the trainer's recomputation is reported.

Tokens sampled by older weights (asynchronous training) take the decoupled PPO
objective: the clipped ratio against the current weights before the update (the
proximal policy, recomputed here), times the truncated importance weight of the
proximal over the recorded behaviour logprobs (grpo.policy_loss).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Sized
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from aworld_train.engines.local.grpo import (
    aggregate,
    chunked_token_logprobs,
    kl_k3,
    policy_loss,
    token_logprobs,
)
from aworld_train.engines.local.master_weights import MasterWeights
from aworld_train.engines.logprob_mismatch import mismatch_metrics, token_mismatch
from aworld_train.inputs.config import AlgorithmConfig
from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.policies.models import large_blocks_unmapped_on_free, release_freed_memory
from aworld_train.rollout.samples.codec import agent_units, episode_samples, group_advantages
from aworld_train.rollout.tokens.ledger import NO_VERSION


@dataclass
class Sample:
    ids: list[int]
    prompt_len: int
    mask: list[int]  # over response positions
    old_logprobs: list[float]  # over response positions
    advantage: float
    origin: tuple[int, int] | None = None  # (trajectory, segment) it was built from
    # the learner's logprobs of the mask-1 tokens, under the weights that sampled them; None
    # where it computed none (a zero-advantage sample without KL, a later mini-batch)
    trainer_logprobs: list[float] | None = None
    # per response position: the weight version that sampled the token (ledger.NO_VERSION: none)
    versions: list[int] = field(default_factory=list)
    # the current weights' logprobs where older weights sampled, the recorded ones elsewhere;
    # None where every token is the current weights' own
    proximal_logprobs: list[float] | None = None

    def __len__(self) -> int:
        return len(self.ids)


def build_samples(
    trajectories: list[Trajectory],
    group_of: list,
    norm_by_std: bool = True,
    train_on_malformed: bool = False,
    frozen_agents: Collection[str] = (),
) -> tuple[list[Sample], list[float]]:
    """Samples for the loss and the advantage of every trajectory (0 for those left out; a team's
    episode: its first trained agent's).

    The codec's rules: a failed episode has no sample and no place in its group's baseline;
    every segment of an agent in an episode is a sample with that agent's advantage, computed
    against the same agent in the other samples of the task; frozen agents give none."""
    episodes = [episode_samples(t, train_on_malformed, frozen_agents) for t in trajectories]
    units = agent_units(episodes, group_of)
    unit_advantages = group_advantages([u.reward for u in units], [u.group for u in units], norm_by_std)
    advantages: list[float | None] = [None] * len(trajectories)
    samples = []
    for unit, advantage in zip(units, unit_advantages, strict=True):
        if advantages[unit.episode] is None:
            advantages[unit.episode] = advantage
        for seg in unit.segments:
            samples.append(
                Sample(
                    seg.prompt_ids + seg.response_ids,
                    len(seg.prompt_ids),
                    seg.response_mask,
                    seg.response_logprobs,
                    advantage,
                    origin=(unit.episode, seg.index),
                    versions=list(seg.response_versions),
                )
            )
    return samples, [0.0 if a is None else a for a in advantages]


# anything with a length in tokens packs: GRPO samples and SFT samples alike
Packable = TypeVar("Packable", bound=Sized)


def micro_batches(samples: list[Packable], token_budget: int) -> list[list[Packable]]:
    """Greedy packing by padded size (rows x longest row) within the budget; one oversize sample stands alone."""
    batches: list[list[Packable]] = []
    current: list[Packable] = []
    for sample in sorted(samples, key=len):  # ascending: the newest sample is the widest
        if current and len(sample) * (len(current) + 1) > token_budget:
            batches.append(current)
            current = []
        current.append(sample)
    if current:
        batches.append(current)
    return batches


def adamw_with_warmup(
    model, lr: float, weight_decay: float, warmup_steps: int
) -> tuple[MasterWeights, torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """The local optimizer (GRPO and SFT alike): AdamW over the model's master weights, its
    learning rate rising linearly over `warmup_steps`, then constant."""
    weights = MasterWeights(model)
    optimizer = torch.optim.AdamW(weights.params, lr=lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0
    )
    return weights, optimizer, scheduler


def _collate(batch: list[Sample], pad_id: int, device, version: int | None = None) -> dict[str, torch.Tensor]:
    """The padded tensors of a micro-batch; `stale`: its loss tokens weights older than `version`
    sampled (none without a version)."""
    width = max(len(s) for s in batch)
    n = len(batch)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    # targets are ids[:, 1:]; loss positions are response tokens
    mask = torch.zeros((n, width - 1))
    old = torch.zeros((n, width - 1))
    behaviour = torch.zeros((n, width - 1))
    stale = torch.zeros((n, width - 1))
    adv = torch.zeros((n, 1))
    for i, s in enumerate(batch):
        ids[i, : len(s)] = torch.tensor(s.ids)
        attention[i, : len(s)] = 1
        start = s.prompt_len - 1
        mask[i, start : start + len(s.mask)] = torch.tensor(s.mask, dtype=torch.float)
        proximal = s.old_logprobs if s.proximal_logprobs is None else s.proximal_logprobs
        old[i, start : start + len(proximal)] = torch.tensor(proximal, dtype=torch.float)
        behaviour[i, start : start + len(s.old_logprobs)] = torch.tensor(s.old_logprobs, dtype=torch.float)
        if version is not None:
            stale[i, start : start + len(s.mask)] = torch.tensor(
                stale_positions(s, version), dtype=torch.float
            )
        adv[i, 0] = s.advantage
    tensors = {
        "ids": ids,
        "attention": attention,
        "mask": mask,
        "old": old,
        "adv": adv,
        "behaviour": behaviour,
        "stale": stale,
    }
    return {k: v.to(device) for k, v in tensors.items()}


def stale_positions(sample: Sample, version: int) -> list[bool]:
    """Per response position: a loss token that weights older than `version` sampled."""
    return [
        bool(m) and v != NO_VERSION and v < version
        for m, v in zip(sample.mask, sample.versions or [NO_VERSION] * len(sample.mask), strict=True)
    ]


def importance_weights(proximal: torch.Tensor, behaviour: torch.Tensor, stale: torch.Tensor) -> list[float]:
    """pi_prox / pi_behaviour at the stale positions, untruncated (for the step's metrics)."""
    return torch.exp((proximal - behaviour)[stale > 0].clamp(max=20.0)).tolist()


def staleness_stats(
    samples: list[Sample], version: int, weights: list[float], cap: float
) -> dict[str, float]:
    """The step's stale tokens (loss tokens of older weights, trained or not) and the importance
    weights of those it trained, as metrics."""
    return {
        "stale_tokens": float(sum(sum(stale_positions(s, version)) for s in samples)),
        "importance_weight_mean": sum(min(w, cap) for w in weights) / len(weights) if weights else 1.0,
        "importance_truncated_frac": sum(w > cap for w in weights) / len(weights) if weights else 0.0,
    }


def _hand_back(micro: list[Sample], logprobs: torch.Tensor, mask: torch.Tensor) -> None:
    """Each sample's logprobs at its loss positions, kept on the sample for the run's token files."""
    for row, sample in enumerate(micro):
        sample.trainer_logprobs = logprobs[row][mask[row] > 0].float().tolist()


class GRPOLearner:
    def __init__(
        self, model, algo: AlgorithmConfig, temperature: float, pad_id: int, ref_model=None, lock=None
    ) -> None:
        self.model = model
        self.algo = algo
        self.temperature = temperature
        self.pad_id = pad_id
        self.ref_model = ref_model if algo.kl_coef > 0 else None
        # a LoRA model's reference is its base: the same model with the adapter switched off
        self.kl_against_base = algo.kl_coef > 0 and ref_model is None and hasattr(model, "disable_adapter")
        self.lock = lock or contextlib.nullcontext()
        if algo.gradient_checkpointing:
            model.gradient_checkpointing_enable()
            model.config.use_cache = False
        self.weights, self.optimizer, self.scheduler = adamw_with_warmup(
            model, algo.lr, algo.weight_decay, algo.warmup_steps
        )

    @property
    def device(self):
        return next(self.model.parameters()).device

    def _logprobs(self, model, batch) -> torch.Tensor:
        """Logprobs of the response tokens ([B, T-1], 0 elsewhere).

        The vocabulary projection runs only at loss positions (on a prompt-heavy agent
        batch that is most of the LM head's compute and memory saved), a chunk of
        positions at a time, so [tokens, vocab] logits never exist whole.
        """
        ids, mask = batch["ids"], batch["mask"] > 0
        targets = ids[:, 1:][mask]
        decoder, head = model.get_decoder(), model.get_output_embeddings()
        out = torch.zeros(mask.shape, dtype=torch.float32, device=ids.device)
        if decoder is None or head is None or getattr(model.config, "final_logit_softcapping", None):
            logits = model(input_ids=ids, attention_mask=batch["attention"]).logits[:, :-1][mask]
            out[mask] = token_logprobs(logits, targets, self.temperature)
        else:
            hidden = decoder(input_ids=ids, attention_mask=batch["attention"]).last_hidden_state[:, :-1]
            out[mask] = chunked_token_logprobs(hidden[mask], head, targets, self.temperature)
        return out

    @property
    def has_reference(self) -> bool:
        return self.ref_model is not None or self.kl_against_base

    @torch.no_grad()
    def _reference_logprobs(self, batch) -> torch.Tensor:
        if self.ref_model is not None:
            return self._logprobs(self.ref_model, batch)
        with self.model.disable_adapter():
            return self._logprobs(self.model, batch)

    def step(self, samples: list[Sample], version: int | None = None) -> dict[str, float]:
        """One GRPO update over `samples` (split into `mini_batches` optimizer steps). `version`:
        the weights' version now; tokens of older versions take the decoupled loss."""
        if not samples:
            return {"skipped": 1.0}
        with self.lock:
            release_freed_memory()  # the rollout's caches, before optimizer state and gradients grow
            try:
                with large_blocks_unmapped_on_free():
                    return self._step(samples, version)
            finally:
                release_freed_memory()

    @torch.no_grad()
    def set_proximal(self, samples: list[Sample], version: int) -> list[float]:
        """Give each sample holding tokens of weights older than `version` its proximal logprobs
        (the current weights', before the update, at those tokens; the recorded ones elsewhere,
        the current weights' own samples); the importance weights its stale tokens get."""
        weights: list[float] = []
        stale = [s for s in samples if any(stale_positions(s, version))]
        for micro in micro_batches(stale, self.algo.micro_batch_tokens):
            batch = _collate(micro, self.pad_id, self.device, version)
            proximal = self._logprobs(self.model, batch)
            weights += importance_weights(proximal, batch["behaviour"], batch["stale"])
            for row, sample in enumerate(micro):
                start = sample.prompt_len - 1
                now = proximal[row, start : start + len(sample.mask)].tolist()
                old = stale_positions(sample, version)
                sample.proximal_logprobs = [
                    n if o else b for n, b, o in zip(now, sample.old_logprobs, old, strict=True)
                ]
        return weights

    def _step(self, samples: list[Sample], version: int | None) -> dict[str, float]:
        algo = self.algo
        self.model.train()
        per_mini = math.ceil(len(samples) / algo.mini_batches)
        minis = [samples[i : i + per_mini] for i in range(0, len(samples), per_mini)]
        # Without a KL term a zero-advantage sample adds exactly nothing to the gradient: skip its
        # forward/backward (and its proximal logprobs), but keep it in the denominators below.
        actives = [mini if self.has_reference else [s for s in mini if s.advantage != 0.0] for mini in minis]
        weights: list[float] = []  # the importance weights of the stale tokens trained
        if version is not None:
            # later mini-batches train after the first's optimizer step, so their proximal policy
            # (these weights) takes a forward now; the first's is its own loss forward, detached
            weights += self.set_proximal([s for active in actives[1:] for s in active], version)
        totals = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "grad_norm": 0.0}
        mismatch_sum = mismatch_max = 0.0
        mismatch_tokens = 0
        micro_count = 0
        for mini_index, (mini, active) in enumerate(zip(minis, actives, strict=True)):
            n_tokens = sum(sum(s.mask) for s in mini)
            n_seqs = len(mini)
            for micro in micro_batches(active, algo.micro_batch_tokens):
                batch = _collate(micro, self.pad_id, self.device, version if mini_index == 0 else None)
                logprobs = self._logprobs(self.model, batch)
                mask, stale = batch["mask"], batch["stale"]
                old = torch.where(stale > 0, logprobs.detach(), batch["old"])
                weights += importance_weights(old, batch["behaviour"], stale)
                decoupled = bool(stale.any()) or any(s.proximal_logprobs is not None for s in micro)
                pg, stats = policy_loss(
                    logprobs,
                    old,
                    batch["adv"],
                    mask,
                    algo.clip_low,
                    algo.clip_high,
                    algo.loss_agg_mode,
                    batch["behaviour"] if decoupled else None,
                    algo.importance_cap,
                )
                loss = pg
                kl_value = 0.0
                if self.has_reference:
                    ref = self._reference_logprobs(batch)
                    kl = aggregate(kl_k3(logprobs, ref), mask, algo.loss_agg_mode)
                    loss = loss + algo.kl_coef * kl
                    kl_value = float(kl.detach())
                # weight so the sum over micro-batches equals the mini-batch aggregate
                weight = (
                    float(mask.sum()) / max(n_tokens, 1)
                    if algo.loss_agg_mode == "token-mean"
                    else len(micro) / n_seqs
                )
                (loss * weight).backward()
                if mini_index == 0:  # before any update: the weights that sampled these tokens
                    with torch.no_grad():
                        # the tokens these weights sampled (older weights' are compared with
                        # their recomputation, by design): the rollout's logprobs against ours
                        fresh = mask * (1 - stale)
                        diff = token_mismatch(logprobs, batch["old"], fresh)
                        mismatch_sum += float(diff.sum())
                        mismatch_max = max(mismatch_max, float(diff.max()))
                        mismatch_tokens += int(fresh.sum())
                        _hand_back(micro, logprobs.detach(), mask)
                totals["loss"] += float(loss.detach()) * weight / len(minis)
                totals["pg_loss"] += float(pg.detach()) * weight / len(minis)
                totals["kl"] += kl_value * weight / len(minis)
                totals["clip_frac"] += stats["clip_frac"] * weight / len(minis)
                micro_count += 1
            if not active:
                continue
            grad_norm = self.weights.step(self.optimizer, algo.grad_clip)
            totals["grad_norm"] += grad_norm / len(minis)
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        return {
            **totals,
            "lr": self.scheduler.get_last_lr()[0],
            # 0 tokens: nothing was recomputed, no figure
            **mismatch_metrics(mismatch_sum / max(mismatch_tokens, 1), mismatch_max, mismatch_tokens),
            "train_tokens": float(sum(sum(s.mask) for s in samples)),
            "samples": float(len(samples)),
            "samples_with_signal": float(sum(s.advantage != 0.0 for s in samples)),
            "micro_batches": float(micro_count),
            **(
                staleness_stats(samples, version, weights, algo.importance_cap) if version is not None else {}
            ),
        }

    def drop_optimizer_state(self) -> None:
        """After the last step and its checkpoint: AdamW's two moments (twice the weights'
        memory) serve no evaluation that follows."""
        self.optimizer.state.clear()
        self.weights.drop()
        release_freed_memory()

    def state_dict(self) -> dict:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "master_weights": self.weights.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.weights.load_state_dict(state.get("master_weights", []))
