"""Our LocalPolicy behind the HTTP protocol of SGLang's server, as AReaL's `RemoteSGLangEngine`
speaks it, so that AReaL's own trainer runs on a CPU.

    python -m aworld_train.engines.areal.cpu.app --model PATH --port PORT [--max-len N]   (cpu/app.py)

What AReaL 1.0.4 sends (engine/sglang_remote.py, infra/remote_inf_engine.py):
- `POST /generate` {input_ids, sampling_params: {max_new_tokens, temperature, top_p, top_k,
  stop_token_ids, ...}, return_logprob}; it reads `meta_info.finish_reason.type` and
  `meta_info.output_token_logprobs` ([logprob, id, _] per token). Requests that arrive together
  are sampled in one batch, with prefix reuse and logprobs log_softmax(logits / temperature), the
  quantity AReaL's actor recomputes (LocalPolicy).
- `POST /update_weights_from_disk` {model_path}: the folder AReaL's actor saved after an update
  (`actor.weight_update_mode: disk`); AReaL deletes it once we answer, so it is loaded first.
- `POST /pause_generation` / `/continue_generation` around an update: new requests wait; the batch
  in flight finishes on the old weights (the load waits for it), so no answer mixes two versions.
  A request that was waiting for its batch when the load came is answered as SGLang answers one
  its pause aborted before prefill (no tokens): AReaL stamps each token with the version it knows,
  which may not yet be the new one, and asks again once its update is over. `meta_info.weight_version`
  is the version that sampled the answer.
- With `actor.use_lora` (AReaL's disk mode, as for SGLang): `POST /load_lora_adapter` {lora_name,
  lora_path}, the peft adapter folder the actor saved (adapter_config.json, adapter_model.safetensors),
  named `<gconfig.lora_name>-v<version>` (AReaL's `get_versioned_lora_name`); the first is the
  initial adapter the CPU trainer hands over at start (version 0, what `_init_rollout(lora_path=...)`
  gives SGLang as `--lora-paths`). The server samples from its one base plus the adapter last loaded,
  whose weights each load replaces in place (`rollout/policies/adapters.py: serve_adapter`); generate
  requests name it in `lora_path`, and one that names an older version is answered as an aborted
  one (AReaL asks again once it knows the new version). `POST /unload_lora_adapter` {lora_name}:
  an adapter already replaced is gone; the one served stays until another replaces it.
- `GET /health`; `GET /server_state` (ours) reports the weight version, the loads and batch sizes.

Every weight or adapter load is appended to the `--events` JSONL file with the requests and tokens
served on the weights it replaces (load_log.py).
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import torch

from aworld_train.engines.areal.cpu.load_log import LoadLog
from aworld_train.rollout.policies.client import SamplingParams

# SGLang's "no top-k" is a huge number; ours is 0
_NO_TOP_K = 1 << 30
_VERSION_IN_PATH = re.compile(r"weight_update_v(\d+)$")
# AReaL names each adapter it loads `<gconfig.lora_name>-v<version>`
_VERSIONED_ADAPTER = re.compile(r"^(?P<name>.+)-v(?P<version>\d+)$")


class AdapterError(ValueError):
    """A LoRA request the server cannot honour (answered 400 with this text)."""


def adapter_version(name: str) -> tuple[str, int]:
    """`lora-v3` -> ("lora", 3): AReaL's versioned adapter name, split."""
    match = _VERSIONED_ADAPTER.match(name)
    if match is None:
        raise AdapterError(
            f"lora_name {name!r} is not a versioned adapter name <name>-v<version> (AReaL's "
            "get_versioned_lora_name): the server serves one adapter at a time, by version"
        )
    return match["name"], int(match["version"])


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a Hugging Face model folder's safetensors files."""
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no .safetensors file")
    named: dict[str, torch.Tensor] = {}
    for file in files:
        named.update(load_file(str(file)))
    return named


def aborted(prompt_tokens: int, version: int) -> dict[str, Any]:
    """SGLang's answer for a request aborted before prefill: no tokens (AReaL resends it)."""
    finish = {"type": "abort", "message": "Abort before prefill: the weights changed while it waited"}
    return {
        "text": "",
        "output_ids": [],
        "meta_info": {
            "finish_reason": finish,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 0,
            "output_token_logprobs": [],
            "weight_version": version,
        },
    }


class PolicyServer:
    """The state behind the routes: the policy, the pause gate, the weight version and counters."""

    def __init__(self, policy, max_len: int, events: Path | None = None) -> None:
        self.policy = policy
        self.stop_ids = set(policy.stop_token_ids)
        self.max_len = max_len
        self.running = asyncio.Event()
        self.running.set()
        self.log = LoadLog(events, ("requests", "tokens", "discarded"))
        # the LoRA adapter served on the base, once one is loaded: its name without the version
        self.adapter: str | None = None
        self.unloaded = 0  # unload requests for adapters already replaced

    @property
    def version(self) -> int:
        """The version of the weights it serves (the policy's: set by each load)."""
        return self.policy.version

    def sampling(self, params: dict[str, Any], prompt_len: int) -> SamplingParams:
        unknown = set(params.get("stop_token_ids") or []) - self.stop_ids
        if unknown:
            raise ValueError(
                f"stop_token_ids {sorted(unknown)} are not the model's stop tokens {sorted(self.stop_ids)}; "
                "this server stops only at those"
            )
        if params.get("ignore_eos"):
            raise ValueError(
                "ignore_eos is not supported: the server always stops at the model's stop tokens"
            )
        room = self.max_len - prompt_len
        if room < 1:
            raise ValueError(
                f"a prompt of {prompt_len} tokens leaves no room in the context of {self.max_len}"
            )
        top_k = int(params.get("top_k") or 0)
        return SamplingParams(
            max_new_tokens=max(1, min(int(params.get("max_new_tokens") or room), room)),
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            top_k=0 if top_k < 0 or top_k >= _NO_TOP_K else top_k,
            seed=params.get("sampling_seed"),
        )

    def named_version(self, lora_path: Any) -> int | None:
        """The adapter version a request names (None: none named), checked against the one served."""
        if lora_path is None:
            if self.adapter is not None:
                raise AdapterError(
                    f"the server samples from its base plus the LoRA adapter {self.adapter!r}: name it in "
                    "lora_path (AReaL does with rollout.use_lora: true)"
                )
            return None
        if not isinstance(lora_path, str):
            raise AdapterError("lora_path: one adapter name per request (a string) is served")
        return self.loaded_version(lora_path)

    def loaded_version(self, lora_name: str) -> int:
        """The version of the adapter `lora_name` names, the one served or one it replaced; an error
        for a name the server never loaded."""
        name, version = adapter_version(lora_name)
        if self.adapter is None or name != self.adapter or version > self.version:
            raise AdapterError(f"LoRA adapter {lora_name!r} is not loaded (served: {self.served_adapter()})")
        return version

    @property
    def served(self) -> dict[str, int]:
        """Requests, tokens and discarded tokens of the weights served now."""
        return self.served_by(self.version)

    def served_by(self, version: int) -> dict[str, int]:
        return self.log.served_by(version)

    def served_adapter(self) -> str | None:
        return None if self.adapter is None else f"{self.adapter}-v{self.version}"

    async def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = [int(t) for t in body["input_ids"]]
        sampling = self.sampling(body.get("sampling_params") or {}, len(prompt))
        self.named_version(body.get("lora_path"))
        await self.running.wait()
        admitted = self.version
        named = self.named_version(body.get("lora_path"))  # a load may have landed while it waited
        if named is not None and named != admitted:
            # it names the adapter a load has just replaced: as for a load that lands while a
            # request waits for its batch (below), AReaL asks again once it knows the new version
            return aborted(len(prompt), admitted)
        gen = await self.policy.generate(prompt, sampling)
        # stamped while the batch held the weights, so a load that landed while this request waited
        # for its batch shows here
        version = self.version if gen.version is None else gen.version
        if version != admitted:
            # AReaL stamps the tokens with the version it set after the load, which it may not have
            # set yet: as SGLang aborts a request its pause caught before prefill, drop the tokens;
            # AReaL's client asks again once its update is over
            self.served_by(version)["discarded"] += len(gen.token_ids)
            return aborted(len(prompt), version)
        counts = self.served_by(version)
        counts["requests"] += 1
        counts["tokens"] += len(gen.token_ids)
        if gen.finish_reason == "stop":
            finish = {"type": "stop", "matched": gen.token_ids[-1]}
        else:
            finish = {"type": "length", "length": len(gen.token_ids)}
        return {
            "text": "",
            "output_ids": list(gen.token_ids),
            "meta_info": {
                "finish_reason": finish,
                "prompt_tokens": len(prompt),
                "completion_tokens": len(gen.token_ids),
                "output_token_logprobs": [
                    [lp, tok, None] for lp, tok in zip(gen.logprobs, gen.token_ids, strict=True)
                ],
                "weight_version": version,
            },
        }

    async def load_from_disk(self, folder: Path) -> dict[str, Any]:
        if self.adapter is not None:
            raise AdapterError(
                f"the server samples from its base plus the LoRA adapter {self.adapter!r}; full weights "
                "replace neither: with actor.use_lora AReaL sends adapters (/load_lora_adapter)"
            )
        started, previous = time.monotonic(), self.version
        named = await asyncio.to_thread(read_weights, folder)
        match = _VERSION_IN_PATH.search(folder.name)
        version = int(match.group(1)) if match else previous + 1
        loaded = await asyncio.to_thread(self.policy.load_weights, named, version)
        return self.log.record("weights", previous, version, folder, loaded, started)

    async def load_adapter(self, lora_name: str, folder: Path) -> dict[str, Any]:
        """The adapter AReaL's actor saved in `folder`, served from now on as `lora_name`."""
        from aworld_train.rollout.policies.adapters import serve_adapter

        name, version = adapter_version(lora_name)
        if self.adapter is not None and name != self.adapter:
            raise AdapterError(
                f"lora_name {lora_name!r}: the server serves adapter {self.adapter!r}, one adapter name per "
                "run (gconfig.lora_name)"
            )
        started, previous = time.monotonic(), self.version
        loaded = await asyncio.to_thread(
            self.policy.change_model, lambda model: serve_adapter(model, folder), version
        )
        self.adapter = name
        return self.log.record("adapter", previous, version, folder, loaded, started, adapter=lora_name)

    def unload_adapter(self, lora_name: str) -> str:
        """SGLang's unload: an adapter a later load replaced is gone already; the one served stays
        (the base alone is not what AReaL's requests name)."""
        if self.loaded_version(lora_name) == self.version:
            raise AdapterError(
                f"LoRA adapter {lora_name!r} is the one served: load its successor, which replaces it"
            )
        self.unloaded += 1
        return f"{lora_name} was replaced by {self.served_adapter()}"

    def state(self) -> dict[str, Any]:
        cache = self.policy.prefix_cache
        return {
            "weight_version": self.version,
            "served": dict(self.served),
            "weight_loads": self.log.loads,
            "adapter": self.served_adapter(),
            "adapter_unloads": self.unloaded,
            "batches": len(self.policy.batches),
            "mean_batch": sum(self.policy.batches) / max(1, len(self.policy.batches)),
            "prefix_cache": None
            if cache is None
            else {"hit_tokens": cache.hits, "miss_tokens": cache.misses},
            "paused": not self.running.is_set(),
        }
