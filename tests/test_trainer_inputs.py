"""AgentTrainer checks every input at construction (ARCHITECTURE.md invariant 5), before any model loads."""

import json

import pytest
import reward_fixtures as fx

from aworld_train import AgentTrainer
from aworld_train.aworld.agent_spec import AgentSpec
from aworld_train.core.errors import AgentSpecError, ConfigError, DatasetError, ModelError, RewardError

AGENT = "aworld_train.agents.calculator:build_agent"
REWARD = "aworld_train.rewards.calculator:exact_answer"
ROWS = [{"prompt": "What is 1 + 1?", "ground_truth": 2}]


def make(**kwargs):
    args = {"agent": AGENT, "reward_func": REWARD, "train_dataset": ROWS, "test_dataset": ROWS}
    args.update(kwargs)
    # the run starts the calculator (env:), so construction does not expect it to answer yet
    if isinstance(args.get("config"), dict | None):
        args["config"] = {"env": [{"name": "calculator"}], **(args.get("config") or {})}
    return AgentTrainer(**args)


def test_valid_inputs_in_every_accepted_form(tmp_path):
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS * 3))
    trainer = make(config={"trainer": {"steps": 1}}, train_dataset=str(jsonl), run_path=tmp_path / "run")
    assert len(trainer.train_tasks) == 3 and trainer.test_tasks[0].ground_truth == 2
    assert trainer.config.data.train == str(jsonl) and trainer.config.reward.fn == REWARD
    assert trainer.run_dir == tmp_path / "run"
    from aworld_train.agents.calculator import build_agent

    assert make(agent=build_agent()).spec.name == "calculator_agent"
    assert make(reward_func=fx.verl_style).reward.reference == "reward_fixtures:verl_style"


def test_parquet_and_datasets_objects(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "q", "reward_model": {"ground_truth": "7"}}]), path)
    assert make(train_dataset=str(path)).train_tasks[0].ground_truth == "7"
    assert len(make(train_dataset=datasets.Dataset.from_list(ROWS * 2)).train_tasks) == 2


def test_unknown_backend():
    with pytest.raises(ConfigError, match="unknown backend 'vrl'"):
        make(config={"backend": "vrl"})


def test_unknown_config_key_with_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'max_assistant_turns'"):
        make(config={"rollout": {"max_assistant_turn": 3}})


def test_missing_prompt_or_ground_truth_columns():
    with pytest.raises(DatasetError, match=r"train_dataset row 1 has no 'prompt' column.*data.prompt_key"):
        make(train_dataset=[ROWS[0], {"question": "q", "ground_truth": 1}])
    with pytest.raises(
        DatasetError, match=r"test_dataset row 0 has no 'ground_truth' column.*data.answer_key"
    ):
        make(test_dataset=[{"prompt": "q", "answer": 1}])
    assert (
        make(
            config={"data": {"answer_key": "answer"}},
            train_dataset=[{"prompt": "q", "answer": 1}],
            test_dataset=None,
        )
        .train_tasks[0]
        .ground_truth
        == 1
    )


def test_missing_files(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        make(train_dataset=str(tmp_path / "missing.jsonl"))
    with pytest.raises(ConfigError, match="does not exist"):
        make(config=str(tmp_path / "missing.yaml"))
    with pytest.raises(ModelError, match="config.json"):
        make(config={"model": str(tmp_path)})


def test_reward_problems():
    with pytest.raises(RewardError, match="parameters"):
        make(reward_func=fx.wrong_signature)
    with pytest.raises(RewardError, match="lambda"):
        make(reward_func=lambda data_source, solution_str, ground_truth, extra_info=None: 1.0)
    with pytest.raises(RewardError, match="closure"):
        make(reward_func=fx.make_closure())


def test_agent_that_cannot_be_rebuilt():
    with pytest.raises(AgentSpecError, match="cannot be rebuilt"):
        make(agent=AgentSpec(name="x", agent_config={"max_steps": "many"}))
    with pytest.raises(AgentSpecError, match="failed"):
        make(agent="reward_fixtures:returns_text")


def test_no_dataset_at_all():
    with pytest.raises(DatasetError, match="no dataset"):
        make(train_dataset=None, test_dataset=None)


def test_a_config_naming_an_unreachable_server_is_refused_before_model_load(tmp_path, monkeypatch):
    import aworld_train.facade.trainer as trainer_module
    from aworld_train.agents.calculator import build_agent
    from aworld_train.core.errors import ToolServerError
    from aworld_train.env.launcher import free_port

    loaded = []
    monkeypatch.setattr(trainer_module, "check_model", lambda model: loaded.append(model))
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    data = [{"prompt": "What is 1 + 1?", "ground_truth": 2}]
    with pytest.raises(ToolServerError) as err:
        AgentTrainer(
            agent=build_agent(url=url),
            config={"env": []},
            reward_func="aworld_train.rewards.calculator:exact_answer",
            train_dataset=data,
        )
    message = str(err.value)
    assert "'calculator'" in message and url in message and "env up calculator" in message
    assert loaded == []  # refused before the model is even looked at
    # the same agent with the server listed under env: is started by the run: not checked here
    AgentTrainer(
        agent=build_agent(),
        config={"env": [{"name": "calculator"}]},
        reward_func="aworld_train.rewards.calculator:exact_answer",
        train_dataset=data,
    )
