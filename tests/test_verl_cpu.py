"""The CPU switch of the verl engine, without running verl's trainer (that is test_verl_cpu_e2e.py):
what `verl.trainer.device: cpu` renders, the aworld_cpu server, and verl's trainer modes. The
episode sampler and the status metrics it reports: test_verl_episode_sampler.py."""

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
