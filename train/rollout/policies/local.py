"""A transformers model as PolicyClient: batched sampling across concurrent episodes.

Requests that arrive while a batch runs are queued and sampled together in the
next one. Our own decoding loop (rather than `generate`) so that the logprob we
record is exactly log_softmax(logits / temperature) of the sampled token, the
quantity the trainer recomputes: importance ratios then start at 1.

Prefix reuse: the keys/values of every prompt and its sampled tokens go into a
PrefixCache. An episode's next prompt extends its previous prompt and response
exactly (the ledger's invariant), and episodes share their system prompt and
tool list, so a new prompt is mostly found there and only its new tokens are
prefilled. Whoever changes the weights holds `lock`; releasing it empties the cache.

Adapters: a model holding several peft adapters (a policy per agent, `policies:`) samples each
request with the adapter it names: a batch is one adapter's requests, and each adapter keeps its
own prefix cache (the same ids have other keys and values under another adapter).

Versions: every sampled token is stamped with `version`, the count of weight changes
(read under the same lock the changes hold, so a batch never reports weights it did not
use). A learner that changes the weights in place holds `weights_update` (the lock,
and the next version on release); a trainer's weight load names its own version.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from aworld_train.rollout.policies.client import Generation, GrammarKey, SamplingParams
from aworld_train.rollout.policies.grammar import Grammars, RowGrammar, mean_log_mass
from aworld_train.rollout.policies.logit_filters import filter_logits
from aworld_train.rollout.policies.model_traits import (
    contiguous_output_layer_input,
    kv_bytes_per_token,
    supports_prefix_reuse,
)
from aworld_train.rollout.policies.models import load_named, release_freed_memory
from aworld_train.rollout.policies.prefix_cache import LayerKV, PrefixCache, shared_prefixes
from aworld_train.rollout.policies.weights_lock import WeightsLock

logger = logging.getLogger(__name__)


# a prefix shorter than this, shared within a batch, is not worth a forward pass of its own
SHARED_PREFIX_MIN_TOKENS = 32


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future
    adapter: str | None = None


class LocalPolicy:
    def __init__(
        self,
        model,
        tokenizer,
        stop_token_ids: list[int],
        max_batch_size: int = 64,
        prefix_cache_mb: float = 256,
    ) -> None:
        self.model = model
        contiguous_output_layer_input(model)
        self.tokenizer = tokenizer
        self.stop_token_ids = list(stop_token_ids)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_token_ids[0]
        self.max_batch_size = max_batch_size
        self.prefix_cache_mb = prefix_cache_mb
        budget = int(prefix_cache_mb * 2**20) // kv_bytes_per_token(model)
        self._cache_budget = budget if budget > 0 and supports_prefix_reuse(model) else 0
        # the prefix cache of the adapter sampling now (None: no reuse); one per adapter
        self._caches: dict[str | None, PrefixCache] = {}
        self.prefix_cache: PrefixCache | None = self._cache_of(None)
        self.version = 0  # stamped on every sampled token; read and changed under `lock`
        self.lock = WeightsLock(self.clear_prefix_cache)
        self.weights_update = WeightsLock(self.clear_prefix_cache, self.lock.mutex, self._next_version)
        self._queue: list[_Request] = []
        self._worker: asyncio.Task | None = None
        self.batches: list[int] = []  # sizes of the batches run, for metrics
        self._grammars: Grammars | None = None

    def sibling(self, model) -> LocalPolicy:
        """A policy of `model` sampling as this one does (a team's full model per policy)."""
        return LocalPolicy(
            model, self.tokenizer, self.stop_token_ids, self.max_batch_size, self.prefix_cache_mb
        )

    @property
    def grammars(self) -> Grammars:
        """The grammars a row may be sampled under (SamplingParams.grammar), made on first use."""
        if self._grammars is None:
            vocab = self.model.config.get_text_config(decoder=True).vocab_size
            self._grammars = Grammars(self.tokenizer, vocab, self.stop_token_ids)
        return self._grammars

    def check_grammar(self, key: GrammarKey) -> None:
        """GrammarError for a grammar this policy cannot sample under (ConstrainedSampling)."""
        self.grammars.check(key)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None
    ) -> Generation:
        """Sample a reply to `prompt_ids` (with the model's peft adapter `adapter`, where it has several)."""
        loop = asyncio.get_running_loop()
        request = _Request(list(prompt_ids), sampling, loop.create_future(), adapter)
        self._queue.append(request)
        # a batching task of a loop that has ended (an earlier batch's, a closed rollout thread's) serves no one
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._worker = loop.create_task(self._drain())
        return await request.future

    async def _drain(self) -> None:
        while self._queue:
            await asyncio.sleep(0.01)  # let episodes that are about to ask join this batch
            key = _batch_key(self._queue[0])
            batch = [r for r in self._queue if _batch_key(r) == key][: self.max_batch_size]
            for r in batch:
                self._queue.remove(r)
            try:
                gens = await asyncio.to_thread(
                    self.generate_batch,
                    [r.prompt_ids for r in batch],
                    batch[0].sampling,
                    [r.sampling.max_new_tokens for r in batch],
                    [r.sampling.seed for r in batch],
                    [r.sampling.grammar for r in batch],
                    batch[0].adapter,
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
        grammars: list[GrammarKey | None] | None = None,
        adapter: str | None = None,
    ) -> list[Generation]:
        """Sample every prompt; `seeds` gives each row its own seed (default: `sampling.seed` for all),
        `grammars` each row's grammar (default: `sampling.grammar` for all), `adapter` the peft
        adapter they are sampled with (None: the model as it is)."""
        n = len(prompts)
        keys = grammars or [sampling.grammar] * n
        rows = [None if key is None else self.grammars.row(key) for key in keys]
        with self.lock.mutex:
            try:
                self._use_adapter(adapter)
                return self._generate(
                    prompts,
                    sampling,
                    max_new or [sampling.max_new_tokens] * n,
                    seeds or [sampling.seed] * n,
                    rows=rows if any(rows) else None,
                )
            finally:
                release_freed_memory()  # the batch's grown key/value caches

    def _next_version(self) -> None:
        self.version += 1

    def load_weights(self, named: dict[str, torch.Tensor], version: int | None = None) -> int:
        """Load a trainer's weights by name (`load_named`, under `lock`: never between two tokens of a
        batch) as `version` (the trainer's; default: the next); the number loaded."""
        return self.change_model(lambda model: (model, load_named(model, named)), version)

    def change_model(self, change: Callable[[Any], tuple[Any, int]], version: int | None = None) -> int:
        """Run `change(model)` under `lock` (never between two tokens of a batch): it returns the model
        to sample from next (the same one changed in place, or one wrapping it, such as a LoRA
        adapter's) and the number of tensors it loaded. The weights are then `version` (the
        trainer's; default: the next); a change that raises leaves the version as it was."""
        with self.lock, torch.no_grad():
            self.model, loaded = change(self.model)
            self.version = self.version + 1 if version is None else int(version)
        return loaded

    def clear_prefix_cache(self) -> None:
        for cache in self._caches.values():
            cache.clear()

    def _cache_of(self, adapter: str | None) -> PrefixCache | None:
        if not self._cache_budget:
            return None
        return self._caches.setdefault(adapter, PrefixCache(self._cache_budget))

    def _use_adapter(self, adapter: str | None) -> None:
        """Sample with `adapter` (under the mutex: a learner switches adapters under it too)."""
        if adapter is not None and self.model.active_adapter != adapter:
            self.model.set_adapter(adapter)
        self.prefix_cache = self._cache_of(adapter)

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

    def _prefill_shared(self, prompts: list[list[int]], sampling: SamplingParams) -> None:
        """Prefixes a batch's prompts share beyond the cache, prefilled first (recursively: they may
        share a shorter prefix), so that every row finds them cached."""
        known = [self.prefix_cache.match_length(p, len(p) - 1) for p in prompts]
        shared = shared_prefixes(prompts, known, SHARED_PREFIX_MIN_TOKENS)
        if shared:
            self._generate(shared, sampling, [0] * len(shared), [None] * len(shared), prefill_only=True)

    def _batch_inputs(self, prompts: list[list[int]]):
        """The batch's first forward: input ids, positions and attention of the tokens not cached,
        left-padded, and the cached prefixes' keys/values (None where nothing is cached)."""
        # at least one prompt token is fed: its logits give the first sampled token
        hits = [self.prefix_cache.lookup(p, len(p) - 1) if self.prefix_cache else (0, None) for p in prompts]
        cached = [c for c, _ in hits]
        fresh = [len(p) - c for p, c in zip(prompts, cached, strict=True)]
        if self.prefix_cache is not None:
            self.prefix_cache.hits += sum(cached)
            self.prefix_cache.misses += sum(fresh)
        # columns: [pad | cached prefix] [pad | fresh prompt tokens]; positions are absolute
        n, width_c, width_f = len(prompts), max(cached), max(fresh)
        input_ids = torch.full((n, width_f), self.pad_id, dtype=torch.long)
        position = torch.zeros((n, width_f), dtype=torch.long)
        attention = torch.zeros((n, width_c + width_f), dtype=torch.long)
        for i, (p, c, f) in enumerate(zip(prompts, cached, fresh, strict=True)):
            input_ids[i, width_f - f :] = torch.tensor(p[c:])
            position[i, width_f - f :] = torch.arange(c, c + f)
            attention[i, width_c - c : width_c] = 1
            attention[i, width_c + width_f - f :] = 1
        device = self.device
        past = self._batch_cache(hits, width_c) if width_c else None
        return input_ids.to(device), position.to(device), attention.to(device), past

    def _generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams,
        max_new: list[int],
        seeds: list[int | None],
        prefill_only: bool = False,
        rows: list[RowGrammar | None] | None = None,
    ) -> list[Generation]:
        device = self.device
        was_training = self.model.training
        self.model.eval()
        n = len(prompts)
        if self.prefix_cache is not None and n > 1:
            self._prefill_shared(prompts, sampling)
        input_ids, position, attention, past = self._batch_inputs(prompts)
        generators = self._generators(seeds, device)
        stop = torch.tensor(self.stop_token_ids, device=device)
        limits = torch.tensor(max_new, device=device)
        finished = torch.zeros(n, dtype=torch.bool, device=device)
        tokens: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        stopped = [False] * n
        # logits_to_keep=1: only the last position's logits, not [n, prompt, vocab] floats
        logits, past = self._forward(input_ids, attention, position, past, logits_to_keep=1)
        next_position = position[:, -1:] + 1
        for step in range(int(limits.max())):
            chosen, chosen_logp = self._draw(logits, sampling, generators, rows)
            chosen = torch.where(finished, torch.full_like(chosen, self.pad_id), chosen)
            if rows is not None:
                self.grammars.advance(rows, chosen.tolist(), (~finished).tolist())
            for i in range(n):
                if not finished[i]:
                    tokens[i].append(int(chosen[i]))
                    logprobs[i].append(float(chosen_logp[i]))
            is_stop = torch.isin(chosen, stop) & ~finished
            stopped = [was or now for was, now in zip(stopped, is_stop.tolist(), strict=True)]
            finished = finished | is_stop | (limits <= step + 1)
            if bool(finished.all()):
                break
            attention = torch.cat([attention, (~finished).long()[:, None]], dim=-1)
            logits, past = self._forward(chosen[:, None], attention, next_position, past)
            next_position = next_position + 1
        if self.prefix_cache is not None:
            self._remember(prompts, tokens, attention, past)
        if was_training:
            self.model.train()
        if not prefill_only:
            self.batches.append(n)
        # the caller holds the lock, so no weight change happened since the batch began
        return [
            Generation(
                tokens[i],
                logprobs[i],
                "stop" if stopped[i] else "length",
                meta=_grammar_meta(rows[i]) if rows is not None else {},
                versions=[self.version] * len(tokens[i]),
            )
            for i in range(n)
        ]

    def _forward(self, input_ids, attention, position, past, **extra) -> tuple[torch.Tensor, Any]:
        """One forward through the cache: the last position's logits (float), and the grown cache."""
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=position,
            past_key_values=past,
            use_cache=True,
            **extra,
        )
        return out.logits[:, -1, :].float(), out.past_key_values

    def _draw(
        self,
        logits: torch.Tensor,
        sampling: SamplingParams,
        generators: list[torch.Generator],
        rows: list[RowGrammar | None] | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A token per row, drawn under the run's sampling (and the row's grammar, if any), and the
        policy's own logprob of it: log_softmax(logits / temperature), what the trainer recomputes."""
        temperature = sampling.temperature if sampling.temperature > 0 else 1.0
        scaled = logits / temperature
        logp = torch.log_softmax(scaled, dim=-1)
        if rows is not None:
            scaled = self.grammars.mask(scaled, rows)
        if sampling.temperature > 0:
            probs = filter_logits(scaled, sampling.top_k, sampling.top_p).softmax(-1)
            chosen = torch.cat(
                [torch.multinomial(probs[i], 1, generator=generators[i]) for i in range(len(probs))]
            )
        else:
            chosen = scaled.argmax(-1)
        return chosen, logp.gather(-1, chosen[:, None]).squeeze(-1)

    def _batch_cache(self, hits: list[tuple[int, LayerKV | None]], width: int) -> DynamicCache:
        """One DynamicCache for the batch: each row's cached prefix right-aligned in `width` columns."""
        n = len(hits)
        first = next(kv for _, kv in hits if kv is not None)
        layers = []
        for layer, (k0, v0) in enumerate(first):
            keys = k0.new_zeros((n, k0.shape[0], width, k0.shape[-1]))
            values = v0.new_zeros((n, v0.shape[0], width, v0.shape[-1]))
            for i, (c, kv) in enumerate(hits):
                if kv is not None:
                    keys[i, :, width - c :] = kv[layer][0]
                    values[i, :, width - c :] = kv[layer][1]
            layers.append((keys, values))
        return DynamicCache(ddp_cache_data=layers, config=self.model.config)

    def _remember(self, prompts, tokens, attention, past: DynamicCache) -> None:
        """Cache each row's prompt plus the sampled tokens that were fed back (all but the last)."""
        assert self.prefix_cache is not None
        for i, (p, t) in enumerate(zip(prompts, tokens, strict=True)):
            ids = p + t[:-1]
            columns = torch.nonzero(attention[i]).flatten()
            if len(columns) != len(ids):  # not the layout this code wrote: cache nothing
                continue

            def kv_from(start: int, i=i, columns=columns) -> LayerKV:
                cols = columns[start:]
                return [(layer.keys[i][:, cols], layer.values[i][:, cols]) for layer in past.layers]

            self.prefix_cache.insert(ids, kv_from)


def _grammar_meta(row: RowGrammar | None) -> dict[str, Any]:
    """What a constrained row's generation keeps of its grammar (`rollout/policies/grammar.py`)."""
    if row is None or not row.allowed_mass:
        return {}
    return {"constrained_tokens": len(row.allowed_mass), "mean_log_allowed_mass": mean_log_mass(row)}


def _batch_key(request: _Request) -> tuple:
    """Requests that may share a batch: one adapter, one sampling setting (the seed is per row, see
    _generators, so requests with different seeds share a batch)."""
    s = request.sampling
    return (request.adapter, s.temperature, s.top_p, s.top_k)
