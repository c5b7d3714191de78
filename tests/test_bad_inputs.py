"""Every bad input the project knows, refused before any model loads: the error names the field
and the fix. One table, so a new check is one new row. The command line's own table (its config
files, overrides, data commands and environment): tests/test_bad_cli_inputs.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aworld_train import AgentTrainer
from aworld_train.core.errors import (
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


def _process_agent(*command: str, **fields):
    from aworld_train.rollout.gateway.process_agent import ProcessAgent

    return ProcessAgent(name="outside", command=[sys.executable, *command], **fields)


def _agent_of_its_own_class():
    from aworld.agents.llm_agent import Agent
    from aworld.config import AgentConfig

    class MyAgent(Agent):
        async def async_policy(self, *args, **kwargs):  # code a worker's rebuilt Agent would not have
            return []

    return MyAgent(name="mine", system_prompt="x", conf=AgentConfig(llm_provider="aworld_train"))


SDK_AGENT = str(ROOT / "examples/calculator_gateway/sdk_agent.py")


# (case, trainer arguments built from a tmp folder, error type, message pattern)
CASES = [
    ("unknown backend", lambda t: {"config": {"backend": "vrl"}}, ConfigError, r"unknown backend 'vrl'"),
    (
        "unknown key",
        lambda t: {"config": {"rollout": {"max_assistant_turn": 3}}},
        ConfigError,
        r"did you mean 'max_assistant_turns'",
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
    (
        "agent of a class of its own, alone",
        lambda t: {"agent": _agent_of_its_own_class()},
        AgentSpecError,
        r"agent 'mine' is a .*MyAgent; the workers rebuild every agent .*its own code would be lost: "
        r"build it as an Agent .*or run it in a process of its own",
    ),
    (
        "process agent script missing",
        lambda t: {"agent": _process_agent(str(t / "missing_agent.py"))},
        AgentSpecError,
        r"agent 'outside': agent process .* exited with code 2 before it answered the hello line .*"
        r"missing_agent.py.*No such file.*Fix `command`",
    ),
    (
        "process agent exits at once",
        lambda t: {
            "agent": _process_agent("-c", "import sys; print('no licence', file=sys.stderr); sys.exit(3)")
        },
        AgentSpecError,
        r"exited with code 3 before it answered the hello line \(log .*\); its last lines: no licence",
    ),
    (
        "process agent speaks no protocol",
        lambda t: {
            "agent": _process_agent(
                "-c", "print('hello there'); import time; time.sleep(60)", start_timeout_s=1
            )
        },
        AgentSpecError,
        r"did not answer the trainer's hello line with \{\"type\": \"ready\", \"protocol\": 1\} within 1s "
        r"\(log .*\); its last lines: hello there\. The agent must speak the JSON-lines protocol",
    ),
    (
        "gateway_host not an address of this machine",
        lambda t: {"agent": _process_agent(SDK_AGENT, gateway_host="192.0.2.7")},
        AgentSpecError,
        r"gateway_host '192.0.2.7' is not an address of this machine \(.*\): use 127.0.0.1 \(the default\), "
        r"0.0.0.0 for every interface",
    ),
    (
        "agent endpoint not a URL",
        lambda t: {
            "config": {"rollout": {"agent_endpoints": {"helper": {"base_url": "helper-host", "model": "m"}}}}
        },
        ConfigError,
        r"'rollout.agent_endpoints.helper.base_url': 'helper-host' is not an http\(s\) URL with a host: give "
        r"the endpoint's base URL",
    ),
    (
        "literal API key not echoed",
        lambda t: {
            "config": {
                "rollout": {
                    "agent_endpoints": {
                        "helper": {
                            "base_url": "http://127.0.0.1:1/v1",
                            "model": "m",
                            "api_key": "sk-live-1234567",
                        }
                    }
                }
            }
        },
        ConfigError,
        r"(?s)^(?!.*sk-live-1234567).*api_key': write the key as a \$\{ENV_VAR\} reference .*\(value not shown",
    ),
    (
        "a data column's name is shown (not taken for a secret)",
        lambda t: {"config": {"data": {"prompt_key": ["question"]}}},
        ConfigError,
        r"'data.prompt_key': .*\(got \['question'\]\)",
    ),
    (
        "literal server secret not echoed",
        lambda t: {"config": {"env": [{"name": "calculator", "env": {"API_TOKEN": "tok-9876543"}}]}},
        ConfigError,
        r"(?s)^(?!.*tok-9876543).*env.API_TOKEN holds a literal secret; write it as a reference",
    ),
    (
        "ray_address not host:port",
        lambda t: {"config": {"backend": "verl", "trainer": {"ray_address": "head-node"}}},
        ConfigError,
        r"'trainer.ray_address': 'head-node' is not a Ray address: give the head node's host:port",
    ),
    (
        "reported reward of an in-process agent",
        lambda t: {"reward_func": "aworld_train.rewards.reported:reported_reward"},
        ConfigError,
        r"reads the reward an agent process reports .* 'calculator_agent' runs in the trainer's process and "
        r"never reports one: name a reward function that scores the trajectory, or run the agent as a ProcessAgent",
    ),
    (
        "reward file raising at import",
        lambda t: {
            "reward_func": write(t / "judge.py", b"raise RuntimeError('judge unreachable')\n") + ":score"
        },
        RewardError,
        r"importing '.*judge.py' raised RuntimeError: judge unreachable \(at .*judge.py, line 1\): fix the error there",
    ),
]


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
                "aworld_train.facade.cli",
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
            "aworld_train.facade.cli",
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
    from aworld_train.rollout.policies.models import EMBEDDED, embedded_gguf

    field = gguf.GGUFReader(embedded_gguf("smollm2-135m")).fields["llama.context_length"]
    assert int(field.parts[field.data[0]][0]) == EMBEDDED["smollm2-135m"]["context_length"]


def test_every_case_is_a_project_error():
    """The CLI turns these into one line and exit code 2 (see above)."""
    assert all(issubclass(case[2], AworldTrainError) for case in CASES)
