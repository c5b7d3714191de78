"""ToolBench: the converter, the MCP server over a StableToolBench cache stand-in, the weighted reward."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aworld_train.env.toolbench import catalog
from aworld_train.env.toolbench.virtual import answer_from_cache, cache_file, request_body
from aworld_train.facade.cli import main as cli
from aworld_train.inputs.dataset import load_tasks
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.batch import run_episodes
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.policies.client import ScriptedPolicy

SAMPLE = Path(__file__).parents[1] / "examples" / "toolbench"
QUERIES = SAMPLE / "G1_sample.json"
CACHE = SAMPLE / "tool_cache"
REWARD = RewardFunction.load("aworld_train.rewards.toolbench:toolbench_reward")
KEY = "tb-test-key"


def _sample_module():
    spec = importlib.util.spec_from_file_location("toolbench_sample", SAMPLE / "make_sample.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _sample_module().scripted_calls()


# -- the converter ---------------------------------------------------------------------------
def test_converter_writes_rows_and_verl_parquet(tmp_path, capsys):
    assert cli(["data", "toolbench", "--input", str(QUERIES), "--output", str(tmp_path / "all.parquet")]) == 0
    rows = pq.read_table(tmp_path / "all.parquet").to_pylist()
    records = json.loads(QUERIES.read_text())
    assert len(rows) == len(records) == 8
    first = rows[0]
    assert first["id"] == "G1_sample-101" and first["data_source"] == "toolbench"
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]
    assert first["prompt"][1]["content"] == records[0]["query"]
    assert first["reward_model"]["style"] == "rule"
    truth = json.loads(first["reward_model"]["ground_truth"])
    assert truth == {
        "relevant_apis": [["Open Meteo Lite", "Current Weather"]],
        "relevant_functions": ["current_weather_for_open_meteo_lite"],
    }
    assert {k: first["extra_info"][k] for k in ("index", "sample_id", "category")} == {
        "index": 0,
        "sample_id": "101",
        "category": "Weather",
    }
    # the rows are our dataset rows too: the system message, the query, the ground truth
    tasks = load_tasks(str(tmp_path / "all.parquet"))
    assert tasks[1].user_turns == [records[1]["query"]] and tasks[1].system.startswith("You are a tool-using")
    assert "8 rows" in capsys.readouterr().out


def test_converter_split_and_max_samples(tmp_path):
    train, val = tmp_path / "train.jsonl", tmp_path / "val.parquet"
    args = ["data", "toolbench", "--input", str(QUERIES), "--split", "--train_output", str(train)]
    assert cli([*args, "--val_output", str(val), "--train_ratio", "0.75"]) == 0
    train_rows = [json.loads(line) for line in train.read_text().splitlines()]
    val_rows = pq.read_table(val).to_pylist()
    assert (len(train_rows), len(val_rows)) == (6, 2)
    assert sorted(r["id"] for r in train_rows + val_rows) == [f"G1_sample-{q}" for q in range(101, 109)]
    # the same seed gives the same split
    assert cli([*args, "--val_output", str(tmp_path / "v2.parquet"), "--train_ratio", "0.75"]) == 0
    assert [json.loads(x)["id"] for x in train.read_text().splitlines()] == [r["id"] for r in train_rows]
    # --max_samples takes the first N records, then splits them
    assert cli([*args, "--val_output", str(val), "--max_samples", "5", "--train_ratio", "0.6"]) == 0
    ids = [json.loads(x)["id"] for x in train.read_text().splitlines()] + [
        r["id"] for r in pq.read_table(val).to_pylist()
    ]
    assert sorted(ids) == [f"G1_sample-{q}" for q in range(101, 106)] and len(pq.read_table(val)) == 2


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda r: r[2].pop("api_list"), "record 2 (query_id 103): 'api_list' must be a non-empty list"),
        (
            lambda r: r[1]["api_list"][0].pop("category_name"),
            "record 1 (query_id 102) api_list[0]: 'category_name'",
        ),
        (lambda r: r[3].update(query_id=None), "record 3: 'query_id' must be a number or a string"),
        (lambda r: r[4].update({"relevant APIs": [["Recipe Box", "Bake"]]}), "is not in its api_list"),
        (lambda r: r[5].update(query_id=101), "record 5 repeats query_id 101 of record 0"),
        (lambda r: r.insert(0, {"id": "x", "conversations": []}), "that is ToolBench's fine-tuning layout"),
    ],
)
def test_converter_names_the_bad_record(tmp_path, capsys, mutate, expected):
    records = json.loads(QUERIES.read_text())
    mutate(records)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(records))
    assert cli(["data", "toolbench", "--input", str(bad), "--output", str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err
    assert expected in err and "bad.json" in err, err


def test_names_and_cache_layout_follow_stabletoolbench():
    assert catalog.standardize("Kick.com API | Kick API") == "kick_com_api_kick_api"
    assert catalog.standardize("3D Models") == "get_3d_models"
    assert catalog.api_part("ID") == "is_id"
    assert catalog.standard_category("News, Media") == "News_Media"
    api = catalog.Api("Data", "Book Finder", "Search Books")
    assert api.function_name == "search_books_for_book_finder"
    body = request_body(api, {"q": "Solaris"}, KEY)
    assert body == {
        "category": "Data",
        "tool_name": "book_finder",
        "api_name": "search_books",
        "tool_input": '{"q": "Solaris"}',
        "strip": "",
        "toolbench_key": KEY,
    }
    path = cache_file(CACHE, body["category"], body["tool_name"], body["api_name"])
    assert path == CACHE / "Data" / "book_finder_for_Data" / "search_books.json"
    assert "{'q': 'Solaris'}" in json.loads(path.read_text())  # keys are str(dict), as the server's
    assert answer_from_cache(CACHE, body)["error"] == ""
    assert "no recorded response" in answer_from_cache(CACHE, {**body, "tool_input": "{}"})["error"]


# -- episodes against the cache-backed server --------------------------------------------------
@pytest.fixture(scope="module")
def rows_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("toolbench") / "rows.jsonl"
    assert cli(["data", "toolbench", "--input", str(QUERIES), "--output", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def servers(rows_file):
    from aworld_train.env.launcher import start_server

    cache = start_server(
        "toolbench-cache",
        env={"AWORLD_TRAIN_TOOLBENCH_CACHE": str(CACHE), "AWORLD_TRAIN_TOOLBENCH_EXPECTED_KEY": KEY},
    )
    url = f"http://127.0.0.1:{cache.port}/virtual"
    tools = start_server(
        "toolbench",
        env={
            "AWORLD_TRAIN_TOOLBENCH_TASKS": str(rows_file),
            "TOOLBENCH_SERVER_URL": url,
            "TOOLBENCH_KEY": KEY,
        },
    )
    yield tools, cache
    tools.stop()
    cache.stop()


@pytest.fixture
def spec(servers):
    from aworld_train.agents.toolbench import build_agent
    from aworld_train.aworld.specs import load_agent_spec

    return load_agent_spec(build_agent(url=servers[0].url))


def call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def scripted(tokenizer, im_end, tasks, wrong: bool = False) -> ScriptedPolicy:
    """Finds the task by its query and the step by the assistant turns so far; calls the task's
    APIs (with arguments the cache does not hold, when `wrong`), then Finish, then stops."""
    by_query = {t.user_turns[0]: t for t in tasks}

    def step(prompt_ids: list[int]) -> str:
        text = tokenizer.decode(prompt_ids)
        task = next(t for q, t in by_query.items() if q in text)
        parsed = catalog.task_from_row(task.row)
        names = {(a.tool, a.api): n for n, a in parsed.functions().items()}
        calls = [(names[(tool, api)], args) for tool, api, args in SCRIPT[parsed.query_id]]
        index = text.rsplit("<|im_start|>user", 1)[1].count("<|im_start|>assistant") - 1
        if index < len(calls):
            name, args = calls[index]
            return call(name, {k: f"{v}-nope" for k, v in args.items()} if wrong else args)
        if index == len(calls):
            return call(
                catalog.FINISH, {"return_type": "give_answer", "final_answer": f"done with {task.id}"}
            )
        return "Finished."

    return ScriptedPolicy(tokenizer, step, im_end, latency_s=0.005)


@pytest.fixture(scope="module")
def tasks(rows_file):
    return load_tasks(str(rows_file))


async def test_right_apis_and_finish_score_the_full_reward(tokenizer, im_end, spec, tasks, make_runtime):
    task = next(t for t in tasks if t.id == "G1_sample-103")  # two APIs, the second uses the first's answer
    runtime = make_runtime(scripted(tokenizer, im_end, tasks), tool_block="auto", max_assistant_turns=6)
    traj = await Episode(spec, task, runtime, REWARD).run()
    assert traj.status == "ok", traj.error
    assert [c.name for c in traj.tool_calls] == [
        "search_books_for_book_finder",
        "book_details_for_book_finder",
        "Finish",
    ]
    assert json.loads(json.loads(traj.tool_calls[1].result)["response"]) == {"title": "Solaris", "pages": 204}
    assert traj.reward == pytest.approx(1.1)
    assert traj.reward_extras == pytest.approx(
        {
            "format_reward": 0.1,
            "function_call_reward": 0.2,
            "finish_reward": 0.3,
            "finish_bonus": 0.5,
            "error_penalty": 0.0,
            "format": 1.0,
            "function_call": 1.0,
            "finish": 1.0,
            "errors": 0.0,
            "solved": 1.0,
        }
    )


async def test_an_erroring_agent_gets_the_penalty(tokenizer, im_end, spec, tasks, make_runtime):
    task = next(t for t in tasks if t.id == "G1_sample-102")
    runtime = make_runtime(
        scripted(tokenizer, im_end, tasks, wrong=True), tool_block="auto", max_assistant_turns=6
    )
    traj = await Episode(spec, task, runtime, REWARD).run()
    assert traj.status == "ok", traj.error
    assert [c.error for c in traj.tool_calls] == [True, True, False], [c.result for c in traj.tool_calls]
    assert "no recorded response" in traj.tool_calls[0].result
    # format 1 (0.1) + no API succeeded (0) + finished (0.3) + no bonus + penalty (-0.5)
    assert traj.reward == pytest.approx(0.1 + 0.3 - 0.5)
    assert traj.reward_extras["error_penalty"] == -0.5 and traj.reward_extras["finish_bonus"] == 0.0


async def test_64_concurrent_episodes_keep_to_their_tasks(
    tokenizer, im_end, spec, tasks, make_runtime, servers
):
    runtime = make_runtime(
        scripted(tokenizer, im_end, tasks),
        tool_block="auto",
        max_assistant_turns=6,
        concurrency=64,
        episode_timeout_s=300,
    )
    trajs = await run_episodes(spec, list(tasks), runtime, REWARD, samples_per_task=8)
    assert len(trajs) == 64
    assert [t.status for t in trajs] == ["ok"] * 64, [t.error for t in trajs if t.status != "ok"]
    assert [t.reward for t in trajs] == pytest.approx([1.1] * 64)
    cache = _sample_module().QUERIES
    answers = {str(q): [json.dumps(r) for *_, r in calls] for q, _, _, calls in cache}
    for traj in trajs:
        query_id = traj.task_id.rsplit("-", 1)[1]
        got = [json.loads(c.result)["response"] for c in traj.tool_calls[:-1]]
        assert got == answers[query_id], traj.task_id  # each episode saw its own task's answers


async def test_a_down_stabletoolbench_server_fails_the_episode(
    tokenizer, im_end, tasks, make_runtime, rows_file
):
    from aworld_train.agents.toolbench import build_agent
    from aworld_train.aworld.specs import load_agent_spec
    from aworld_train.env.launcher import free_port, start_server

    dead = f"http://127.0.0.1:{free_port()}/virtual"
    env = {"AWORLD_TRAIN_TOOLBENCH_TASKS": str(rows_file), "TOOLBENCH_SERVER_URL": dead}
    with start_server("toolbench", env=env) as server:
        spec = load_agent_spec(build_agent(url=server.url))
        runtime = make_runtime(scripted(tokenizer, im_end, tasks), tool_block="auto", max_assistant_turns=6)
        traj = await Episode(spec, tasks[0], runtime, REWARD).run()
    assert traj.status == "tool_server_down", (traj.status, traj.error)
    assert "did not answer" in traj.error and traj.reward is None


# -- the weights from a native verl YAML ----------------------------------------------------------
NATIVE = SAMPLE / "grpo_toolbench_trainer.yaml"


def native_trainer(servers, tmp_path, overrides=()):
    from aworld_train import AgentTrainer
    from aworld_train.agents.toolbench import build_agent

    return AgentTrainer(
        agent=build_agent(url=servers[0].url),
        config=str(NATIVE),
        reward_func="aworld_train.rewards.toolbench:toolbench_reward",
        train_dataset=str(SAMPLE / "train.jsonl"),
        test_dataset=str(SAMPLE / "val.jsonl"),
        run_path=tmp_path / "run",
        overrides=list(overrides),
    )


def test_native_verl_reward_model_weights_reach_the_reward(servers, tmp_path):
    pytest.importorskip("verl")
    import yaml

    weights = {
        "format_reward_weight": 0.1,
        "function_call_reward_weight": 0.2,
        "finish_reward_weight": 0.3,
        "error_penalty": -0.5,
        "finish_bonus": 0.5,
    }
    trainer = native_trainer(servers, tmp_path, ["verl.reward_model.error_penalty=-0.7"])
    assert trainer.config.backend == "verl"
    assert trainer.reward.kwargs == {**weights, "error_penalty": -0.7}
    run = trainer.render()
    assert "format_reward_weight" not in run.final.reward_model  # verl never sees them
    loop = yaml.safe_load((run.folder / "agent_loop.yaml").read_text())
    assert json.dumps(loop).count('"error_penalty": -0.7') == 1  # our loop passes them to the reward
    # the same key in reward.kwargs with another value is a contradiction
    from aworld_train.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"error_penalty \(-1.0 vs -0.5\)"):
        native_trainer(servers, tmp_path, ["reward.kwargs.error_penalty=-1.0"])


def test_a_literal_key_in_a_server_env_is_refused():
    from aworld_train.core.errors import ConfigError
    from aworld_train.inputs.config import load_config

    with pytest.raises(ConfigError, match=r"env.TOOLBENCH_KEY holds a literal secret"):
        load_config({"env": [{"name": "toolbench", "env": {"TOOLBENCH_KEY": "abc123"}}]})
    cfg = load_config({"env": [{"name": "toolbench", "env": {"TOOLBENCH_KEY": "${TOOLBENCH_KEY}"}}]})
    assert "${TOOLBENCH_KEY}" in cfg.render()
