"""TRL 1.x beside verl 0.9.1: verl's actor cannot start, and `aworld-train check` names the clash
and its fix. TRL's real wheel (fetched by `make setup`, never installed) is put on the path."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[1]
WHEELS = sorted((ROOT / ".cache" / "fetched" / "trl").glob("trl-*.whl"))
pytestmark = pytest.mark.skipif(not WHEELS, reason="TRL's wheel is missing: run `make fetch`")

# verl's actor applies this patch to the model it trains (verl/workers/fsdp_workers.py)
VERL_ACTOR_PATCH = """
from transformers import LlamaConfig, LlamaForCausalLM
from verl.models.transformers.monkey_patch import apply_monkey_patch
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1)
apply_monkey_patch(LlamaForCausalLM(config))
print("patched")
"""


@pytest.fixture(scope="module")
def trl_on_path(tmp_path_factory) -> dict[str, str]:
    """The environment of a process that imports TRL 1.x, as if it were installed."""
    folder = tmp_path_factory.mktemp("trl")
    with zipfile.ZipFile(WHEELS[-1]) as wheel:
        wheel.extractall(folder)
    return {**os.environ, "PYTHONPATH": str(folder)}


def python(code_or_args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *code_or_args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


def test_verl_actor_patch_fails_with_trl_1x_and_works_without(trl_on_path):
    broken = python(["-c", VERL_ACTOR_PATCH], trl_on_path)
    assert broken.returncode != 0
    assert "cannot import name 'AutoModelForCausalLMWithValueHead' from 'trl'" in broken.stderr
    assert python(["-c", VERL_ACTOR_PATCH], dict(os.environ)).stdout.splitlines()[-1] == "patched"


def test_check_names_the_clash_and_its_fix(trl_on_path, tmp_path, tiny_model_dir):
    out = python(
        [
            "-m",
            "aworld_train.facade.cli",
            "check",
            "examples/calculator/grpo_verl_cpu.yaml",
            f"trainer.run_dir={tmp_path / 'run'}",
            f"model={tiny_model_dir}",
        ],
        trl_on_path,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    line = next(x for x in out.stdout.splitlines() if "TRL beside verl" in x)
    assert line.startswith("FAIL TRL beside verl: TRL 1.16.0 has no AutoModelForCausalLMWithValueHead")
    assert "`pip uninstall trl`" in line and "make bench-env" in line


def test_without_trl_the_check_passes():
    from aworld_train.engines.verl.checks import trl_beside_verl

    check = trl_beside_verl()
    assert check.ok and check.detail == "TRL not installed"
