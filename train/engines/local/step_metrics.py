"""What a local step records beyond its loss: the rollout's figures, staleness, each episode's notes
for the token files, and the process's memory."""

from __future__ import annotations

import resource
import statistics
from collections import Counter
from typing import Any

from aworld_train.engines.local.async_rollout import Taken
from aworld_train.engines.local.samples import Sample
from aworld_train.evaluation.report import CORRECT
from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.samples.agent_stats import agent_metrics
from aworld_train.rollout.samples.token_log import EpisodeNotes


def rollout_metrics(trajs: list[Trajectory], train_on_malformed: bool = False) -> dict[str, Any]:
    n = max(len(trajs), 1)
    rewards = [t.reward or 0.0 for t in trajs]
    response_tokens = [sum(sum(s.response_mask) for s in t.segments) for t in trajs]
    return {
        "reward_mean": sum(rewards) / n,
        "success_rate": sum(r >= CORRECT for r in rewards) / n,
        "tool_call_rate": sum(t.called_tool for t in trajs) / n,
        "turns_mean": sum(t.num_turns for t in trajs) / n,
        "sampled_tokens_mean": sum(response_tokens) / n,
        # segments begun because an agent's history stopped extending its ledger
        "history_rewrites_mean": sum(t.history_rewrites for t in trajs) / n,
        "forced_calls_mean": sum(t.forced_calls for t in trajs) / n,
        "constrained_tokens_mean": sum(t.constrained_tokens for t in trajs) / n,
        "episode_s_mean": statistics.fmean(t.timings.get("total_s", 0.0) for t in trajs) if trajs else 0.0,
        "statuses": dict(Counter(t.status for t in trajs)),
        "trainable_rate": sum(t.trainable(train_on_malformed) for t in trajs) / n,
        **agent_metrics(trajs),
    }


def episode_notes(
    count: int, groups: list[str], samples: list[Sample], advantages: list[float]
) -> list[EpisodeNotes]:
    """What the token files keep of a step beyond its trajectories: each episode's group, its
    advantage (None: not trained) and each trained segment's, and the learner's logprobs."""
    notes = [EpisodeNotes(group=groups[i]) for i in range(count)]
    for sample in samples:
        if sample.origin is None:
            continue
        episode, segment = sample.origin
        note = notes[episode]
        note.advantage = advantages[episode]
        note.segment_advantages[segment] = sample.advantage
        note.turn_rewards[segment] = sample.turn_rewards
        note.turn_advantages[segment] = sample.turn_advantages
        if sample.trainer_logprobs is not None:
            note.trainer_logprobs[segment] = sample.trainer_logprobs
    return notes


def staleness_metrics(taken: Taken, version: int) -> dict[str, float]:
    """Per trained episode, the versions its oldest token lags the weights it trains; the groups
    dropped as stale."""
    behind = [version - t.min_version for t in taken.trajectories if t.min_version is not None]
    return {
        "staleness_mean": statistics.fmean(behind) if behind else 0.0,
        "staleness_max": float(max(behind, default=0)),
        "dropped_stale": float(len(taken.dropped)),
    }


def stale_example(taken: Taken, version: int) -> str:
    """The all-stale step's figures: its groups and how far behind the oldest was."""
    oldest = min((g.oldest_version for g in taken.dropped if g.oldest_version is not None), default=version)
    return f"{len(taken.dropped)} groups dropped, up to {version - oldest} versions behind the weights' {version}"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
