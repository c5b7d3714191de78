"""Agents that rewrite their own context train on the local learner and on verl: an agent that trims
its history, one that replaces it by a summary its own policy writes, one that compacts its tool
results (tests/rewriting_agents.py). Every segment reaches the trainer with its tokens as sampled
(mask, logprobs, versions), none dropped; each carries its episode's advantage, or each turn's own;
GRPO's baseline counts an episode once however many segments it has; an episode weighs the same
in the loss however it is cut. AReaL's side: tests/areal_env/test_areal_rewrites.py."""

from __future__ import annotations

import asyncio

import pytest
import torch
from rewriting_agents import (
    KINDS,
    QUESTION,
    SUMMARY,
    AnswerReward,
    EpisodePolicy,
    RewritingAgent,
    replies,
    sampled,
)

from aworld_train.engines.local.samples import build_samples
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.trajectory import Segment, Task, Trajectory
from aworld_train.rollout.samples.codec import episode_samples, group_advantages
from aworld_train.rollout.samples.credit import Credit

OUTCOMES = ("right", "wrong", "right", "wrong")
TASK = Task("sum", [QUESTION], ground_truth=9)


def run_episode(kind: str, outcome: str, make_runtime, tokenizer, im_end, script=None, **rollout):
    policy = EpisodePolicy(tokenizer, script or replies(kind, outcome), im_end)
    rollout.setdefault("max_assistant_turns", 6)
    episode = Episode(RewritingAgent(kind), TASK, make_runtime(policy, **rollout), AnswerReward())
    return asyncio.run(episode.run()), policy


def run_group(kind, make_runtime, tokenizer, im_end) -> tuple[list[Trajectory], list[EpisodePolicy]]:
    runs = [run_episode(kind, outcome, make_runtime, tokenizer, im_end) for outcome in OUTCOMES]
    return [t for t, _ in runs], [p for _, p in runs]


def calls_of(traj: Trajectory, policy: EpisodePolicy) -> list[list]:
    """Per segment, the generations of the calls it holds (in the order the policy was called)."""
    out, done = [], 0
    for seg in traj.segments:
        out.append(policy.generations[done : done + len(seg.turn_starts)])
        done += len(seg.turn_starts)
    assert done == len(policy.generations)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_each_rewrite_begins_a_segment_that_holds_the_tokens_as_sampled(
    kind, make_runtime, tokenizer, im_end
):
    traj, policy = run_episode(kind, "right", make_runtime, tokenizer, im_end)
    assert traj.status == "ok" and traj.reward == 1.0, traj.error
    assert len(traj.segments) == 3 and traj.history_rewrites == 2
    for seg, gens in zip(traj.segments, calls_of(traj, policy), strict=True):
        ids, logprobs, versions = sampled(seg)
        assert ids == [t for g in gens for t in g.token_ids]
        assert logprobs == [lp for g in gens for lp in g.logprobs]
        assert versions == [v for g in gens for v in g.versions]
    # every prompt the policy got is its segment's prefix, up to that call's start
    prompts = iter(policy.prompts)
    for seg in traj.segments:
        for start in seg.turn_starts:
            assert seg.ids[:start] == next(prompts)
    if kind == "summarises":  # the policy's summary: sampled in its own segment, context in the next
        summary, after = traj.segments[1], traj.segments[2]
        assert tokenizer.decode(sampled(summary)[0]).startswith(SUMMARY)
        assert SUMMARY in tokenizer.decode(after.prompt_ids)


@pytest.mark.parametrize("kind", KINDS)
def test_the_local_learner_trains_every_segment_with_its_episodes_advantage(
    kind, make_runtime, tokenizer, im_end
):
    trajs, _ = run_group(kind, make_runtime, tokenizer, im_end)
    assert [len(t.segments) for t in trajs] == [3, 1, 3, 1]
    samples, advantages = build_samples(trajs, ["g"] * len(trajs))
    # GRPO's baseline counts each episode once, not once per segment
    expected = group_advantages([1.0, 0.0, 1.0, 0.0], ["g"] * 4)
    assert advantages == pytest.approx(expected)
    assert len(samples) == sum(len(t.segments) for t in trajs)  # none dropped
    for sample in samples:
        episode, index = sample.origin
        seg = trajs[episode].segments[index]
        assert sample.ids == seg.prompt_ids + seg.response_ids and sample.prompt_len == len(seg.prompt_ids)
        assert sample.mask == seg.response_mask and sample.old_logprobs == seg.response_logprobs
        assert sample.versions == seg.response_versions
        assert sample.advantage == pytest.approx(expected[episode])
    # an episode's segments share its weight in a seq-mean loss: their shares of its tokens add to 1
    for episode in range(len(trajs)):
        shares = [s.loss_share for s in samples if s.origin[0] == episode]
        assert sum(shares) == pytest.approx(1.0)


@pytest.mark.parametrize("kind", KINDS)
def test_verl_gets_an_output_per_segment_and_grpo_counts_an_episode_once(
    kind, make_runtime, tokenizer, im_end
):
    """verl's own GRPO over the outputs, keyed as its V1 trainer keys them (uid, session, output):
    every output of an episode gets the episode's advantage, the same as the local learner's."""
    pytest.importorskip("verl.experimental.agent_loop.agent_loop")
    from engine_parity import verl_grpo_advantages

    from aworld_train.engines.verl.loop import to_agent_loop_outputs

    trajs, _ = run_group(kind, make_runtime, tokenizer, im_end)
    outputs, keys = [], []
    for episode, traj in enumerate(trajs):
        outs = to_agent_loop_outputs(traj, response_length=4096, train_on_malformed=False)
        assert len(outs) == len(traj.segments)  # none dropped
        for k, (out, seg) in enumerate(zip(outs, traj.segments, strict=True)):
            assert out.prompt_ids == seg.prompt_ids and out.response_ids == seg.response_ids
            assert out.response_mask == seg.response_mask and out.response_logprobs == seg.response_logprobs
            assert out.reward_score == traj.reward
            assert out.extra_fields["reward_extra_info"]["segments_dropped"] == 0
            keys.append(f"uid0_{episode}_{k}")
        outputs += outs
    got = verl_grpo_advantages(outputs, keys)
    local, _ = build_samples(trajs, ["g"] * len(trajs))
    for r, (out, sample) in enumerate(zip(outputs, local, strict=True)):
        trained = torch.tensor(out.response_mask, dtype=torch.bool)
        values = got[r, : len(out.response_mask)][trained]
        assert torch.allclose(values, torch.full_like(values, sample.advantage), atol=1e-5)


@pytest.mark.parametrize("estimator", ["gigpo", "discounted"])
def test_an_advantage_per_turn_spans_the_segments_alike_on_the_local_learner_and_verl(
    estimator, make_runtime, tokenizer, im_end
):
    """Under gigpo and discounted a unit's turns run over all its segments: each turn's advantage is
    on its own tokens, in whichever segment it was sampled, the same on both engines."""
    pytest.importorskip("verl.experimental.agent_loop.agent_loop")
    from aworld_train.engines.verl.loop import to_agent_loop_outputs
    from aworld_train.engines.verl.turn_credit import TURNS_FIELD, batch_advantages

    trajs, _ = run_group("summarises", make_runtime, tokenizer, im_end)
    credit = Credit(estimator, gamma=0.9)  # type: ignore[arg-type]
    local, _ = build_samples(trajs, ["g"] * len(trajs), credit)
    outputs = [
        o for t in trajs for o in to_agent_loop_outputs(t, response_length=4096, train_on_malformed=False)
    ]
    width = max(len(o.response_ids) for o in outputs)
    rows = [o.extra_fields[TURNS_FIELD] for o in outputs]
    verl, _ = batch_advantages(
        estimator, rows, ["uid0"] * len(rows), width, gamma=0.9, step_weight=1.0, norm_by_std=True
    )
    assert len(local) == len(outputs) == 8
    for sample, values in zip(local, verl, strict=True):
        assert values[: len(sample.mask)] == pytest.approx(sample.token_advantages, abs=1e-6)
    # the right answers' five turns, over three segments, each with its own discounted return
    right = [a for s in local if s.origin[0] == 0 for a in s.turn_advantages]
    assert len(right) == 5 and len({round(a, 6) for a in right}) > 1


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_an_episode_weighs_the_same_however_many_segments_it_was_cut_into(tiny_model_dir, tokenizer, agg):
    """The same sampled tokens, after the same contexts, as one segment or cut into two: the local
    learner's update is the same (seq-mean-token-mean weighs each segment by its share of the
    episode's tokens, so the episode counts once)."""
    from aworld_train.engines.local.learner import GRPOLearner
    from aworld_train.inputs.config import AlgorithmConfig
    from aworld_train.rollout.policies.models import load_model

    prompt, response = tokenizer.encode("Add two and three."), tokenizer.encode(" It is five, done.")
    logprobs = [-0.3 - 0.1 * i for i in range(len(response))]

    def segment(start: int, end: int, ids: list[int] = response) -> Segment:
        return Segment(prompt + ids[:start], ids[start:end], [1] * (end - start), logprobs[start:end],
                       turn_starts=[len(prompt) + start])  # fmt: skip

    other = Trajectory("b", "t", reward=0.0, segments=[segment(0, 3, tokenizer.encode(" Seven, I think"))])
    whole = Trajectory("a", "t", reward=1.0, segments=[segment(0, len(response))])
    parts = Trajectory("a", "t", reward=1.0, segments=[segment(0, 2), segment(2, len(response))])
    grads = []
    for traj in (whole, parts):
        torch.manual_seed(1)
        model = load_model(str(tiny_model_dir), dtype=torch.float32)
        samples, _ = build_samples([traj, other], ["g", "g"])
        learner = GRPOLearner(model, AlgorithmConfig(loss_agg_mode=agg, grad_clip=1e9), 1.0, 0)
        learner.optimizer.step = lambda: None  # keep the weights, look at the gradient
        learner.optimizer.zero_grad = lambda set_to_none=True: None
        learner.step(samples)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert float((grads[0] - grads[1]).norm()) <= 1e-5 * float(grads[0].norm())


def test_a_failed_summary_call_fails_the_episode(make_runtime, tokenizer, im_end):
    """The summary is an LLM call of the agent: when it fails, the episode fails (no loss, no place
    in its group's baseline), it does not score 0."""
    script = replies("summarises", "right")

    def lost(_):
        raise RuntimeError("the policy server is gone")

    script[2] = lost  # the summary call
    traj, _ = run_episode("summarises", "right", make_runtime, tokenizer, im_end, script=script)
    assert traj.status == "error" and "the policy server is gone" in traj.error
    assert traj.reward is None and not episode_samples(traj).in_baseline
    others, _ = run_group("trims", make_runtime, tokenizer, im_end)
    samples, advantages = build_samples([*others, traj], ["g"] * 5)
    assert advantages[-1] == 0.0 and all(s.origin[0] < 4 for s in samples)
    assert advantages[:4] == pytest.approx(group_advantages([1.0, 0.0, 1.0, 0.0], ["g"] * 4))


def test_a_rewritten_prompt_over_max_prompt_tokens_ends_the_episode_segment_too_long(
    make_runtime, tokenizer, im_end
):
    first, _ = run_episode("summarises", "right", make_runtime, tokenizer, im_end)
    limit = len(first.segments[0].prompt_ids) + 4  # the first prompt fits; the summary request not
    traj, policy = run_episode(
        "summarises", "right", make_runtime, tokenizer, im_end, max_prompt_tokens=limit
    )
    assert traj.status == "segment_too_long" and len(policy.generations) == 2
    assert f"over rollout.max_prompt_tokens={limit}" in traj.error and "rewrote its history" in traj.error
    assert not episode_samples(traj).in_baseline  # a failure: no loss, no place in the baseline


def test_a_rewritten_prompt_the_run_cannot_hold_names_max_total_tokens():
    from aworld_train.rollout.episodes.limits import CallEnded, check_rewritten
    from aworld_train.rollout.episodes.settings import RolloutSettings

    settings = RolloutSettings(max_total_tokens=100)
    check_rewritten(settings, 99, 2, "a")  # one token left to sample: it goes on
    with pytest.raises(CallEnded) as ended:
        check_rewritten(settings, 100, 2, "a")
    assert ended.value.status == "segment_too_long"
    assert "segment 2" in ended.value.error and "over rollout.max_total_tokens=100" in ended.value.error


def test_a_rewrite_too_long_to_tokenize_within_the_budget_ends_segment_too_long(
    make_runtime, tokenizer, im_end
):
    """An in-process agent whose rewritten history is longer than max_total_tokens could hold even at
    the vocabulary's longest token: the call is never tokenized, the episode ends segment_too_long."""
    from aworld_train.rollout.tokens.templates.prompt_bounds import longest_token_chars

    huge = "x" * (400 * longest_token_chars(tokenizer) + 1)
    policy = EpisodePolicy(tokenizer, replies("trims", "right"), im_end)
    agent = RewritingAgent("trims")
    original = agent.start

    def start(endpoint, episode_id, task, turns):
        run = original(endpoint, episode_id, task, turns)
        view = run.view
        run.view = lambda history: [{"role": "user", "content": huge}] if len(history) > 2 else view(history)
        return run

    agent.start = start
    runtime = make_runtime(policy, max_total_tokens=400, max_assistant_turns=6)
    traj = asyncio.run(Episode(agent, TASK, runtime, AnswerReward()).run())
    assert traj.status == "segment_too_long", traj.error
    assert "rewrote its history" in traj.error and "rollout.max_total_tokens=400" in traj.error
