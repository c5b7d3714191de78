"""Which dtype a model loads in: float32 on a CPU (bf16 sampling lags what the learner learned:
docs/BENCHMARKS.md, "The matrix", dtype), bf16 on a GPU, AWORLD_TRAIN_DTYPE deciding where set
(an unknown value is refused before any model loads: tests/test_bad_cli_inputs.py, dtype_unknown)."""

from __future__ import annotations

import pytest
import torch

from aworld_train.rollout.policies import models


@pytest.fixture
def on_gpu(monkeypatch):
    def set_gpu(present: bool) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: present)

    monkeypatch.delenv(models.DTYPE_VARIABLE, raising=False)
    return set_gpu


def test_a_cpu_loads_float32_even_with_native_bf16_matmuls(on_gpu, tiny_model_dir):
    on_gpu(False)
    assert models.best_dtype() is torch.float32
    assert models.load_model(str(tiny_model_dir)).dtype == torch.float32


def test_a_gpu_loads_bf16(on_gpu):
    on_gpu(True)
    assert models.best_dtype() is torch.bfloat16


@pytest.mark.parametrize(
    ("value", "expected"), [("bfloat16", torch.bfloat16), ("bf16", torch.bfloat16), ("fp32", torch.float32)]
)
def test_the_users_dtype_wins_on_either(on_gpu, monkeypatch, value, expected):
    for gpu in (False, True):
        on_gpu(gpu)
        monkeypatch.setenv(models.DTYPE_VARIABLE, value)
        assert models.best_dtype() is expected
