"""verl's replay buffer with our episode tags (engines/verl/episodes.py), against a stand-in for
TransferQueue's key-value store: the status metrics of a step's episodes, and the sampler that
replaces a prompt group with no episode to train (sync and both async trainers), stops a run
whose every group fails, and drops the tags of a stale group verl evicts."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")


def test_episode_metrics_count_failed_episodes_and_every_status():
    from aworld_train.engines.verl.episodes import episode_metrics
    from aworld_train.rollout.episodes.trajectory import STATUSES

    tags = [
        {"status": "ok", "trained": True, "reward": 1.0},
        {"status": "ok", "trained": True, "reward": 0.0},
        {"status": "tool_timeout", "trained": False, "reward": 0.0},
    ]
    metrics = episode_metrics("training", tags)
    assert metrics["training/aworld/episodes"] == 3
    assert metrics["training/aworld/failed"] == 1 and metrics["training/aworld/trained"] == 2
    assert metrics["training/aworld/status/tool_timeout"] == 1
    assert metrics["training/aworld/reward/mean"] == 0.5  # trained episodes only
    assert all(f"training/aworld/status/{s}" in metrics for s in STATUSES)
    assert not any("/agent/" in key for key in metrics)  # a lone agent: no per-agent figures


def test_episode_metrics_count_each_agents_samples_in_a_team():
    from aworld_train.engines.verl.episodes import episode_metrics

    planner = {"samples": 1, "tool_calls": 0, "tokens": 10}
    solver = {"samples": 2, "tool_calls": 3, "tokens": 40}
    tags = [
        {"status": "ok", "trained": True, "reward": 1.0, "agents": {"planner": planner, "solver": solver}},
        {"status": "ok", "trained": True, "reward": 0.0, "agents": {"planner": {**planner, "tokens": 20}}},
        {"status": "error", "trained": False, "reward": 0.0, "agents": {}},
    ]
    metrics = episode_metrics("training", tags)
    assert metrics["training/aworld/agent/planner/samples"] == 2
    assert metrics["training/aworld/agent/solver/samples"] == 2
    assert metrics["training/aworld/agent/planner/episodes"] == 2
    assert metrics["training/aworld/agent/solver/episodes"] == 1
    assert metrics["training/aworld/agent/planner/sampled_tokens_mean"] == 15
    assert metrics["training/aworld/agent/solver/tool_calls_mean"] == 3


class FakeStore:
    """TransferQueue's key-value calls that verl's replay buffer makes, over a dict."""

    def __init__(self):
        self.data: dict[str, dict[str, dict]] = {}

    def kv_list(self, partition_id=None):
        if partition_id is None:
            return {pid: dict(items) for pid, items in self.data.items()}
        return {partition_id: dict(self.data.get(partition_id, {}))}

    def kv_clear(self, keys, partition_id):
        for key in [keys] if isinstance(keys, str) else keys:
            self.data.get(partition_id, {}).pop(key, None)

    def group(self, uid: str, statuses: list[str], task: str | None = None) -> None:
        """One prompt group as verl's agent loop leaves it, with our episode tags: `finished` even
        when no episode gave an output (verl marks `failure` only a loop that raised)."""
        train = self.data.setdefault("train", {})
        train[uid] = {"is_prompt": True, "status": "finished", "global_steps": 1}
        for i, status in enumerate(statuses):
            if status == "ok":
                train[f"{uid}_{i}"] = {"reward": 1.0}
            tag = {"status": status, "trained": status == "ok", "reward": 0.0, "error": f"why {status}"}
            tag["task"] = task or uid
            self.data.setdefault("aworld_episodes", {})[f"{uid}_{i}"] = tag


@pytest.fixture
def store(monkeypatch):
    import transfer_queue

    fake = FakeStore()
    monkeypatch.setattr(transfer_queue, "kv_list", fake.kv_list)
    monkeypatch.setattr(transfer_queue, "kv_clear", fake.kv_clear)
    return fake


def _sampler(refill, limit, mode="sync", threshold=None, groups_per_step=1):
    from omegaconf import OmegaConf

    from aworld_train.engines.verl.episodes import EpisodeStatusSampler, EpisodeStatusSamplerAsync

    return (EpisodeStatusSampler if mode == "sync" else EpisodeStatusSamplerAsync)(
        trainer_mode=mode,
        trainer_config=OmegaConf.create({}),
        max_off_policy_threshold=threshold,
        max_off_policy_strategy="drop",
        sampler_kwargs=OmegaConf.create(
            {"refill_failed_groups": True, "failed_groups_limit": limit, "groups_per_step": groups_per_step}
        ),
        refill_fn=refill,
    )


def test_a_group_with_no_episode_to_train_is_replaced_and_counted(store):
    """verl's sync trainer stops with a RuntimeError when a batch holds only such groups."""
    store.group("a", ["malformed_tool_call", "tool_timeout"])
    replaced = []

    def refill(count):
        replaced.append(count)
        store.group("b", ["ok", "malformed_tool_call"])

    batch, metrics = _sampler(refill, limit=6).sample(1, "train", 1)
    assert replaced == [1] and batch.keys == ["b_0"]
    assert metrics["training/aworld/episodes"] == 4 and metrics["training/aworld/trained"] == 1
    assert metrics["training/aworld/status/tool_timeout"] == 1
    assert metrics["training/aworld/status/malformed_tool_call"] == 2
    assert store.data["aworld_episodes"] == {}  # counted once


def test_a_policy_whose_every_group_fails_stops_the_run_with_the_statuses(store):
    from aworld_train.core.errors import RunCannotLearn

    store.group("g0", ["malformed_tool_call", "malformed_tool_call"])
    refills = []

    def refill(count):
        refills.append(count)
        store.group(f"g{len(refills)}", ["malformed_tool_call", "malformed_tool_call"])

    with pytest.raises(
        RunCannotLearn,
        match="last 3 prompt groups.*malformed_tool_call 6.*rollout.tool_parser.*"
        "one malformed_tool_call episode's error: why malformed_tool_call",
    ):
        _sampler(refill, limit=3).sample(1, "train", 1)
    assert refills == [1, 1]


def test_a_steps_worth_of_groups_whose_every_reward_failed_stops_the_run(store):
    """A reward that fails on every sample is broken code: no refill escapes it, so one step's worth
    of such groups in a row stops the run, long before trainer.stop_after_failed_steps."""
    from aworld_train.core.errors import RunCannotLearn

    store.group("g0", ["reward_error", "reward_error"])
    refills = []

    def refill(count):
        refills.append(count)
        store.group(f"g{len(refills)}", ["reward_error", "reward_error"])

    with pytest.raises(
        RunCannotLearn, match=r"last 2 prompt groups could be trained \(reward_error 4\).*fix reward.fn"
    ):
        _sampler(refill, limit=30, groups_per_step=2).sample(1, "train", 2)
    assert refills == [1]


def test_one_task_whose_reward_fails_is_replaced_not_a_stop(store):
    """A reward that fails on one task's row (a bad ground truth) fails that task's groups only,
    however often the task is drawn: they are replaced and the step trains on the others."""
    store.group("good", ["ok", "ok"])
    store.group("bad", ["reward_error", "reward_error"], task="t-bad")
    refills = []

    def refill(count):  # the same task drawn again, then a task whose reward works
        refills.append(count)
        if len(refills) == 1:
            store.group("again", ["reward_error", "reward_error"], task="t-bad")
        else:
            store.group("fresh", ["ok", "reward_error"])

    batch, metrics = _sampler(refill, limit=30, groups_per_step=2).sample(1, "train", 2)
    assert refills == [1, 1]
    assert sorted(batch.keys) == ["fresh_0", "good_0", "good_1"]
    assert metrics["training/aworld/status/reward_error"] == 5


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_the_async_trainers_replace_a_group_with_no_episode_to_train_as_sync_does(store, mode):
    """verl's async buffer replaces only groups whose loop raised; ours, every group it cannot train."""
    store.group("a", ["tool_timeout", "tool_timeout"])
    store.group("b", ["ok", "ok"])
    replaced = []

    def refill(count):
        replaced.append(count)
        store.group("c", ["ok", "malformed_tool_call"])

    batch, metrics = _sampler(refill, limit=6, mode=mode).sample(1, "train", 2)
    assert replaced == [1] and sorted(batch.keys) == ["b_0", "b_1", "c_0"]
    assert metrics["training/aworld/episodes"] == 6 and metrics["training/aworld/trained"] == 3
    assert metrics["training/aworld/status/tool_timeout"] == 2
    assert store.data["aworld_episodes"] == {}


def test_a_stale_group_verl_drops_takes_its_episode_tags_with_it(store):
    """Past `max_off_policy_threshold` steps verl evicts a finished group and samples a fresh one in
    its place (training/off_policy/evicted_samples); its episodes are neither trained nor failed."""
    store.group("old", ["ok", "ok"])
    store.group("new", ["ok", "ok"])
    store.data["train"]["new"]["global_steps"] = 3
    refills = []

    def refill(count):
        refills.append(count)
        store.group("fresh", ["ok", "ok"])
        store.data["train"]["fresh"]["global_steps"] = 3

    batch, metrics = _sampler(refill, limit=6, mode="colocate_async", threshold=2).sample(3, "train", 2)
    assert refills == [1] and metrics["training/off_policy/evicted_samples"] == 1
    assert sorted(batch.keys) == ["fresh_0", "fresh_1", "new_0", "new_1"]
    assert metrics["training/aworld/episodes"] == 4 and metrics["training/aworld/failed"] == 0
    assert store.data["aworld_episodes"] == {}  # the stale group's tags went with it
