"""backend: verl's launch, with verl's entry point replaced (main_ppo needs GPUs): `run` checks the
machine before it launches, starts its servers and renders once, streams verl's output into
verl.log and names it when verl fails, and resumes only when asked; the GPU smoke script's model is
built from files in the repository."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("verl.experimental.agent_loop.agent_loop")

from backend_support import ROWS, trainer_for  # noqa: E402

from aworld_train import AgentTrainer  # noqa: E402
from aworld_train.core.errors import ConfigError  # noqa: E402


def test_a_failed_launch_is_an_error_that_names_the_log(tmp_path, monkeypatch, capsys):
    """`run` starts verl's entry point in a subprocess and streams its output into verl.log; an
    engine that exits non-zero makes `train()` raise and `aworld-train run` exit 1, with the log's
    path and last lines in the message. (The command itself is replaced: main_ppo needs GPUs.)"""
    import sys

    from aworld_train.core.errors import EngineFailed
    from aworld_train.engines.verl import render as verl_render
    from aworld_train.facade import cli
    from aworld_train.prerun import checks as preflight

    # the preflight has its own test below; vLLM cannot be installed here
    monkeypatch.setattr(preflight, "require_checks", lambda inputs, engine, run: None)
    monkeypatch.setattr(
        verl_render,
        "command",
        lambda folder, config_path: (
            sys.executable,
            "-c",
            "print('step:1 - reward 0.5'); raise SystemExit(3)",
        ),
    )
    log = tmp_path / "run" / "verl.log"
    with pytest.raises(
        EngineFailed, match=rf"(?s)verl exited with status 3.*{re.escape(str(log))}.*step:1 - reward 0.5"
    ):
        trainer_for(tmp_path, {"backend": "verl"}).train()
    assert "step:1 - reward 0.5" in log.read_text()
    assert "step:1 - reward 0.5" in capsys.readouterr().err

    monkeypatch.setattr(
        "aworld_train.facade.cli._trainer", lambda args: trainer_for(tmp_path / "cli", {"backend": "verl"})
    )
    assert cli.main(["run", "unused.yaml"]) == 1
    err = capsys.readouterr().err
    assert "aworld-train: error: verl exited with status 3" in err
    assert str(tmp_path / "cli" / "run" / "verl.log") in err and "| step:1 - reward 0.5" in err


def test_the_gpu_smoke_models_files_travel_with_the_repo(tmp_path):
    """scripts/gpu/verl_smoke.sh builds its model from files in the repository and renders the example."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, str(root / "scripts/gpu/make_tiny_model.py"), str(tmp_path / "tiny")],
        capture_output=True,
        text=True,
        check=True,
    )
    model = out.stdout.strip().splitlines()[-1]
    trainer = AgentTrainer(
        config=str(root / "examples/calculator/grpo_verl.yaml"),
        overrides=[f"model={model}", f"trainer.run_dir={tmp_path / 'run'}"],
        train_dataset=ROWS,
        test_dataset=ROWS[:2],
    )
    run = trainer.render()
    assert run.final.actor_rollout_ref.model.path == model
    assert run.final.trainer.n_gpus_per_node == 1


def test_a_run_resumes_only_when_asked(tmp_path, monkeypatch):
    """verl's resume_mode defaults to auto: a run without --resume would continue from old checkpoints."""
    import sys

    from aworld_train.engines.verl import render as verl_render
    from aworld_train.prerun import checks as preflight

    run = trainer_for(tmp_path, {"backend": "verl"}).render()
    assert run.final.trainer.resume_mode == "disable"
    monkeypatch.setattr(preflight, "require_checks", lambda inputs, engine, run: None)
    printed = "import sys; print('ARGS', sys.argv[1:])"
    monkeypatch.setattr(verl_render, "command", lambda folder, config_path: (sys.executable, "-c", printed))
    # a checkpoint verl was killed while writing: its tracker file, written last, does not name it
    checkpoints = tmp_path / "run" / "checkpoints"
    (checkpoints / "global_step_2").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"--resume: .*checkpoints holds no checkpoint to continue from"):
        trainer_for(tmp_path, {"backend": "verl"}).train(resume=True)
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("2")
    trainer_for(tmp_path, {"backend": "verl"}).train(resume=True)
    assert "ARGS ['trainer.resume_mode=auto']" in (tmp_path / "run" / "verl.log").read_text()


def test_run_checks_before_it_launches(tmp_path, monkeypatch, calculator_server):
    """`run` on verl fails on this machine before anything launches, naming what is missing."""
    import sys

    from aworld_train.engines.verl import render as verl_render

    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    launched = tmp_path / "launched"
    monkeypatch.setattr(
        verl_render,
        "command",
        lambda folder, config_path: (sys.executable, "-c", f"open({str(launched)!r}, 'w')"),
    )
    with pytest.raises(ConfigError, match=r"the run cannot start:\nFAIL module vllm: not installed") as error:
        trainer_for(tmp_path, {"backend": "verl"}).train()
    assert "MCP server" not in str(error.value)  # the server answered
    assert not launched.exists()


def test_run_starts_its_servers_and_renders_once(tmp_path, monkeypatch):
    """The checks and the launch share one render and one start of each env server: the engine
    runs with the servers the checks listed."""
    import sys

    from aworld_train.engines.verl import checks as verl_checks
    from aworld_train.engines.verl import render as verl_render
    from aworld_train.env import launcher

    renders, starts = [], []
    real_render, real_start = verl_render.render, launcher.start_server

    def counted_render(inputs):
        renders.append(inputs.run_dir)
        return real_render(inputs)

    def counted_start(name, **kwargs):
        server = real_start(name, **kwargs)
        starts.append(server.url)
        return server

    monkeypatch.setattr(verl_render, "render", counted_render)
    monkeypatch.setattr(launcher, "start_server", counted_start)
    monkeypatch.setattr(verl_checks, "package_checks", lambda final: [])  # vLLM cannot be installed here
    printed = "import os; print('URL', os.environ['CALCULATOR_MCP_URL'])"
    monkeypatch.setattr(verl_render, "command", lambda folder, config_path: (sys.executable, "-c", printed))
    result = trainer_for(tmp_path, {"backend": "verl"}).train()
    assert result["returncode"] == 0
    assert len(renders) == 1 and len(starts) == 1
    assert f"URL {starts[0]}" in (tmp_path / "run" / "verl.log").read_text()
