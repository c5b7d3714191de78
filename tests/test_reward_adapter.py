from pathlib import Path

import pytest
import reward_fixtures as fx

from aworld_train.core.errors import RewardError
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.trajectory import Task, ToolCallRecord, Trajectory


def traj(answer="The answer is 5.", calls=1):
    t = Trajectory(episode_id="e", task_id="t", final_answer=answer)
    t.tool_calls = [ToolCallRecord(f"c{i}", "calculate", {}) for i in range(calls)]
    return t


SAMPLE = Task("t1", ["q"], ground_truth=5).sample()


def test_verl_style_gets_the_final_answer_and_ground_truth():
    reward = RewardFunction.load(fx.verl_style)
    assert reward.shape == "verl" and reward.reference == "reward_fixtures:verl_style"
    assert reward(traj(), SAMPLE) == (1.0, {})
    assert reward(traj("no"), SAMPLE) == (0.0, {})


def test_trajectory_style_and_dict_results():
    reward = RewardFunction.load("reward_fixtures:trajectory_style")
    assert reward.shape == "trajectory"
    assert reward(traj(calls=2), SAMPLE) == (2.0, {"used_tools": True, "id": "t1"})


def test_file_path_with_name(tmp_path):
    path = Path(fx.__file__)
    assert RewardFunction.load(f"{path}:verl_style").shape == "verl"
    assert RewardFunction.load((str(path), "verl_style")).shape == "verl"
    with pytest.raises(RewardError, match="name the function"):
        RewardFunction.load(str(path))


def test_the_shipped_calculator_reward_loads():
    reward = RewardFunction.load("aworld_train.rewards.calculator:exact_answer")
    assert reward(traj("The answer is 5."), SAMPLE)[0] == 1.0


def test_wrong_signature_is_refused_with_the_accepted_shapes():
    with pytest.raises(
        RewardError, match=r"\(answer, truth\).*data_source, solution_str, ground_truth.*trajectory, sample"
    ):
        RewardFunction.load(fx.wrong_signature)


def test_lambda_and_closure_are_refused_because_workers_import_by_reference():
    with pytest.raises(RewardError, match="lambda"):
        RewardFunction.load(lambda data_source, solution_str, ground_truth, extra_info=None: 0.0)
    with pytest.raises(RewardError, match="closure"):
        RewardFunction.load(fx.make_closure())


def test_unimportable_references():
    with pytest.raises(RewardError, match="cannot import"):
        RewardFunction.load("no_such_module_xyz:fn")
    with pytest.raises(RewardError, match="has no attribute"):
        RewardFunction.load("reward_fixtures:missing")
    with pytest.raises(RewardError, match="does not exist"):
        RewardFunction.load("/nope/rewards.py:fn")
    with pytest.raises(RewardError, match="required"):
        RewardFunction.load(None)


def test_bad_return_values_name_the_function():
    reward = RewardFunction.load(fx.returns_text)
    with pytest.raises(RewardError, match="returns_text.*finite float"):
        reward(traj(), SAMPLE)
    with pytest.raises(RewardError, match="without 'score'"):
        reward.normalise({"value": 1})
