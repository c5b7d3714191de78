"""verl's own trainer on a CPU, resumed from its checkpoint with a tool server killed in the step
it runs: a 1-step run of examples/calculator/grpo_verl_cpu.yaml saves global_step_1; `aworld-train
run --resume` with trainer.steps=2 continues at step 2 from it (actor, optimizer and dataloader
state), and the calculator server is killed (SIGKILL) when the step's first episode asks for its
tools (tests/faults/verl_fault_reward.py, loaded by verl's agent-loop worker as the run's reward
file). The episodes that found it gone end as `tool_server_down` and leave their groups (verl gets
no output for them; fresh prompts take their groups' places), the supervisor starts the server
again, the step trains on full groups, and the run exits 0. A few minutes on 2 cores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from faults_support import record
from verl_cpu_support import calculator_rows, cpu_run, parse_steps

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

FAULT_REWARD = Path(__file__).with_name("verl_fault_reward.py")


def run(command: list[str], cwd: Path, **env: str) -> dict:
    environ = {
        **os.environ,
        "RAY_DEDUP_LOGS": "0",
        **env,
    }  # every worker's lines, the episodes' errors among them
    done = subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=1200)
    log = done.stdout + done.stderr
    return {"rc": done.returncode, "log": log, "steps": parse_steps(log)}


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    base = tmp_path_factory.mktemp("verl-resumed")
    command, run_dir, _ = cpu_run(
        sys.executable, "examples/calculator/grpo_verl_cpu.yaml", base, calculator_rows(2),
        "trainer.steps=1", "trainer.save_every=1",
    )  # fmt: skip
    first = run(command, base)
    assert first["rc"] == 0 and sorted(first["steps"]) == [1], first["log"][-4000:]
    marker = base / "killed-pid"
    again = [arg for arg in command if not arg.startswith(("trainer.steps=", "reward.fn="))]
    again += ["trainer.steps=2", f"reward.fn={FAULT_REWARD}:distinct_chars", "--resume"]
    return {**run(again, base, FAULT_KILL_MARKER=str(marker)), "marker": marker, "run_dir": run_dir}


def test_verl_resumes_at_the_step_after_its_checkpoint(resumed):
    assert resumed["rc"] == 0, resumed["log"][-4000:]
    assert sorted(resumed["steps"]) == [2]  # global_step_1's weights, optimizer and data order, then step 2
    assert (resumed["run_dir"] / "checkpoints/global_step_2").is_dir()
    assert (resumed["run_dir"] / "checkpoints/latest_checkpointed_iteration.txt").read_text().strip() == "2"


def test_a_server_killed_in_verls_run_costs_only_the_episodes_that_found_it_gone(resumed):
    assert resumed["rc"] == 0, resumed["log"][-4000:]
    killed = int(resumed["marker"].read_text())  # the fault happened, on a real process
    log = resumed["log"]
    assert "exited with code -9" in log and "answers again on port" in log, log[-4000:]
    metrics = resumed["steps"][2]
    down = metrics["training/aworld/status/tool_server_down"]
    failed, trained = metrics["training/aworld/failed"], metrics["training/aworld/trained"]
    statuses = {k: v for k, v in metrics.items() if k.startswith("training/aworld/")}
    assert down >= 1, statuses  # at least the episode that met the kill
    assert failed == down, statuses  # and nothing else failed
    # the step's 2 groups each kept at least one episode (a group none of whose episodes can train
    # is replaced by a fresh prompt); a failed one left its group, whose others trained
    assert 2 <= trained <= 4 and metrics["training/aworld/episodes"] == trained + failed, statuses
    record(
        fault="`env:` MCP server SIGKILL in verl's CPU run, resumed from global_step_1",
        where="step 2, as its first episode asked for its tools",
        run="restarted on its port; fresh prompts took the failed groups' places; exit 0",
        steps="2 of 2 (step 2 after the resume)",
        lost=f"{down:g} (`tool_server_down`) of {metrics['training/aworld/episodes']:g} episodes; {trained:g} trained",
        resources=f"server pid {killed} killed; the run's processes ended with it (exit 0)",
    )
