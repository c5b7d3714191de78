"""The trainer killed (SIGKILL) mid-rollout, mid-update and mid-save, each time continued with
`aworld-train run CONFIG --resume`: the run goes on from its last complete checkpoint, counts no
step twice in metrics.jsonl or TensorBoard, keeps only whole trajectory files, and ends where an
uninterrupted run of the same config ends: the same episodes, metrics and weights, step for step.

One run folder takes the three kills in turn; the uninterrupted run is the reference. A tiny random
model, 2 tasks x 2 samples a step, a few seconds a step."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
from faults_support import assert_flat, local_config, record, resources, write_config
from safetensors.torch import load_file

from aworld_train.core.atomic_files import incomplete

pytestmark = pytest.mark.timeout(900)

KILL_AT = Path(__file__).with_name("kill_at.py")
STEPS = 5
# (where, step): killed while step 3's episodes run (checkpoint 2 is the latest), at step 4's
# optimizer step (checkpoint 3), while checkpoint 4 is written (its metrics are logged already)
KILLS = [("rollout", 3), ("update", 4), ("save", 4)]
COMPARED = ("reward_mean", "loss", "pg_loss", "grad_norm", "samples", "train_tokens", "statuses")


def config_of(run: Path, model_dir: Path) -> dict:
    # one episode at a time: the local policy then computes each prompt alone, whatever the timing,
    # and logprobs that are sums in another order would make the runs differ in their last digits
    return local_config(run, model_dir, STEPS, rollout={"concurrency": 1})


def launch(command: list[str], log: Path) -> tuple[int, set[int]]:
    """Run `command`; its exit status and every process it started while it ran."""
    seen: set[int] = set()
    with log.open("a") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True)
        watch = psutil.Process(process.pid)

        def sample() -> None:
            while process.poll() is None:
                try:
                    seen.update(p.pid for p in watch.children(recursive=True))
                except psutil.Error:
                    pass
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        returncode = process.wait(timeout=600)
        sampler.join()
    return returncode, seen


def survivors(pids: set[int], wait_s: float = 10.0) -> list[str]:
    """Of `pids`, the processes still running after `wait_s` (a killed trainer's orphans)."""
    deadline = time.monotonic() + wait_s
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = {
            p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        }
        time.sleep(0.2)
    return [" ".join(psutil.Process(p).cmdline()) for p in alive if psutil.pid_exists(p)]


def train_rows(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if json.loads(line)["phase"] == "train"]


def whole_jsonl_files(run: Path) -> list[str]:
    """Every JSONL file of the run folder, each line of which parses (none is cut short)."""
    names = []
    for path in sorted(run.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            json.loads(line)
        names.append(str(path.relative_to(run)))
    return names


def tensorboard_steps(run: Path, tag: str = "train/reward_mean") -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    """The reference run, and the run killed three times and resumed after each kill."""
    base = tmp_path_factory.mktemp("trainer-killed")
    before = resources()
    # the reference runs as the others do, in a process of its own: the same threads, the same sums
    reference = base / "reference"
    reference_config = write_config(base / "reference-config", config_of(reference, tiny_model_dir))
    returncode, _ = launch(
        [sys.executable, "-m", "aworld_train.facade.cli", "run", str(reference_config)],
        base / "reference.log",
    )
    assert returncode == 0, (base / "reference.log").read_text()[-3000:]

    run = base / "killed"
    config = write_config(base / "killed-config", config_of(run, tiny_model_dir))
    cli = [sys.executable, "-m", "aworld_train.facade.cli", "run", str(config)]
    log = base / "killed.log"
    kills = []
    for index, (point, step) in enumerate(KILLS):
        resume = ["--resume"] if index else []
        command = [sys.executable, str(KILL_AT), point, str(step), "run", str(config), *resume]
        returncode, started = launch(command, log)
        kills.append(
            {
                "point": point,
                "step": step,
                "returncode": returncode,
                "orphans": survivors(started),
                "started": len(started),
                "metrics_steps": [r["step"] for r in train_rows(run)],
                "checkpoints": sorted(p.name for p in (run / "checkpoints").iterdir()),
                "jsonl": whole_jsonl_files(run),
                "incomplete": {
                    p.name: incomplete(p)
                    for p in (run / "checkpoints").iterdir()
                    if incomplete(p) is not None
                },
            }
        )
    returncode, started = launch([*cli, "--resume"], log)
    after = resources()
    return {
        "reference": reference,
        "run": run,
        "kills": kills,
        "final_returncode": returncode,
        "final_orphans": survivors(started),
        "log": log.read_text(),
        "before": before,
        "after": after,
    }


def test_each_kill_leaves_whole_files_and_checkpoints_and_no_process(runs):
    kills = {k["point"]: k for k in runs["kills"]}
    for kill in kills.values():
        assert kill["returncode"] == -9, runs["log"][-3000:]  # SIGKILL, at the point asked
        assert kill["started"] >= 1 and kill["orphans"] == [], kill  # the env server died with the trainer
        assert kill["jsonl"], kill  # and every line of every JSONL file parses
    # killed while step 3's episodes ran: steps 1-2 logged and saved, nothing of step 3
    assert kills["rollout"]["metrics_steps"] == [1, 2]
    assert kills["rollout"]["checkpoints"] == ["step_000001", "step_000002"]
    assert "trajectories/step_000003.jsonl" not in kills["rollout"]["jsonl"]
    # resumed at 2, killed at step 4's update: step 3 logged and saved
    assert kills["update"]["metrics_steps"] == [1, 2, 3]
    assert kills["update"]["checkpoints"] == ["step_000001", "step_000002", "step_000003"]
    # resumed at 3, killed while checkpoint 4 was written: step 4 logged, its checkpoint partial
    assert kills["save"]["metrics_steps"] == [1, 2, 3, 4]
    assert (
        "step_000004.partial" in kills["save"]["checkpoints"]
        and "step_000004" not in kills["save"]["checkpoints"]
    )
    assert kills["save"]["incomplete"] == {
        "step_000004.partial": kills["save"]["incomplete"]["step_000004.partial"]
    }
    record_rows(runs)


def test_the_last_resume_starts_at_the_last_complete_checkpoint_and_finishes(runs):
    assert runs["final_returncode"] == 0, runs["log"][-3000:]
    assert runs["final_orphans"] == []
    log = runs["log"]
    assert "resuming from" in log and "step_000003 (step 3)" in log  # not the partial checkpoint 4
    checkpoints = sorted(p.name for p in (runs["run"] / "checkpoints").iterdir())
    assert checkpoints == [f"step_{s:06d}" for s in range(1, STEPS + 1)]  # the partial one is gone
    assert all(incomplete(runs["run"] / "checkpoints" / name) is None for name in checkpoints)


def test_no_step_is_counted_twice_in_metrics_or_tensorboard(runs):
    rows = train_rows(runs["run"])
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    board = tensorboard_steps(runs["run"])
    assert [step for step, _ in board] == list(range(1, STEPS + 1))
    assert [value for _, value in board] == pytest.approx([r["reward_mean"] for r in rows])
    for step in range(1, STEPS + 1):
        lines = (runs["run"] / f"trajectories/step_{step:06d}.jsonl").read_text().splitlines()
        assert len(lines) == 4  # the step's 2 tasks x 2 samples, once


def test_the_resumed_run_is_the_uninterrupted_run(runs):
    """Same data order from the same step, same sampling (seeded per step), same optimizer state:
    the killed and resumed run's episodes, metrics and final weights are the reference's."""
    ours, theirs = train_rows(runs["run"]), train_rows(runs["reference"])
    assert len(ours) == len(theirs) == STEPS
    for mine, reference in zip(ours, theirs, strict=True):
        for key in COMPARED:
            assert mine[key] == pytest.approx(reference[key], rel=1e-4, abs=1e-6), (mine["step"], key)
    assert any(r["grad_norm"] > 0 for r in theirs)  # the reference learned: the comparison means something
    for step in range(1, STEPS + 1):
        name = f"trajectories/step_{step:06d}.jsonl"
        mine = [json.loads(line) for line in (runs["run"] / name).read_text().splitlines()]
        reference = [json.loads(line) for line in (runs["reference"] / name).read_text().splitlines()]
        assert [(t["task_id"], t["messages"]) for t in mine] == [
            (t["task_id"], t["messages"]) for t in reference
        ]
    final = f"checkpoints/step_{STEPS:06d}/model.safetensors"
    ours_w, theirs_w = load_file(runs["run"] / final), load_file(runs["reference"] / final)
    assert ours_w.keys() == theirs_w.keys()
    for name, tensor in ours_w.items():
        assert torch.allclose(tensor, theirs_w[name], atol=1e-6), name


def test_the_test_process_keeps_no_resource_of_the_killed_runs(runs):
    assert_flat(runs["before"], runs["after"], "four launches, three of them killed")


def record_rows(runs) -> None:
    places = {"rollout": "mid-rollout (first episode of step 3 scored)", "update": "mid-update (step 4's optimizer step)",
              "save": "mid-save (checkpoint 4, weights written)"}  # fmt: skip
    for kill in runs["kills"]:
        record(
            fault="trainer SIGKILL",
            where=places[kill["point"]],
            run="killed; `run --resume` went on from the last complete checkpoint",
            steps=f"{kill['metrics_steps'][-1] if kill['metrics_steps'] else 0} logged before, {STEPS} of {STEPS} in the end",
            lost="the interrupted step's episodes and update (redone on resume)",
            resources=f"orphans {len(kill['orphans'])}; test process {runs['before']} -> {runs['after']}",
        )
