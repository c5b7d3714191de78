"""vLLM's own server behind the routes AReaL's `RemotevLLMEngine` calls, for a CPU run with
`rollout.engine: vllm`: every rollout token sampled by vLLM, every update through AReaL's own disk
path. `python -m aworld_train.engines.areal.cpu.vllm_front --model M --port P`, started by the AReaL
entry point (cpu/trainer.py) in place of our transformers policy server (cpu/app.py).

AReaL's vLLM backend speaks vLLM's OpenAI routes plus four of its own server's (AReaL's
`areal_vllm_server.py`, which extends vLLM's api_server in vLLM's process). That server cannot run
here: it imports AReaL into vLLM's environment, whose pins differ (transformers >= 5.16, mcp 2), and
its weight update calls the model's `load_weights`, which empties the weights vLLM's CPU build
prepacked. So this process serves AReaL's routes in front of vLLM's unchanged server:

- `POST /v1/completions` (token-id prompts, AReaL's flat sampling keys): passed to vLLM as they come,
  held while AReaL has paused generation;
- `POST /areal_pause_generation` / `/areal_continue_generation`: new requests wait; the ones sampling
  finish on the weights they began with (the update waits for them), so no answer mixes versions;
- `POST /areal_update_weights` {model_path}: the folder AReaL's actor saved, written as vLLM's served
  folder expects it (its output layer untied: rollout/policies/vllm_weights.py) and reloaded
  (`reload_weights`, the prefix cache emptied), before AReaL deletes it;
- `POST /v1/load_lora_adapter` {lora_name, lora_path} (with `actor.use_lora`): passed to vLLM, which
  serves each version's adapter beside the one base (`--lora-rank` starts it with LoRA); requests
  name the version they want (`model: <lora_name>-v<version>`);
- `GET /health`, `GET /server_state` (ours: the weight version, the loads).

Every load is appended to `--events` with the requests and tokens the weights it replaced served
(load_log.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from aworld_train.engines.areal.cpu.load_log import LoadLog
from aworld_train.rollout.policies.vllm_server import VLLMServer
from aworld_train.rollout.policies.vllm_weights import tied_embedding_name, write_model_folder, write_state

_VERSION_IN_PATH = re.compile(r"weight_update_v(\d+)$")
# AReaL names each adapter `<gconfig.lora_name>-v<version>` (get_versioned_lora_name)
_VERSIONED_ADAPTER = re.compile(r"-v(\d+)$")


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message}, "success": False, "message": message}, status)


class VLLMFront:
    """The pause gate, the weight version and what each version served, in front of `server`."""

    def __init__(
        self, server: VLLMServer, folder: Path, tied_to: str | None = None, events: Path | None = None
    ) -> None:
        self.server, self.folder = server, folder
        # a tied model's saved folder has no output layer, which vLLM's untied folder needs
        self.tied_to = tied_to
        self.client = httpx.AsyncClient(base_url=server.url, timeout=600)
        self.running = asyncio.Event()
        self.running.set()
        self.sampling = 0  # requests vLLM is answering now
        self.drained = asyncio.Event()
        self.drained.set()
        self.version = 0
        self.log = LoadLog(events, ("requests", "tokens"))

    async def complete(self, body: dict[str, Any]) -> tuple[int, Any]:
        await self.running.wait()
        self.sampling += 1
        self.drained.clear()
        named = _VERSIONED_ADAPTER.search(str(body.get("model") or ""))
        version = int(named.group(1)) if named else self.version
        try:
            answer = await self.client.post("/v1/completions", json=body)
        finally:
            self.sampling -= 1
            if not self.sampling:
                self.drained.set()
        payload = answer.json()
        if answer.status_code == 200:
            counts = self.log.served_by(version)
            counts["requests"] += 1
            counts["tokens"] += sum(len(c["logprobs"]["tokens"]) for c in payload.get("choices", []))
        return answer.status_code, payload

    async def update(self, saved: Path) -> dict[str, Any]:
        """AReaL's saved weights into vLLM, once the requests it is answering have finished."""
        from aworld_train.engines.areal.cpu.server import read_weights

        started, previous = time.monotonic(), self.version
        await self.drained.wait()
        named = await asyncio.to_thread(read_weights, saved)
        if self.tied_to is not None and "lm_head.weight" not in named:
            named["lm_head.weight"] = named[self.tied_to]
        await asyncio.to_thread(write_state, named, self.folder)
        await asyncio.to_thread(self.server.reload_weights, self.folder)
        match = _VERSION_IN_PATH.search(saved.name)
        return self.record(
            "weights", previous, int(match.group(1)) if match else previous + 1, saved, len(named), started
        )

    async def load_adapter(self, body: dict[str, Any]) -> httpx.Response:
        """AReaL's adapter for a version, passed to vLLM: requests that name it are served with it."""
        started, previous = time.monotonic(), self.version
        answer = await self.client.post("/v1/load_lora_adapter", json=body)
        named = _VERSIONED_ADAPTER.search(str(body.get("lora_name") or ""))
        if answer.status_code == 200 and named:
            self.record(
                "adapter", previous, int(named.group(1)), Path(str(body.get("lora_path"))), 0, started
            )
        return answer

    def record(
        self, event: str, previous: int, version: int, path: Path, tensors: int, started: float
    ) -> dict:
        """A load: `version` is served from now on."""
        self.version = version
        return self.log.record(event, previous, version, path, tensors, started)


def build_app(front: VLLMFront) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        # at shutdown (uvicorn then re-raises the SIGTERM it caught, so nothing after it runs)
        shutil.rmtree(front.folder, ignore_errors=True)
        await asyncio.to_thread(front.server.stop)

    app = FastAPI(title="aworld-train: vLLM's server behind AReaL's vLLM routes", lifespan=lifespan)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "weight_version": front.version}

    @app.get("/server_state")
    async def server_state() -> dict[str, Any]:
        return {"weight_version": front.version, "weight_loads": front.log.loads, "vllm": front.server.url}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        if body.get("stream"):
            return error(400, "stream: AReaL's requests are not streamed; this route answers whole")
        status, payload = await front.complete(body)
        return JSONResponse(payload, status)

    @app.post("/areal_pause_generation")
    async def pause():
        front.running.clear()
        return {"success": True, "message": "new requests wait; those sampling finish"}

    @app.post("/areal_continue_generation")
    async def resume():
        front.running.set()
        return {"success": True, "message": "generation continued"}

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request):
        answer = await front.load_adapter(await request.json())
        return Response(answer.content, answer.status_code, media_type=answer.headers.get("content-type"))

    @app.post("/areal_update_weights")
    async def update(request: Request):
        body = await request.json()
        folder = Path(str(body.get("model_path") or ""))
        if not folder.is_dir():
            return error(400, f"model_path {str(folder)!r} is not a folder of saved weights")
        try:
            record = await front.update(folder)
        except (OSError, RuntimeError) as exc:
            return error(500, f"loading {folder}: {exc}")
        return {"success": True, "message": f"loaded version {record['version']}"}

    return app


def serve(args: argparse.Namespace) -> None:
    import tempfile

    import torch
    import uvicorn
    from transformers import AutoModelForCausalLM

    from aworld_train.rollout.policies.models import resolve_model_path

    path = resolve_model_path(args.model)
    folder = Path(tempfile.mkdtemp(prefix="aworld-train-vllm-", dir=args.weights_parent))
    # float32: the logprobs vLLM samples are those AReaL's float32 actor recomputes
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    write_model_folder(model, folder)
    tied_to = tied_embedding_name(model)
    del model
    try:
        server = VLLMServer(
            str(folder),
            str(path),
            args.log,
            dtype="float32",
            max_model_len=args.max_len,
            seed=args.seed,
            kv_cache_gib=args.kv_cache_gib,
            lora_rank=args.lora_rank,
        )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    print(f"vLLM's server at {server.url}, ready in {server.started_s:.0f}s (log {args.log})", flush=True)
    front = VLLMFront(server, folder, tied_to, args.events)
    uvicorn.run(build_app(front), host=args.host, port=args.port, log_level="warning")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model folder or embedded:<name>")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--max-len", type=int, required=True, help="vLLM's context length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kv-cache-gib", type=float, default=2.0)
    parser.add_argument("--lora-rank", type=int, default=None, help="serve LoRA adapters up to this rank")
    parser.add_argument("--log", type=Path, required=True, help="vLLM's server log")
    parser.add_argument("--weights-parent", type=Path, default=None, help="where vLLM's model folder goes")
    parser.add_argument("--events", type=Path, default=None, help="JSONL file of weight loads")
    serve(parser.parse_args(argv))


if __name__ == "__main__":
    main()
