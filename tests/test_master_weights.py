"""A bf16 model's small AdamW steps accumulate in float32 master weights instead of rounding away."""

import torch

from aworld_train.config import AlgorithmConfig
from aworld_train.engines.local.learner import GRPOLearner, Sample
from aworld_train.models import load_model


def _samples(tokenizer) -> list[Sample]:
    out = []
    for i in range(4):
        prompt = tokenizer.encode(f"Question {i}: what is next?")
        response = tokenizer.encode(" an answer")
        ids = prompt + response
        # advantage > 0 with old logprobs above the model's: the ratio stays below the clip, grads flow
        out.append(Sample(ids, len(prompt), [1] * len(response), [-1.0] * len(response), 1.0))
    return out


def _learner(model, lr: float) -> GRPOLearner:
    return GRPOLearner(model, AlgorithmConfig(lr=lr, micro_batch_tokens=4096), temperature=1.0, pad_id=0)


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().float().flatten() for t in tensors])


def _layers(model, tensors) -> list:
    """Of `tensors` (one per model parameter), those of the transformer layers: every one of their
    weights gets a gradient (an embedding row gets one only for the tokens the samples hold)."""
    names = [name for name, _ in model.named_parameters()]
    return [t for name, t in zip(names, tensors, strict=True) if ".layers." in name]


def test_bf16_model_steps_accumulate_in_float32_and_reach_the_model(tiny_model_dir, tokenizer):
    model = load_model(str(tiny_model_dir), dtype=torch.bfloat16)
    start = _flat(_layers(model, model.parameters()))
    # lr far below the spacing of bf16 weights of this model's size (about 1e-3 at 0.3)
    learner = _learner(model, lr=1e-4)
    assert learner.weights.copied and all(p.dtype == torch.float32 for p in learner.weights.params)
    samples = _samples(tokenizer)
    for _ in range(3):
        learner.step(samples)
    master = _flat(_layers(model, learner.weights.params))
    moved = (master != start).float().mean().item()
    assert moved > 0.9, f"only {moved:.1%} of the master weights moved"
    # the model computes with the master weights, rounded to its own precision
    for low, high in zip(model.parameters(), learner.weights.params, strict=True):
        assert torch.equal(low, high.detach().to(low.dtype))

    # a bf16 model stepped directly by AdamW loses most of the same steps
    plain = load_model(str(tiny_model_dir), dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(plain.parameters(), lr=1e-4, weight_decay=0.0)
    for _ in range(3):
        plain.zero_grad()
        plain(input_ids=torch.tensor([samples[0].ids]), labels=torch.tensor([samples[0].ids])).loss.backward()
        optimizer.step()
    assert (_flat(_layers(plain, plain.parameters())) != start).float().mean().item() < moved / 2


def test_master_weights_survive_a_checkpoint(tiny_model_dir, tokenizer):
    model = load_model(str(tiny_model_dir), dtype=torch.bfloat16)
    learner = _learner(model, lr=1e-4)
    learner.step(_samples(tokenizer))
    saved = learner.state_dict()
    assert len(saved["master_weights"]) == len(learner.weights.params)

    resumed = _learner(load_model(str(tiny_model_dir), dtype=torch.bfloat16), lr=1e-4)
    resumed.load_state_dict(saved)
    assert torch.equal(_flat(resumed.weights.params), _flat(learner.weights.params))


def test_a_float32_model_is_stepped_directly(tiny_model_dir):
    model = load_model(str(tiny_model_dir), dtype=torch.float32)
    learner = _learner(model, lr=1e-4)
    assert not learner.weights.copied
    assert [id(p) for p in learner.weights.params] == [id(p) for p in model.parameters()]
    assert learner.state_dict()["master_weights"] == []


def test_stepping_in_slices_is_one_step_over_all_weights(tiny_model_dir, tokenizer, monkeypatch):
    from aworld_train.engines.local import master_weights

    results = []
    for slice_bytes in (2**40, 1):  # one slice; one weight tensor a slice
        monkeypatch.setattr(master_weights, "_SLICE_BYTES", slice_bytes)
        learner = _learner(load_model(str(tiny_model_dir), dtype=torch.bfloat16), lr=1e-4)
        metrics = [learner.step(_samples(tokenizer)) for _ in range(2)]
        results.append((_flat(learner.weights.params), [m["grad_norm"] for m in metrics]))
    (whole, whole_norms), (sliced, sliced_norms) = results
    assert torch.equal(whole, sliced)
    assert whole_norms == sliced_norms
