"""The learning guard: a short run of the whole path (the calculator agent on the embedded model,
its MCP tool, the chat template, the ledger, masks, the learner) at fixed seeds must raise held-out
accuracy by a clear margin. A flipped advantage sign, a mask off by one or a learning rate never
applied each leave it where it started or lower, and fail here (docs/BENCHMARKS.md, "The learning
guard": the gains measured over seeds that set the margin, and the broken runs).

One run, shared by the assertions: `aworld-train run` in a process of its own, started with the
session beside the rest of the suite (tests/early_runs.py), on one thread so that it takes the core
the suite leaves idle (about four minutes alone). Held-out figures are those every
engine's run ends with (evaluation/run_summary.py), sampled at the run's seed, so the run before and
after training draws each held-out sample from the same seed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import early_runs
import pytest

from aworld_train.evaluation.run_summary import held_out_figures

ROOT = Path(__file__).resolve().parent.parent
STEPS = 5
HELD_OUT = 30  # the first 30 of the calculator's 50 test tasks
# the gain in held-out accuracy must reach this: measured at seeds 0 and 1 the run gains 70 and 77
# points in float32, the CPU's default (17% -> 87%, 20% -> 97%), and gained 47 to 53 in bf16; with
# every advantage's sign flipped it lost 13 (13% -> 0%, bf16) (docs/BENCHMARKS.md); the margin sits
# far below the first and far above the second
MARGIN = 0.2
# the run alone on one thread took about four minutes (246 s with tests/test_structure.py); beside
# the suite, longer
RUN_LIMIT_S = 2400
pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(RUN_LIMIT_S)]


def start_run(tmp: Path) -> early_runs.Started:
    run_dir = tmp / "run"
    command = [
        sys.executable,
        "-m",
        "aworld_train.facade.cli",
        "run",
        str(ROOT / "examples/calculator/grpo_local.yaml"),
        f"trainer.steps={STEPS}",
        "trainer.seed=0",
        "trainer.save_every=0",
        "trainer.log_trajectories=0",
        f"trainer.run_dir={run_dir}",
        f"data.max_test={HELD_OUT}",
    ]

    def collect(returncode: int, log: str) -> dict:
        return {"rc": returncode, "log": log, "run_dir": run_dir}

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return early_runs.launch(command, tmp, RUN_LIMIT_S - 60, collect, cwd=ROOT, env=env)


@pytest.fixture(scope="module")
def guard_run(tmp_path_factory):
    result = early_runs.result(__name__, start_run, tmp_path_factory.mktemp("guard"))
    assert result["rc"] == 0, result["log"][-4000:]
    return result["run_dir"]


def test_a_short_calculator_run_raises_held_out_accuracy_by_the_margin(guard_run):
    figures = held_out_figures(guard_run, k=1)
    before, after = figures["before"], figures["after"]
    assert before is not None and after is not None, figures
    assert before.episodes == after.episodes == HELD_OUT
    assert after.accuracy - before.accuracy >= MARGIN, (before, after)


def test_the_run_trained_every_step_on_episodes_with_signal(guard_run):
    rows = [json.loads(line) for line in (guard_run / "metrics.jsonl").read_text().splitlines()]
    train = [row for row in rows if row["phase"] == "train"]
    assert [row["step"] for row in train] == list(range(1, STEPS + 1))
    assert all(row["grad_norm"] > 0 for row in train if row["advantage_abs_mean"] > 0)
    assert train[-1]["reward_mean"] > train[0]["reward_mean"], [row["reward_mean"] for row in train]
