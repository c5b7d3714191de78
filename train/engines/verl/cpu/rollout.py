"""The `aworld_cpu` rollout: verl's replica / server / adapter contract, served on CPU.

- `AWorldCPUServer` (a Ray actor): the token-in/token-out `generate` that verl's
  `LLMServerClient` calls, answered by our batched `LocalPolicy` (concurrent requests
  are sampled together; logprobs are log_softmax(logits / temperature), the quantity
  verl's actor recomputes, as vLLM's `processed_logprobs`), plus the control calls verl
  makes on every server (sleep, wake_up, abort, ...), which have nothing to free on a CPU.
  With `engine_kwargs.aworld_cpu.sampler: vllm` (what `rollout.engine: vllm` renders to) it is
  answered by vLLM's own server instead (`VLLMPolicy`, in vLLM's environment: verl 0.9.1's
  vLLM rollout does not run on a CPU, docs/BACKENDS.md), each weight update pushed to it.
- `AWorldCPUReplica`: registered in verl's RolloutReplicaRegistry; starts one server actor,
  named as verl's hybrid adapters look their servers up.
- `AWorldCPUAdapter`: the hybrid worker's `BaseRollout`. verl's sync trainer hands it the
  actor's weights after every update (engine_workers.py, `update_weights`); rank 0 loads
  them into the server, as verl's colocated vLLM/SGLang adapters push theirs to the engine.
  A standalone replica (separate_async) gets them from its checkpoint worker, which received
  them through the `aworld_cpu` checkpoint engine (weights.py).
  An actor training a LoRA adapter it does not merge sends the adapter (and, once, the base):
  the server loads it into its model (lora.py) and samples from base + adapter.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from typing import Any

import ray
import torch
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput
from verl.workers.rollout.utils import ensure_async_iterator

from aworld_train.engines.verl.cpu.lora import RolloutAdapter, base_weights, refuse_lora_names
from aworld_train.rollout.policies.client import SamplingParams

log = logging.getLogger("aworld_train")
NAME = "aworld_cpu"


def server_name(replica_rank: int) -> str:
    return f"{NAME}_server_{replica_rank}_0"


def sampling_from_vllm(params: dict[str, Any], default_max: int) -> SamplingParams:
    """vLLM's SamplingParams keys (what verl's agent loops send) as our SamplingParams."""
    top_k = int(params.get("top_k") or 0)
    seed = params.get("seed")
    return SamplingParams(
        max_new_tokens=max(1, int(params.get("max_tokens") or params.get("max_new_tokens") or default_max)),
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        top_k=max(0, top_k),  # vLLM's -1 means no top-k, as our 0
        seed=None if seed is None else int(seed),
    )


def sampler_settings(config: Any) -> dict[str, Any]:
    """`engine_kwargs.aworld_cpu` of verl's rollout config (a dataclass or a DictConfig)."""
    engine_kwargs = getattr(config, "engine_kwargs", None) or {}
    return dict(engine_kwargs.get(NAME) or {})


class AWorldCPUServer:
    def __init__(
        self, model_path: str, prompt_length: int, response_length: int, sampler: dict[str, Any] | None = None
    ) -> None:
        from transformers import AutoModelForCausalLM

        from aworld_train.rollout.policies.models import load_tokenizer
        from aworld_train.rollout.tokens.turns.stops import stop_token_ids

        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        tokenizer = load_tokenizer(model_path)
        self.stop_ids = set(stop_token_ids(tokenizer))
        self.max_len = prompt_length + response_length
        self.sampler = (sampler or {}).get("sampler", "transformers")
        if self.sampler == "vllm":
            self.policy = self._vllm(model, tokenizer, model_path, sampler or {})
        else:
            from aworld_train.rollout.policies.local import LocalPolicy

            self.policy = LocalPolicy(model, tokenizer, sorted(self.stop_ids))
        self.response_length = response_length
        self.global_steps: int | None = None
        self.weight_loads = 0
        self.adapter = RolloutAdapter(model)
        self.adapter_loads = 0

    def _vllm(self, model, tokenizer, model_path: str, settings: dict[str, Any]):
        """vLLM's server on the model's weights; `model` stays here as the copy each update loads
        into before it is pushed."""
        from pathlib import Path

        from aworld_train.rollout.policies.vllm_policy import VLLMPolicy

        run_folder = Path(settings["run_folder"])
        policy = VLLMPolicy.start(
            model,
            tokenizer,
            sorted(self.stop_ids),
            model_path,
            run_folder / "vllm.log",
            max_model_len=self.max_len,
            seed=int(settings.get("seed", 0)),
            kv_cache_gib=float(settings.get("kv_cache_gib", 2)),
            lora_rank=settings.get("lora_rank"),
            weights_parent=run_folder,
        )
        # the server's stdout reaches verl's log through Ray
        print(
            f"{NAME}: sampling with vLLM's server at {policy.server.url} (log {policy.server.log_path})",
            flush=True,
        )
        return policy

    async def generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str | None = None, **_: Any
    ) -> TokenOutput:
        unknown = set(sampling_params.get("stop_token_ids") or []) - self.stop_ids
        if unknown:
            raise ValueError(
                f"{NAME}: stop_token_ids {sorted(unknown)} are not the model's stop tokens "
                f"{sorted(self.stop_ids)}; the CPU rollout stops only at those"
            )
        sampling = sampling_from_vllm(sampling_params, self.response_length)
        room = self.max_len - len(prompt_ids)
        if room < 1:
            raise ValueError(f"{NAME}: a prompt of {len(prompt_ids)} tokens leaves no room in {self.max_len}")
        sampling = dataclasses.replace(sampling, max_new_tokens=min(sampling.max_new_tokens, room))
        gen = await self.policy.generate(list(prompt_ids), sampling)
        return TokenOutput(
            token_ids=list(gen.token_ids),
            log_probs=list(gen.logprobs) if sampling_params.get("logprobs") else None,
            stop_reason="completed",
            num_preempted=0,
            # the version stamped while the batch held the weights: a load that lands while this
            # request waits cannot make it report weights it did not use
            extra_fields={"global_steps": self.policy.version if gen.version is None else gen.version},
        )

    async def load_weights(self, named: list[tuple[str, torch.Tensor]], global_steps: int | None) -> int:
        loaded = await asyncio.to_thread(self._load, named, global_steps)
        self.global_steps = self.policy.version
        self.weight_loads += 1
        return loaded

    def _load(self, named: list[tuple[str, torch.Tensor]], global_steps: int | None) -> int:
        try:
            return self.policy.load_weights(dict(named), version=global_steps)
        except RuntimeError as exc:
            raise RuntimeError(f"{NAME}: {exc}") from exc

    async def load_adapter(
        self, named: list[tuple[str, torch.Tensor]], peft_config: dict[str, Any], global_steps: int | None
    ) -> int:
        """The actor's LoRA adapter (weights and settings) into the model, replacing the last one."""
        if self.sampler == "vllm":  # served beside the base as one of vLLM's own adapters
            loaded = await asyncio.to_thread(self.policy.load_adapter, dict(named), peft_config, global_steps)
            return self._adapter_loaded(loaded, peft_config)
        try:
            loaded = await asyncio.to_thread(
                self.policy.change_model,
                lambda model: (model, self.adapter.load(named, peft_config)),
                global_steps,
            )
        except (RuntimeError, ValueError) as exc:
            raise type(exc)(f"{NAME}: {exc}") from exc
        return self._adapter_loaded(loaded, peft_config)

    def _adapter_loaded(self, loaded: int, peft_config: dict[str, Any]) -> int:
        self.global_steps = self.policy.version
        self.adapter_loads += 1
        # the server's stdout reaches verl's log through Ray: the line a user (and a test) reads to
        # see that the adapter arrived
        print(
            f"{NAME}: LoRA adapter loaded ({loaded} tensors, rank {peft_config.get('r')}) as weights "
            f"version {self.global_steps}; adapter loads {self.adapter_loads}",
            flush=True,
        )
        return loaded

    async def stats(self) -> dict[str, Any]:
        return {
            "sampler": self.sampler,
            "global_steps": self.global_steps,
            "weight_loads": self.weight_loads,
            "adapter_loads": self.adapter_loads,
            "batches": getattr(self.policy, "batches", None),  # vLLM batches on its own
            "pushes_s": getattr(self.policy, "pushes", None),
        }

    async def set_global_steps(self, global_steps: int) -> None:
        # verl's name for the version of the weights this server holds (its vLLM server's too)
        await asyncio.to_thread(self._set_version, global_steps)

    def _set_version(self, global_steps: int) -> None:
        with self.policy.lock:
            self.policy.version = int(global_steps)
        self.global_steps = int(global_steps)

    # control calls verl makes on every server; a CPU model has no cache to free or engine to pause
    async def wake_up(self, tags: list[str] | None = None) -> None: ...
    async def sleep(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def wait_for_requests_to_drain(self) -> None: ...
    async def resume_generation(self) -> None: ...
    async def start_profile(self, **kwargs: Any) -> None: ...
    async def stop_profile(self) -> None: ...

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        return {"aborted_count": 0, "request_ids": []}

    def get_server_address(self) -> tuple[str, int]:
        return ray.util.get_node_ip_address(), 0  # no HTTP endpoint: token-in/token-out over Ray only


class AWorldCPUReplica(RolloutReplica):
    async def launch_servers(self) -> None:
        if self.world_size != 1:
            raise ValueError(
                f"{NAME}: one CPU process per replica; set actor_rollout_ref.rollout.tensor_model_parallel_size, "
                "data_parallel_size and pipeline_model_parallel_size to 1"
            )
        name = server_name(self.replica_rank)
        if self.is_reward_model or self.is_teacher_model:
            name = f"{name}_{'reward' if self.is_reward_model else 'teacher'}{self.name_suffix}"
        # the model config reaches the driver as a DictConfig (HFModelConfig only inside workers)
        path = getattr(self.model_config, "local_path", None) or self.model_config["path"]
        server = (
            ray.remote(AWorldCPUServer)
            .options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(
                str(path),
                self.config.prompt_length,
                self.config.response_length,
                sampler_settings(self.config),
            )
        )
        self.servers = [server]
        self._server_handle = server
        address, _ = await server.get_server_address.remote()
        # no HTTP endpoint: the address only names the server in verl's load balancer, which keys
        # servers by it, so each replica needs its own (separate_async holds a hybrid replica and a
        # standalone one in one balancer, and removes the hybrid ones by address)
        self._server_address = f"{address}/{name}"

    def rollout_worker_use_gpu(self) -> bool:
        return False


class AWorldCPUAdapter(BaseRollout):
    """In the hybrid actor worker: rank 0 of each replica loads the trainer's weights into its server."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank = rank if replica_rank == -1 else replica_rank
        self.is_leader = True  # one process per replica (AWorldCPUReplica refuses more)
        self._server = None

    def server(self):
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(
        self,
        weights,
        wire_format: str = "named_tensors",
        peft_config: dict[str, Any] | None = None,
        base_sync_done: bool = True,
        **kwargs: Any,
    ) -> None:
        """Full (or merged) weights; or, from an actor training an unmerged LoRA adapter
        (`peft_config` given), its base weights (`base_sync_done` false, once) or its adapter."""
        if wire_format != "named_tensors":
            raise ValueError(f"{NAME}: weight wire format {wire_format!r}; only named_tensors is supported")
        # drained on every rank: the generator gathers FSDP shards collectively (a standalone
        # replica's come from the aworld_cpu checkpoint engine, an async generator)
        named = [
            (name, tensor.detach().to("cpu", copy=True))
            async for name, tensor in ensure_async_iterator(weights)
        ]
        if not self.is_leader:
            return
        global_steps = kwargs.get("global_steps")
        if peft_config is None:
            refuse_lora_names(named, NAME)
            await self.server().load_weights.remote(named, global_steps)
        elif base_sync_done:
            await self.server().load_adapter.remote(named, peft_config, global_steps)
        else:
            await self.server().load_weights.remote(base_weights(named), global_steps)


RolloutReplicaRegistry.register(NAME, lambda: AWorldCPUReplica)
# verl has no registration call for in-worker adapters: its table is a plain dict
# (verl/workers/rollout/base.py:89, read by get_rollout_class)
rollout_base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.AWorldCPUAdapter"
