"""The disk fills up while a checkpoint is written (the run folder on a small tmpfs, shrunk after the
first checkpoint to room for half of one): the run stops with the cause, the previous checkpoint
is intact, nothing half-written is left, and once there is room again `run --resume` continues
from that checkpoint. Needs root to mount (CI runs as root); elsewhere it skips with one line."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from faults_support import (
    assert_flat_after_run,
    local_config,
    record,
    resources,
    settled_resources,
    warm_up,
    write_config,
)

from aworld_train import AgentTrainer
from aworld_train.core.atomic_files import incomplete
from aworld_train.core.errors import RunStoppedByDisk
from aworld_train.engines.local import training

pytestmark = pytest.mark.timeout(600)

ROOMY = 256 * 2**20


def mount_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = mount_command("-t", "tmpfs", "-o", f"size={ROOMY}", "tmpfs", str(disk))
    if mounted.returncode != 0:
        reason = f"cannot mount a tmpfs here ({mounted.stderr.strip() or mounted.returncode}): run as root"
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the disk-full case: {reason}")
        pytest.skip(reason)
    yield disk
    subprocess.run(["umount", "--lazy", str(disk)], capture_output=True)


def resize(disk: Path, size: int) -> None:
    done = mount_command("-o", f"remount,size={size}", str(disk))
    assert done.returncode == 0, done.stderr


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def metrics_steps(run: Path) -> list[int]:
    import json

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if r["phase"] == "train"]


def test_a_full_disk_while_saving_stops_the_run_and_the_last_checkpoint_resumes(
    small_disk, tmp_path, tiny_model_dir
):
    run = small_disk / "run"
    config = write_config(tmp_path / "config", local_config(run, tiny_model_dir, 3))
    save = training.LocalTraining.save
    room: dict[str, int] = {}
    in_run: list = []

    def save_then_fill(self, step: int) -> Path:
        path = save(self, step)
        if step == 1:  # what is left on the disk: half a checkpoint
            in_run.append(resources())
            room["checkpoint"] = folder_size(path)
            resize(small_disk, shutil.disk_usage(small_disk).used + room["checkpoint"] // 2)
        return path

    warm_up(tmp_path / "warm-up")
    before = resources()
    with pytest.MonkeyPatch.context() as patch, pytest.raises(RunStoppedByDisk) as stopped:
        patch.setattr(training.LocalTraining, "save", save_then_fill)
        AgentTrainer(config=str(config)).train()
    message = str(stopped.value)
    assert stopped.value.exit_code == 1
    assert message.startswith(
        f"saving checkpoint {run / 'checkpoints/step_000002'} failed: no space left on device"
    )
    assert (
        "(ENOSPC)" in message
        and f"checkpoint {run / 'checkpoints/step_000001'} (step 1) is intact" in message
    )
    assert "Free space on that disk" in message and "aworld-train run CONFIG --resume" in message
    # the checkpoint before is whole; of the one that failed nothing is left
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000001"]
    assert incomplete(run / "checkpoints/step_000001") is None
    assert metrics_steps(run) == [1, 2]  # step 2 was logged before its checkpoint failed
    stopped_at = settled_resources(before)

    resize(small_disk, ROOMY)  # the fix: free space
    summary = AgentTrainer(config=str(config)).train(resume=True)
    assert summary["final_checkpoint"] == str(run / "checkpoints/step_000003")
    assert metrics_steps(run) == [1, 2, 3]  # step 2 again, counted once
    assert all(incomplete(p) is None for p in (run / "checkpoints").iterdir())
    after = settled_resources(before)
    assert_flat_after_run(before, in_run[0], stopped_at, "disk full")
    assert_flat_after_run(before, in_run[0], after, "disk full, then resumed")
    record(
        fault="disk full (tmpfs run folder, half a checkpoint of room)",
        where="saving checkpoint 2 of 3",
        run="stopped: ENOSPC named with the intact checkpoint and the fix (exit 1); resumed once there was room",
        steps="2 logged, checkpoint 1 kept; 3 of 3 after `--resume`",
        lost="step 2's update (redone on resume); no episode of a finished step",
        resources=f"{in_run[0]} at checkpoint 1 -> {stopped_at} once stopped -> {after} resumed and done",
    )
