"""`aworld-train check` on an AReaL config runs AReaL's own config loader on the render, in AReaL's
environment (`make setup-areal`; tests/areal_support.py): a GPU run, and a setting AReaL's
loader accepts but the run could not work with. (The CPU run's `run` makes the same check:
tests/test_areal_cpu_e2e.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

from areal_support import AREAL_PYTHON, ROOT, needs_areal


def check(config: str, tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aworld_train.facade.cli", "check", str(ROOT / config), f"trainer.run_dir={tmp_path / 'run'}", *overrides],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "AWORLD_TRAIN_AREAL_PYTHON": AREAL_PYTHON},
    )  # fmt: skip


@needs_areal
def test_check_loads_a_gpu_render_with_areals_loader(tmp_path):
    out = check("examples/calculator/grpo_areal.yaml", tmp_path, "areal.cluster.n_gpus_per_node=1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"ok   AReaL environment: {AREAL_PYTHON}" in out.stdout
    assert "ok   AReaL's config loader: AReaL 1.0.4" in out.stdout


@needs_areal
def test_a_setting_areal_would_fail_on_is_a_fail_line_with_the_fix(tmp_path):
    """One GPU shared by the actor and SGLang: an NCCL weight-update group cannot hold both."""
    out = check(
        "examples/calculator/grpo_areal.yaml",
        tmp_path,
        "areal.cluster.n_gpus_per_node=1",
        "areal.actor.weight_update_mode=xccl",
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "FAIL AReaL's config loader: actor.weight_update_mode is 'xccl'" in out.stdout
    assert "Set actor.weight_update_mode: disk" in out.stdout


def test_without_areal_check_names_the_environment_to_use(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "aworld_train.facade.cli", "check", str(ROOT / "examples/calculator/grpo_areal.yaml"),
         f"trainer.run_dir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "AWORLD_TRAIN_AREAL_PYTHON"},
    )  # fmt: skip
    assert out.returncode == 2
    assert "cannot import areal: run aworld-train from AReaL's environment" in out.stdout
    assert "AWORLD_TRAIN_AREAL_PYTHON" in out.stdout
