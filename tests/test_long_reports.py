"""The long task (examples/long_reports/): daily reports that overflow a 1k-token budget, an agent
that keeps each day's count in AWorld's own summary written by the policy, and the same agent cut at
the budget. Scripted policies: what each call saw, the segments, the statuses and the reward."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from rewriting_agents import EpisodePolicy, sampled

from aworld_train.agents.reports import build_agent, build_agent_without_summary, question
from aworld_train.aworld.specs import load_agent_spec
from aworld_train.env.reports import ReportError, report
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.samples.codec import episode_samples

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "examples/long_reports/grpo_local.yaml").read_text())
DEPOT, DAYS = "K7", 3
CRATES = [report(DEPOT, day)[1] for day in range(1, DAYS + 1)]
TASK = Task(
    "k7",
    [question(DEPOT, DAYS)],
    ground_truth=sum(CRATES),
    extra_info={"depot": DEPOT, "crates": CRATES},
    data_source="reports",
)
ANSWER = "; ".join(f"day {d}: {c}" for d, c in enumerate(CRATES, start=1)) + f". The answer is {sum(CRATES)}."


def notes(days: int) -> str:
    """The notes the policy writes once the first `days` reports are summarised."""
    return "; ".join(f"day {d}: {c} crates" for d, c in enumerate(CRATES[:days], start=1))


def read(day: int) -> str:
    call = {"name": "read_report", "arguments": {"depot": DEPOT, "day": day}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


@pytest.fixture(scope="module")
def reports_server():
    from aworld_train.env.launcher import start_server

    server = start_server("reports")
    yield server
    server.stop()


def run_episode(build, script, reports_server, make_runtime, tokenizer, im_end):
    spec = load_agent_spec(build(url=reports_server.url))
    policy = EpisodePolicy(tokenizer, script, im_end)
    limits = {k: CONFIG["rollout"][k] for k in ("max_assistant_turns", "max_new_tokens", "max_total_tokens")}
    runtime = make_runtime(policy, **limits)
    reward = RewardFunction.load(CONFIG["reward"]["fn"])
    return asyncio.run(Episode(spec, TASK, runtime, reward).run()), policy


def test_a_report_is_long_and_holds_one_count_and_a_missing_one_is_named():
    text, crates = report(DEPOT, 2)
    assert text == report(DEPOT.lower(), 2)[0]  # the same report however the code is cased
    assert text.count("Crates received:") == 1 and f"Crates received: {crates}." in text
    assert 2 <= crates <= 9 and len(text.splitlines()) >= 10
    with pytest.raises(ReportError, match="day must be a whole number from 1 to 9"):
        report(DEPOT, 0)


@pytest.mark.parametrize("split", ["train", "test"])
def test_the_shipped_tasks_are_the_generators_and_their_answers_the_reports(split):
    spec = importlib.util.spec_from_file_location("make_data", ROOT / "examples/long_reports/make_data.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    import random

    rng = random.Random(0)
    written = make.rows(400, rng, "train")
    rows = [
        json.loads(line) for line in (ROOT / f"examples/long_reports/{split}.jsonl").read_text().splitlines()
    ]
    assert (written if split == "train" else make.rows(100, rng, "test")) == rows
    for row in rows:
        depot, crates = row["extra_info"]["depot"], row["extra_info"]["crates"]
        assert len(crates) in (3, 4) and f"days 1 to {len(crates)}" in row["prompt"]
        assert crates == [report(depot, d)[1] for d in range(1, len(crates) + 1)]
        assert row["ground_truth"] == sum(crates)


def test_the_summarising_agent_answers_from_its_notes_within_the_budget(
    reports_server, make_runtime, tokenizer, im_end
):
    # AWorld summarises the [call, result] pairs before the last one once there are two: from the
    # second report on, each report's call is followed by notes on the reports before it
    script = [read(1)] + [s for day in range(2, DAYS + 1) for s in (read(day), notes(day - 1))] + [ANSWER]
    traj, policy = run_episode(build_agent, script, reports_server, make_runtime, tokenizer, im_end)
    assert traj.status == "ok" and traj.reward == 1.0, traj.error
    assert len(policy.generations) == len(script)  # each summary came before the next call
    budget = CONFIG["rollout"]["max_total_tokens"]
    assert all(len(seg.ids) <= budget for seg in traj.segments), [len(seg.ids) for seg in traj.segments]
    last = tokenizer.decode(policy.prompts[-1])
    # the last call sees the notes on the first reports and the last report, not the others
    assert notes(DAYS - 1) in last and report(DEPOT, DAYS)[0] in last
    assert not any(report(DEPOT, day)[0] in last for day in range(1, DAYS))
    written = [tokenizer.decode(sampled(seg)[0]) for seg in traj.segments]
    assert sum(text.startswith(notes(1)) for text in written) == DAYS - 1  # sampled: they train
    assert episode_samples(traj).in_baseline


def test_the_agent_cut_at_the_budget_ends_truncated_with_the_same_script(
    reports_server, make_runtime, tokenizer, im_end
):
    script = [read(day) for day in range(1, DAYS + 1)] + [ANSWER]
    traj, _ = run_episode(
        build_agent_without_summary, script, reports_server, make_runtime, tokenizer, im_end
    )
    assert traj.status == "truncated" and traj.reward == 0.0, (traj.status, traj.error)
    assert len(traj.segments) == 1 and traj.history_rewrites == 0


@pytest.mark.parametrize(
    "answer,read,score",
    [
        (ANSWER, [], 1.0),
        (f"day 1: {CRATES[0]}, day 2: {CRATES[1]}. The answer is 99.", [1, 2], 0.5 * 2 / 3),
        (f"day 1: {CRATES[0]}, day 2: {CRATES[1]}. The answer is 99.", [1], 0.5 * 1 / 3),  # day 2 guessed
        ("The answer is 99.", [1, 2, 3], 0.0),
        ("", [1, 2, 3], 0.0),
    ],
)
def test_the_reward_pays_the_total_or_half_a_point_for_the_days_read_and_named_right(answer, read, score):
    from aworld_train.rewards.reports import total_or_counts
    from aworld_train.rollout.episodes.trajectory import ToolCallRecord, Trajectory

    calls = [
        ToolCallRecord(id=str(day), name="read_report", arguments={"day": day}, result=report(DEPOT, day)[0])
        for day in read
    ]
    traj = Trajectory(episode_id="e", task_id="k7", final_answer=answer, tool_calls=calls)
    sample = {"ground_truth": sum(CRATES), "extra_info": {"depot": DEPOT, "crates": CRATES}}
    result = total_or_counts(traj, sample)
    assert result["score"] == pytest.approx(score) and result["days_read"] == len(read)
