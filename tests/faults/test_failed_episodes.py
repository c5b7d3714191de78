"""The statuses faults leave (a server gone, a worker dead, ...) carry no loss and take no place
in their group's baseline: the group's advantages are those of its other episodes alone."""

from __future__ import annotations

import pytest

from aworld_train.engines.local.samples import build_samples
from aworld_train.rollout.episodes.trajectory import FAILED_STATUSES, Trajectory
from aworld_train.rollout.tokens.ledger import Segment


def episode(status: str, reward: float | None) -> Trajectory:
    segment = Segment(
        prompt_ids=[1, 2], response_ids=[3, 9], response_mask=[1, 1], response_logprobs=[-0.5, -0.1]
    )
    return Trajectory("e", "t", status=status, reward=reward, segments=[segment])


@pytest.mark.parametrize("status", sorted(FAILED_STATUSES))
def test_a_failed_episode_leaves_its_groups_baseline(status):
    ok = [episode("ok", 1.0), episode("ok", 0.0)]
    # a failed episode of the same group (its reward, if any, must not count), and another group
    samples, advantages = build_samples([*ok, episode(status, 1.0), episode("ok", 0.5)], ["a", "a", "a", "b"])
    alone, alone_advantages = build_samples(ok, ["a", "a"])
    assert advantages[:2] == pytest.approx(alone_advantages) and advantages[0] > 0 > advantages[1]
    assert advantages[2] == 0.0 and len(samples) == 3  # the failed one: no sample
    assert [s.advantage for s in samples[:2]] == pytest.approx(alone_advantages)


def test_the_faults_statuses_are_failures():
    assert {"tool_server_down", "worker_died"} <= FAILED_STATUSES
