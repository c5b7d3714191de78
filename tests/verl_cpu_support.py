"""For the CPU runs of verl's trainer: their reward, and verl's step lines read back.

A random tiny model never answers right, so exact_answer would give every sample 0 and GRPO no
gradient; this dense stand-in scores the share of distinct characters in the answer, which
differs between samples of a group."""

import os
import subprocess
import sys
from pathlib import Path

FAILING_TRUTH = -1  # the task whose reward fails: its episodes end as reward_error, inside verl's run
ROOT = Path(__file__).resolve().parents[1]


def distinct_chars(data_source, solution_str, ground_truth, extra_info=None):
    if str(ground_truth) == str(FAILING_TRUTH):
        raise ValueError("this task's reward fails on purpose")
    text = solution_str or ""
    return {"score": len(set(text)) / max(1, len(text)), "chars": len(text)}


def parse_steps(log: str) -> dict[int, dict[str, float]]:
    """verl's console logger line per step: `step:N - key:value - key:value ...`."""
    from aworld_train.engines.verl.step_lines import parse_step_line

    return dict(parsed for line in log.splitlines() if (parsed := parse_step_line(line)))


def calculator_rows(n: int) -> list[str]:
    """The first `n` rows of the calculator example's training tasks."""
    return (ROOT / "examples/calculator/train.jsonl").read_text().splitlines()[:n]


# the mechanics runs' settings over the example's (the demo's): 2 steps of 2 prompts x 2 samples,
# short episodes, no held-out evaluation unless a test asks for one
MECHANICS = (
    "algorithm.group_size=2",
    "algorithm.lr=1.0e-4",
    "rollout.max_assistant_turns=2",
    "rollout.max_new_tokens=24",
    "rollout.max_response_tokens=128",
    "rollout.temperature=1.0",
    "data.batch_size=2",
    "trainer.steps=2",
    "trainer.save_every=2",
    "trainer.eval_before=false",
    "trainer.eval_after=false",
)


def cpu_run(
    python: str, config: str, tmp: Path, train_rows: list[str], *overrides: str
) -> tuple[list[str], Path, Path]:
    """An engine's CPU run as `aworld-train run` launches it: `config` (relative to the repository)
    with the MECHANICS settings for a verl config, on a tiny random model made here with `python`,
    the tasks `train_rows` and this file's dense reward, then `overrides`. The command, the run
    folder and the model folder."""
    model = tmp / "tiny"
    subprocess.run([python, str(ROOT / "scripts/gpu/make_tiny_model.py"), str(model)], check=True)
    train = tmp / "train.jsonl"
    train.write_text("\n".join(train_rows) + "\n")
    run_dir = tmp / "run"
    command = [
        python,
        "-m",
        "aworld_train.facade.cli",
        "run",
        str(ROOT / config),
        *(MECHANICS if "verl" in Path(config).name else ()),
        f"trainer.run_dir={run_dir}",
        f"model={model}",
        f"reward.fn={ROOT / 'tests/verl_cpu_support.py'}:distinct_chars",
        f"data.train={train}",
        f"data.test={ROOT / 'examples/calculator/test.jsonl'}",
        *overrides,
    ]
    return command, run_dir, model


def launch_cpu_run(tmp: Path, train_rows: list[str], *overrides: str):
    """verl's CPU run of examples/calculator/grpo_verl_cpu.yaml (see `cpu_run`), started in the
    background (an `early_runs.Started`); its result holds the exit status, the log, verl's steps,
    the run and model folders."""
    # imported here: verl's workers import this file by path for its reward, outside tests/
    import early_runs

    command, run_dir, model = cpu_run(
        sys.executable, "examples/calculator/grpo_verl_cpu.yaml", tmp, train_rows, *overrides
    )

    def collect(returncode: int, log: str) -> dict:
        return {"rc": returncode, "log": log, "steps": parse_steps(log), "run_dir": run_dir, "model": model}

    env = {**os.environ, "RAY_DEDUP_LOGS": "0"}  # every worker's lines, the episodes' errors among them
    return early_runs.launch(command, tmp, 1400, collect, cwd=tmp, env=env)


SHARED_MEMORY = Path("/dev/shm")
SHM_BEFORE = "shm_before.txt"


def note_shared_memory(tmp: Path) -> None:
    """What /dev/shm holds before a run that starts vLLM (`assert_vllm_left_nothing` compares)."""
    (tmp / SHM_BEFORE).write_text("\n".join(_shared_memory()))


def assert_vllm_left_nothing(served: Path, tmp: Path) -> None:
    """No vLLM server started from `served` still runs, its model folder is gone, and it left no
    shared memory in /dev/shm (a server killed outright leaves hundreds of MB there)."""
    assert not list(served.glob("aworld-train-vllm-*"))
    left = subprocess.run(["pgrep", "-f", str(served)], capture_output=True, text=True).stdout.split()
    assert left == []
    before = set((tmp / SHM_BEFORE).read_text().split())
    assert {name for name in _shared_memory() if name.startswith("psm_")} <= before


def _shared_memory() -> list[str]:
    return sorted(p.name for p in SHARED_MEMORY.iterdir()) if SHARED_MEMORY.is_dir() else []
