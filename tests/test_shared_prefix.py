"""The learner computes a micro-batch's common prefix once: the same logprobs and the same update
as the plain forward over every row."""

import asyncio

import pytest
import torch

from aworld_train.engines.local import shared_prefix
from aworld_train.engines.local.learner import GRPOLearner
from aworld_train.engines.local.samples import build_samples
from aworld_train.engines.local.shared_prefix import decoder_hidden, shared_prefix_len
from aworld_train.inputs.config import AlgorithmConfig
from aworld_train.rollout.episodes.single_turn import sample_groups
from aworld_train.rollout.policies.client import SamplingParams
from aworld_train.rollout.policies.local import LocalPolicy
from aworld_train.rollout.policies.models import load_model


def test_the_shared_prefix_is_what_every_row_holds_within_its_own_tokens():
    ids = torch.tensor([[1, 2, 3, 4, 0], [1, 2, 3, 9, 9], [1, 2, 3, 4, 5]])
    attention = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert shared_prefix_len(ids, attention) == 3
    assert shared_prefix_len(ids[[0, 2]], attention[[0, 2]]) == 4  # row 0's padding is not its own
    assert shared_prefix_len(ids[:1], attention[:1]) == 0  # one row: nothing to share


def test_hidden_states_and_gradients_equal_the_plain_forward(tiny_model_dir):
    torch.manual_seed(0)
    model = load_model(str(tiny_model_dir), dtype=torch.float32).train()
    decoder = model.get_decoder()
    ids = torch.randint(10, 1000, (3, 70))
    ids[:, :50] = ids[0, :50]
    attention = torch.ones_like(ids)
    attention[1, 60:] = 0
    grads, hidden = [], []
    for shared in (True, False):
        model.zero_grad()
        out = (
            decoder_hidden(decoder, ids, attention)
            if shared
            else decoder(input_ids=ids, attention_mask=attention).last_hidden_state
        )
        (out * attention[..., None]).pow(2).mean().backward()
        hidden.append(out.detach())
        grads.append([p.grad.clone() for p in decoder.parameters()])
    assert torch.allclose(hidden[0], hidden[1], atol=1e-5)
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def _learned_weights(model_dir, tokenizer, stop_ids, monkeypatch, share: bool) -> list[torch.Tensor]:
    seen: list[int] = []  # the common prefix of each micro-batch the learner forwarded
    monkeypatch.setattr(
        shared_prefix,
        "shared_prefix_len",
        lambda ids, att: seen.append(shared_prefix_len(ids, att)) or seen[-1],
    )
    if not share:
        monkeypatch.setattr(shared_prefix, "MIN_SHARED_TOKENS", 10**9)
    torch.manual_seed(0)
    model = load_model(str(model_dir), dtype=torch.float32)
    policy = LocalPolicy(model, tokenizer, stop_ids)
    algo = AlgorithmConfig(group_size=4, lr=1e-3, micro_batch_tokens=4096)
    learner = GRPOLearner(model, algo, temperature=1.0, pad_id=policy.pad_id, lock=policy.lock)
    system = "You answer with one word. " * 8  # a long prompt every sample shares
    prompts = [tokenizer.encode(system + f"Pick a word number {i}:") for i in range(4)]
    trajs = asyncio.run(
        sample_groups(
            policy,
            prompts,
            4,
            SamplingParams(max_new_tokens=4, temperature=1.0, seed=3),
            lambda p, g: float(sum(g.token_ids) % 3),
        )
    )
    samples, _ = build_samples(trajs, [t.task_id for t in trajs])
    assert any(s.has_signal for s in samples)
    metrics = learner.step(samples)
    assert metrics["logprob_mismatch_mean"] < 1e-4  # the sampler's logprobs, recomputed either way
    if share:  # every micro-batch shared the system prompt's tokens
        assert seen and min(seen) >= 32
    return [p.detach().clone() for p in model.parameters()]


def test_a_grpo_step_updates_the_weights_as_the_plain_forward_does(
    tiny_model_dir, tokenizer, stop_ids, monkeypatch
):
    shared = _learned_weights(tiny_model_dir, tokenizer, stop_ids, monkeypatch, share=True)
    plain = _learned_weights(tiny_model_dir, tokenizer, stop_ids, monkeypatch, share=False)
    start = [p.detach() for p in load_model(str(tiny_model_dir), dtype=torch.float32).parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(shared, start, strict=True))  # it trained
    for a, b in zip(shared, plain, strict=True):
        assert torch.allclose(a, b, atol=1e-6), float((a - b).abs().max())


@pytest.mark.parametrize("checkpointing", [True])
def test_gradient_checkpointing_takes_the_plain_forward(tiny_model_dir, checkpointing):
    model = load_model(str(tiny_model_dir), dtype=torch.float32).train()
    model.gradient_checkpointing_enable()
    ids = torch.randint(10, 1000, (2, 60))
    ids[:, :40] = ids[0, :40]
    out = decoder_hidden(model.get_decoder(), ids, torch.ones_like(ids))
    assert out.shape == (2, 60, model.config.hidden_size)
