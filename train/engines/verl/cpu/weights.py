"""The `aworld_cpu` checkpoint engine: verl's weight transfer from the actor to standalone rollout
replicas (`trainer.v1.trainer_mode: separate_async`) without an accelerator.

verl's separate trainer pushes the actor's weights to its standalone replicas through a checkpoint
engine (checkpoint_engine/base.py, `CheckpointEngineManager.update_weights`) and refuses the
colocated `naive` one there; the engines verl ships move tensors with NCCL, HCCL, NIXL or Mooncake,
all of which need a device. Here the actor's rank 0 puts the weights into Ray's object store and
leaves the reference, under the weights' version, with one named mailbox actor; each replica's
checkpoint worker takes it from there and hands the tensors to the `aworld_cpu` adapter, which loads
them into its server. Ray's object store serves every node of a cluster, so nothing here assumes
one machine.

What it carries is what verl's actor hands a checkpoint engine: full weights, or merged ones for a
LoRA actor with `model.lora.merge: true`. verl 0.9.1 hands it no adapter (engine_workers.py:764
drops the `peft_config`; an unmerged adapter's actor sends its base weights alone), so `check`
refuses separate_async with an unmerged adapter, and the `aworld_cpu` adapter refuses such base
weights should they arrive (lora.py, `refuse_lora_names`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import Any

import ray
import torch
from verl.checkpoint_engine import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

NAME = "aworld_cpu"
MAILBOX = "aworld_cpu_weights"


class WeightsMailbox:
    """Holds the latest weights' object reference by version; a receiver waits for its version."""

    def __init__(self) -> None:
        self.version: int | None = None
        self.refs: list[ray.ObjectRef] = []
        self.posted = asyncio.Condition()

    async def put(self, version: int | None, refs: list[ray.ObjectRef]) -> None:
        async with self.posted:
            self.version, self.refs = version, refs
            self.posted.notify_all()

    async def take(self, version: int | None) -> list[ray.ObjectRef]:
        async with self.posted:
            await self.posted.wait_for(lambda: self.refs and self.version == version)
            return self.refs


@functools.cache
def mailbox():
    """The run's one mailbox, started by whichever process asks first (once per process: looking it
    up anew took seconds a call)."""
    return ray.remote(WeightsMailbox).options(name=MAILBOX, get_if_exists=True, num_cpus=0).remote()


@CheckpointEngineRegistry.register(NAME)
class CPUCheckpointEngine(CheckpointEngine):
    """Built by verl in the actor's workers (`is_master` on rank 0) and in each standalone replica's
    checkpoint worker; no process group: the object store carries the tensors."""

    def __init__(self, bucket_size: int = 0, is_master: bool = False, **_: Any) -> None:
        self.is_master = is_master
        mailbox()  # its process starts now, not at the first weight push

    def prepare(self) -> dict[str, Any]:
        return {}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]):
        return {}, {}

    def init_process_group(self, **kwargs: Any) -> None:
        return None

    def finalize(self) -> None:
        return None

    async def send_weights(self, weights, global_steps: int | None = None) -> dict[str, float]:
        named: list[tuple[str, torch.Tensor]] = []
        # every rank drains the generator: FSDP gathers each full tensor collectively
        async for name, tensor in ensure_async_iterator(weights):
            if self.is_master:
                named.append((name, tensor.detach().to("cpu", copy=True)))
        if self.is_master:
            # in a list, so that Ray hands the receivers the reference, not the tensors, at `take`
            await mailbox().put.remote(global_steps, [ray.put(named)])
        return {}

    async def receive_weights(
        self, global_steps: int | None = None
    ) -> AsyncIterator[tuple[str, torch.Tensor]]:
        [ref] = await mailbox().take.remote(global_steps)
        for name, tensor in await ref:
            yield name, tensor
