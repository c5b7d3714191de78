"""The local policy samples ids with the logprobs the trainer will recompute, batched."""

import asyncio

import pytest
import torch

from aworld_train.rollout.policies.client import SamplingParams
from aworld_train.rollout.policies.local import LocalPolicy
from aworld_train.rollout.policies.models import load_model


@pytest.fixture(scope="module")
def policy(tiny_model_dir, tokenizer, stop_ids):
    model = load_model(str(tiny_model_dir), dtype=torch.float32)
    return LocalPolicy(model, tokenizer, stop_ids, max_batch_size=16)


def recomputed_logprobs(model, prompt, generated, temperature):
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / temperature, -1)
    return logp.gather(-1, torch.tensor(generated)[:, None]).squeeze(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_a_full_forward_of_the_sampled_sequence(policy, tokenizer, temperature):
    prompts = [
        tokenizer.encode("Hello there, how are you?"),
        tokenizer.encode("2+2="),
        tokenizer.encode("A longer prompt with several more words in it"),
    ]
    gens = policy.generate_batch(prompts, SamplingParams(max_new_tokens=12, temperature=temperature, seed=3))
    for prompt, gen in zip(prompts, gens, strict=True):
        assert len(gen.token_ids) == len(gen.logprobs) > 0
        expected = recomputed_logprobs(policy.model, prompt, gen.token_ids, temperature)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=2e-4, rtol=1e-4)


def test_stop_and_length_finish_reasons(policy, tokenizer, stop_ids):
    gens = policy.generate_batch([tokenizer.encode("hi")] * 4, SamplingParams(max_new_tokens=5, seed=1))
    for gen in gens:
        if gen.finish_reason == "stop":
            assert gen.token_ids[-1] in stop_ids and len(gen.token_ids) <= 5
        else:
            assert len(gen.token_ids) == 5 and not set(gen.token_ids) & set(stop_ids)


def test_greedy_is_deterministic_and_seeded_sampling_repeats(policy, tokenizer):
    prompt = [tokenizer.encode("Once upon a time")]
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    assert (
        policy.generate_batch(prompt, greedy)[0].token_ids
        == policy.generate_batch(prompt, greedy)[0].token_ids
    )
    seeded = SamplingParams(max_new_tokens=8, temperature=1.0, seed=11)
    assert (
        policy.generate_batch(prompt, seeded)[0].token_ids
        == policy.generate_batch(prompt, seeded)[0].token_ids
    )


def test_per_request_token_limits_in_one_batch(policy, tokenizer):
    prompts = [tokenizer.encode("a b c")] * 2
    gens = policy.generate_batch(
        prompts, SamplingParams(max_new_tokens=9, temperature=1.0, seed=2), max_new=[3, 9]
    )
    assert len(gens[0].token_ids) <= 3 and len(gens[1].token_ids) <= 9


def test_concurrent_requests_are_batched(policy, tokenizer):
    async def many():
        sampling = SamplingParams(max_new_tokens=4, temperature=1.0)
        return await asyncio.gather(
            *(policy.generate(tokenizer.encode(f"prompt {i}"), sampling) for i in range(12))
        )

    before = len(policy.batches)
    gens = asyncio.run(many())
    assert len(gens) == 12 and all(g.token_ids for g in gens)
    assert policy.batches[before:] == [12]


def test_a_seeded_row_draws_the_same_tokens_in_any_batch(policy, tokenizer):
    """Seeds are per request (as vLLM's): batch mates and their seeds do not change a row's draws."""
    a, b = (
        tokenizer.encode("Tell me a story"),
        tokenizer.encode("A much longer prompt about numbers and words"),
    )
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    alone = policy.generate_batch([b], sampling, seeds=[9])[0]
    shared = policy.generate_batch([a, b, b], sampling, seeds=[5, 9, 10])
    assert shared[1].token_ids == alone.token_ids and shared[1].logprobs == pytest.approx(
        alone.logprobs, abs=1e-4
    )


def largest_allocation_mb(run) -> float:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    return max((e.cpu_memory_usage for e in prof.events()), default=0) / 2**20


def test_a_frozen_models_prefill_never_copies_the_output_weight_per_row(tiny_model_dir, tokenizer, stop_ids):
    """A LoRA base (or any frozen model) in bfloat16, as runs load it, sampling 32 rows: without a
    contiguous input to the output layer, torch broadcast its [vocab, hidden] weight to every row
    (32 x 6 MB here)."""
    model = load_model(str(tiny_model_dir), dtype=torch.bfloat16).requires_grad_(False)
    weight_mb = model.get_output_embeddings().weight.numel() * 2 / 2**20
    policy = LocalPolicy(model, tokenizer, stop_ids, max_batch_size=32)
    prompts = [tokenizer.encode(f"Prompt number {i} asks for something") for i in range(32)]
    largest = largest_allocation_mb(
        lambda: policy.generate_batch(prompts, SamplingParams(max_new_tokens=2, temperature=1.0, seed=0))
    )
    assert largest < 4 * weight_mb, f"{largest:.0f} MB in one allocation against a {weight_mb:.1f} MB weight"
