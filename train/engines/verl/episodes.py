"""Episode statuses in verl's own step metrics, failed episodes included.

verl's V1 trainer logs nothing of an agent loop's `reward_extra_info` for training
steps, and a failed episode gives it no output at all (it carries no loss and takes no
place in its group). So every episode also leaves one tag in TransferQueue, the store
verl's V1 trainer already runs: partition `aworld_episodes`, key `<uid>_<session>`.
`EpisodeStatusSampler`, verl's own replay buffer plugged in through
`trainer.v1.sampler.custom_sampler`, counts the tags of the prompt groups it hands the
trainer and returns them with its sampling metrics, which verl merges into the step's:

    training/aworld/episodes, training/aworld/trained, training/aworld/failed,
    training/aworld/status/<status> (every status, 0 included), training/aworld/reward/mean
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from aworld_train.rollout.trajectory import STATUSES, Trajectory

PARTITION = "aworld_episodes"


async def report_episode(run_kwargs: dict[str, Any], traj: Trajectory, trained: bool) -> None:
    """Tag one finished episode; a no-op outside verl's V1 agent-loop workers (no uid/session)."""
    uid, session = run_kwargs.get("uid"), run_kwargs.get("session_id")
    if uid is None or session is None:
        return
    import transfer_queue as tq

    tag = {"status": traj.status, "trained": trained, "reward": float(traj.reward or 0.0)}
    await tq.async_kv_put(key=f"{uid}_{session}", partition_id=PARTITION, tag=tag)


def episode_metrics(prefix: str, tags: list[dict[str, Any]]) -> dict[str, float]:
    statuses = Counter(str(t.get("status")) for t in tags)
    trained = [t for t in tags if t.get("trained")]
    metrics: dict[str, float] = {
        f"{prefix}/aworld/episodes": len(tags),
        f"{prefix}/aworld/trained": len(trained),
        f"{prefix}/aworld/failed": len(tags) - len(trained),
        f"{prefix}/aworld/reward/mean": (sum(t["reward"] for t in trained) / len(trained))
        if trained
        else 0.0,
    }
    for status in sorted(set(STATUSES) | set(statuses)):
        metrics[f"{prefix}/aworld/status/{status}"] = statuses.get(status, 0)
    return metrics


class _EpisodeStatuses:
    """Mixed into verl's replay buffers: the selected groups' episode tags as sampling metrics."""

    def _materialize_batch(self, partition_id, selected_prompt_uids, partition_snapshot):
        self._aworld_selected = list(selected_prompt_uids)
        return super()._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot)

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        import transfer_queue as tq

        self._aworld_selected = []
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        selected = set(self._aworld_selected)
        tags = (tq.kv_list(partition_id=PARTITION) or {}).get(PARTITION, {})
        mine = {key: tag for key, tag in tags.items() if key.rsplit("_", 1)[0] in selected}
        metrics.update(episode_metrics(self._metrics_prefix(partition_id), list(mine.values())))
        if mine:
            tq.kv_clear(keys=list(mine), partition_id=PARTITION)
        return batch, metrics


class EpisodeStatusSampler(_EpisodeStatuses, ReplayBuffer):
    """For `trainer.v1.trainer_mode: sync`."""


class EpisodeStatusSamplerAsync(_EpisodeStatuses, ReplayBufferAsync):
    """For verl's asynchronous V1 trainer modes."""
