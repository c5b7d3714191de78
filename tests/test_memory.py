"""The memory-lean loss computes what the plain one computes: same logprobs, loss and gradients."""

import os

import pytest
import torch

from aworld_train.engines.local.grpo import chunked_token_logprobs, policy_loss, token_logprobs
from aworld_train.engines.local.learner import GRPOLearner
from aworld_train.engines.local.samples import Sample, collate
from aworld_train.inputs.config import AlgorithmConfig
from aworld_train.rollout.policies.models import load_model


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype=torch.float32)


def samples(seed: int = 0) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, (prompt, response) in enumerate([(9, 5), (14, 3), (6, 8), (11, 6)]):
        ids = torch.randint(100, 5000, (prompt + response,), generator=g).tolist()
        mask = [1] * response
        mask[1] = 0 if i % 2 else 1  # a tool-result token inside the response
        old = (-torch.rand(response, generator=g) * 3).tolist()
        out.append(Sample(ids, prompt, mask, old, advantage=[1.0, -0.5, 0.25, -1.0][i]))
    return out


def plain_logprobs(model, batch, temperature):
    """The straightforward way: the model's logits over the whole vocabulary at every position."""
    logits = model(input_ids=batch["ids"], attention_mask=batch["attention"]).logits[:, :-1]
    logp = torch.log_softmax(logits.float() / temperature, -1)
    picked = logp.gather(-1, batch["ids"][:, 1:, None]).squeeze(-1)
    return picked * (batch["mask"] > 0)


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_chunked_logprobs_and_gradients_equal_the_whole_vocabulary_computation(model):
    head = model.get_output_embeddings()
    hidden = torch.randn(37, model.config.hidden_size, requires_grad=True)
    targets = torch.randint(0, model.config.vocab_size, (37,))
    weights = torch.randn(37)

    model.zero_grad(set_to_none=True)
    whole = token_logprobs(head(hidden), targets, 0.7)
    (whole * weights).sum().backward()
    expected_hidden, expected_head = hidden.grad.clone(), head.weight.grad.clone()

    hidden.grad = None
    model.zero_grad(set_to_none=True)
    chunked = chunked_token_logprobs(hidden, head, targets, 0.7, chunk=8)  # 5 chunks, the last short
    (chunked * weights).sum().backward()
    torch.testing.assert_close(chunked, whole)
    # the hidden states' gradient is a sum over vocabulary chunks, added in another order: float32
    # rounding (1.2e-5 seen on one of 2368 elements), far below any real difference
    torch.testing.assert_close(hidden.grad, expected_hidden, atol=5e-5, rtol=1e-4)
    torch.testing.assert_close(head.weight.grad, expected_head)
    with torch.no_grad():  # evaluation: no autograd, same values
        torch.testing.assert_close(chunked_token_logprobs(hidden, head, targets, 0.7, chunk=8), whole)


def test_learner_loss_and_gradients_equal_the_plain_computation(model, tokenizer):
    temperature = 0.7
    learner = GRPOLearner(model, AlgorithmConfig(lr=1e-3), temperature, tokenizer.pad_token_id)
    batch = collate(samples(), tokenizer.pad_token_id, "cpu")

    model.zero_grad(set_to_none=True)
    lean = learner._logprobs(model, batch)
    plain = plain_logprobs(model, batch, temperature)
    torch.testing.assert_close(lean, plain, atol=1e-5, rtol=1e-5)

    loss_lean, _ = policy_loss(lean, batch["old"], batch["adv"], batch["mask"])
    loss_lean.backward()
    lean_grads = grads(model)
    model.zero_grad(set_to_none=True)
    loss_plain, _ = policy_loss(plain, batch["old"], batch["adv"], batch["mask"])
    loss_plain.backward()
    plain_grads = grads(model)
    model.zero_grad(set_to_none=True)
    torch.testing.assert_close(loss_lean, loss_plain)
    assert lean_grads.keys() == plain_grads.keys() and lean_grads
    for name in lean_grads:
        torch.testing.assert_close(lean_grads[name], plain_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_a_cpu_model_bounds_onednns_kernel_cache_unless_the_user_did(tiny_model_dir, monkeypatch):
    from aworld_train.rollout.policies.models import ONEDNN_CACHE_VARIABLE

    monkeypatch.delenv(ONEDNN_CACHE_VARIABLE, raising=False)
    load_model(str(tiny_model_dir), dtype=torch.float32, device="cpu")
    assert int(os.environ[ONEDNN_CACHE_VARIABLE]) <= 64  # the default of 1024 kernels grew the demo's memory

    monkeypatch.setenv(ONEDNN_CACHE_VARIABLE, "512")
    load_model(str(tiny_model_dir), dtype=torch.float32, device="cpu")
    assert os.environ[ONEDNN_CACHE_VARIABLE] == "512"
