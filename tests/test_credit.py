"""Credit per turn (`algorithm.advantage`): each estimator against a hand computation, per-turn
rewards on the tokens of their turn through the local learner, anchor states on real episodes, and
the refusals."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from credit_support import two_turn_episode

from aworld_train.core.errors import RewardError
from aworld_train.engines.local.samples import build_samples, collate
from aworld_train.rollout.episodes.trajectory import ToolCallRecord, Trajectory
from aworld_train.rollout.samples.credit import Credit, Turn, anchor_text, returns_to_go, turn_advantages
from aworld_train.rollout.tokens.ledger import Segment

# One task's group of three samples (r_t per turn, the state each turn acted on):
# A: question -> tool result "5" -> reward 1 at its answer; B: the same states, reward 0;
# C: question -> result "7" -> answer "x": reward 1 on its third turn.
GROUP = [
    [Turn(0.0, "q"), Turn(1.0, "r=5")],
    [Turn(0.0, "q"), Turn(0.0, "r=5")],
    [Turn(0.0, "q"), Turn(0.0, "r=7"), Turn(1.0, "x")],
]
EPS = 1e-6


def _close(got: list[list[float]], want: list[list[float]]) -> bool:
    """Nested per-unit, per-turn values equal within 1e-9 (the same shape)."""
    return [len(u) for u in got] == [len(u) for u in want] and all(
        a == pytest.approx(b, abs=1e-9)
        for u, v in zip(got, want, strict=True)
        for a, b in zip(u, v, strict=True)
    )


def _std(values):  # unbiased, as verl's GRPO
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def test_grpo_gives_every_turn_the_episode_advantage():
    # returns 1, 0, 1: mean 2/3, std sqrt(1/3)
    high, low = (1 / 3) / (math.sqrt(1 / 3) + EPS), (-2 / 3) / (math.sqrt(1 / 3) + EPS)
    out = turn_advantages("grpo", GROUP, ["g"] * 3)
    assert _close(out, [[high, high], [low, low], [high, high, high]])


def test_discounted_compares_each_return_to_go_with_the_group():
    assert returns_to_go([0.0, 0.0, 1.0], 0.9) == pytest.approx([0.81, 0.9, 1.0])
    firsts = [0.9, 0.0, 0.81]  # G_0 of A, B, C at gamma 0.9
    mean, scale = sum(firsts) / 3, _std([1.0, 0.0, 1.0]) + EPS  # scaled by the returns undiscounted
    expected = [
        [(0.9 - mean) / scale, (1.0 - mean) / scale],
        [(0.0 - mean) / scale, (0.0 - mean) / scale],
        [(0.81 - mean) / scale, (0.9 - mean) / scale, (1.0 - mean) / scale],
    ]
    assert _close(turn_advantages("discounted", GROUP, ["g"] * 3, gamma=0.9), expected)


def test_gigpo_adds_a_step_advantage_over_recurring_states():
    episode = turn_advantages("grpo", GROUP, ["g"] * 3)
    # state "q" recurs in all three (G_0: 0.9, 0, 0.81); "r=5" in A and B (G_1: 1, 0); "r=7" and
    # "x" are seen once: their turns keep the episode-level advantage alone (the paper's fallback)
    q_mean, q_scale = 1.71 / 3, _std([1.0, 0.0, 1.0]) + EPS  # scaled by their G_0 undiscounted
    r5 = 0.5 / (_std([1.0, 0.0]) + EPS)
    expected = [
        [episode[0][0] + 0.5 * (0.9 - q_mean) / q_scale, episode[0][1] + 0.5 * r5],
        [episode[1][0] + 0.5 * (0.0 - q_mean) / q_scale, episode[1][1] - 0.5 * r5],
        [episode[2][0] + 0.5 * (0.81 - q_mean) / q_scale, episode[2][1], episode[2][2]],
    ]
    out = turn_advantages("gigpo", GROUP, ["g"] * 3, gamma=0.9, step_weight=0.5)
    assert _close(out, expected)
    # C's last two states are its own: nothing to compare them with, so no step-level term
    assert out[2][1] == out[2][2] == pytest.approx(episode[2][0])


def test_the_discount_alone_never_gives_an_advantage_the_size_of_a_reward_difference():
    # four answers of equal reward, three after one call and one after two (its first state, the
    # question, shared by all): the discount tells them apart by a few hundredths; scaled by their
    # own tiny std it had given the longer one -1.5 (gigpo) and every last turn +2.6 (discounted)
    def episode(calls: int, reward: float = 0.25) -> list[Turn]:
        return [Turn(0.0, "q"), *(Turn(0.0, f"r{i}") for i in range(1, calls)), Turn(reward, "a")]

    tied = [episode(1), episode(1), episode(1), episode(2)]
    for estimator in ("gigpo", "discounted"):
        out = turn_advantages(estimator, tied, ["g"] * 4, gamma=0.95)
        assert max(abs(a) for unit in out for a in unit) < 0.05, (estimator, out)
    # a real reward difference in the same group is still scaled to the size GRPO gives it
    mixed = [episode(1), episode(1, 0.0), episode(1), episode(2)]
    grpo = turn_advantages("grpo", mixed, ["g"] * 4)
    for estimator in ("gigpo", "discounted"):
        out = turn_advantages(estimator, mixed, ["g"] * 4, gamma=0.95)
        assert out[1][0] < -0.5 * abs(grpo[1][0]) and out[0][-1] > 0, (estimator, out)


def test_without_turn_rewards_every_estimator_is_grpo_at_gamma_one():
    sparse = [[Turn(0.0, "q"), Turn(r, f"s{i}")] for i, r in enumerate((1.0, 0.0, 0.0, 1.0))]
    grpo = turn_advantages("grpo", sparse, ["g"] * 4)
    assert _close(turn_advantages("discounted", sparse, ["g"] * 4, gamma=1.0), grpo)
    assert _close(turn_advantages("gigpo", sparse, ["g"] * 4, step_weight=0.0), grpo)


def test_groups_and_states_never_mix_across_tasks():
    # the same state text in two tasks' groups: each compares only within its own group
    units = [[Turn(1.0, "s")], [Turn(0.0, "s")], [Turn(5.0, "s")], [Turn(5.0, "s")]]
    out = turn_advantages("gigpo", units, ["a", "a", "b", "b"])
    assert out[2] == out[3] == [0.0]
    assert out[0][0] == pytest.approx(-out[1][0]) and out[0][0] > 0


def test_anchor_text_drops_call_ids_and_spacing():
    assert anchor_text("tool:  5\n call_9f2Kq1 ") == anchor_text("tool: 5 call_Zz81aa")
    assert anchor_text("tool: 5") != anchor_text("tool: 7")


# -- through the local learner, on real ledger segments ------------------------------------------
def _episode(reward: float, answer_error: bool, ids_from: int) -> Trajectory:
    return two_turn_episode(reward, [-0.5 if answer_error else 0.0, 0.0], ids_from)


def test_each_turn_advantage_lands_on_the_tokens_its_turn_sampled():
    trajs = [_episode(1.0, False, 10), _episode(0.0, True, 20), _episode(0.0, False, 30)]
    samples, _ = build_samples(trajs, ["g"] * 3, Credit("gigpo", gamma=1.0))
    units = [
        [Turn(0.0, "user: what is 2 + 3?"), Turn(1.0, "tool: 5")],
        [Turn(-0.5, "user: what is 2 + 3?"), Turn(0.0, "tool: 5")],
        [Turn(0.0, "user: what is 2 + 3?"), Turn(0.0, "tool: 5")],
    ]
    expected = turn_advantages("gigpo", units, ["g"] * 3)
    batch = collate(samples, pad_id=0, device="cpu")
    for row, (sample, (first, second)) in enumerate(zip(samples, expected, strict=True)):
        assert sample.turn_rewards == [u.reward for u in units[row]]
        assert sample.turn_advantages == pytest.approx([first, second])
        # response position p is target column prompt_len - 1 + p: turn 0 at 0..2, context 3..4, turn 1 at 5..6
        adv = batch["adv"][row, 1:8].tolist()
        assert adv == pytest.approx([first] * 3 + [0.0, 0.0] + [second] * 2)
    assert expected[1][0] < expected[2][0]  # the turn penalised on its own is the one that lost


def test_grpo_keeps_one_advantage_per_sample_and_its_old_tensor_shape():
    trajs = [_episode(1.0, False, 10), _episode(0.0, False, 20)]
    samples, advantages = build_samples(trajs, ["g"] * 2)
    assert all(s.token_advantages is None for s in samples)
    assert collate(samples, pad_id=0, device="cpu")["adv"].shape == (2, 1)
    assert [s.advantage for s in samples] == pytest.approx(advantages)


def three_turn_rewards(trajectory, sample):
    return {"score": 1.0, "turn_rewards": [0.0, 0.0, 0.0]}


def text_turn_rewards(trajectory, sample):
    return {"score": 1.0, "turn_rewards": "bad"}


def test_a_reward_function_giving_more_turn_rewards_than_turns_is_refused():
    from aworld_train.inputs.reward import RewardFunction

    with pytest.raises(RewardError, match="made 2 LLM calls"):
        RewardFunction.load(three_turn_rewards)(_episode(1.0, False, 10), {})
    with pytest.raises(RewardError, match=r"\{agent: \[floats\]\}"):
        RewardFunction.load(text_turn_rewards)(_episode(1.0, False, 10), {})


def test_the_calculator_reward_penalises_the_turn_whose_tool_call_failed():
    from aworld_train.rewards.calculator import answer_and_tool_errors

    traj = _episode(0.0, False, 10)
    traj.final_answer = "The answer is 5."
    traj.tool_calls = [ToolCallRecord("c1", "calculate", {"expression": "2 +"}, "Error: bad", True, turn=0)]
    out = answer_and_tool_errors(traj, {"ground_truth": 5})
    assert out["score"] == 1.0 and out["turn_rewards"] == [-0.2, 0.0]


def _team_episode(planner_turn_reward: float, reward: float, base: int) -> Trajectory:
    planner = Segment(
        [1], [base, 2], [1, 1], [-0.1, -0.1], turn_starts=[1], turn_observations=["user: q"], agent="planner"
    )
    solver = Segment(
        [5],
        [base + 1, 6, base + 2],
        [1, 0, 1],
        [-0.1] * 3,
        turn_starts=[1, 3],
        turn_observations=["user: plan", "tool: 6"],
        agent="solver",
    )
    traj = Trajectory(episode_id=f"e{base}", task_id="t", reward=reward, segments=[planner, solver])
    traj.reward_extras = {"turn_rewards": {"planner": [planner_turn_reward], "solver": [0.0, 0.0]}}
    return traj


def test_a_teams_agents_each_get_their_own_turns_credit():
    """Per agent: a planner's turns compare with the group's planners only, a solver's with the
    solvers; each agent's own turn rewards reach its own turns."""
    trajs = [_team_episode(0.5, 1.0, 10), _team_episode(0.0, 0.0, 20)]
    samples, _ = build_samples(trajs, ["g"] * 2, Credit("discounted", gamma=1.0))
    by_agent = {(s.agent, s.origin[0]): s for s in samples}
    # planners: returns 1.5 and 0.0 (its own 0.5 and the episode's 1); solvers: 1.0 and 0.0
    planner_scale, solver_scale = _std([1.5, 0.0]) + EPS, _std([1.0, 0.0]) + EPS
    assert by_agent[("planner", 0)].turn_rewards == [1.5]
    assert by_agent[("planner", 0)].turn_advantages == pytest.approx([0.75 / planner_scale])
    assert by_agent[("solver", 1)].turn_advantages == pytest.approx([-0.5 / solver_scale] * 2)


# -- a real local run -----------------------------------------------------------------------------
def _gigpo(changes: dict) -> None:
    changes["algorithm"].update(advantage="gigpo", gamma=0.9)
    changes["trainer"].update(steps=1, eval_before=False, eval_after=False)
    changes["reward"] = {"fn": "aworld_train.rewards.calculator:answer_and_tool_errors"}


def test_a_gigpo_run_records_each_turns_reward_and_advantage(tmp_path: Path, tiny_model_dir):
    """One local step with gigpo on the tiny model, its replies partly scripted: the token files
    hold per turn the reward and the advantage credit.py gives for the recorded episodes, and the
    tool result the first task's samples share is one anchor state."""
    import pyarrow.parquet as pq
    from viewer_support import ROWS, run_tiny

    run = run_tiny(tmp_path / "run", tiny_model_dir, changes=_gigpo)
    parts = (run / "tokens" / "step_000001").glob("part-*.parquet")
    rows = [r for p in parts for r in pq.read_table(p).to_pylist()]
    by_group: dict[str, list[dict]] = {}
    for row in rows:
        if row["segments"][0]["turn_advantages"] is not None:
            by_group.setdefault(row["group"], []).append(row)
    assert len(by_group) == len(ROWS)
    for group in by_group.values():
        units = [[Turn(r, anchor_text(o)) for r, o in _turns(row)] for row in group]
        expected = turn_advantages("gigpo", units, ["g"] * len(units), gamma=0.9)
        for row, advantages in zip(group, expected, strict=True):
            assert row["segments"][0]["turn_advantages"] == pytest.approx(advantages)
    # the first task's samples all call the tool and read one result: one state at each turn
    first = by_group["0"]
    anchors = [[anchor_text(o) for _, o in _turns(row)] for row in first]
    assert len(first) == 3 and all(len(a) == 2 for a in anchors)
    assert len({a[0] for a in anchors}) == 1 and len({a[1] for a in anchors}) == 1
    assert anchors[0][0] != anchors[0][1] and "3" in anchors[0][1]


def _turns(row: dict) -> list[tuple[float, str]]:
    seg = row["segments"][0]
    return list(zip(seg["turn_rewards"], seg["turn_observations"], strict=True))


def test_the_gigpo_example_reads_and_a_gamma_out_of_range_is_refused():
    from aworld_train.inputs.config import AlgorithmConfig, load_config

    example = load_config(Path(__file__).parents[1] / "examples/calculator/grpo_local_gigpo.yaml")
    assert (example.algorithm.advantage, example.algorithm.gamma) == ("gigpo", 0.95)
    with pytest.raises(ValueError, match="gamma"):
        AlgorithmConfig(gamma=0.0)
    with pytest.raises(ValueError, match="advantage"):
        AlgorithmConfig(advantage="gae")
