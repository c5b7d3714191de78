"""A transformers model as PolicyClient: batched sampling across concurrent episodes.

Requests that arrive while a batch runs are queued and sampled together in the
next one. Our own decoding loop (rather than `generate`) so that the logprob we
record is exactly log_softmax(logits / temperature) of the sampled token, the
quantity the trainer recomputes: importance ratios then start at 1.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from aworld_train.rollout.policy import Generation, SamplingParams

if TYPE_CHECKING:
    from aworld_train.config import TrainConfig
    from aworld_train.rollout.episode import RolloutRuntime


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop = cumulative - sorted_logits.softmax(-1) > top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


class LocalPolicy:
    def __init__(self, model, tokenizer, stop_token_ids: list[int], max_batch_size: int = 64) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.stop_token_ids = list(stop_token_ids)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_token_ids[0]
        self.max_batch_size = max_batch_size
        self.lock = threading.Lock()  # the trainer holds it while it updates the weights
        self._queue: list[_Request] = []
        self._worker: asyncio.Task | None = None
        self.batches: list[int] = []  # sizes of the batches run, for metrics

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        loop = asyncio.get_running_loop()
        request = _Request(list(prompt_ids), sampling, loop.create_future())
        self._queue.append(request)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        return await request.future

    async def _drain(self) -> None:
        while self._queue:
            await asyncio.sleep(0.01)  # let episodes that are about to ask join this batch
            key = _sampling_key(self._queue[0].sampling)
            batch = [r for r in self._queue if _sampling_key(r.sampling) == key][: self.max_batch_size]
            for r in batch:
                self._queue.remove(r)
            try:
                gens = await asyncio.to_thread(
                    self.generate_batch,
                    [r.prompt_ids for r in batch],
                    batch[0].sampling,
                    [r.sampling.max_new_tokens for r in batch],
                    [r.sampling.seed for r in batch],
                )
            except Exception as exc:
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(exc)
                continue
            for r, gen in zip(batch, gens, strict=True):
                if not r.future.done():
                    r.future.set_result(gen)

    @torch.inference_mode()
    def generate_batch(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams,
        max_new: list[int] | None = None,
        seeds: list[int | None] | None = None,
    ) -> list[Generation]:
        """Sample every prompt; `seeds` gives each row its own seed (default: `sampling.seed` for all)."""
        n = len(prompts)
        with self.lock:
            return self._generate(
                prompts, sampling, max_new or [sampling.max_new_tokens] * n, seeds or [sampling.seed] * n
            )

    def _generators(self, seeds: list[int | None], device) -> list[torch.Generator]:
        """One generator per row: a seeded row draws the same tokens whatever batch it shares."""
        shared = torch.Generator(device=device)
        shared.seed()
        out = []
        for seed in seeds:
            if seed is None:
                out.append(shared)
            else:
                out.append(torch.Generator(device=device))
                out[-1].manual_seed(int(seed))
        return out

    def _generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams,
        max_new: list[int],
        seeds: list[int | None],
    ) -> list[Generation]:
        device = self.device
        was_training = self.model.training
        self.model.eval()
        n = len(prompts)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((n, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p)
            attention[i, width - len(p) :] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        generators = self._generators(seeds, device)
        stop = torch.tensor(self.stop_token_ids, device=device)
        limits = torch.tensor(max_new, device=device)
        finished = torch.zeros(n, dtype=torch.bool, device=device)
        tokens: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        stopped = [False] * n
        position = (attention.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=position, use_cache=True)
        past = out.past_key_values
        logits = out.logits[:, -1, :].float()
        next_position = position[:, -1:] + 1
        for step in range(int(limits.max())):
            temperature = sampling.temperature if sampling.temperature > 0 else 1.0
            logp = torch.log_softmax(logits / temperature, dim=-1)
            if sampling.temperature > 0:
                filtered = _filter_logits(logits / temperature, sampling.top_k, sampling.top_p)
                probs = filtered.softmax(-1)
                chosen = torch.cat(
                    [torch.multinomial(probs[i], 1, generator=generators[i]) for i in range(n)]
                )
            else:
                chosen = logits.argmax(-1)
            chosen = torch.where(finished, torch.full_like(chosen, self.pad_id), chosen)
            chosen_logp = logp.gather(-1, chosen[:, None]).squeeze(-1)
            for i in range(n):
                if not finished[i]:
                    tokens[i].append(int(chosen[i]))
                    logprobs[i].append(float(chosen_logp[i]))
            is_stop = torch.isin(chosen, stop) & ~finished
            for i in torch.nonzero(is_stop).flatten().tolist():
                stopped[i] = True
            finished = finished | is_stop | (limits <= step + 1)
            if bool(finished.all()):
                break
            attention = torch.cat([attention, (~finished).long()[:, None]], dim=-1)
            out = self.model(
                input_ids=chosen[:, None],
                attention_mask=attention,
                position_ids=next_position,
                past_key_values=past,
                use_cache=True,
            )
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            next_position = next_position + 1
        if was_training:
            self.model.train()
        self.batches.append(n)
        return [Generation(tokens[i], logprobs[i], "stop" if stopped[i] else "length") for i in range(n)]


def _sampling_key(s: SamplingParams) -> tuple:
    # the seed is per row (see _generators), so requests with different seeds share a batch
    return (s.temperature, s.top_p, s.top_k)


def local_runtime(config: TrainConfig, model=None, tokenizer=None) -> tuple[RolloutRuntime, object]:
    """The rollout runtime over a local transformers policy; returns (runtime, policy)."""
    from aworld_train.models import load_model, load_tokenizer, stop_token_ids
    from aworld_train.rollout.chat import ChatRenderer
    from aworld_train.rollout.episode import RolloutRuntime

    tokenizer = tokenizer or load_tokenizer(config.model)
    model = model or load_model(config.model)
    stops = stop_token_ids(tokenizer)
    policy = LocalPolicy(model, tokenizer, stops, max_batch_size=config.rollout.max_batch_size)
    return RolloutRuntime(
        policy,
        ChatRenderer(
            tokenizer,
            tool_block=config.rollout.tool_block,
            template_kwargs=config.rollout.chat_template_kwargs,
        ),
        stops,
        config.rollout,
    ), policy
