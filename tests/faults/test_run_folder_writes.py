"""The run folder's files are whole or absent: a checkpoint cut short is never the latest, and a
resume takes the folder back to its checkpoint's step (metrics, TensorBoard, trajectories)."""

from __future__ import annotations

import json

import pytest

from aworld_train.core.atomic_files import MARKER, complete_folder, incomplete, write_text
from aworld_train.engines.local.run_folder import RunFolder


def checkpoint(folder: RunFolder, step: int, payload: bytes = b"weights") -> None:
    with complete_folder(folder.checkpoint_dir(step), step=step) as tmp:
        (tmp / "model.safetensors").write_bytes(payload)
        (tmp / "trainer_state.pt").write_bytes(b"state")


def test_a_checkpoint_cut_short_is_never_taken_for_the_latest(tmp_path):
    folder = RunFolder(tmp_path / "run")
    checkpoint(folder, 1)
    checkpoint(folder, 2)
    with pytest.raises(KeyboardInterrupt):  # interrupted while it writes
        with complete_folder(folder.checkpoint_dir(3), step=3) as tmp:
            (tmp / "model.safetensors").write_bytes(b"half")
            raise KeyboardInterrupt
    assert sorted(p.name for p in (folder.path / "checkpoints").iterdir()) == ["step_000001", "step_000002"]
    assert folder.latest_checkpoint() == (2, folder.checkpoint_dir(2))
    # a file of the latest cut short after the fact (a disk that lost it), then one without its marker
    (folder.checkpoint_dir(2) / "model.safetensors").write_bytes(b"wei")
    assert incomplete(folder.checkpoint_dir(2)) == "model.safetensors has 3 bytes where 7 were written"
    killed = folder.checkpoint_dir(4)
    killed.mkdir()
    (killed / "trainer_state.pt").write_bytes(b"state")
    assert "has no complete.json" in incomplete(killed)
    assert folder.latest_checkpoint() == (1, folder.checkpoint_dir(1))
    assert [(step, problem is None) for step, _, problem in folder.checkpoints()] == [
        (4, False),
        (2, False),
        (1, True),
    ]


def test_saving_a_step_again_replaces_its_checkpoint_whole(tmp_path):
    folder = RunFolder(tmp_path / "run")
    checkpoint(folder, 1, b"old")
    checkpoint(folder, 1, b"newer")
    path = folder.checkpoint_dir(1)
    assert (path / "model.safetensors").read_bytes() == b"newer" and incomplete(path) is None
    assert json.loads((path / MARKER).read_text())["step"] == 1
    assert sorted(p.name for p in (folder.path / "checkpoints").iterdir()) == ["step_000001"]


def test_rewind_drops_what_later_steps_wrote(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = RunFolder(tmp_path / "run")
    folder.log(0, {"accuracy": 0.1}, prefix="eval")
    for step in (1, 2, 3):
        folder.log(step, {"reward_mean": float(step)})
        folder.write_trajectories(f"trajectories/step_{step:06d}", [])
    folder.write_trajectories("eval/after", [])
    folder.close()
    with folder.metrics_path.open("a") as f:
        f.write('{"step": 4, "phase": "tra')  # the machine went down mid-line
    checkpoint(folder, 2)
    (folder.path / "checkpoints/step_000003.partial").mkdir()
    write_text(folder.path / "trajectories/notes.txt", "kept")

    resumed = RunFolder(folder.path)
    removed = resumed.rewind(2)
    assert removed == [
        "1 metrics record(s) past step 2",
        "trajectories/step_000003.jsonl",
        "eval/after.jsonl",
        "checkpoints/step_000003.partial",
    ]
    assert [
        (r["phase"], r["step"]) for r in map(json.loads, folder.metrics_path.read_text().splitlines())
    ] == [
        ("eval", 0),
        ("train", 1),
        ("train", 2),
    ]
    resumed.log(3, {"reward_mean": 30.0})  # step 3 again, differently
    resumed.close()
    events = EventAccumulator(str(folder.path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/reward_mean")] == [(1, 1.0), (2, 2.0), (3, 30.0)]
    assert (folder.path / "trajectories/notes.txt").is_file()
