"""The command line, end to end."""

import json
import subprocess
import sys

import pytest
import yaml

CLI = [sys.executable, "-m", "aworld_train.facade.cli"]


def run(*args, timeout=600):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_render_prints_the_final_config_with_overrides():
    out = run("render", "examples/calculator/grpo_local.yaml", "algorithm.group_size=8")
    assert out.returncode == 0, out.stderr
    rendered = yaml.safe_load(out.stdout)
    assert rendered["algorithm"]["group_size"] == 8 and rendered["backend"] == "local"


def test_the_asynchronous_example_renders_with_its_switch_and_its_slow_tool():
    out = run("render", "examples/calculator/grpo_local_async.yaml")
    assert out.returncode == 0, out.stderr
    rendered = yaml.safe_load(out.stdout)
    assert rendered["algorithm"]["max_staleness"] == 1
    [calculator] = rendered["env"]
    assert calculator["env"]["CALCULATOR_LATENCY_P99_S"] == "8"


def test_render_explain_prints_every_setting_with_its_value_default_and_meaning():
    """Read from the config alone: a dataset this machine lacks does not stop it."""
    from aworld_train.inputs.settings_catalog import catalog

    out = run(
        "render",
        "examples/calculator/grpo_local.yaml",
        "rollout.top_p=0.9",
        "data.train=absent.jsonl",
        "--explain",
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "* rollout.top_p = 0.9  (default 1.0)" in lines  # an override
    assert "* rollout.temperature = 0.7  (default 1.0)" in lines  # the YAML
    assert "  rollout.top_k = 0  (default 0)" in lines  # left at its default
    assert '* env[0].name = "calculator"  (default required)' in lines
    assert "  algorithm.lora.rank = -  (default 16)" in lines  # no adapter in this config
    assert any(line.startswith("* algorithm: how the policy learns") for line in lines)
    assert "AdamW's learning rate" in out.stdout
    shown = {line[2:].split(" = ")[0].split(":")[0] for line in lines if line[:2] in ("* ", "  ")}
    expected = {s.name.replace("env[]", "env[0]") for s in catalog()}
    assert expected <= shown, sorted(expected - shown)


def test_bad_config_key_is_a_clear_error_not_a_traceback():
    out = run("render", "examples/calculator/grpo_local.yaml", "rollout.max_assistant_turn=3")
    assert out.returncode == 2
    assert "did you mean 'max_assistant_turns'" in out.stderr and "Traceback" not in out.stderr


def test_unknown_env_server():
    out = run("env", "up", "nope")
    assert out.returncode == 2 and "unknown env server 'nope'" in out.stderr


@pytest.mark.model
def test_eval_on_the_embedded_model_runs_to_the_end(tmp_path):
    out = run(
        "eval",
        "examples/calculator/grpo_local.yaml",
        "data.max_test=6",
        f"trainer.run_dir={tmp_path}",
        "--output",
        str(tmp_path / "t.jsonl"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])
    assert summary["episodes"] == 6 and 0.0 <= summary["accuracy"] <= 1.0
    assert sum(summary["statuses"].values()) == 6
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["segments"] and r["status"] for r in rows)
