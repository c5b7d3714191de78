"""Episode statuses in verl's own step metrics, failed episodes included.

verl's V1 trainer logs nothing of an agent loop's `reward_extra_info` for training
steps, and a failed episode gives it no output at all (it carries no loss and takes no
place in its group). So every episode also leaves one tag in TransferQueue, the store
verl's V1 trainer already runs: partition `aworld_episodes`, key `<uid>_<session>`.
`EpisodeStatusSampler`, verl's own replay buffer plugged in through
`trainer.v1.sampler.custom_sampler`, counts the tags of the prompt groups it hands the
trainer and returns them with its sampling metrics, which verl merges into the step's:

    training/aworld/episodes, training/aworld/trained, training/aworld/failed,
    training/aworld/status/<status> (every status, 0 included), training/aworld/reward/mean,
    training/aworld/history_rewrites/mean (segments begun because an agent rewrote its history),
    and for a team, per agent: training/aworld/agent/<name>/samples (the outputs it gave verl),
    .../episodes (the episodes it trained in), .../tool_calls_mean, .../sampled_tokens_mean

A prompt group none of whose episodes can be trained (every one failed, or malformed) is
replaced by a fresh prompt, as verl's `trainer.v1.sampler.sync_refill_failed_groups` does for
its own buffer: without that, a batch of such groups stops verl's sync trainer with a
RuntimeError, and verl's asynchronous trainers would train a smaller batch (verl's async buffer
replaces only groups whose loop raised: replay_buffer.ReplayBufferAsync._terminal_eviction_reasons).
verl hands a custom sampler none of its refill settings (trainer_base._build_replay_buffer), so
the render passes ours in `sampler_kwargs`. A policy that only fails would be refilled forever:
after `failed_groups_limit` such groups in a row (trainer.stop_after_failed_steps steps' worth)
the run stops with their statuses, and after one step's worth of tasks (`groups_per_step`)
whose every episode ended as reward_error (`failure_streak.STOP_AT_ONCE`). The asynchronous trainers also drop groups older than
`trainer.v1.sampler.max_off_policy_threshold` steps (verl logs them as
training/off_policy/evicted_samples); their episodes' tags go with them, uncounted.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from aworld_train.core.errors import RunCannotLearn
from aworld_train.rollout.episodes.trajectory import STATUSES, Trajectory
from aworld_train.rollout.samples.failure_streak import FIXES, STOP_AT_ONCE

PARTITION = "aworld_episodes"
ERROR_CHARS = 400  # of an episode's error, kept with its tag for the message that stops a run


async def report_episode(run_kwargs: dict[str, Any], traj: Trajectory, agents: list[str]) -> None:
    """Tag one finished episode, with the agent of each output it gave verl (none: not trained); a
    no-op outside verl's V1 agent-loop workers (no uid/session)."""
    uid, session = run_kwargs.get("uid"), run_kwargs.get("session_id")
    if uid is None or session is None:
        return
    import transfer_queue as tq

    tag = {
        "task": traj.task_id,
        "status": traj.status,
        "error": clipped(traj.error or ""),
        "trained": bool(agents),
        "reward": float(traj.reward or 0.0),
        "history_rewrites": traj.history_rewrites,
        "agents": {
            agent: {
                "samples": samples,
                "tool_calls": traj.tool_calls_of(agent),
                "tokens": traj.sampled_tokens_of(agent),
            }
            for agent, samples in Counter(agents).items()
        },
    }
    await tq.async_kv_put(key=f"{uid}_{session}", partition_id=PARTITION, tag=tag)


def clipped(text: str) -> str:
    """An error's start and end (a Ray error's cause comes last, after its traceback)."""
    if len(text) <= ERROR_CHARS:
        return text
    return f"{text[: ERROR_CHARS // 3]} ... {text[-(ERROR_CHARS - ERROR_CHARS // 3) :]}"


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
        f"{prefix}/aworld/history_rewrites/mean": sum(t.get("history_rewrites", 0) for t in tags) / len(tags)
        if tags
        else 0.0,
    }
    for status in sorted(set(STATUSES) | set(statuses)):
        metrics[f"{prefix}/aworld/status/{status}"] = statuses.get(status, 0)
    per_agent: dict[str, Counter[str]] = {}
    for tag in trained:
        for agent, figures in (tag.get("agents") or {}).items():
            per_agent.setdefault(agent, Counter()).update({**figures, "episodes": 1})
    if len(per_agent) > 1:  # a team: what each agent trained on
        for agent, figures in sorted(per_agent.items()):
            base = f"{prefix}/aworld/agent/{agent}"
            metrics[f"{base}/samples"] = figures["samples"]
            metrics[f"{base}/episodes"] = figures["episodes"]
            metrics[f"{base}/tool_calls_mean"] = figures["tool_calls"] / figures["episodes"]
            metrics[f"{base}/sampled_tokens_mean"] = figures["tokens"] / figures["episodes"]
    return metrics


class _EpisodeStatuses:
    """Mixed into verl's replay buffers: the selected groups' episode tags as sampling metrics,
    and failed groups replaced by fresh prompts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the trainer process, verl wholly imported: gigpo and discounted in its estimator
        # registry, and its trainer's _compute_advantage wrapped (engines/verl/advantages.py)
        from aworld_train.engines.verl import advantages  # noqa: F401

        options = dict(self.sampler_kwargs or {})
        self._refill_failed = bool(options.get("refill_failed_groups"))
        if self._refill_failed and self.trainer_mode == "sync":
            # the render derived trainer.v1.sampler.sync_refill_failed_groups, so verl's
            # dataloader fetches one prompt at a time, as a refill needs (the asynchronous
            # trainers always do: trainer_base._init_dataloader)
            self.sync_refill_failed_groups = True
            self.gen_batch_size = 1
        self._failed_groups_limit = int(options.get("failed_groups_limit", 0))
        self._groups_per_step = max(1, int(options.get("groups_per_step", 1)))
        self._failed_in_a_row: set[str] = set()
        self._aworld_selected: list[str] = []

    def _terminal_eviction_reasons(self, global_steps: int, partition_id: str):
        stale, dapo, failed, counts = super()._terminal_eviction_reasons(global_steps, partition_id)
        if self._refill_failed and partition_id != "val":
            # verl marks a prompt `failure` only when its loop raised; ours returns no output for an
            # episode it cannot train, and verl marks such a group `finished`, with nothing in it
            materializable = {key.split("_")[0] for key in self.partitions[partition_id]}
            failed = failed | (self.finished_keys[partition_id] - materializable)
        reasons = (stale, dapo, failed, counts)
        if failed:
            self._failed_in_a_row |= failed
            if self._failed_groups_limit and (
                len(self._failed_in_a_row) >= self._failed_groups_limit or self._stop_at_once()
            ):
                raise RunCannotLearn(self._cannot_learn_message())
        return reasons

    def _failed_tags(self) -> list[dict[str, Any]]:
        return [tag for key, tag in _tags().items() if key.rsplit("_", 1)[0] in self._failed_in_a_row]

    def _stop_at_once(self) -> bool:
        """A step's worth of tasks in a row whose episodes all failed for a cause no later prompt
        will escape (a reward that fails on every sample; one task's bad row fails its own groups
        only, however often it is drawn)."""
        tags = self._failed_tags()
        statuses = {str(t.get("status")) for t in tags}
        tasks = {t.get("task") for t in tags}
        return bool(statuses) and statuses <= STOP_AT_ONCE and len(tasks) >= self._groups_per_step

    def _evict_terminal_groups(self, global_steps: int, partition_id: str, eviction_reasons):
        stale, _dapo, failed, _counts = eviction_reasons
        dropped = stale - failed  # too old to train: not a failure, and never sampled
        if dropped and partition_id != "val":
            keys = [key for key in _tags() if key.rsplit("_", 1)[0] in dropped]
            if keys:
                import transfer_queue as tq

                tq.kv_clear(keys=keys, partition_id=PARTITION)
        return super()._evict_terminal_groups(global_steps, partition_id, eviction_reasons)

    def _cannot_learn_message(self) -> str:
        tags = self._failed_tags()
        statuses = Counter(str(t.get("status")) for t in tags)
        listed = ", ".join(f"{status} {count}" for status, count in statuses.most_common())
        cause = statuses.most_common(1)[0][0] if statuses else ""
        fix = FIXES.get(cause, "see the episodes' errors in the engine log")
        example = next((t["error"] for t in tags if t.get("status") == cause and t.get("error")), "")
        return (
            f"no episode of the last {len(self._failed_in_a_row)} prompt groups could be trained "
            f"({listed or 'no statuses recorded'}); nothing can be learned from them: {fix}"
            + (f" (one {cause} episode's error: {example})" if example else "")
            + ". trainer.stop_after_failed_steps=0 keeps such a run going"
        )

    def _materialize_batch(self, partition_id, selected_prompt_uids, partition_snapshot):
        self._aworld_selected = list(selected_prompt_uids)
        return super()._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot)

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        import transfer_queue as tq

        self._aworld_selected = []
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        # the replaced groups' episodes count too: they show as failed in this step's statuses
        counted = set(self._aworld_selected) | self._failed_in_a_row
        self._failed_in_a_row = set()
        mine = {key: tag for key, tag in _tags().items() if key.rsplit("_", 1)[0] in counted}
        metrics.update(episode_metrics(self._metrics_prefix(partition_id), list(mine.values())))
        if mine:
            tq.kv_clear(keys=list(mine), partition_id=PARTITION)
        return batch, metrics


def _tags() -> dict[str, dict[str, Any]]:
    import transfer_queue as tq

    return (tq.kv_list(partition_id=PARTITION) or {}).get(PARTITION, {})


class EpisodeStatusSampler(_EpisodeStatuses, ReplayBuffer):
    """For `trainer.v1.trainer_mode: sync`."""


class EpisodeStatusSamplerAsync(_EpisodeStatuses, ReplayBufferAsync):
    """For verl's asynchronous V1 trainer modes."""
