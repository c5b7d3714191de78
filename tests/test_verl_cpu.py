"""The CPU switch of the verl engine, without running verl's trainer (that is test_verl_cpu_e2e.py):
what `verl.trainer.device: cpu` renders, the aworld_cpu server, and the status metrics."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

from backend_support import trainer_for  # noqa: E402

from aworld_train.core.errors import ConfigError  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples/calculator/grpo_verl_cpu.yaml"


def _config(tiny_model_dir, native):
    return {
        "backend": "verl",
        "model": str(tiny_model_dir),
        "algorithm": {"group_size": 2},
        "rollout": {"max_total_tokens": 2048},
        "verl": native,
    }


def test_device_cpu_renders_the_same_command_with_the_cpu_rollout(tmp_path, tiny_model_dir):
    run = trainer_for(tmp_path, _config(tiny_model_dir, {"trainer": {"device": "cpu"}})).render()
    gpu = trainer_for(tmp_path / "gpu", _config(tiny_model_dir, {})).render()
    assert run.command[1:3] == gpu.command[1:3] == ("-m", "verl.trainer.main_ppo")
    final = run.final
    assert final.trainer.device == "cpu" and final.actor_rollout_ref.rollout.name == "aworld_cpu"
    assert gpu.final.actor_rollout_ref.rollout.name == "vllm" and gpu.env == {}
    assert final.actor_rollout_ref.actor.strategy == "fsdp2"
    assert final.ray_kwargs.ray_init.num_gpus == final.trainer.n_gpus_per_node == 1
    assert final.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert run.env["VERL_PLATFORM"] == "cpu"
    assert run.env["VERL_USE_EXTERNAL_MODULES"] == "aworld_train.engines.verl.cpu"
    # the rendered file is what main_ppo reads
    assert "num_gpus: 1" in run.config_text() and "name: aworld_cpu" in run.config_text()
    for rendered in (run, gpu):
        sampler = rendered.final.trainer.v1.sampler
        assert sampler.custom_sampler.name == "EpisodeStatusSampler"
        assert Path(sampler.custom_sampler.path).name == "episodes.py"
        # groups with no episode to train are replaced; 3 steps of 8 prompts (the defaults) in a row stop the run
        assert sampler.sync_refill_failed_groups is True
        assert dict(sampler.sampler_kwargs) == {
            "refill_failed_groups": True,
            "failed_groups_limit": 3 * 8,
            "groups_per_step": 8,
        }


def test_a_run_may_keep_failed_groups(tmp_path, tiny_model_dir):
    native = {"trainer": {"device": "cpu", "v1": {"sampler": {"sync_refill_failed_groups": False}}}}
    sampler = trainer_for(tmp_path, _config(tiny_model_dir, native)).render().final.trainer.v1.sampler
    assert sampler.sync_refill_failed_groups is False
    assert sampler.sampler_kwargs.refill_failed_groups is False


def test_the_example_is_a_cpu_run(tmp_path, tiny_model_dir):
    from aworld_train import AgentTrainer

    overrides = [
        f"trainer.run_dir={tmp_path / 'run'}",
        f"model={tiny_model_dir}",
        "rollout.max_total_tokens=2048",
    ]
    run = AgentTrainer(config=str(EXAMPLE), overrides=overrides).render()
    assert run.final.actor_rollout_ref.rollout.name == "aworld_cpu"
    assert run.final.trainer.total_training_steps == 8  # the demo's steps
    # held-out accuracy before the first step and after the last, from a checkpoint `eval` loads
    assert (run.final.trainer.val_before_train, run.final.trainer.test_freq) == (True, 8)
    assert "hf_model" in run.final.actor_rollout_ref.actor.checkpoint.save_contents


@pytest.mark.parametrize(
    "native",
    [
        {"trainer": {"device": "cpu"}, "actor_rollout_ref": {"rollout": {"name": "vllm"}}},
        {"trainer": {"device": "cuda"}, "actor_rollout_ref": {"rollout": {"name": "aworld_cpu"}}},
    ],
)
def test_device_and_rollout_that_disagree_are_refused(tmp_path, tiny_model_dir, native):
    with pytest.raises(ConfigError, match="trainer.device"):
        trainer_for(tmp_path, _config(tiny_model_dir, native)).render()


def test_dapo_filtering_keeps_verls_own_replay_buffer(tmp_path, tiny_model_dir):
    native = {"algorithm": {"filter_groups": {"enable": True, "metric": "acc"}}}
    run = trainer_for(tmp_path, _config(tiny_model_dir, native)).render()
    assert run.final.trainer.v1.sampler.custom_sampler.path is None


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


def test_cpu_server_samples_with_logprobs_and_loads_the_actors_weights(tiny_model_dir, tokenizer):
    import torch
    from verl.plugin.platform.platform_manager import PlatformRegistry
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    import aworld_train.engines.verl.cpu  # noqa: F401  (registers the platform and the rollout)
    from aworld_train.engines.verl.cpu.rollout import AWorldCPUServer

    assert PlatformRegistry.get("cpu") is not None
    assert RolloutReplicaRegistry.get("aworld_cpu").__name__ == "AWorldCPUReplica"

    server = AWorldCPUServer(str(tiny_model_dir), prompt_length=64, response_length=8)
    prompt = tokenizer.encode("What is 2 + 2?", add_special_tokens=False)
    params = {"temperature": 0.7, "top_k": -1, "top_p": 1.0, "logprobs": True, "max_tokens": 6}
    out = asyncio.run(server.generate(prompt, params))
    assert 1 <= len(out.token_ids) <= 6 and len(out.log_probs) == len(out.token_ids)
    # the logprob verl's actor recomputes: log_softmax(logits / temperature) of the sampled token
    with torch.no_grad():
        logits = server.policy.model(torch.tensor([prompt + out.token_ids])).logits[0].float()
    expected = torch.log_softmax(logits[len(prompt) - 1 : -1] / 0.7, -1)
    expected = expected.gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4)

    new = {k: torch.zeros_like(v) for k, v in server.policy.model.state_dict().items()}
    asyncio.run(server.load_weights(list(new.items()), global_steps=3))
    assert all(float(p.detach().abs().sum()) == 0 for p in server.policy.model.parameters())
    assert asyncio.run(server.generate(prompt, params)).extra_fields["global_steps"] == 3
    with pytest.raises(RuntimeError, match="do not match"):
        asyncio.run(server.load_weights([("not.a.weight", torch.zeros(1))], global_steps=4))


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


# -- verl's trainer modes --------------------------------------------------------------------------


def _mode(tmp_path, tiny_model_dir, mode, **native):
    """A CPU render in verl trainer mode `mode`, with more native keys (dotted)."""
    from aworld_train.engines.native import put

    verl = {"trainer": {"device": "cpu", "v1": {"trainer_mode": mode}}}
    for key, value in native.items():
        put(verl, key, value)
    return trainer_for(tmp_path, _config(tiny_model_dir, verl))


def test_separate_async_on_a_cpu_gets_a_standalone_rollout_of_its_own(tmp_path, tiny_model_dir):
    """verl's separate trainer needs rollout resources of its own and a checkpoint engine other than
    naive; on a CPU: one slot beside the actor's and the aworld_cpu engine (Ray's object store)."""
    trainer = _mode(
        tmp_path, tiny_model_dir, "separate_async", **{"trainer.v1.separate_async.parameter_sync_step": 2}
    )
    final = trainer.render().final
    rollout = final.actor_rollout_ref.rollout
    assert (rollout.nnodes, rollout.n_gpus_per_node, rollout.checkpoint_engine.backend) == (
        1,
        1,
        "aworld_cpu",
    )
    assert final.ray_kwargs.ray_init.num_gpus == 2  # the actor's slot and the rollout's
    assert final.actor_rollout_ref.hybrid_engine is True
    # verl asserts train_batch_size == parameter_sync_step * ppo_mini_batch_size: derived
    assert final.actor_rollout_ref.actor.ppo_mini_batch_size * 2 == final.data.train_batch_size
    sampler = final.trainer.v1.sampler
    assert sampler.custom_sampler.name == "EpisodeStatusSamplerAsync"
    assert sampler.sampler_kwargs.refill_failed_groups is True

    from aworld_train.engines.verl.checks import preflight

    lines = {check.name: check for check in preflight(trainer.run_inputs(), trainer.render())}
    assert lines["trainer mode"].detail.startswith(
        "separate_async: rollout on 1 node(s) x 1 slot(s) of its own (and the trainer's until training "
        "starts), weights pushed every 2 local update(s) through checkpoint engine aworld_cpu; groups "
        "older than 8 steps dropped and replaced"
    )


def test_the_check_says_what_an_async_mode_does_with_the_run(tmp_path, tiny_model_dir):
    from aworld_train.engines.verl.modes import mode_summary

    native = {
        "algorithm.rollout_correction.rollout_is": "token",
        "trainer.v1.sampler.max_off_policy_threshold": 2,
    }
    final = _mode(tmp_path, tiny_model_dir, "colocate_async", **native).render().final
    assert mode_summary(final) == (
        "colocate_async: rollout on the trainer's slots samples the next step's groups while the actor "
        "trains; groups older than 2 steps dropped and replaced (trainer.v1.sampler.max_off_policy_threshold); "
        "stale tokens weighed by token-level importance ratios capped at 2.0 (algorithm.rollout_correction)"
    )
    final = _mode(tmp_path / "sync", tiny_model_dir, "sync").render().final
    assert mode_summary(final).startswith("sync: each step samples its groups with the current weights")


@pytest.mark.parametrize(
    ("mode", "native", "refusal"),
    [
        (
            "fully_async",
            {},
            "trainer_mode='fully_async': verl's V1 trainer has sync, colocate_async, separate_async",
        ),
        (
            "colocate_async",
            {"actor_rollout_ref.hybrid_engine": False},
            "which only trainer_mode separate_async has",
        ),
        ("separate_async", {"actor_rollout_ref.hybrid_engine": False}, "trainer_separate_async.py:181"),
        (
            "separate_async",
            {"trainer.v1.separate_async.parameter_sync_step": 3},
            "data.batch_size=8 is not a multiple of .*parameter_sync_step=3 .*choose a parameter_sync_step that divides",
        ),
        (
            "separate_async",
            {
                "trainer.v1.separate_async.parameter_sync_step": 1,
                "actor_rollout_ref.actor.ppo_mini_batch_size": 1,
            },
            "must be data.batch_size / parameter_sync_step = 8 / 1",
        ),
        (
            "separate_async",
            {
                "trainer.v1.separate_async.parameter_sync_step": 1,
                "actor_rollout_ref.rollout.checkpoint_engine.backend": "naive",
            },
            "checkpoint_engine.backend=nccl",
        ),
        (
            "colocate_async",
            {"trainer.v1.sampler.max_off_policy_threshold": 0},
            "a whole number of at least 1",
        ),
        ("colocate_async", {"trainer.v1.sampler.max_off_policy_strategy": "keep"}, "drop .* or wait"),
    ],
)
def test_contradictory_mode_settings_are_refused_with_the_fix(
    tmp_path, tiny_model_dir, mode, native, refusal
):
    with pytest.raises(ConfigError, match=refusal):
        _mode(tmp_path, tiny_model_dir, mode, **native).render()


def test_separate_async_on_gpus_needs_rollout_resources_of_its_own(tmp_path, tiny_model_dir):
    native = {
        "trainer": {"v1": {"trainer_mode": "separate_async", "separate_async": {"parameter_sync_step": 1}}}
    }
    with pytest.raises(ConfigError, match="set verl.actor_rollout_ref.rollout.nnodes and n_gpus_per_node"):
        trainer_for(tmp_path, _config(tiny_model_dir, native)).render()
