"""Every bad input the command line knows, refused before a model, tokenizer, MCP server or engine
starts: one line naming the field and the fix, exit code 2. One table, so a new check is one new
row (the trainer's own table: tests/test_bad_inputs.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
