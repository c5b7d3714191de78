"""Every bad input the project knows, refused before any model loads: the error names the field
and the fix. One table, so a new check is one new row."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aworld_train import AgentTrainer
from aworld_train.errors import (
    AgentSpecError,
    AworldTrainError,
    ConfigError,
    DatasetError,
    ModelError,
    RewardError,
)

ROOT = Path(__file__).resolve().parents[1]
AGENT = "aworld_train.agents.calculator:build_agent"
REWARD = "aworld_train.rewards.calculator:exact_answer"
ROWS = [{"prompt": "What is 1 + 1?", "ground_truth": 2}]


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _a_file(tmp: Path) -> Path:
    path = tmp / "a-file"
    path.write_text("")
    return path


# (case, trainer arguments built from a tmp folder, error type, message pattern)
CASES = [
    ("unknown backend", lambda t: {"config": {"backend": "vrl"}}, ConfigError, r"unknown backend 'vrl'"),
    (
        "unknown key",
        lambda t: {"config": {"rollout": {"max_turn": 3}}},
        ConfigError,
        r"did you mean 'max_turns'",
    ),
    (
        "bad value",
        lambda t: {"config": {"rollout": {"temperature": -1}}},
        ConfigError,
        r"rollout.temperature",
    ),
    (
        "group of one",
        lambda t: {"config": {"algorithm": {"group_size": 1}}},
        ConfigError,
        r"algorithm.group_size.*group of one gives every advantage 0.*use 2 or more",
    ),
    (
        "unknown env server",
        lambda t: {"config": {"env": [{"name": "calculater"}]}},
        ConfigError,
        r"unknown env server 'calculater'.*did you mean 'calculator'",
    ),
    (
        "beyond the context",
        lambda t: {"config": {"rollout": {"max_total_tokens": 100000}}},
        ConfigError,
        r"rollout.max_total_tokens=100000 is beyond embedded:smollm2-135m's context of 8192 tokens",
    ),
    (
        "new tokens beyond the context",
        lambda t: {"config": {"rollout": {"max_new_tokens": 9000}}},
        ConfigError,
        r"rollout.max_new_tokens=9000 .*set it to 8192 or less",
    ),
    ("unknown model", lambda t: {"config": {"model": str(t)}}, ModelError, r"no config.json there"),
    (
        "dataset not UTF-8",
        lambda t: {
            "train_dataset": write(
                t / "latin1.jsonl", '{"prompt": "caf\xe9", "ground_truth": 1}\n'.encode("latin-1")
            )
        },
        DatasetError,
        r"latin1.jsonl' is not UTF-8 text \(line 1, byte 15\): save it as UTF-8",
    ),
    (
        "malformed JSONL line",
        lambda t: {
            "train_dataset": write(
                t / "broken.jsonl",
                b'{"prompt": "a", "ground_truth": 1}\n\n{"prompt": "b", "ground_truth": 2}\n{"prompt": "c",\n',
            )
        },
        DatasetError,
        r"broken.jsonl' line 4: .* at column \d+: each line must be one JSON object",
    ),
    (
        "missing dataset file",
        lambda t: {"train_dataset": str(t / "nope.jsonl")},
        DatasetError,
        r"nope.jsonl' does not exist",
    ),
    (
        "empty prompt",
        lambda t: {"train_dataset": [{"prompt": "  ", "ground_truth": 1}]},
        DatasetError,
        r"row 0: 'prompt' user turn 0 is empty",
    ),
    (
        "missing prompt column",
        lambda t: {"train_dataset": [{"question": "q", "ground_truth": 1}]},
        DatasetError,
        r"no 'prompt' column.*data.prompt_key",
    ),
    ("run_dir is a file", lambda t: {"run_path": _a_file(t)}, ConfigError, r"is a file: choose a folder"),
    (
        "reward missing",
        lambda t: {"reward_func": "aworld_train.rewards.calculator:nope"},
        RewardError,
        r"has no attribute 'nope'",
    ),
    ("reward lambda", lambda t: {"reward_func": lambda *a: 0.0}, RewardError, r"[Ll]ambda"),
    ("agent missing", lambda t: {"agent": "aworld_train.agents.calculator:nope"}, AgentSpecError, r"nope"),
]


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any model or tokenizer load is a failure of the test: checks come first."""
    from aworld_train import models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    for name in ("load_model", "load_tokenizer", "resolve_model_path"):
        monkeypatch.setattr(models, name, refuse)


@pytest.mark.parametrize(("case", "arguments", "error", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_before_any_model_loads(
    tmp_path, no_model_loads, case, arguments, error, message
):
    args = {"agent": AGENT, "reward_func": REWARD, "train_dataset": ROWS, "test_dataset": ROWS}
    args["run_path"] = tmp_path / "run"
    given = arguments(tmp_path)
    # the run starts the agent's calculator server itself (nothing to reach at construction)
    given["config"] = {"env": [{"name": "calculator"}], **given.get("config", {})}
    args.update(given)
    with pytest.raises(error, match=message):
        AgentTrainer(**args)


def test_the_cli_reports_bad_input_in_one_line(tmp_path):
    """From the command line the same error is one line and exit code 2, no traceback."""
    a_file = _a_file(tmp_path)
    for command in ("run", "render"):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "aworld_train.cli",
                command,
                "examples/calculator/grpo_local.yaml",
                f"trainer.run_dir={a_file}",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith("aworld-train: error: ") and "is a file: choose a folder" in out.stderr
        assert "Traceback" not in out.stderr


def test_render_on_the_local_backend_checks_the_datasets(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "aworld_train.cli",
            "render",
            "examples/calculator/grpo_local.yaml",
            f"data.train={tmp_path / 'missing.jsonl'}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 2 and "missing.jsonl' does not exist" in out.stderr


def test_the_embedded_models_context_is_the_one_its_gguf_declares():
    gguf = pytest.importorskip("gguf")
    from aworld_train.models import EMBEDDED, embedded_gguf

    field = gguf.GGUFReader(embedded_gguf("smollm2-135m")).fields["llama.context_length"]
    assert int(field.parts[field.data[0]][0]) == EMBEDDED["smollm2-135m"]["context_length"]


def test_every_case_is_a_project_error():
    """The CLI turns these into one line and exit code 2 (see above)."""
    assert all(issubclass(case[2], AworldTrainError) for case in CASES)
