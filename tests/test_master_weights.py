"""A bf16 model's small AdamW steps accumulate in float32 master weights instead of rounding away."""

import torch

from aworld_train.engines.local import master_weights
from aworld_train.engines.local.learner import GRPOLearner
from aworld_train.engines.local.samples import Sample
from aworld_train.inputs.config import AlgorithmConfig
from aworld_train.rollout.policies.models import load_model


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
    masters = learner.weights.masters()
    assert all(m.dtype == torch.float32 for m in masters)
    master = _flat(_layers(model, masters))
    moved = (master != start).float().mean().item()
    assert moved > 0.9, f"only {moved:.1%} of the master weights moved"
    # the model computes with the master weights, rounded to its own precision
    for low, high in zip(model.parameters(), masters, strict=True):
        assert torch.equal(low, high.to(low.dtype))

    # a bf16 model stepped directly by AdamW loses most of the same steps
    plain = load_model(str(tiny_model_dir), dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(plain.parameters(), lr=1e-4, weight_decay=0.0)
    for _ in range(3):
        plain.zero_grad()
        plain(input_ids=torch.tensor([samples[0].ids]), labels=torch.tensor([samples[0].ids])).loss.backward()
        optimizer.step()
    assert (_flat(_layers(plain, plain.parameters())) != start).float().mean().item() < moved / 2


def test_master_weights_survive_a_checkpoint(tiny_model_dir, tokenizer, tmp_path):
    model = load_model(str(tiny_model_dir), dtype=torch.bfloat16)
    learner = _learner(model, lr=1e-4)
    learner.step(_samples(tokenizer))
    saved = learner.state_dict()
    torch.save(saved, tmp_path / "trainer_state.pt")
    model.save_pretrained(tmp_path / "model")
    expected = _flat(learner.weights.masters())
    assert not torch.equal(expected, _flat(model.parameters()))  # the masters hold more than the model

    resumed_model = load_model(str(tmp_path / "model"), dtype=torch.bfloat16)
    resumed = _learner(resumed_model, lr=1e-4)
    resumed.load_state_dict(torch.load(tmp_path / "trainer_state.pt", weights_only=True))
    assert torch.equal(_flat(resumed.weights.masters()), expected)


def test_float32_masters_of_an_older_checkpoint_are_restored(tiny_model_dir, tokenizer):
    model = load_model(str(tiny_model_dir), dtype=torch.bfloat16)
    learner = _learner(model, lr=1e-4)
    learner.step(_samples(tokenizer))
    older = learner.weights.masters()  # what checkpoints held before the low-bit form

    resumed = _learner(load_model(str(tiny_model_dir), dtype=torch.bfloat16), lr=1e-4)
    resumed.weights.load_state_dict(older)
    assert torch.equal(_flat(resumed.weights.masters()), _flat(older))
    assert torch.equal(_flat(resumed.model.parameters()), _flat(model.parameters()))


def test_a_float32_model_is_stepped_directly(tiny_model_dir):
    model = load_model(str(tiny_model_dir), dtype=torch.float32)
    learner = _learner(model, lr=1e-4)
    assert not learner.weights.copied
    assert [id(p) for p in learner.weights.params] == [id(p) for p in model.parameters()]
    assert learner.state_dict()["master_weights"] == {}


def test_stepping_in_slices_is_one_step_over_all_weights(tiny_model_dir, tokenizer, monkeypatch):
    results = []
    for slice_bytes in (2**40, 1):  # one slice; one weight tensor a slice
        monkeypatch.setattr(master_weights, "_SLICE_BYTES", slice_bytes)
        learner = _learner(load_model(str(tiny_model_dir), dtype=torch.bfloat16), lr=1e-4)
        metrics = [learner.step(_samples(tokenizer)) for _ in range(2)]
        results.append((_flat(learner.weights.masters()), [m["grad_norm"] for m in metrics]))
    (whole, whole_norms), (sliced, sliced_norms) = results
    assert torch.equal(whole, sliced)
    assert whole_norms == sliced_norms


class _Float32Copies:
    """The plain recipe: a float32 copy of every weight, one clipped AdamW step over all of them,
    the model given the copies rounded."""

    def __init__(self, model):
        self.model_params = list(model.parameters())
        self.params = [torch.nn.Parameter(p.detach().float().clone()) for p in self.model_params]

    @torch.no_grad()
    def step(self, optimizer, max_grad_norm):
        for low, high in zip(self.model_params, self.params, strict=True):
            high.grad = low.grad.float()
            low.grad = None
        norm = torch.nn.utils.clip_grad_norm_(self.params, max_grad_norm)
        optimizer.step()
        for low, high in zip(self.model_params, self.params, strict=True):
            low.copy_(high)
        return float(norm)


def test_low_bit_masters_give_the_update_of_float32_copies(tiny_model_dir, tokenizer):
    runs = []
    for plain in (True, False):
        learner = _learner(load_model(str(tiny_model_dir), dtype=torch.bfloat16), lr=1e-4)
        if plain:
            learner.weights = _Float32Copies(learner.model)
            learner.optimizer = torch.optim.AdamW(learner.weights.params, lr=1e-4, weight_decay=0.0)
            schedule = learner.scheduler.lr_lambdas[0]
            learner.scheduler = torch.optim.lr_scheduler.LambdaLR(learner.optimizer, schedule)
        for _ in range(3):
            learner.step(_samples(tokenizer))
        masters = learner.weights.params if plain else learner.weights.masters()
        runs.append((_flat(learner.model.parameters()), _flat(masters)))
    (plain_model, plain_masters), (model, masters) = runs
    assert torch.equal(model, plain_model)
    assert torch.equal(masters, plain_masters)


def test_any_float32_keeps_its_low_bits_and_rounds_as_torch_does():
    torch.manual_seed(0)
    bits = torch.randint(-(2**31), 2**31 - 1, (200_000,), dtype=torch.int32)
    bits[::5] = (bits[::5] & ~0xFFFF) | 0x8000  # ties, above bits odd and even
    bits[:4] = torch.tensor([0, 0x8000, 0x18000, -(2**31)], dtype=torch.int32)  # zero, tie-down, tie-up, -0.0
    values = bits.view(torch.float32)
    values = values[~values.isnan()]

    model = torch.nn.Linear(1, 1).to(torch.bfloat16)
    model.weight.data = values.to(torch.bfloat16)  # any shape works; one flat weight here
    weights = master_weights.MasterWeights(model)
    weights._store(0, values.clone())
    assert torch.equal(model.weight.view(torch.int16), values.to(torch.bfloat16).view(torch.int16))
    assert torch.equal(weights.masters()[0].view(torch.int32), values.view(torch.int32))
    assert 0 < len(weights.ties_down[0]) < int((bits.bitwise_and(0xFFFF) == 0x8000).sum())
