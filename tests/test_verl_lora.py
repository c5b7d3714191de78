"""verl LoRA without verl's trainer (its CPU run with an adapter: test_verl_cpu_gateway_e2e.py): the
`aworld_cpu` rollout loads what verl's actor sends for an unmerged adapter and samples from base +
adapter; an adapter that does not arrive shows as mismatch in the step line, with its warning; the
LoRA settings verl would not carry out are refused before anything starts, and a GPU render leaves
vLLM's LoRA settings for verl to derive."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

import torch  # noqa: E402

from aworld_train.core.errors import ConfigError  # noqa: E402
from aworld_train.inputs.config import AlgorithmConfig, LoraConfig, load_config  # noqa: E402

TEMPERATURE = 0.7
TOLERANCE = AlgorithmConfig().mismatch_tolerance
PROMPT = "What is 12 times 7? Answer with the number."


def trainer_model(tiny_model_dir):
    """The actor's side: the base with a LoRA adapter whose B matrices are not zero (an adapter
    after updates), as peft wraps it in verl's FSDP actor."""
    from aworld_train.engines.local.lora import attach
    from aworld_train.rollout.policies.models import load_model

    model = attach(load_model(str(tiny_model_dir), dtype=torch.float32), LoraConfig(rank=4, alpha=8))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5)
    return model.eval()


def verl_sends(peft_model, base_sync_done: bool):
    """What verl's FSDP engine yields for an unmerged adapter (workers/engine/fsdp/transformer_impl.py,
    get_per_tensor_param), by verl's own functions: the adapter, or the base under its `.base_layer` names."""
    from verl.utils.fsdp_utils import collect_lora_params, replace_lora_wrapper

    peft_config = peft_model.peft_config["default"]
    params = collect_lora_params(peft_model, layered_summon=False, base_sync_done=base_sync_done)
    if not base_sync_done:
        params = {replace_lora_wrapper(name, peft_config): tensor for name, tensor in params.items()}
    return list(params.items()), peft_config.to_dict()


class DirectServer:
    """The server actor's methods as `AWorldCPUAdapter` calls them (`.remote(...)`, awaited), in-process."""

    def __init__(self, server) -> None:
        self.server = server

    def __getattr__(self, name: str):
        return type("Method", (), {"remote": staticmethod(getattr(self.server, name))})


def cpu_rollout(tiny_model_dir):
    from aworld_train.engines.verl.cpu.rollout import AWorldCPUAdapter, AWorldCPUServer

    server = AWorldCPUServer(str(tiny_model_dir), prompt_length=64, response_length=12)
    adapter = AWorldCPUAdapter.__new__(AWorldCPUAdapter)  # verl's worker state is not needed here
    adapter.is_leader, adapter._server = True, DirectServer(server)
    return server, adapter


def update(adapter, named, **kwargs) -> None:
    asyncio.run(adapter.update_weights(iter(named), **kwargs))


def sample_and_recompute(server, model, tokenizer, seed: int = 0):
    """Tokens the server samples with their logprobs, and the trainer model's logprobs of them."""
    prompt = tokenizer.encode(PROMPT, add_special_tokens=False)
    params = {"temperature": TEMPERATURE, "top_k": -1, "top_p": 1.0, "logprobs": True, "max_tokens": 12}
    out = asyncio.run(server.generate(prompt, {**params, "seed": seed}))
    return out, recompute(model, prompt, out.token_ids)


def recompute(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """log_softmax(logits / temperature) of each sampled token: what verl's actor computes."""
    from aworld_train.engines.local.grpo import token_logprobs

    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0]
    return token_logprobs(logits[len(prompt) - 1 : -1], torch.tensor(tokens), TEMPERATURE)


def verl_step_line(step: int, out, recomputed) -> str:
    """verl's step line for a step that trained on `out`: its own metrics of the rollout's logprobs
    against the actor's (utils/debug/metrics.py), printed as its console logger prints them."""
    from verl.protocol import DataProto
    from verl.utils.debug.metrics import calculate_debug_metrics
    from verl.utils.logger.aggregate_logger import concat_dict_to_str

    tokens = torch.tensor([out.token_ids])
    data = DataProto.from_dict(
        tensors={
            "responses": tokens,
            "response_mask": torch.ones_like(tokens),
            "rollout_log_probs": torch.tensor([out.log_probs]),
            "old_log_probs": recomputed[None],
        }
    )
    return f"(TaskRunner pid=1) {concat_dict_to_str(calculate_debug_metrics(data), step=step)}"


def test_the_cpu_rollout_serves_base_plus_the_adapter_verl_sends(tiny_model_dir, tokenizer):
    server, adapter = cpu_rollout(tiny_model_dir)
    base_params = sum(p.numel() for p in server.policy.model.parameters())
    model = trainer_model(tiny_model_dir)
    # the first update of a run with rollout.load_format dummy: the base once, then the adapter
    base, peft_config = verl_sends(model, base_sync_done=False)
    assert any(".base_layer." in name for name, _ in base)  # verl's names for the wrapped layers
    update(adapter, base, peft_config=peft_config, base_sync_done=False, global_steps=0)
    adapter_now, _ = verl_sends(model, base_sync_done=True)
    assert adapter_now and all(".lora_" in name for name, _ in adapter_now)
    update(adapter, adapter_now, peft_config=peft_config, base_sync_done=True, global_steps=0)
    assert asyncio.run(server.stats())["adapter_loads"] == 1 and server.weight_loads == 1

    out, recomputed = sample_and_recompute(server, model, tokenizer)
    assert len(out.token_ids) >= 4
    assert torch.allclose(torch.tensor(out.log_probs), recomputed, atol=1e-4)  # base + adapter
    with model.disable_adapter():
        prompt = tokenizer.encode(PROMPT, add_special_tokens=False)
        base_only = recompute(model, prompt, out.token_ids)
    assert (torch.tensor(out.log_probs) - base_only).abs().max() > 0.1  # the adapter matters here

    # a later update: the adapter alone, replacing the last in the same layers
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_A" in name:
                param.mul_(-1)
    adapter_now, _ = verl_sends(model, base_sync_done=True)
    update(adapter, adapter_now, peft_config=peft_config, base_sync_done=True, global_steps=1)
    stats = asyncio.run(server.stats())
    assert stats["adapter_loads"] == 2 and stats["weight_loads"] == 1 and stats["global_steps"] == 1
    out, recomputed = sample_and_recompute(server, model, tokenizer, seed=1)
    assert out.extra_fields["global_steps"] == 1
    assert torch.allclose(torch.tensor(out.log_probs), recomputed, atol=1e-4)
    # the layers were built from the first update's settings: other settings are not taken silently
    with pytest.raises(ValueError, match=r"LoRA settings changed between updates \(lora_alpha\)"):
        update(adapter, adapter_now, peft_config={**peft_config, "lora_alpha": 99}, global_steps=2)
    # the adapter lives in the one model: no second copy of the base
    adapter_params = sum(p.numel() for name, p in model.named_parameters() if "lora_" in name)
    assert sum(p.numel() for p in server.policy.model.parameters()) == base_params + adapter_params


def test_base_weights_without_their_adapter_are_refused(tiny_model_dir):
    """What verl's checkpoint-engine path would send a standalone replica for an unmerged adapter."""
    _, adapter = cpu_rollout(tiny_model_dir)
    base, _ = verl_sends(trainer_model(tiny_model_dir), base_sync_done=False)
    with pytest.raises(ValueError, match=r"without its adapter.*engine_workers\.py:764.*lora\.merge: true"):
        update(adapter, base, global_steps=1)


def test_an_adapter_that_never_reaches_the_rollout_warns_in_the_step_line(tiny_model_dir, tokenizer):
    """The server keeps the base (the adapter deliberately not delivered) while the actor recomputes
    with its adapter: verl's own mismatch figures for the step exceed the tolerance, and the line our
    launcher adds after verl's step line says so, naming the likely cause. Delivered, no warning."""
    from aworld_train.engines.verl.step_lines import MismatchWatch

    watch = MismatchWatch(TOLERANCE)
    model = trainer_model(tiny_model_dir)
    server, adapter = cpu_rollout(tiny_model_dir)
    line = watch(verl_step_line(2, *sample_and_recompute(server, model, tokenizer)))
    assert line is not None and line.startswith("verl step 2: rollout probability mismatch")
    assert (
        "WARNING" in line and "LoRA adapter" in line and f"algorithm.mismatch_tolerance={TOLERANCE}" in line
    )

    adapter_now, peft_config = verl_sends(model, base_sync_done=True)
    update(adapter, adapter_now, peft_config=peft_config, base_sync_done=True, global_steps=1)
    line = watch(verl_step_line(2, *sample_and_recompute(server, model, tokenizer)))
    assert line is not None and "WARNING" not in line
    assert float(line.split("mismatch ")[1].split()[0]) < 1e-3
    assert watch("(TaskRunner pid=1) Training Progress: 50%") is None  # other lines add nothing


# -- settings verl would not carry out, refused before anything starts -----------------------------


def validate(native: dict) -> None:
    from aworld_train.engines import get_engine

    cfg = load_config({"backend": "verl", "verl": native})
    get_engine("verl").validate(cfg)


def lora_native(cpu: bool = True, **model) -> dict:
    native = {"actor_rollout_ref": {"model": {"lora_rank": 8, "lora_alpha": 16, **model}}}
    if cpu:
        native["trainer"] = {"device": "cpu"}
    return native


def test_an_unmerged_adapter_runs_on_the_cpu_rollout_in_sync_and_colocate_async():
    validate(lora_native())
    native = lora_native()
    native["trainer"]["v1"] = {"trainer_mode": "colocate_async"}
    validate(native)


def test_lora_settings_verl_would_not_carry_out_are_refused_with_the_fix():
    separate = lora_native()
    separate["trainer"]["v1"] = {"trainer_mode": "separate_async"}
    with pytest.raises(ConfigError, match=r"separate_async.*engine_workers\.py:764.*lora\.merge: true"):
        validate(separate)
    separate["actor_rollout_ref"]["model"]["lora"] = {"merge": True}
    validate(separate)  # merged weights travel through the checkpoint engine like any

    layered = lora_native()
    layered["actor_rollout_ref"]["rollout"] = {"layered_summon": True}
    with pytest.raises(ConfigError, match=r"layered_summon=true.*load_format: safetensors"):
        validate(layered)
    layered["actor_rollout_ref"]["rollout"]["load_format"] = "safetensors"
    validate(layered)

    megatron_key = {"actor_rollout_ref": {"model": {"lora": {"rank": 8}}}, "trainer": {"device": "cpu"}}
    with pytest.raises(
        ConfigError, match=r"lora\.rank=8 is read by verl's Megatron actor only.*lora_rank: 8"
    ):
        validate(megatron_key)

    with pytest.raises(ConfigError, match=r"lora_rank=1024: vLLM serves adapters of rank up to 512"):
        validate(lora_native(cpu=False, lora_rank=1024))
    validate(lora_native(lora_rank=1024))  # the CPU rollout takes any rank


def test_a_gpu_render_leaves_vllms_lora_settings_for_verl_to_derive(tmp_path, tiny_model_dir):
    """verl 0.9.1's vLLM server turns LoRA on from the model config it is given
    (vllm_async_server.py:417-435: enable_lora, max_loras 1, max_lora_rank from lora_rank, unless
    lora.merge): the render passes lora_rank and alpha through and sets none of those itself."""
    from backend_support import trainer_for
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import HFModelConfig

    data = {
        "backend": "verl",
        "model": str(tiny_model_dir),
        "algorithm": {"group_size": 2},
        "rollout": {"max_total_tokens": 2048},
        "verl": lora_native(cpu=False),
    }
    final = trainer_for(tmp_path, data).render().final
    assert final.actor_rollout_ref.rollout.name == "vllm"
    model = omega_conf_to_dataclass(final.actor_rollout_ref.model, dataclass_type=HFModelConfig)
    assert (model.lora_rank, model.lora_alpha) == (8, 16)
    assert model.lora.get("rank", 0) == 0 and not model.lora.get("merge", False)  # lora_rank decides
    vllm_kwargs = final.actor_rollout_ref.rollout.engine_kwargs.get("vllm") or {}
    assert not {"enable_lora", "max_lora_rank", "max_loras"} & set(vllm_kwargs)


def test_the_launcher_adds_the_mismatch_line_after_each_verl_step_line(tmp_path, capsys):
    """What `run` streams from verl's process, in the console and in verl.log."""
    import sys
    from types import SimpleNamespace

    from aworld_train.engines.native import launch
    from aworld_train.engines.verl.step_lines import MismatchWatch

    step = (
        "(TaskRunnerV1 pid=7) step:3 - training/rollout_probs_diff_valid:1 - "
        "training/rollout_probs_diff_max:np.float64(0.9) - training/rollout_probs_diff_mean:0.25 - actor/lr:0.001"
    )
    command = [sys.executable, "-c", f"print('Training Progress: 1/3'); print({step!r})"]
    returncode, log = launch(
        command, SimpleNamespace(run_dir=tmp_path), "verl.log", watch=MismatchWatch(TOLERANCE)
    )
    assert returncode == 0
    lines = log.read_text().splitlines()
    assert lines[:2] == ["Training Progress: 1/3", step]
    assert lines[2].startswith("verl step 3: rollout probability mismatch 0.25 (max 0.9) | WARNING: ")
    assert "training/rollout_probs_diff_mean" in lines[2] and "LoRA adapter" in lines[2]
    assert lines[2] in capsys.readouterr().err
