"""Evaluation as AgentGym users run it: k samples per task under fixed seeds, pass@k and mean@k
with their spread across seeds, several checkpoints in one table and plot; the policy local
or an OpenAI-compatible completions endpoint that returns token ids (vLLM's shape)."""

from __future__ import annotations

import asyncio
import csv
import json
import re
import shutil
import subprocess
import sys

import pytest
from fake_completions_server import FakeCompletionsServer

from aworld_train.core.errors import ModelError
from aworld_train.evaluation.checkpoints import resolve_checkpoint
from aworld_train.evaluation.report import EvalReport, pass_at_k
from aworld_train.evaluation.suite import run_suite
from aworld_train.evaluation.suite_table import CheckpointResult
from aworld_train.inputs.config import load_config
from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.policies.client import Generation, SamplingParams
from aworld_train.rollout.policies.completions import CompletionsPolicy, PolicyServerError, parse_completion

CALC = "examples/calculator/grpo_local.yaml"


# -- pass@k -------------------------------------------------------------------------------
def test_pass_at_k_matches_hand_computed_values():
    # n=4 samples, c=2 correct, k=2: 1 - C(2,2)/C(4,2) = 1 - 1/6
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    # n=5, c=2, k=3: 1 - C(3,3)/C(5,3) = 1 - 1/10
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(2, 1, 3)


def _report(rewards_per_task: list[list[float | None]]) -> EvalReport:
    trajs = [
        Trajectory(
            episode_id=f"{t}-{i}", task_id=f"task-{t}", reward=r, status="ok" if r is not None else "error"
        )
        for t, rewards in enumerate(rewards_per_task)
        for i, r in enumerate(rewards)
    ]
    return EvalReport.of(trajs, 1.0, samples_per_task=len(rewards_per_task[0]))


def test_report_pass_at_k_and_mean_at_k_over_tasks():
    # task 0: 2 of 4 right; task 1: none right (one failed episode, one partial reward); task 2: all right
    report = _report([[1.0, 0.0, 0.0, 1.0], [0.5, 0.0, None, 0.0], [1.0, 1.0, 1.0, 1.0]])
    assert report.pass_at(1) == pytest.approx((0.5 + 0 + 1) / 3)
    assert report.pass_at(2) == pytest.approx((5 / 6 + 0 + 1) / 3)
    assert report.pass_at(4) == pytest.approx(2 / 3)
    assert report.mean_at_k == pytest.approx((0.5 + 0.125 + 1.0) / 3)
    summary = report.summary()
    assert summary["pass@4"] == pytest.approx(0.6667, abs=1e-4) and summary["k"] == 4


def test_spread_across_seeds_is_the_sample_std():
    result = CheckpointResult("m", "m", 2)
    result.reports = {0: _report([[1.0, 0.0], [0.0, 0.0]]), 1: _report([[1.0, 1.0], [1.0, 0.0]])}
    stats = result.stats("pass@1")  # 0.25 and 0.75
    assert stats["mean"] == pytest.approx(0.5) and stats["std"] == pytest.approx(0.3535534, rel=1e-5)
    assert (stats["min"], stats["max"]) == (0.25, 0.75)


def test_tables_with_k1_do_not_repeat_pass_at_1(tmp_path):
    from aworld_train.evaluation.suite_table import SuiteResult

    result = CheckpointResult("m", "m", 1)
    result.reports = {0: _report([[1.0], [0.0]])}
    suite = SuiteResult(1, [0], [result], tmp_path)
    suite.write()
    assert (
        suite.markdown().splitlines()[0]
        == "| checkpoint | pass@1 | mean@1 | tool calls | episodes | failed |"
    )
    header = suite.table_csv.read_text().splitlines()[0].split(",")
    assert len(header) == len(set(header)) and "pass@1_mean" in header and suite.plot.is_file()


# -- the completions endpoint as policy ------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_policy(tiny_model_dir, tokenizer, stop_ids):
    from aworld_train.rollout.policies.local import LocalPolicy
    from aworld_train.rollout.policies.models import load_model

    return LocalPolicy(load_model(str(tiny_model_dir)), tokenizer, stop_ids)


def _vllm_sampling(body: dict) -> SamplingParams:
    return SamplingParams(
        max_new_tokens=body["max_tokens"],
        temperature=body["temperature"],
        top_p=body["top_p"],
        top_k=body.get("top_k", 0),
        seed=body.get("seed"),
    )


def test_completions_policy_returns_what_the_server_sampled(tiny_policy, tokenizer, stop_ids):
    """A vLLM-shaped server backed by a real model: the client gets the sampled ids and logprobs exactly."""
    server = FakeCompletionsServer(
        lambda model, ids, body: tiny_policy.generate_batch([ids], _vllm_sampling(body))[0]
    )
    try:
        policy = CompletionsPolicy(server.url, "tiny", stop_token_ids=stop_ids)
        prompt = tokenizer.encode("What is 2 + 2?")
        sampling = SamplingParams(max_new_tokens=12, temperature=1.0, top_k=50, seed=7)
        remote = asyncio.run(policy.generate(prompt, sampling))
        local = tiny_policy.generate_batch([prompt], sampling)[0]
        assert remote.token_ids == local.token_ids and remote.finish_reason == local.finish_reason
        # the second call reuses the first's cached prompt prefix: same tokens, logprobs to float noise
        assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-4)
        body = server.bodies[-1]
        assert body["prompt"] == prompt and body["model"] == "tiny"
        assert body["return_tokens_as_token_ids"] is True and body["logprobs"] == 0
        assert body["seed"] == 7 and body["top_k"] == 50 and body["stop_token_ids"] == stop_ids
        # a busy server (503) is retried
        server.fail_next = 2
        assert asyncio.run(policy.generate(prompt, sampling)).token_ids == local.token_ids
    finally:
        server.stop()


def test_completions_shapes_and_refusals():
    # vLLM >= 0.10.2 with return_token_ids: ids come as a list
    gen = parse_completion(
        {
            "choices": [
                {
                    "token_ids": [5, 6],
                    "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1.0, -2.0]},
                    "finish_reason": "length",
                }
            ]
        }
    )
    assert gen.token_ids == [5, 6] and gen.finish_reason == "length"
    with pytest.raises(PolicyServerError, match="return-tokens-as-token-ids"):
        parse_completion(
            {"choices": [{"logprobs": {"tokens": ["hi"], "token_logprobs": [-1.0]}, "finish_reason": "stop"}]}
        )
    with pytest.raises(PolicyServerError, match="no logprobs"):
        parse_completion({"choices": [{"text": "hi", "finish_reason": "stop"}]})
    dead = CompletionsPolicy("http://127.0.0.1:9/v1", "m", retries=1)
    with pytest.raises(PolicyServerError, match="did not answer after 2 tries"):
        asyncio.run(dead.generate([1, 2], SamplingParams()))


# -- checkpoints --------------------------------------------------------------------------
def test_checkpoint_references(tmp_path, tiny_model_dir):
    run = tmp_path / "run"
    for step in (2, 10):
        shutil.copytree(tiny_model_dir, run / "checkpoints" / f"step_{step:06d}")
    (run / "checkpoints" / "step_000020").mkdir()  # no model in it: not a checkpoint
    assert resolve_checkpoint(str(run)) == str(run / "checkpoints" / "step_000010")
    assert resolve_checkpoint(str(tiny_model_dir)) == str(tiny_model_dir)
    assert resolve_checkpoint("embedded:smollm2-135m") == "embedded:smollm2-135m"
    with pytest.raises(ModelError, match="--checkpoints"):
        resolve_checkpoint(str(tmp_path / "nothing"))


def test_two_local_checkpoints_under_fixed_seeds(tmp_path, tiny_model_dir, calculator_spec):
    """Two copies of one model: the same seeds draw the same tokens, whatever the batches."""
    from aworld_train.inputs.dataset import load_tasks
    from aworld_train.inputs.reward import RewardFunction

    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run / "checkpoints" / "step_000003")
    cfg = load_config(
        CALC,
        [
            f"model={tiny_model_dir}",
            "env=[]",
            "rollout.max_new_tokens=6",
            "rollout.max_assistant_turns=1",
            "rollout.episode_timeout_s=60",
            f"eval.checkpoints={json.dumps([str(tiny_model_dir), str(run)])}",
            "eval.k=2",
            "eval.seeds=[3]",
        ],
    )
    tasks = load_tasks("examples/calculator/test.jsonl")[:2]
    reward = RewardFunction.load("aworld_train.rewards.calculator:exact_answer")
    suite = run_suite(
        cfg,
        calculator_spec,
        tasks,
        reward,
        out_dir=tmp_path / "eval",
        trajectories_path=tmp_path / "all.jsonl",
        show_progress=False,
    )
    labels = [r.label for r in suite.results]
    assert labels == [tiny_model_dir.name, "run/step_000003"]
    first, second = (
        [json.loads(line) for line in (tmp_path / "eval" / label / "seed_3.jsonl").read_text().splitlines()]
        for label in labels
    )
    assert len(first) == len(second) == 4
    ids = [[r["segments"][0]["response_ids"] for r in rows if r["segments"]] for rows in (first, second)]
    assert ids[0] and ids[0] == ids[1]
    assert len({tuple(x) for x in ids[0]}) > 1  # the samples of a task differ: each has its own seed
    assert len((tmp_path / "all.jsonl").read_text().splitlines()) == 8
    assert (tmp_path / "eval" / "eval_table.md").is_file() and (tmp_path / "eval" / "eval_plot.png").is_file()


# -- the command, over an endpoint serving two models --------------------------------------
def _scripted_answers(tokenizer, im_end):
    from aworld_train.env.calculator import evaluate

    def reply(model: str, ids: list[int], body: dict) -> Generation:
        if len(ids) == 1:  # eval's probe of the endpoint before it starts anything
            return Generation([im_end], [-0.1], "stop")
        question = re.findall(r"What is ([^?]+)\?", tokenizer.decode(ids))[-1]
        value = int(float(evaluate(question)))
        # "solver" is always right; "guesser" only where the answer is even
        answer = value if model == "solver" or value % 2 == 0 else value + 1
        out = tokenizer.encode(f"The answer is {answer}.", add_special_tokens=False) + [im_end]
        return Generation(out, [-0.1] * len(out), "stop")

    return reply


def test_eval_command_k4_two_checkpoints_writes_table_and_plot(tmp_path, tokenizer, im_end):
    tasks = [json.loads(line) for line in open("examples/calculator/test.jsonl")][:4]
    even = sum(int(t["ground_truth"]) % 2 == 0 for t in tasks) / 4
    server = FakeCompletionsServer(_scripted_answers(tokenizer, im_end), with_token_ids=True)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "aworld_train.facade.cli", "eval", CALC, "data.max_test=4",
             f"trainer.run_dir={tmp_path}", "--k", "4", "--seeds", "0", "1",
             "--checkpoints", "solver", "guesser", "--policy-url", server.url],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    folder = tmp_path / "eval"
    table = (folder / "eval_table.md").read_text()
    assert "| solver | 1.000 ± 0.000 | 1.000 ± 0.000 | 1.000 ± 0.000 |" in table and "| guesser |" in table, (
        table + (tmp_path / "eval_trajectories.jsonl").read_text()[:3000]
    )
    rows = {r["checkpoint"]: r for r in csv.DictReader(open(folder / "eval_table.csv"))}
    assert float(rows["guesser"]["pass@1_mean"]) == pytest.approx(even)
    assert float(rows["guesser"]["pass@4_mean"]) == pytest.approx(even)
    assert int(rows["solver"]["episodes"]) == 4 * 4 * 2
    assert (folder / "eval_plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list(csv.DictReader(open(folder / "eval_seeds.csv")))) == 4
    # one probe per model first, then one request per sample (one turn each); every sample of a seed
    # has its own seed, the same for both models
    assert [(b["model"], b["prompt"]) for b in server.bodies[:2]] == [("solver", [0]), ("guesser", [0])]
    del server.bodies[:2]
    assert len(server.bodies) == 4 * 4 * 2 * 2
    seeds = {m: [b["seed"] for b in server.bodies if b["model"] == m] for m in ("solver", "guesser")}
    assert len(set(seeds["solver"])) == 32 and set(seeds["solver"]) == set(seeds["guesser"])
    assert all(isinstance(i, int) for b in server.bodies for i in b["prompt"])
    lines = (tmp_path / "eval_trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 64 and {json.loads(x)["checkpoint"] for x in lines} == {"solver", "guesser"}
    # every episode's tokens, per checkpoint and seed: `aworld-train view` compares them task by task
    from aworld_train.viewer.store import Run
    from aworld_train.viewer.views import compare_sets

    run = Run(tmp_path)
    sets = {s.name: s for s in run.sets()}
    assert all(sets[f"eval/{m}/seed_{s}"].has_token_files for m in ("solver", "guesser") for s in (0, 1))
    compared = compare_sets(run, "eval/guesser/seed_0", run, "eval/solver/seed_0")
    assert len(compared["tasks"]) == 4 and all(len(t["a"]) == len(t["b"]) == 4 for t in compared["tasks"])
    assert compared["a_mean"] == pytest.approx(even) and compared["b_mean"] == 1.0


def test_eval_against_a_policy_that_answers_in_text_is_refused_before_anything_starts(
    tmp_path, tokenizer, im_end, monkeypatch, capsys
):
    """An endpoint that returns token text instead of ids (an unreachable one is in
    test_bad_cli_inputs.py's table): refused with the reason before any server starts or tokenizer loads."""
    from aworld_train.env import launcher
    from aworld_train.facade import cli
    from aworld_train.rollout.policies import models

    def refuse(*args, **kwargs):
        raise AssertionError("a server or tokenizer started before the endpoint was checked")

    monkeypatch.setattr(launcher, "start_server", refuse)
    monkeypatch.setattr(models, "load_tokenizer", refuse)
    server = FakeCompletionsServer(_scripted_answers(tokenizer, im_end), tokens_as_ids=False)
    try:
        code = cli.main(["eval", CALC, f"trainer.run_dir={tmp_path}", "--policy-url", server.url])
    finally:
        server.stop()
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(
        "aworld-train: error: eval.policy_url (--policy-url), asked for model 'embedded:smollm2-135m'"
    )
    assert "--return-tokens-as-token-ids" in err and len(server.bodies) == 1
