"""The CPU switch of the verl engine, without running verl's trainer (that is test_verl_cpu_e2e.py):
what `verl.trainer.device: cpu` renders, the aworld_cpu server, and the status metrics."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

from backend_support import trainer_for  # noqa: E402

from aworld_train.errors import ConfigError  # noqa: E402

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
        sampler = rendered.final.trainer.v1.sampler.custom_sampler
        assert sampler.name == "EpisodeStatusSampler" and Path(sampler.path).name == "episodes.py"


def test_the_example_is_a_cpu_run(tmp_path, tiny_model_dir):
    from aworld_train import AgentTrainer

    overrides = [
        f"trainer.run_dir={tmp_path / 'run'}",
        f"model={tiny_model_dir}",
        "rollout.max_total_tokens=2048",
    ]
    run = AgentTrainer(config=str(EXAMPLE), overrides=overrides).render()
    assert run.final.actor_rollout_ref.rollout.name == "aworld_cpu"
    assert run.final.trainer.total_training_steps == 2


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
    from aworld_train.rollout.trajectory import STATUSES

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
