"""vLLM as the local backend's sampler (`rollout.engine: vllm`): every rollout token sampled by
vLLM's own engine, in a server process of its own (`vllm_server.py`), while the trainer's model
learns in this one.

Sampling goes through the server's completions endpoint with the ledger's token ids
(`CompletionsPolicy`): the sampled ids and their logprobs come back as vLLM sampled them, and the
learner recomputes those logprobs beside them (the step's logprob mismatch). Learning does not stop
sampling: the learner's update runs while episodes go on sampling from the weights before it (the
update's `weights_update` holds nothing until it ends). Then the new weights are pushed: calls
already sampling finish first, new ones wait, the trainer's weights are written to a folder and the
server reloads them (`reload_weights`), and the version every later token is stamped with moves
on. No call is ever sampled by two weight versions. A LoRA run pushes its adapter alone, loaded
beside the base the server holds (vLLM's own adapters, one `policy-vN` per version, the last one
unloaded), never the merged weights. A run with a policy per agent pushes every policy's adapter
(`<name>-vN`) and samples each call with the one its agent's policy names (`generate(adapter=)`).

The same policy answers verl's `aworld_cpu` rollout on a CPU (engines/verl/cpu/rollout.py), whose
trainer is another process: its weights, or its adapter, arrive as tensors (`load_weights`,
`load_adapter`) and are pushed the same way.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from aworld_train.rollout.policies.client import Generation, SamplingParams
from aworld_train.rollout.policies.completions import CompletionsPolicy
from aworld_train.rollout.policies.models import load_named
from aworld_train.rollout.policies.vllm_server import SERVED_NAME, VLLMServer
from aworld_train.rollout.policies.vllm_weights import write_model_folder, write_weights

_WAIT_S = 0.005


class VLLMPolicy(CompletionsPolicy):
    """Samples with `server`; after each update pushes the weights of `model` (the one the learner trains) to it."""

    def __init__(
        self,
        server: VLLMServer,
        model,
        tokenizer,
        stop_token_ids: list[int],
        weights_dir: Path,
        lora: bool = False,
    ) -> None:
        super().__init__(f"{server.url}/v1", SERVED_NAME, stop_token_ids)
        self.lora = lora  # the trained model is a peft adapter on the base vLLM holds
        self.server, self.trained, self.tokenizer = server, model, tokenizer
        self.stop_token_ids = list(stop_token_ids)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_token_ids[0]
        self.version = 0  # stamped on every sampled token; moves on after each push
        self.lock = threading.Lock()  # held while the trainer's weights are read (a push, a save)
        self._guard = threading.Lock()  # the counts below
        self._sampling = 0  # calls being sampled now
        self._pushing = False  # a push waits for them, and new calls wait for it
        self._push_dir = weights_dir  # the server's model folder (vllm_weights.py), or the adapters'
        self.pushes: list[float] = []  # seconds each push took (write and reload)
        # a policy per agent: the model's named adapters, each served under its own name
        self.policies = [name for name in getattr(model, "peft_config", {}) if name != "default"]
        self.served: dict[str, str] = {}  # a policy's adapter as the server names it now
        self._served_folder: Path | None = None  # where those adapters were written
        if self.policies:
            self._push_policies(0)
        elif lora and hasattr(model, "peft_config"):
            # from the first call on, every token comes through the adapter, as the learner's do (an
            # adapter trained in another process arrives with its first update: `load_adapter`)
            self._push_adapter(0, model.save_pretrained)

    @classmethod
    def start(
        cls,
        model,
        tokenizer,
        stop_token_ids: list[int],
        model_path: str,
        log_path: Path,
        *,
        max_model_len: int,
        seed: int,
        kv_cache_gib: float,
        lora_rank: int | None = None,
        weights_parent: Path | None = None,
        adapters: int = 1,
    ) -> VLLMPolicy:
        """vLLM's server on `model`'s weights (a LoRA run's: the base at `model_path`, the adapter
        pushed beside it), then the policy. The server's model folder goes under `weights_parent`,
        by default in memory where there is /dev/shm (the policy's `close` removes it)."""
        shm = Path("/dev/shm")
        if weights_parent is None and shm.is_dir():
            weights_parent = shm
        folder = Path(tempfile.mkdtemp(prefix="aworld-train-vllm-", dir=weights_parent))
        try:
            served = model_path if lora_rank is not None else str(write_model_folder(model, folder))
            server = VLLMServer(
                served,
                model_path,
                log_path,
                dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
                max_model_len=max_model_len,
                seed=seed,
                kv_cache_gib=kv_cache_gib,
                lora_rank=lora_rank,
                adapters=adapters,
            )
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return cls(server, model, tokenizer, stop_token_ids, folder, lora=lora_rank is not None)

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None
    ) -> Generation:
        """Sample as the server holds the weights now (with policy `adapter`'s adapter, where the
        model has one per policy)."""
        if adapter is not None and adapter not in self.policies:
            raise ValueError(f"no adapter of policy {adapter!r} is served (policies: {self.policies})")
        while True:
            with self._guard:
                if not self._pushing:
                    self._sampling += 1
                    version = self.version
                    model = self.served[adapter] if adapter is not None else None
                    break
            await asyncio.sleep(_WAIT_S)
        try:
            gen = await super().generate(prompt_ids, sampling, model)
        finally:
            with self._guard:
                self._sampling -= 1
        gen.versions = [version] * len(gen.token_ids)
        return gen

    def body(
        self, prompt_ids: list[int], sampling: SamplingParams, model: str | None = None
    ) -> dict[str, Any]:
        if sampling.grammar is not None:
            raise ValueError("rollout.engine vllm samples no grammar (response_format) yet")
        return super().body(prompt_ids, sampling, model)

    @property
    def weights_update(self) -> _PushAfter:
        """What the learner holds while it updates: sampling goes on meanwhile; the new weights are
        pushed at its end (none where it raised)."""
        return _PushAfter(self)

    def load_weights(self, named: dict, version: int | None = None) -> int:
        """A trainer's weights by name (`load_named`) into the model this policy mirrors, then pushed
        as `version` (default: the next); the number loaded. For a trainer in another process
        (verl's actor), whose weights arrive as tensors; in a LoRA policy, the base the adapters
        are served on."""
        with self.lock:
            loaded = load_named(self.trained, named)
        self._push(version, self._push_weights)
        return loaded

    def load_adapter(self, named: dict, settings: dict[str, Any], version: int | None = None) -> int:
        """A trainer's LoRA adapter (its tensors under peft's names, its LoraConfig as a dict) served
        as `version` (default: the next); the number of tensors. For a trainer in another process."""
        if not self.lora:
            raise ValueError("this vLLM server was started without LoRA: it takes full weights")

        def save(folder: Path) -> None:
            folder.mkdir(parents=True, exist_ok=True)
            save_file(
                {k: v.detach().contiguous() for k, v in named.items()}, folder / "adapter_model.safetensors"
            )
            # peft's config as peft writes it (a set of target modules as a list)
            text = json.dumps(
                settings, default=lambda v: sorted(v) if isinstance(v, set | frozenset) else str(v)
            )
            (folder / "adapter_config.json").write_text(text)

        self._push(version, lambda following: self._push_adapter(following, save))
        return len(named)

    def push(self, version: int | None = None) -> None:
        """The trainer's weights (a LoRA policy's: its adapter) into the server, once no call is
        sampling: `version` from now on (default: the next)."""
        if self.policies:
            self._push(version, self._push_policies)
        elif self.lora:
            self._push(version, lambda following: self._push_adapter(following, self.trained.save_pretrained))
        else:
            self._push(version, self._push_weights)

    def _push(self, version: int | None, send: Callable[[int], None]) -> None:
        """`send(version)` once no call is sampling, new calls held back meanwhile; then that version
        is the one every later token is stamped with."""
        started = time.monotonic()
        with self._guard:
            self._pushing = True
        try:
            while True:
                with self._guard:
                    if not self._sampling:
                        break
                time.sleep(_WAIT_S)
            following = self.version + 1 if version is None else int(version)
            send(following)
            self.version = following
        finally:
            with self._guard:
                self._pushing = False
        self.pushes.append(time.monotonic() - started)

    def _push_weights(self, _version: int) -> None:
        with self.lock:
            write_weights(self.trained, self._push_dir)
        self.server.reload_weights(self._push_dir)

    def _push_adapter(self, version: int, save: Callable[[Path], None]) -> None:
        """The adapter `save` writes to a folder, served as `policy-v<version>`, which later calls
        name; the one before it unloaded."""
        folder = self._push_dir / f"v{version}"
        with self.lock:
            save(folder)
        name, previous = f"{SERVED_NAME}-v{version}", self.model
        self.server.load_adapter(name, folder)
        self.model = name
        if previous != SERVED_NAME:
            self.server.unload_adapter(previous)
            shutil.rmtree(self._push_dir / previous.removeprefix(f"{SERVED_NAME}-"), ignore_errors=True)

    def _push_policies(self, version: int) -> None:
        """Every policy's adapter, served as `<name>-v<version>` (which its agents' later calls name);
        each one's previous version unloaded."""
        folder = self._push_dir / f"v{version}"
        with self.lock:
            self.trained.save_pretrained(folder, selected_adapters=self.policies)  # folder/<name>/ each
        previous, previous_folder = dict(self.served), self._served_folder
        for name in self.policies:
            self.server.load_adapter(f"{name}-v{version}", folder / name)
            self.served[name] = f"{name}-v{version}"
        self._served_folder = folder
        for old in previous.values():
            self.server.unload_adapter(old)
        if previous_folder is not None and previous_folder != folder:
            shutil.rmtree(previous_folder, ignore_errors=True)

    def close(self) -> None:
        self.server.stop()
        shutil.rmtree(self._push_dir, ignore_errors=True)


class _PushAfter:
    def __init__(self, policy: VLLMPolicy) -> None:
        self.policy = policy

    def __enter__(self) -> _PushAfter:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.policy.push()
