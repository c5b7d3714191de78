"""Our CPU policy server's HTTP routes, in SGLang's protocol (the calls AReaL's `RemoteSGLangEngine`
makes), and its command line: `python -m aworld_train.engines.areal.cpu.app --model M --port P`,
started by the AReaL entry point in SGLang's place (cpu/trainer.py). The server itself is
cpu/server.py."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from aworld_train.engines.areal.cpu.server import AdapterError, PolicyServer


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message}, "success": False, "message": message}, status)


def build_app(server: PolicyServer) -> FastAPI:
    app = FastAPI(title="aworld-train CPU policy server (SGLang protocol)")
    _add_weight_routes(app, server)
    _add_control_routes(app, server)

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

    return app


def _add_weight_routes(app: FastAPI, server: PolicyServer) -> None:
    """Weights and adapters AReaL's actor saved, loaded in place."""

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request):
        body = await request.json()
        folder = Path(str(body.get("model_path") or ""))
        if not folder.is_dir():
            return error(400, f"model_path {str(folder)!r} is not a folder of saved weights")
        try:
            record = await server.load_from_disk(folder)
        except AdapterError as exc:
            return error(400, str(exc))
        except (OSError, RuntimeError) as exc:
            return error(500, f"loading {folder}: {exc}")
        return {"success": True, "message": f"loaded version {record['version']}", "num_paused_requests": 0}

    @app.post("/load_lora_adapter")
    async def load_lora_adapter(request: Request):
        body = await request.json()
        name, folder = str(body.get("lora_name") or ""), Path(str(body.get("lora_path") or ""))
        if not folder.is_dir():
            return error(400, f"lora_path {str(folder)!r} is not a folder of a saved adapter")
        try:
            record = await server.load_adapter(name, folder)
        except ValueError as exc:  # a name or folder that is no adapter
            return error(400, f"loading {name!r} from {folder}: {exc}")
        except (OSError, RuntimeError) as exc:
            return error(500, f"loading {name!r} from {folder}: {exc}")
        return {"success": True, "message": f"loaded {name} ({record['tensors']} tensors)"}

    @app.post("/unload_lora_adapter")
    async def unload_lora_adapter(request: Request):
        body = await request.json()
        try:
            return {"success": True, "message": server.unload_adapter(str(body.get("lora_name") or ""))}
        except AdapterError as exc:
            return error(400, str(exc))


def _add_control_routes(app: FastAPI, server: PolicyServer) -> None:
    """Pausing around an update, and the colocation calls a CPU process answers as done."""

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


def serve(model: str, port: int, host: str, max_len: int | None, events: Path | None, threads: int) -> None:
    import uvicorn
    from transformers import AutoModelForCausalLM

    from aworld_train.rollout.policies.local import LocalPolicy
    from aworld_train.rollout.policies.models import load_tokenizer, resolve_model_path
    from aworld_train.rollout.tokens.turns.stops import stop_token_ids

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
