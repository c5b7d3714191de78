"""AReaL's own config loader on our rendered config, in AReaL's own environment.

AReaL 1.0.4 cannot share this environment (its torch, transformers and Hydra pins), so the check
runs with the Python of an AReaL environment built by `scripts/areal/install_cpu_env.sh` and named
by AWORLD_TRAIN_AREAL_PYTHON; without one the test is skipped and says how to get one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from aworld_train import AgentTrainer

ROOT = Path(__file__).resolve().parents[1]
AREAL_PYTHON = os.environ.get("AWORLD_TRAIN_AREAL_PYTHON")


needs_areal = pytest.mark.skipif(
    not AREAL_PYTHON,
    reason="no AReaL environment: bash scripts/areal/install_cpu_env.sh /tmp/areal-venv . && "
    "export AWORLD_TRAIN_AREAL_PYTHON=/tmp/areal-venv/bin/python",
)


@needs_areal
def test_areal_loads_the_rendered_config_with_a_gpu_per_worker(tmp_path):
    trainer = AgentTrainer(
        config=str(ROOT / "examples/calculator/grpo_areal.yaml"),
        overrides=[f"trainer.run_dir={tmp_path / 'run'}", "areal.cluster.n_gpus_per_node=1"],
    )
    run = trainer.render()
    out = subprocess.run(
        [AREAL_PYTHON, str(ROOT / "scripts/areal/check_config.py"), str(run.config_path), "--gpus", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rollout.scheduling_spec: [{'gpu': 1" in out.stdout
    assert "actor.weight_update_mode: disk" in out.stdout and "0 failed, 0 warnings" in out.stdout


@needs_areal
def test_areals_advantages_leave_a_failed_episode_out_of_its_group(tmp_path):
    """AReaL's own PPOActor, under our rendered config, turns the workflow's rows into exactly the
    advantages of the group without its failed episode."""
    run = AgentTrainer(
        config=str(ROOT / "examples/calculator/grpo_areal.yaml"),
        overrides=[f"trainer.run_dir={tmp_path / 'run'}"],
    ).render()
    out = subprocess.run(
        [AREAL_PYTHON, str(ROOT / "scripts/areal/check_advantages.py"), str(run.config_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok: AReaL's advantages equal the group's without its failed episode" in out.stdout
