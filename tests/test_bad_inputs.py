"""Every bad input the project knows, refused before any model loads: the error names the field
and the fix. One table, so a new check is one new row."""

from __future__ import annotations

import re
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


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any model or tokenizer load is a failure of the test: checks come first."""
    from aworld_train.rollout.policies import models

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


# -- the command line -------------------------------------------------------------------------
CALC = str(ROOT / "examples/calculator/grpo_local.yaml")
VERL_CPU = str(ROOT / "examples/calculator/grpo_verl_cpu.yaml")
AREAL = str(ROOT / "examples/calculator/grpo_areal.yaml")
AGENTGYM_LIST = '[{"item_id": "textcraft_1"}, {"item_id": "textcraft_2"}]'
TOOLBENCH_QUERY = (
    '[{"query": "q", "query_id": 1, "api_list": [{"category_name": "c", "tool_name": "t", "api_name": "a"}]}]'
)


def _file(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text)
    return str(path)


def _folder(tmp: Path) -> str:
    (tmp / "a-folder").mkdir(exist_ok=True)
    return str(tmp / "a-folder")


def _config_beside_dotenv(tmp: Path, dotenv: str) -> str:
    """The calculator config copied into `tmp`, with a `.env` beside it."""
    text = Path(CALC).read_text().replace("examples/calculator", str(ROOT / "examples/calculator"))
    (tmp / ".env").write_text(dotenv)
    return _file(tmp, "grpo.yaml", text)


def _agentgym(tmp: Path, *flags: str) -> list[str]:
    return [
        "data",
        "agentgym",
        _file(tmp, "tasks.json", AGENTGYM_LIST),
        "--output",
        str(tmp / "rows.jsonl"),
        *flags,
    ]


# (case, argv built from a tmp folder, exit code, message pattern); every one is refused before a
# model, tokenizer, MCP server or engine starts (the `nothing_starts` fixture)
CLI_CASES = [
    ("config_file_missing", lambda t: ["run", str(t / "nope.yaml")], r"config file '.*nope.yaml' does not exist: give the path of a YAML file"),
    ("config_not_yaml", lambda t: ["run", _file(t, "bad.yaml", "a: [1, 2\nb: 3\n")], r"is not valid YAML \(line 2, column 2: expected ',' or '\]', but got ':'\): fix it there"),
    ("config_not_a_mapping", lambda t: ["run", _file(t, "list.yaml", "- 1\n")], r"holds a list: write a mapping of `key: value` lines"),
    ("override_into_a_value", lambda t: ["run", CALC, "backend.x=1"], r"'backend' is a value, not a section: write backend=value"),
    ("steps_zero", lambda t: ["run", CALC, "trainer.steps=0"], r"'trainer.steps': .*greater than or equal to 1 \(got 0\): set it to 1 or more"),
    ("not_a_boolean", lambda t: ["run", CALC, "trainer.eval_before=maybe"], r"'trainer.eval_before': .*: give true or false"),
    ("not_a_choice", lambda t: ["run", CALC, "algorithm.name=ppo"], r"'algorithm.name': Input should be 'grpo' \(got 'ppo'\): choose one of those"),
    ("dataset_empty_file", lambda t: ["run", CALC, f"data.train={_file(t, 'empty.jsonl', '')}"], r"empty.jsonl' has no rows: add rows"),
    ("dataset_is_directory", lambda t: ["run", CALC, f"data.train={_folder(t)}"], r"a-folder' is a folder: give the path of a .jsonl, .json or .parquet file"),
    ("dataset_not_json", lambda t: ["run", CALC, f"data.train={_file(t, 'bad.json', '[{')}"], r"bad.json' is not JSON \(.*\): it must hold a list of row objects"),
    ("dataset_json_not_list", lambda t: ["run", CALC, "data.train=" + _file(t, "obj.json", '{"a": 1}')], r"obj.json' holds a dict: it must hold a list of row objects"),
    ("dataset_row_not_mapping", lambda t: ["run", CALC, "data.train=" + _file(t, "rows.json", '["a"]')], r"row 0 is a str, not a dict: give each row as a mapping"),
    ("reward_file_missing", lambda t: ["run", CALC, "reward.fn=nofile.py:f"], r"cannot import 'nofile.py' .*: check the path"),
    ("reward_module_missing", lambda t: ["run", CALC, "reward.fn=no_such_module:f"], r"cannot import 'no_such_module' .*: check the module's name"),
    ("reward_not_callable", lambda t: ["run", CALC, "reward.fn=aworld_train.rewards.calculator:__doc__"], r"is a str, not callable: name a function"),
    ("reward_misspelt", lambda t: ["run", CALC, "reward.fn=aworld_train.rewards.calculator:exact_answr"], r"has no attribute 'exact_answr' \(did you mean 'exact_answer'\?\)"),
    ("agent_not_callable", lambda t: ["run", CALC, "agent=aworld_train.agents.calculator:__doc__"], r"is a str, not callable: name a function that returns an AWorld Agent"),
    ("agent_factory_fails", lambda t: ["run", CALC, f"agent={_file(t, 'a.py', 'def f():' + chr(10) + '    raise RuntimeError(7)')}:f"], r"failed \(RuntimeError: 7\): fix it so that, called with no arguments, it returns an AWorld Agent"),
    ("agent_yaml_missing", lambda t: ["run", CALC, f"agent={t / 'nope.yaml'}"], r"agent YAML '.*nope.yaml' does not exist: give the path of a YAML file"),
    ("agent_yaml_bad_field", lambda t: ["run", CALC, f"agent={_file(t, 'agent.yaml', 'name: x' + chr(10) + 'system_promt: hi' + chr(10))}"], r"unknown agent key 'system_promt' \(did you mean 'system_prompt'\?\); remove it or fix its spelling"),
    ("agent_yaml_not_yaml", lambda t: ["run", CALC, f"agent={_file(t, 'agent.yaml', 'name: [x' + chr(10))}"], r"agent YAML '.*' is not valid YAML \(line 2, column 1: .*\): fix it there"),
    ("dotenv_line_unparsable", lambda t: ["run", _config_beside_dotenv(t, "GOOD=1\nthis is bad\n")], r"\.env line 2: 'this is bad' is not a setting: write KEY=value"),
    ("env_variable_unset", lambda t: ["run", CALC, "env=[{name: calculator, env: {X: '${AWORLD_TRAIN_UNSET_X}'}}]"], r"env\[0\] \(calculator\): env.X is '\$\{AWORLD_TRAIN_UNSET_X\}', and AWORLD_TRAIN_UNSET_X is not set: export"),
    ("verl_unknown_key", lambda t: ["run", VERL_CPU, "verl.trainer.totl_training_steps=1"], r"verl.trainer.totl_training_steps is not a key of verl's ppo_trainer config \(did you mean verl.trainer.total_training_steps\?\)"),
    ("verl_legacy_trainer", lambda t: ["run", VERL_CPU, "verl.trainer.use_v1=false"], r"verl.trainer.use_v1=false selects verl's legacy trainer.*remove trainer.use_v1"),
    ("areal_unknown_key", lambda t: ["run", AREAL, "areal.actr.lr=1"], r"areal.actr is not a key of AReaL's GRPOConfig .*did you mean actor\?.*remove it or fix its spelling"),
    ("sft_data_empty", lambda t: ["sft", CALC, "sft.data=[]"], r"sft.data is empty: list trajectory files"),
    ("sft_data_missing", lambda t: ["sft", CALC, f"sft.data=[{t / 'nope.jsonl'}]"], r"sft.data: '.*nope.jsonl' does not exist: list trajectory files"),
    ("sft_data_bad_line", lambda t: ["sft", CALC, f"sft.data=[{_file(t, 'sft.jsonl', '{' + chr(10))}]"], r"sft.jsonl line 1 is not JSON \(.*\): each line must be one JSON object"),
    ("sft_record_unknown", lambda t: ["sft", CALC, "sft.data=[" + _file(t, "sft.jsonl", '{"a": 1}' + chr(10)) + "]"], r"record 1 has neither `conversations` \(AgentGym\) nor `segments`"),
    ("agentgym_unknown_env", lambda t: [*_agentgym(t, "--env", "textcraf")], r"--env 'textcraf' is not an AgentGym environment \(did you mean 'textcraft'\?\): choose one of"),
    ("agentgym_held_out_above_1", lambda t: [*_agentgym(t, "--env", "textcraft", "--held-out", "1.5")], r"--held-out 1.5 is not a share of the items: give a number from 0"),
    ("agentgym_held_out_negative", lambda t: [*_agentgym(t, "--env", "textcraft", "--held-out", "-0.3")], r"--held-out -0.3 is not a share"),
    ("agentgym_input_is_directory", lambda t: ["data", "agentgym", _folder(t), "--env", "textcraft", "--output", str(t / "o.jsonl")], r"a-folder' is a folder: give an AgentGym task list"),
    ("agentgym_not_json", lambda t: ["data", "agentgym", _file(t, "ag.json", "{"), "--env", "textcraft", "--output", str(t / "o.jsonl")], r"is not valid JSON \(.*\): give an AgentGym task list"),
    ("toolbench_input_is_directory", lambda t: ["data", "toolbench", "--input", _folder(t)], r"--input '.*a-folder' is a folder: give a StableToolBench query file"),
    ("toolbench_not_json", lambda t: ["data", "toolbench", "--input", _file(t, "q.json", "{")], r"is not a JSON file \(.*\): give a StableToolBench query file"),
    ("dtype_unknown", lambda t: ["run", CALC], r"AWORLD_TRAIN_DTYPE='fp8': use bfloat16, float32 or auto"),
    ("aworld_log_level_unknown", lambda t: ["run", CALC], r"AWORLD_TRAIN_AWORLD_LOG_LEVEL='LOUD' is not a log level; use one of"),
    ("toolbench_ratio", lambda t: ["data", "toolbench", "--input", _file(t, "q.json", TOOLBENCH_QUERY), "--split", "--train_ratio", "1.5"], r"--train_ratio must be between 0 and 1"),
    ("toolbench_not_a_list", lambda t: ["data", "toolbench", "--input", _file(t, "q.json", '{"query": "q"}')], r"holds a dict, not a list of records with query, query_id and api_list: give a StableToolBench query file"),
    ("toolbench_bad_record", lambda t: ["data", "toolbench", "--input", _file(t, "q.json", "[1]")], r"record 0 is a int, not an object with query and api_list; fix that record or leave it out"),
    ("config_key_twice", lambda t: ["run", _file(t, "twice.yaml", "rollout:\n  max_assistant_turns: 2\n  max_assistant_turns: 8\n")], r"is not valid YAML \(line 3, column 3: key 'max_assistant_turns' appears twice in one mapping \(line 2, then line 3\); keep one\): fix it there"),
    ("agent_yaml_key_twice", lambda t: ["run", CALC, f"agent={_file(t, 'agent.yaml', 'name: a' + chr(10) + 'name: b' + chr(10))}"], r"agent YAML .* is not valid YAML \(line 2, column 1: key 'name' appears twice"),
    ("swarm_names_twice", lambda t: ["run", CALC, f"agent={_file(t, 'team.yaml', 'name: t' + chr(10) + 'kind: workflow' + chr(10) + 'agents: [{name: a}, {name: a}]' + chr(10) + 'topology: [a]' + chr(10))}"], r"agent: agent names must be unique in a swarm; a appear twice: give each agent a name of its own$"),
    ("ray_address_env", lambda t: ["run", VERL_CPU], r"RAY_ADDRESS \(read as trainer.ray_address\): 'head-node:ray' is not a Ray address: give the head node's host:port .*; or unset it"),
    ("resume_without_checkpoint", lambda t: ["run", "--resume", CALC], r"--resume: .*checkpoints holds no checkpoint to continue from: run without --resume to start at step 0"),
    ("eval_seeds_empty", lambda t: ["eval", CALC, f"trainer.run_dir={t}", "--seeds"], r"--seeds was given no value: list at least one, e.g. --seeds 0 1 2"),
    ("eval_policy_url_unreachable", lambda t: ["eval", CALC, f"trainer.run_dir={t}", "--policy-url", "http://127.0.0.1:9/v1"], r"eval.policy_url \(--policy-url\), asked for model 'embedded:smollm2-135m': completions endpoint http://127.0.0.1:9/v1/completions did not answer .*; start that server, or fix the URL"),
]  # fmt: skip


@pytest.fixture
def nothing_starts(monkeypatch, no_model_loads):
    """Starting an MCP server or an engine fails the test too."""
    from aworld_train.engines import native
    from aworld_train.env import launcher

    def refuse(*args, **kwargs):
        raise AssertionError("a server or an engine started before the input was checked")

    monkeypatch.setattr(launcher, "start_server", refuse)
    monkeypatch.setattr(native, "launch", refuse)


@pytest.mark.parametrize(("case", "argv", "message"), CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_bad_input_on_the_command_line_is_one_line_and_exit_2(
    tmp_path, nothing_starts, monkeypatch, capsys, case, argv, message
):
    from aworld_train.facade import cli

    settings = {
        "dtype_unknown": ("AWORLD_TRAIN_DTYPE", "fp8"),
        "aworld_log_level_unknown": ("AWORLD_TRAIN_AWORLD_LOG_LEVEL", "LOUD"),
        "ray_address_env": ("RAY_ADDRESS", "head-node:ray"),
    }
    if case in settings:
        monkeypatch.setenv(*settings[case])
    args = argv(tmp_path)
    if args[0] in ("run", "sft"):
        args.append(f"trainer.run_dir={tmp_path / 'run'}")
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("aworld-train: error: ") and len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err
    assert not (tmp_path / "rows.jsonl").exists()  # a refused conversion writes nothing
