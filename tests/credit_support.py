"""A two-turn episode on one ledger segment, for the tests of credit per turn on each engine."""

from __future__ import annotations

from aworld_train.rollout.episodes.trajectory import Trajectory
from aworld_train.rollout.tokens.ledger import Segment


def two_turn_episode(
    reward: float, turn_rewards: list[float], ids_from: int, tool: str = "tool: 5"
) -> Trajectory:
    """Prompt [1, 2]; turn 0 samples 3 tokens, a tool result of 2 (context, the observation `tool`),
    turn 1 samples 2 tokens; the reward function gave `turn_rewards`."""
    seg = Segment(
        [1, 2],
        [ids_from, ids_from + 1, ids_from + 2, 90, 91, ids_from + 3, ids_from + 4],
        [1, 1, 1, 0, 0, 1, 1],
        [-0.1] * 7,
        turn_starts=[2, 7],
        turn_observations=["user: what is 2 + 3?", tool],
    )
    traj = Trajectory(episode_id=f"e{ids_from}", task_id="t", reward=reward, segments=[seg], num_turns=2)
    traj.reward_extras = {"turn_rewards": turn_rewards}
    return traj
