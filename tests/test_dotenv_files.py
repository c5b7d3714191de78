"""Settings in `.env` files: read from the working folder and beside the config, the real
environment winning, and never written into the run folder."""

from __future__ import annotations

import yaml

from aworld_train import AgentTrainer

ROWS = [{"prompt": "What is 1 + 1?", "ground_truth": 2}]


def write_config(folder, run_dir):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "grpo.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "agent": "aworld_train.agents.calculator:build_agent",
                "reward": {"fn": "aworld_train.rewards.calculator:exact_answer"},
                "trainer": {"run_dir": str(run_dir)},
            }
        )
    )
    return path


def test_a_dotenv_beside_the_config_gives_the_agent_its_server(tmp_path, monkeypatch, calculator_server):
    import os

    import pytest

    from aworld_train.core.errors import AworldTrainError
    from aworld_train.env.launcher import free_port

    def without_the_variable():
        monkeypatch.setenv("CALCULATOR_MCP_URL", "unset")
        monkeypatch.delenv("CALCULATOR_MCP_URL")  # restored after the test, whatever the trainer set

    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path / "configs", tmp_path / "run")
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    without_the_variable()
    (config.parent / ".env").write_text(f"CALCULATOR_MCP_URL={dead}\n")
    with pytest.raises(AworldTrainError, match=dead):  # the .env's URL is the one checked
        AgentTrainer(config=str(config), train_dataset=ROWS, test_dataset=ROWS)
    without_the_variable()
    (config.parent / ".env").write_text(f"CALCULATOR_MCP_URL={calculator_server.url}\n")
    trainer = AgentTrainer(config=str(config), train_dataset=ROWS, test_dataset=ROWS)
    assert os.environ["CALCULATOR_MCP_URL"] == calculator_server.url
    # files we write keep the reference, never the value
    written = trainer.config.render() + trainer.spec.write(tmp_path / "run" / "agent_spec.yaml").read_text()
    assert "${CALCULATOR_MCP_URL" in written and calculator_server.url not in written


def test_the_environment_wins_then_the_working_folders_file(tmp_path, monkeypatch, calculator_server):
    from aworld_train.inputs.dotenv_files import load_env_files

    for name in ("DOTENV_A", "DOTENV_B", "DOTENV_C"):
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)
    monkeypatch.setenv("DOTENV_A", "from the environment")
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("DOTENV_A=working\nDOTENV_B=working\n")
    config = write_config(tmp_path / "configs", tmp_path / "run")
    (config.parent / ".env").write_text("DOTENV_A=config\nDOTENV_B=config\nDOTENV_C=config\n")
    assert load_env_files(config) == {"DOTENV_B": "working", "DOTENV_C": "config"}
    import os

    assert [os.environ[n] for n in ("DOTENV_A", "DOTENV_B", "DOTENV_C")] == [
        "from the environment",
        "working",
        "config",
    ]
