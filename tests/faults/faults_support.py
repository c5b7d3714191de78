"""What the fault cases share: a short local run's config on the tiny random model, the resources
of this process (file descriptors, child processes, RSS), and a record of each fault for the table
in docs/BENCHMARKS.md (printed at the end of the session: `pytest -s tests/faults`)."""

from __future__ import annotations

import gc
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import early_runs
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[2]
DENSE_REWARD = f"{ROOT / 'tests/verl_cpu_support.py'}:distinct_chars"  # varies between samples: real updates
# 8 distinct tasks: a step of 4 never holds one twice
ROWS = [{"id": f"t{i}", "prompt": f"What is {i} + 1?", "ground_truth": i + 1} for i in range(8)]


def local_config(
    run_dir: Path,
    model_dir: Path,
    steps: int,
    agent: str = "aworld_train.agents.calculator:build_agent",
    **sections: dict[str, Any],
) -> dict[str, Any]:
    """A few-second local run: 2 tasks x 2 samples a step, a checkpoint after every step (all of
    them kept, for the tests to look at), no evaluation; `sections` update the config's sections."""
    config: dict[str, Any] = {
        "model": str(model_dir),
        "agent": agent,
        "algorithm": {"group_size": 2, "lr": 1e-3},
        "rollout": {
            "max_new_tokens": 8,
            "max_assistant_turns": 2,
            "tool_block": "never",
            "train_on_malformed": True,
        },
        "data": {"batch_size": 2},
        "reward": {"fn": DENSE_REWARD},
        "trainer": {
            "steps": steps,
            "save_every": 1,
            "save_total_limit": None,
            "eval_every": 0,
            "eval_before": False,
            "eval_after": False,
            "run_dir": str(run_dir),
            "log_trajectories": 4,
        },
        "env": [{"name": "calculator"}],
    }
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values}
    return config


def write_config(folder: Path, config: dict[str, Any]) -> Path:
    """The config as a YAML file, with its train rows beside it (what `aworld-train run` reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    train = folder / "train.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump({**config, "data": {**config["data"], "train": str(train)}}))
    return path


@dataclass(frozen=True)
class Resources:
    fds: int
    children: int
    rss_mb: float

    def __str__(self) -> str:
        return f"{self.fds} fds, {self.children} child processes, {self.rss_mb:.0f} MB RSS"


def own_children() -> list[psutil.Process]:
    """This process's descendants, less the end-to-end runs that overlap the suite (early_runs)."""
    me = psutil.Process()
    others: set[int] = set()
    for run in early_runs._runs.values():
        if run is not None and run.process.poll() is None:
            try:
                root = psutil.Process(run.process.pid)
                others |= {root.pid, *(p.pid for p in root.children(recursive=True))}
            except psutil.NoSuchProcess:
                continue
    return [p for p in me.children(recursive=True) if p.pid not in others and _running(p)]


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def resources() -> Resources:
    gc.collect()
    return Resources(
        fds=len(os.listdir("/proc/self/fd")),
        children=len(own_children()),
        rss_mb=psutil.Process().memory_info().rss / 2**20,
    )


def warm_up(folder: Path) -> None:
    """Open what a process keeps open for good once it drew a figure: matplotlib's fonts (a run
    ends with its reward curve; a baseline taken in the run's first step precedes that)."""
    from aworld_train.engines.local.run_folder import RunFolder

    run = RunFolder(folder)
    run.log(1, {"reward_mean": 0.5})
    run.plot_reward_curve()
    run.close()


def settled_resources(like: Resources, limit_s: float = 15.0) -> Resources:
    """Resources once child processes that are ending have ended (a replaced worker, a server's
    old process), or after `limit_s`: what a fault left behind."""
    import time

    deadline = time.monotonic() + limit_s
    now = resources()
    while time.monotonic() < deadline and (now.children != like.children or now.fds > like.fds):
        time.sleep(0.25)
        now = resources()
    return now


# RSS may grow by what a first fault loads once (an exception's traceback modules, a new worker's
# pipes' buffers); a leak grows with every fault and step. The bound is per case.
RSS_SLACK_MB = 64.0


def assert_flat(before: Resources, after: Resources, what: str) -> None:
    assert after.fds <= before.fds, f"{what}: file descriptors {before.fds} -> {after.fds}"
    assert after.children == before.children, f"{what}: child processes {before.children} -> {after.children}"
    assert after.rss_mb - before.rss_mb < RSS_SLACK_MB, (
        f"{what}: RSS {before.rss_mb:.0f} -> {after.rss_mb:.0f} MB"
    )


def assert_flat_after_run(before_run: Resources, in_run: Resources, after: Resources, what: str) -> None:
    """After a run ended: its processes (servers, workers) are gone, and no more descriptors or
    memory are held than while it ran (what a process opens once, on its first run, included)."""
    assert after.children == before_run.children, (
        f"{what}: child processes {before_run.children} -> {after.children}"
    )
    assert after.fds <= in_run.fds, (
        f"{what}: file descriptors {in_run.fds} in the run -> {after.fds} after it"
    )
    assert after.rss_mb - in_run.rss_mb < RSS_SLACK_MB, (
        f"{what}: RSS {in_run.rss_mb:.0f} -> {after.rss_mb:.0f} MB"
    )


# -- the table ---------------------------------------------------------------------------------

TABLE: list[dict[str, str]] = []


def record(**row: Any) -> None:
    """One fault's row: fault, where, outcome, steps, lost, resources."""
    TABLE.append({k: str(v) for k, v in row.items()})
    out = os.environ.get("AWORLD_TRAIN_FAULT_TABLE")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(TABLE[-1]) + "\n")


# -- a reward that counts what it scored (the fault choreographies wait on it) ------------------

SCORED = [0]


def counted_exact_answer(data_source, solution_str, ground_truth, extra_info=None) -> dict:
    """The calculator's exact_answer, counting the episodes scored in this process."""
    from aworld_train.rewards.calculator import exact_answer

    SCORED[0] += 1
    return exact_answer(data_source, solution_str, ground_truth, extra_info)
