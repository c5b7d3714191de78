"""Figures per agent for a team's episodes: what each agent of a swarm did and earned, as flat
`agent/<name>/<figure>` metrics beside a step's or an evaluation's own (nothing for a lone agent)."""

from __future__ import annotations

from collections.abc import Sequence

from aworld_train.rollout.episodes.trajectory import Trajectory


def agent_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    agents = list(dict.fromkeys(seg.agent for t in trajs for seg in t.segments))
    if len(agents) < 2:
        return {}
    out: dict[str, float] = {}
    n = max(len(trajs), 1)
    for agent in agents:
        spoke = [t for t in trajs if any(seg.agent == agent for seg in t.segments)]
        rewards = [t.reward_of(agent) for t in spoke]
        sampled = sum(t.sampled_tokens_of(agent) for t in trajs)
        tool_calls = sum(t.tool_calls_of(agent) for t in trajs)
        out.update(
            {
                f"agent/{agent}/episodes": len(spoke),
                f"agent/{agent}/reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
                f"agent/{agent}/tool_calls_mean": tool_calls / n,
                f"agent/{agent}/sampled_tokens_mean": sampled / n,
                f"agent/{agent}/ok_rate": sum(t.status == "ok" for t in spoke) / len(spoke) if spoke else 0.0,
            }
        )
    return out
