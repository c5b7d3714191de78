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
from dataclasses import dataclass, field

import torch

from aworld_train.engines.local.grpo import (
    aggregate,
    chunked_token_logprobs,
    kl_k3,
    policy_loss,
    token_logprobs,
)
from aworld_train.engines.local.master_weights import MasterWeights
from aworld_train.engines.local.samples import (
    Sample,
    collate,
    hand_back,
    importance_weights,
    micro_batches,
    stale_positions,
    staleness_stats,
)
from aworld_train.engines.local.shared_prefix import decoder_hidden
from aworld_train.engines.logprob_mismatch import mismatch_metrics, token_mismatch
from aworld_train.inputs.config import AlgorithmConfig
from aworld_train.rollout.policies.models import large_blocks_unmapped_on_free, release_freed_memory


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


@dataclass
class _Tally:
    """What a step's micro-batches add up to: its averaged losses, the mismatch of the tokens the
    current weights sampled, the importance weights of the stale tokens trained."""

    minis: int
    totals: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("loss", "pg_loss", "kl", "clip_frac", "grad_norm"), 0.0)
    )
    mismatch_sum: float = 0.0
    mismatch_max: float = 0.0
    mismatch_tokens: int = 0
    micro_count: int = 0
    weights: list[float] = field(default_factory=list)

    def add(self, weight: float, **values: float) -> None:
        for key, value in values.items():
            self.totals[key] += value * weight / self.minis
        self.micro_count += 1

    def measure(self, logprobs: torch.Tensor, recorded: torch.Tensor, fresh: torch.Tensor) -> None:
        diff = token_mismatch(logprobs, recorded, fresh)
        self.mismatch_sum += float(diff.sum())
        self.mismatch_max = max(self.mismatch_max, float(diff.max()))
        self.mismatch_tokens += int(fresh.sum())

    def mismatch(self) -> dict[str, float]:
        return mismatch_metrics(
            self.mismatch_sum / max(self.mismatch_tokens, 1), self.mismatch_max, self.mismatch_tokens
        )


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
            hidden = decoder_hidden(decoder, ids, batch["attention"])[:, :-1]
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
            batch = collate(micro, self.pad_id, self.device, version)
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
        """`samples` in `algorithm.mini_batches` optimizer steps, each over micro-batches of at most
        `micro_batch_tokens`; the first mini-batch also measures the rollout's logprob mismatch."""
        self.model.train()
        per_mini = math.ceil(len(samples) / self.algo.mini_batches)
        minis = [samples[i : i + per_mini] for i in range(0, len(samples), per_mini)]
        # Without a KL term a zero-advantage sample adds exactly nothing to the gradient: skip its
        # forward/backward (and its proximal logprobs), but keep it in the denominators below.
        actives = [mini if self.has_reference else [s for s in mini if s.has_signal] for mini in minis]
        tally = _Tally(len(minis))
        if version is not None:
            # later mini-batches train after the first's optimizer step, so their proximal policy
            # (these weights) takes a forward now; the first's is its own loss forward, detached
            tally.weights += self.set_proximal([s for active in actives[1:] for s in active], version)
        for index, (mini, active) in enumerate(zip(minis, actives, strict=True)):
            for micro in micro_batches(active, self.algo.micro_batch_tokens):
                self._train_micro(micro, mini, version if index == 0 else None, index == 0, tally)
            if active:
                tally.totals["grad_norm"] += self.weights.step(self.optimizer, self.algo.grad_clip) / len(
                    minis
                )
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        return {
            **tally.totals,
            "lr": self.scheduler.get_last_lr()[0],
            # 0 tokens: nothing was recomputed, no figure
            **tally.mismatch(),
            "train_tokens": float(sum(sum(s.mask) for s in samples)),
            "samples": float(len(samples)),
            "samples_with_signal": float(sum(s.has_signal for s in samples)),
            "micro_batches": float(tally.micro_count),
            **(
                staleness_stats(samples, version, tally.weights, self.algo.importance_cap)
                if version is not None
                else {}
            ),
        }

    def _train_micro(
        self, micro: list[Sample], mini: list[Sample], version: int | None, first: bool, tally: _Tally
    ) -> None:
        """One micro-batch's forward and backward, weighed so that the micro-batches of `mini` add
        up to its aggregate loss; in the first mini-batch (before any update) its mismatch too."""
        algo = self.algo
        batch = collate(micro, self.pad_id, self.device, version)
        logprobs = self._logprobs(self.model, batch)
        mask, stale = batch["mask"], batch["stale"]
        old = torch.where(stale > 0, logprobs.detach(), batch["old"])
        tally.weights += importance_weights(old, batch["behaviour"], stale)
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
            batch["share"],
        )
        loss, kl_value = pg, 0.0
        if self.has_reference:
            kl_per_token = kl_k3(logprobs, self._reference_logprobs(batch))
            kl = aggregate(kl_per_token, mask, algo.loss_agg_mode, batch["share"])
            loss = loss + algo.kl_coef * kl
            kl_value = float(kl.detach())
        if algo.loss_agg_mode == "token-mean":
            weight = float(mask.sum()) / max(sum(sum(s.mask) for s in mini), 1)
        else:  # each agent's episode once, however many segments (rows) it was cut into
            weight = sum(s.loss_share for s in micro) / max(sum(s.loss_share for s in mini), 1e-12)
        (loss * weight).backward()
        if first:  # the weights that sampled these tokens
            with torch.no_grad():
                # the tokens these weights sampled (older weights' are compared with their
                # recomputation, by design): the rollout's logprobs against ours
                tally.measure(logprobs, batch["old"], mask * (1 - stale))
                hand_back(micro, logprobs.detach(), mask)
        tally.add(
            weight,
            loss=float(loss.detach()),
            pg_loss=float(pg.detach()),
            kl=kl_value,
            clip_frac=stats["clip_frac"],
        )

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
