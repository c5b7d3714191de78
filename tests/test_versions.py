"""The weight version of every sampled token: stamped by the policy, kept by the ledger beside each
token, and carried by trajectories, the sample codec and the trajectory JSONL the local backend and
`eval` write; a segment whose turns two weight versions sampled knows both."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from aworld_train.engines.local.run_folder import RunFolder
from aworld_train.evaluation.report import EvalReport
from aworld_train.inputs.reward import RewardFunction
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Task, Trajectory
from aworld_train.rollout.policies.client import Generation, SamplingParams, ScriptedPolicy
from aworld_train.rollout.policies.local import LocalPolicy
from aworld_train.rollout.policies.models import load_model
from aworld_train.rollout.samples.codec import episode_samples
from aworld_train.rollout.tokens.ledger import NO_VERSION, Segment

REWARD = RewardFunction.load("aworld_train.rewards.calculator:exact_answer")
CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "37 * 48"}}\n</tool_call>'


@pytest.fixture
async def two_version_episode(tokenizer, im_end, calculator_spec, make_runtime):
    """A calculator episode whose first turn version 3 samples and whose second, after the learner's
    update, version 4."""

    def answer(_ids):
        policy.version = 4  # the weights changed between the two LLM calls
        return "The answer is 1776."

    policy = ScriptedPolicy(tokenizer, [CALL, answer], im_end, version=3)
    spec = calculator_spec.model_copy(update={"few_shot": []})
    task = Task("t", ["What is 37 * 48?"], ground_truth=1776)
    traj = await Episode(spec, task, make_runtime(policy), REWARD).run()
    assert traj.status == "ok", traj.error
    return traj, policy


def test_each_sampled_token_keeps_the_version_that_sampled_it(two_version_episode):
    traj, policy = two_version_episode
    (seg,) = traj.segments
    first, second = (len(g.token_ids) for g in policy.generations)
    assert len(seg.response_versions) == len(seg.response_ids)
    assert seg.response_versions[:first] == [3] * first
    assert seg.response_versions[-second:] == [4] * second
    # the tool result between the turns: no policy sampled it
    delta = seg.response_versions[first:-second]
    assert delta and set(delta) == {NO_VERSION}
    assert [m == 0 for m in seg.response_mask] == [v == NO_VERSION for v in seg.response_versions]
    assert (seg.min_version, seg.max_version) == (3, 4)
    assert (traj.min_version, traj.max_version) == (3, 4)


def test_the_codec_and_the_jsonl_carry_the_versions(two_version_episode, tmp_path):
    traj, _ = two_version_episode
    (sample,) = episode_samples(traj).segments
    assert sample.response_versions == traj.segments[0].response_versions

    folder = RunFolder(tmp_path / "run")
    written = json.loads(folder.write_trajectories("trajectories/step_000001", [traj]).read_text())
    assert (written["min_version"], written["max_version"]) == (3, 4)
    report = EvalReport.of([traj], wall_s=0.0)
    line = json.loads(report.write_jsonl(tmp_path / "eval.jsonl").read_text())
    assert (line["min_version"], line["max_version"]) == (3, 4)
    assert line["segments"][0]["response_versions"] == traj.segments[0].response_versions


def test_an_engine_without_versions_leaves_them_unknown(tokenizer, im_end):
    policy = ScriptedPolicy(tokenizer, ["4"], im_end)
    gen = asyncio.run(policy.generate([1, 2], SamplingParams()))
    assert gen.versions is None and gen.version is None
    seg = Segment([1, 2])
    seg.append_sampled(gen)
    assert seg.response_versions == [NO_VERSION] * len(gen.token_ids)
    assert seg.min_version is None and seg.max_version is None
    traj = Trajectory("e", "t", segments=[seg])
    assert traj.to_dict(with_tokens=False)["min_version"] is None


def test_versions_must_align_with_the_tokens():
    with pytest.raises(ValueError, match="one per sampled token"):
        Generation([1, 2], [-0.1, -0.2], versions=[0])
    with pytest.raises(ValueError, match="one per response token"):
        Segment([1], [2, 3], [1, 1], [-0.1, -0.2], response_versions=[0])
    # a segment built without versions: every token unknown
    assert Segment([1], [2, 3], [1, 1], [-0.1, -0.2]).response_versions == [NO_VERSION, NO_VERSION]


def test_a_cut_generation_keeps_the_versions_of_its_tokens():
    gen = Generation([5, 6, 7], [-0.1, -0.2, -0.3], "length", versions=[2, 2, 3])
    head = gen.head(2, "stop")
    assert (head.token_ids, head.logprobs, head.versions, head.finish_reason) == (
        [5, 6],
        [-0.1, -0.2],
        [2, 2],
        "stop",
    )
    assert head.version == 2 and gen.version is None  # one version, or several


@pytest.fixture(scope="module")
def local_policy(tiny_model_dir, tokenizer, stop_ids):
    return LocalPolicy(load_model(str(tiny_model_dir), dtype=torch.float32), tokenizer, stop_ids)


def test_the_local_policy_stamps_the_version_of_the_weights_it_samples_with(local_policy, tokenizer):
    prompt = [tokenizer.encode("What is 2 + 2?")]
    sampling = SamplingParams(max_new_tokens=4, seed=1)
    start = local_policy.version
    assert set(local_policy.generate_batch(prompt, sampling)[0].versions) == {start}
    with local_policy.lock:  # a checkpoint save reads the weights: no new version
        pass
    assert local_policy.generate_batch(prompt, sampling)[0].version == start
    with local_policy.weights_update:  # the learner's update
        pass
    assert local_policy.version == start + 1
    assert local_policy.generate_batch(prompt, sampling)[0].version == start + 1
    with pytest.raises(RuntimeError), local_policy.weights_update:  # an update that failed
        raise RuntimeError("the update failed")
    assert local_policy.version == start + 1
    # a trainer's weights arrive with the trainer's version
    state = {k: v.clone() for k, v in local_policy.model.state_dict().items()}
    local_policy.load_weights(state, version=7)
    assert local_policy.generate_batch(prompt, sampling)[0].version == 7
    local_policy.load_weights(state)
    assert local_policy.version == 8
    with pytest.raises(RuntimeError, match="do not match"):
        local_policy.load_weights({"not.a.weight": torch.zeros(1)}, version=9)
    assert local_policy.version == 8  # a refused load is no new version
