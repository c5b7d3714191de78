"""Figures per agent for a team's episodes: what each agent of a swarm did and earned, as flat
`agent/<name>/<figure>` metrics beside a step's or an evaluation's own (nothing for a lone agent)."""

from __future__ import annotations

from collections.abc import Sequence

from aworld_train.rollout.trajectory import Trajectory


def agent_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    agents = list(dict.fromkeys(seg.agent for t in trajs for seg in t.segments))
    if len(agents) < 2:
        return {}
    out: dict[str, float] = {}
    n = max(len(trajs), 1)
    for agent in agents:
        spoke = [t for t in trajs if any(seg.agent == agent for seg in t.segments)]
        rewards = [_reward_of(t, agent) for t in spoke]
        sampled = sum(sum(seg.response_mask) for t in trajs for seg in t.segments if seg.agent == agent)
        tool_calls = sum(call.agent == agent for t in trajs for call in t.tool_calls)
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


def _reward_of(traj: Trajectory, agent: str) -> float:
    named = traj.reward_extras.get("agent_rewards")
    if isinstance(named, dict) and agent in named:
        return float(named[agent])
    return float(traj.reward or 0.0)
