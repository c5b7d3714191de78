"""verl's own `main_ppo` with our rendered configs, on this CPU: every import and config step passes,
and the run stops exactly where verl first asks for a GPU (its resource-pool check)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

from aworld_train import AgentTrainer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GAIA = ROOT / "examples/train_gaia_with_aworld_verl"
# verl's first GPU request: single_controller/ray/base.py, _check_resource_available
GPU_STAGE = "Total available GPUs 0 is less than total desired GPUs"
# 2 cores: TransferQueue's controller and storage units each take a Ray CPU slot
CPU_SLOTS = [
    "ray_kwargs.ray_init.num_cpus=16",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
]


def launch_until_the_gpu(run, tmp_path: Path) -> str:
    # Ray's socket paths must stay under 107 bytes: a short temp folder of its own
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run(
        [*run.command, *CPU_SLOTS],
        capture_output=True,
        text=True,
        timeout=420,
        env=env,
        cwd=tmp_path,
    )
    return out.stdout + out.stderr


@pytest.mark.parametrize(
    "config, overrides",
    [
        ("examples/calculator/grpo_verl.yaml", []),
        (
            str(GAIA / "grpo_trainer.yaml"),
            [f"data.train={GAIA / 'train.jsonl'}", f"data.test={GAIA / 'test.jsonl'}"],
        ),
    ],
    ids=["calculator", "gaia"],
)
def test_main_ppo_passes_imports_and_config_and_stops_at_the_first_gpu_request(tmp_path, config, overrides):
    trainer = AgentTrainer(
        config=str(ROOT / config), overrides=[*overrides, f"trainer.run_dir={tmp_path / 'run'}"]
    )
    log = launch_until_the_gpu(trainer.render(), tmp_path)
    assert GPU_STAGE in log, log[-4000:]
    # everything before that point ran: verl composed and printed our config, Ray and TransferQueue started
    assert (
        "aworld_train.engines.verl.loop.AWorldAgentLoop"
        in Path(trainer.run_dir / "verl/agent_loop.yaml").read_text()
    )
    # (verl warns about its optional engines, torchtitan and veomni, which are not ours to install)
    for failure in (
        "No module named 'transfer_queue'",
        "No module named 'aworld_train",
        "ConfigKeyError",
        "ConfigAttributeError",
        "ValidationError",
    ):
        assert failure not in log, log[-4000:]
    assert "'use_v1': True" in log or "use_v1: true" in log.lower(), log[-4000:]
