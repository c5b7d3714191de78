"""Prefix reuse in the local policy: the same tokens and logprobs as a full prefill, less prefill."""

import gc
import weakref

import pytest
import torch

from aworld_train.rollout.policies.client import SamplingParams
from aworld_train.rollout.policies.local import LocalPolicy
from aworld_train.rollout.policies.models import load_model
from aworld_train.rollout.policies.prefix_cache import PrefixCache, shared_prefixes


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype=torch.float32).eval()


def recomputed_logprobs(model, prompt, generated, temperature):
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / temperature, -1)
    return logp.gather(-1, torch.tensor(generated)[:, None]).squeeze(-1)


def conversations(tokenizer, policy, sampling, turns=3, groups=2, group_size=2):
    """Multi-turn episodes whose prompts share a system prompt, and a task within a group;
    every next prompt extends the last prompt and its response (the ledger's property)."""
    system = tokenizer.encode("<|im_start|>system\nYou call tools. " + "tool_a(x: int) adds one. " * 12)
    prompts = [
        system + tokenizer.encode(f"<|im_start|>user\nTask {g}: " + "work " * (3 * g + 1))
        for g in range(groups)
        for _ in range(group_size)
    ]
    history = []
    for turn in range(turns):
        gens = policy.generate_batch(prompts, sampling)
        history.append((prompts, gens))
        prompts = [
            p + g.token_ids + tokenizer.encode(f"<|im_start|>tool\nresult {turn}<|im_end|>")
            for p, g in zip(prompts, gens, strict=True)
        ]
    return history


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_reuse_samples_what_a_full_prefill_samples(model, tokenizer, stop_ids, temperature):
    sampling = SamplingParams(max_new_tokens=6, temperature=temperature, seed=7)
    reuse = LocalPolicy(model, tokenizer, stop_ids)
    plain = LocalPolicy(model, tokenizer, stop_ids, prefix_cache_mb=0)
    assert reuse.prefix_cache is not None and plain.prefix_cache is None
    with_reuse = conversations(tokenizer, reuse, sampling)
    without = conversations(tokenizer, plain, sampling)
    for (prompts, a), (_, b) in zip(with_reuse, without, strict=True):
        assert [g.token_ids for g in a] == [g.token_ids for g in b]
        for gen, ref in zip(a, b, strict=True):
            torch.testing.assert_close(
                torch.tensor(gen.logprobs), torch.tensor(ref.logprobs), atol=1e-4, rtol=0
            )
        # and what the trainer recomputes over the whole sequence in one forward
        for prompt, gen in zip(prompts[:1], a[:1], strict=True):
            expected = recomputed_logprobs(model, prompt, gen.token_ids, temperature or 1.0)
            torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=2e-4, rtol=1e-4)
    cache = reuse.prefix_cache
    prompt_tokens = sum(len(p) for prompts, _ in with_reuse for p in prompts)
    assert cache.hits + cache.misses >= prompt_tokens - 1
    # shared system prompt and group prompts prefilled once; later turns only their new tokens
    assert cache.misses < prompt_tokens / 3


def test_a_prompt_that_does_not_extend_falls_back(model, tokenizer, stop_ids):
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    policy = LocalPolicy(model, tokenizer, stop_ids)
    first = tokenizer.encode("The quick brown fox jumps over the lazy dog " * 4)
    policy.generate_batch([first], greedy)
    # diverges in the middle: the cached tail after the divergence must not be used
    edited = first[:10] + tokenizer.encode(" a cat sleeps") + first[10:]
    unrelated = tokenizer.encode("Completely different text " * 3)
    before = policy.prefix_cache.hits
    gens = policy.generate_batch([edited, unrelated, first], greedy)
    assert policy.prefix_cache.hits - before == 10 + (len(first) - 1)
    for prompt, gen in zip([edited, unrelated, first], gens, strict=True):
        ref = LocalPolicy(model, tokenizer, stop_ids, prefix_cache_mb=0).generate_batch([prompt], greedy)[0]
        assert gen.token_ids == ref.token_ids
        torch.testing.assert_close(torch.tensor(gen.logprobs), torch.tensor(ref.logprobs), atol=1e-4, rtol=0)


def test_changing_the_weights_under_the_lock_empties_the_cache(model, tokenizer, stop_ids):
    policy = LocalPolicy(model, tokenizer, stop_ids)
    prompt = tokenizer.encode("Once upon a time " * 5)
    policy.generate_batch([prompt], SamplingParams(max_new_tokens=3, temperature=0.0))
    assert policy.prefix_cache.tokens > 0
    with policy.lock:  # what a trainer does around an optimizer step or a weight load
        pass
    assert policy.prefix_cache.tokens == 0


def test_cache_tree_splits_shares_and_evicts():
    def kv(ids):  # one layer; the "key" of a token is its id, so slices are checkable
        t = torch.tensor(ids, dtype=torch.float32)[None, :, None]
        return lambda start: [(t[:, start:].clone(), -t[:, start:].clone())]

    cache = PrefixCache(max_tokens=12)
    cache.insert([1, 2, 3, 4, 5], kv([1, 2, 3, 4, 5]))
    cache.insert([1, 2, 3, 9], kv([1, 2, 3, 9]))  # splits [1..5] after 3; stores only [9]
    assert cache.tokens == 6
    n, got = cache.lookup([1, 2, 3, 9, 7], limit=4)
    assert (
        n == 4
        and got[0][0].flatten().tolist() == [1, 2, 3, 9]
        and got[0][1].flatten().tolist() == [-1, -2, -3, -9]
    )
    assert cache.lookup([1, 2, 3, 4, 5], limit=4)[0] == 4  # never the whole prompt
    assert cache.match_length([1, 2, 7], 3) == 2 and cache.lookup([8], 1) == (0, None)
    cache.insert([6] * 8, kv([6] * 8))  # over budget: the least recently used leaf goes
    assert cache.tokens <= 12 and cache.match_length([1, 2, 3, 4, 5], 5) == 3


def test_clearing_frees_the_keys_and_values_at_once():
    cache = PrefixCache(max_tokens=100)
    keys = torch.arange(5, dtype=torch.float32)[None, :, None]
    cache.insert([1, 2, 3, 4, 5], lambda start: [(keys[:, start:].clone(), keys[:, start:].clone())])
    cache.insert(
        [1, 2, 9], lambda start: [(keys[:, :1].clone(), keys[:, :1].clone())]
    )  # a split: parent and child
    stored = [weakref.ref(k) for node in cache._nodes() for k, _ in node.kv]
    assert len(stored) == 3
    gc.disable()  # freed by reference counting, not whenever the cycle collector next runs
    try:
        cache.clear()
        assert [ref() for ref in stored] == [None] * 3
    finally:
        gc.enable()
    assert cache.tokens == 0 and cache.match_length([1, 2, 3], 3) == 0


def test_shared_prefixes_within_a_batch():
    a, b, c = [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 7], [9, 9, 9]
    assert shared_prefixes([a, b, c, a], [0, 0, 0, 0], min_tokens=2) == [[1, 2, 3, 4], [1, 2, 3, 4, 5]]
    assert shared_prefixes([a, b], [4, 0], min_tokens=2) == []  # already cached for one of them
    assert shared_prefixes([a, b], [0, 0], min_tokens=5) == []
