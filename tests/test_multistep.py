"""The tasks with headroom: the multi-step arithmetic task (its one-operation tool, its data, its
per-turn reward) and the story-problem team (its data, its two agents)."""

import importlib.util
import json
import random
from pathlib import Path

import pytest

from aworld_train.env.calculator import CalculatorError, evaluate
from aworld_train.env.multistep import one_operation
from aworld_train.rewards.multistep import exact_answer_and_steps
from aworld_train.rollout.episodes.trajectory import ToolCallRecord, Trajectory
from aworld_train.rollout.tokens.ledger import Segment

ROOT = Path(__file__).resolve().parents[1]


def _script(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(path: str) -> list[dict]:
    return [json.loads(line) for line in (ROOT / path).read_text().splitlines()]


@pytest.mark.parametrize(
    "expression,answer", [("12 + 7", "12 + 7 = 19"), ("19*3", "19 * 3 = 57"), (" -4 - 5 ", "-4 - 5 = -9")]
)
def test_the_tool_computes_one_operation_and_says_which(expression, answer):
    assert one_operation(expression) == answer


@pytest.mark.parametrize(
    "expression", ["(12 + 7) * 3", "12 + 7 + 1", "19", "12 / 4", "2 ** 3", "x + 1", "", "1 +"]
)
def test_the_tool_refuses_anything_but_one_operation_and_says_so(expression):
    with pytest.raises(CalculatorError, match="one operation per call: two numbers and one of"):
        one_operation(expression)


@pytest.mark.parametrize("split", ["train", "test"])
def test_the_shipped_tasks_are_the_generators_and_each_chain_holds(split):
    """The shipped files are what make_data.py writes at its defaults; every question needs 2 to
    4 operations, each step's value is the last one's after its operation, and the last is the answer."""
    make = _script("examples/multistep/make_data.py")
    rows = _rows(f"examples/multistep/{split}.jsonl")
    rng = random.Random(0)
    written = make.rows(400, rng, "train")
    assert (written if split == "train" else make.rows(100, rng, "test")) == rows
    for row in rows:
        steps, expression = row["extra_info"]["steps"], row["extra_info"]["expression"]
        numbers, ops = expression.split()[::2], expression.split()[1::2]
        assert 2 <= len(steps) == len(ops) <= 4 and set(ops) <= {"+", "-", "*"}
        value = int(numbers[0])
        for op, operand, step in zip(ops, numbers[1:], steps, strict=True):  # left to right
            value = int(evaluate(f"{value} {op} {operand}"))
            assert value == step
        assert steps[-1] == row["ground_truth"]
        assert row["prompt"] == f"What is {expression}, computed left to right?"


def _episode(calls: list[tuple[str, str, bool]], answer: str, turns: int) -> Trajectory:
    """An episode of `turns` LLM calls: a call per turn (expression, result, refused), then the answer."""
    seg = Segment([1], list(range(turns)), [1] * turns, [-0.1] * turns, turn_starts=list(range(1, turns + 1)))
    traj = Trajectory(episode_id="e", task_id="t", segments=[seg], final_answer=answer, num_turns=turns)
    traj.tool_calls = [
        ToolCallRecord(f"c{i}", "calculate", {"expression": e}, r, refused, turn=i)
        for i, (e, r, refused) in enumerate(calls)
    ]
    return traj


def test_the_reward_pays_each_intermediate_value_in_order_and_penalises_refused_calls():
    """A wrong answer scores below 1 (held-out accuracy counts 1 only) by the share of its chain reached."""
    sample = {"ground_truth": 86, "extra_info": {"steps": [42, 126, 86]}}
    right = _episode(
        [
            ("17 + 25", "17 + 25 = 42", False),
            ("42 * 3", "42 * 3 = 126", False),
            ("126 - 40", "126 - 40 = 86", False),
        ],
        "86.",
        4,
    )
    assert exact_answer_and_steps(right, sample) == {
        "score": 1.0, "parsed": True, "steps_reached": 3, "turn_rewards": [0.1, 0.1, 0.1, 0.0]
    }  # fmt: skip
    # a refused call, a value out of order (the second step's value first earns nothing), no answer
    wrong = _episode(
        [
            ("(17 + 25) * 3", "Error: one operation per call", True),
            ("42 * 3", "42 * 3 = 126", False),
            ("17 + 25", "17 + 25 = 42", False),
        ],
        "I am not sure.",
        4,
    )
    out = exact_answer_and_steps(wrong, sample)
    # no exact answer: half a point for the whole chain, a third of it reached
    assert out["score"] == pytest.approx(0.5 / 3) and out["steps_reached"] == 1
    assert out["turn_rewards"] == [0.0, 0.0, 0.1, 0.0]
    assert exact_answer_and_steps(wrong, sample, partial_credit=0.0)["score"] == 0.0
    penalised = exact_answer_and_steps(wrong, sample, error_penalty=0.2)
    assert penalised["turn_rewards"] == [-0.2, 0.0, 0.1, 0.0]
    # no partial credit without an answer: an episode that ran out of turns (or tokens) calling the tool
    for status in ("max_turns", "truncated"):
        wrong.status = status
        unanswered = exact_answer_and_steps(wrong, sample)
        assert unanswered["score"] == 0.0 and unanswered["steps_reached"] == 1
        assert unanswered["turn_rewards"] == [0.0, 0.0, 0.1, 0.0]  # credit per turn keeps its step bonus
    # a value the tool prints rounded reaches the step, compared as the final answer is
    thirds = {"ground_truth": 2, "extra_info": {"steps": [1 / 3, 2]}}
    rounded = _episode([("1 / 3", "1 / 3 = 0.3333333333", False)], "0.3", 2)
    assert exact_answer_and_steps(rounded, thirds)["steps_reached"] == 1


@pytest.mark.parametrize("split", ["train", "test"])
def test_each_story_says_its_expression_and_its_answer(split):
    make = _script("examples/story_team/make_data.py")
    rows = _rows(f"examples/story_team/{split}.jsonl")
    rng = random.Random(0)
    written = make.rows(400, rng, "train")
    assert (written if split == "train" else make.rows(100, rng, "test")) == rows
    for row in rows:
        expression = row["extra_info"]["expression"]
        assert int(evaluate(expression)) == row["ground_truth"]
        numbers = [int(n) for n in expression.replace("(", " ").replace(")", " ").split() if n.isdigit()]
        story_numbers = [int(w.strip(".")) for w in row["prompt"].split() if w.strip(".").isdigit()]
        assert numbers == story_numbers  # every number of the expression is the story's, in order


def test_the_story_team_is_a_reader_then_the_calculator_agent():
    from aworld_train.agents.story_team import build_team
    from aworld_train.aworld.swarm_spec import spec_from_swarm

    spec = spec_from_swarm(build_team())
    assert [agent.name for agent in spec.agents] == ["reader", "calculator_agent"]


def _team_episode(handed: str, answer: str) -> Trajectory:
    """A story team's episode: the reader handed the calculator agent `handed`; the team answered."""
    traj = Trajectory(episode_id="e", task_id="t", final_answer=answer)
    system = {"role": "system", "content": "You are a careful calculator assistant."}
    traj.prompt_inputs = {"calculator_agent": {"messages": [system, {"role": "user", "content": handed}]}}
    return traj


def test_the_story_reward_gives_the_reader_half_a_point_for_the_right_expression():
    from aworld_train.rewards.story_team import answer_or_expression

    sample = {"ground_truth": 185, "extra_info": {"expression": "(59 - 22) * 5"}}
    assert answer_or_expression(_team_episode("(59 - 22) * 5", "The answer is 185."), sample)["score"] == 1.0
    # the reader was right (any form of the same value), the calculator agent was not
    for handed in ("(59 - 22) * 5", "5 * (59-22)"):
        out = answer_or_expression(_team_episode(handed, "The answer is 145."), sample)
        assert out["score"] == 0.5 and out["reader_right"]
    # the expression on its first line, before the reader's own (wrong) working-out, counts
    out = answer_or_expression(_team_episode("(59 - 22) * 5 = 145\nFay has 145 books.", "145"), sample)
    assert out["score"] == 0.5 and out["reader_right"]
    # a wrong expression, or a story retold instead of an expression, earns nothing
    for handed in ("59 - 22 * 5", "Fay has 59 - 22 = 27 books.", "59 - 22 = 37\n37 * 5 = 185"):
        out = answer_or_expression(_team_episode(handed, "The answer is 145."), sample)
        assert out["score"] == 0.0 and not out["reader_right"]
    assert (
        answer_or_expression(_team_episode("(59 - 22) * 5", "145"), sample, reader_credit=0.0)["score"] == 0.0
    )


def test_each_agent_of_the_story_team_can_be_rewarded_for_its_own_part():
    from aworld_train.rewards.story_team import each_agents_part

    sample = {"ground_truth": 185, "extra_info": {"expression": "(59 - 22) * 5"}}

    def parts(handed: str, answer: str) -> tuple[float, dict]:
        out = each_agents_part(_team_episode(handed, answer), sample)
        return out["score"], out["agent_rewards"]

    assert parts("(59 - 22) * 5", "The answer is 185.") == (1.0, {"reader": 1.0, "calculator_agent": 1.0})
    # the reader was right, the calculator agent answered something else than what it was handed
    assert parts("(59 - 22) * 5", "The answer is 145.") == (0.5, {"reader": 1.0, "calculator_agent": 0.0})
    # the reader was wrong, the calculator agent computed what it was handed: its part was done
    assert parts("59 - 22 * 5", "The answer is -51.") == (0.0, {"reader": 0.0, "calculator_agent": 1.0})
    # nothing it could compute was handed over: neither did its part
    assert parts("Fay has some books.", "The answer is 185.") == (
        1.0,
        {"reader": 0.0, "calculator_agent": 0.0},
    )
