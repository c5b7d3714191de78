"""`aworld-train check`: a run's needs checked before any model loads, each failure naming its fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from aworld_train.env.launcher import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CALCULATOR = "examples/calculator/grpo_local.yaml"


def check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aworld_train.facade.cli", "check", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_a_runnable_config_passes(tmp_path):
    out = check(CALCULATOR, f"trainer.run_dir={tmp_path / 'run'}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok   MCP server 'calculator'" in out.stdout and "4 of 4 checks passed" in out.stdout
    assert "ok   chat template: generic template; tool parser hermes (rollout.tool_parser)" in out.stdout
    assert "ok   sampler: transformers: the trainer's own model samples" in out.stdout


def test_a_vllm_sampler_without_its_environment_fails_with_its_fix(tmp_path):
    missing = tmp_path / "no-vllm" / "python"
    out = check(
        CALCULATOR,
        f"trainer.run_dir={tmp_path / 'run'}",
        "rollout.engine=vllm",
        env={"AWORLD_TRAIN_VLLM_PYTHON": str(missing)},
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert (
        f"FAIL sampler: rollout.engine=vllm: no vLLM environment at {missing}: run `make setup-vllm`"
        in out.stdout
    )


def test_an_unreachable_server_fails_with_its_fix(tmp_path):
    # no env: servers, and the agent's URL points at a port nothing listens on
    closed = f"http://127.0.0.1:{free_port()}/mcp"
    out = check(
        CALCULATOR, f"trainer.run_dir={tmp_path / 'run'}", "env=[]", env={"CALCULATOR_MCP_URL": closed}
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"FAIL inputs: MCP server 'calculator' at {closed} does not answer" in out.stdout
    assert "env up calculator" in out.stdout


def test_a_file_as_run_folder_fails_with_its_fix(tmp_path):
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("")
    out = check(CALCULATOR, f"trainer.run_dir={a_file}")
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"FAIL inputs: trainer.run_dir='{a_file}' is a file: choose a folder" in out.stdout
