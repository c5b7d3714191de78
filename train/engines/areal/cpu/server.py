"""Our LocalPolicy behind the HTTP protocol of SGLang's server, as AReaL's `RemoteSGLangEngine`
speaks it, so that AReaL's own trainer runs on a CPU.

    python -m aworld_train.engines.areal.cpu.server --model PATH --port PORT [--max-len N]

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
- `GET /health`; `GET /server_state` (ours) reports the weight version, the loads and batch sizes.

Every weight load is appended to the `--events` JSONL file with the requests and tokens served on
the weights it replaces, so a run's log shows which version served what.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from aworld_train.rollout.policies.client import SamplingParams

# SGLang's "no top-k" is a huge number; ours is 0
_NO_TOP_K = 1 << 30
_VERSION_IN_PATH = re.compile(r"weight_update_v(\d+)$")


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
        self.events = events
        self.running = asyncio.Event()
        self.running.set()
        self.served = {"requests": 0, "tokens": 0, "discarded": 0}
        self.loads: list[dict[str, Any]] = []

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

    async def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = [int(t) for t in body["input_ids"]]
        sampling = self.sampling(body.get("sampling_params") or {}, len(prompt))
        await self.running.wait()
        admitted = self.version
        gen = await self.policy.generate(prompt, sampling)
        # stamped while the batch held the weights, so a load that landed while this request waited
        # for its batch shows here
        version = self.version if gen.version is None else gen.version
        if version != admitted:
            # AReaL stamps the tokens with the version it set after the load, which it may not have
            # set yet: as SGLang aborts a request its pause caught before prefill, drop the tokens;
            # AReaL's client asks again once its update is over
            self.served["discarded"] += len(gen.token_ids)
            return aborted(len(prompt), version)
        self.served["requests"] += 1
        self.served["tokens"] += len(gen.token_ids)
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
        started = time.monotonic()
        named = await asyncio.to_thread(read_weights, folder)
        match = _VERSION_IN_PATH.search(folder.name)
        previous = self.version
        version = int(match.group(1)) if match else previous + 1
        loaded = await asyncio.to_thread(self.policy.load_weights, named, version)
        record = {
            "event": "weights",
            "version": version,
            "path": str(folder),
            "tensors": loaded,
            "load_s": round(time.monotonic() - started, 3),
            "served_on_previous": {"version": previous, **self.served},
        }
        self.served = {"requests": 0, "tokens": 0, "discarded": 0}
        self.loads.append(record)
        if self.events is not None:
            with self.events.open("a") as out:
                out.write(json.dumps(record) + "\n")
        return record

    def state(self) -> dict[str, Any]:
        cache = self.policy.prefix_cache
        return {
            "weight_version": self.version,
            "served": self.served,
            "weight_loads": self.loads,
            "batches": len(self.policy.batches),
            "mean_batch": sum(self.policy.batches) / max(1, len(self.policy.batches)),
            "prefix_cache": None
            if cache is None
            else {"hit_tokens": cache.hits, "miss_tokens": cache.misses},
            "paused": not self.running.is_set(),
        }


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message}, "success": False, "message": message}, status)


def build_app(server: PolicyServer) -> FastAPI:
    app = FastAPI(title="aworld-train CPU policy server (SGLang protocol)")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "weight_version": server.version}

    @app.get("/server_state")
    async def server_state() -> dict[str, Any]:
        return server.state()

    @app.post("/generate")
    async def generate(request: Request):
        body = await request.json()
        if not isinstance(body.get("input_ids"), list) or not body["input_ids"]:
            return error(
                400, "input_ids: a non-empty list of token ids is required (text prompts are not served)"
            )
        try:
            return await server.generate(body)
        except ValueError as exc:
            return error(400, str(exc))

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request):
        body = await request.json()
        folder = Path(str(body.get("model_path") or ""))
        if not folder.is_dir():
            return error(400, f"model_path {str(folder)!r} is not a folder of saved weights")
        try:
            record = await server.load_from_disk(folder)
        except (OSError, RuntimeError) as exc:
            return error(500, f"loading {folder}: {exc}")
        return {"success": True, "message": f"loaded version {record['version']}", "num_paused_requests": 0}

    @app.post("/pause_generation")
    async def pause_generation():
        server.running.clear()
        return {"success": True}

    @app.post("/continue_generation")
    async def continue_generation():
        server.running.set()
        return {"success": True}

    # offloading and colocation calls: a CPU process has no accelerator memory to hand back
    @app.post("/release_memory_occupation")
    async def release_memory_occupation():
        return {"success": True}

    @app.post("/resume_memory_occupation")
    async def resume_memory_occupation():
        return {"success": True}

    return app


def serve(model: str, port: int, host: str, max_len: int | None, events: Path | None, threads: int) -> None:
    import uvicorn
    from transformers import AutoModelForCausalLM

    from aworld_train.rollout.policies.local import LocalPolicy
    from aworld_train.rollout.policies.models import load_tokenizer, resolve_model_path
    from aworld_train.rollout.tokens.stops import stop_token_ids

    if threads > 0:
        torch.set_num_threads(threads)
    path = resolve_model_path(model)
    # float32: the logprobs sampled here are the ones AReaL's float32 actor recomputes
    loaded = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(str(path))
    policy = LocalPolicy(loaded, tokenizer, stop_token_ids(tokenizer))
    context = max_len or int(getattr(loaded.config, "max_position_embeddings", 0) or 4096)
    app = build_app(PolicyServer(policy, context, events))
    uvicorn.run(app, host=host, port=port, log_level="warning")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model folder or embedded:<name>")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--max-len", type=int, default=None, help="context length (default: the model's)")
    parser.add_argument("--events", type=Path, default=None, help="JSONL file of weight loads")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)
    serve(args.model, args.port, args.host, args.max_len, args.events, args.threads)


if __name__ == "__main__":
    main()
