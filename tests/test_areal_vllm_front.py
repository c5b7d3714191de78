"""The routes AReaL's `RemotevLLMEngine` calls, in front of vLLM's server (cpu/vllm_front.py),
against a stand-in for vLLM's own routes: AReaL's LoRA updates pass to vLLM's adapter route and
name the version that serves from then on, requests naming a versioned adapter count for that
version, and a paused front holds new requests until AReaL continues. (One AReaL run through the
real vLLM, every weight trained: tests/test_areal_cpu_vllm_e2e.py.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from aworld_train.engines.areal.cpu.vllm_front import VLLMFront, build_app


def stand_in_vllm(seen: list[tuple[str, dict]]) -> FastAPI:
    """vLLM's completions and adapter routes, recording what reached them; an adapter folder that
    does not exist is refused as vLLM refuses it."""
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        seen.append(("completions", body))
        tokens = ["a", "b", "c"][: body.get("max_tokens", 3)]
        return {"choices": [{"text": "".join(tokens), "logprobs": {"tokens": tokens}}]}

    @app.post("/v1/load_lora_adapter")
    async def load(request: Request):
        body = await request.json()
        seen.append(("load_lora_adapter", body))
        if not Path(body["lora_path"]).is_dir():
            return JSONResponse({"error": {"message": f"No adapter found for {body['lora_path']}"}}, 400)
        return JSONResponse(f"Success: LoRA adapter '{body['lora_name']}' added successfully.")

    return app


@pytest.fixture
def front(tmp_path):
    seen: list[tuple[str, dict]] = []
    front = VLLMFront(
        SimpleNamespace(url="http://vllm"), tmp_path / "served", events=tmp_path / "events.jsonl"
    )
    front.client = httpx.AsyncClient(
        transport=httpx.ASGITransport(stand_in_vllm(seen)), base_url="http://vllm"
    )
    client = httpx.AsyncClient(transport=httpx.ASGITransport(build_app(front)), base_url="http://front")
    return SimpleNamespace(front=front, client=client, seen=seen, events=tmp_path / "events.jsonl")


def adapter_folder(tmp_path: Path, version: int) -> Path:
    folder = tmp_path / f"weight_update_v{version}"
    folder.mkdir()
    return folder


async def test_each_loaded_adapter_is_vllms_and_serves_the_version_it_names(front, tmp_path):
    async def load(version: int) -> httpx.Response:
        body = {"lora_name": f"lora-gsm-v{version}", "lora_path": str(adapter_folder(tmp_path, version))}
        return await front.client.post("/v1/load_lora_adapter", json=body)

    async def complete(model: str) -> None:
        answer = await front.client.post(
            "/v1/completions", json={"model": model, "prompt": [1, 2], "max_tokens": 2}
        )
        assert answer.status_code == 200 and answer.json()["choices"][0]["logprobs"]["tokens"] == ["a", "b"]

    assert (await load(0)).status_code == 200
    await complete("lora-gsm-v0")
    await complete("lora-gsm-v0")
    assert (await load(1)).status_code == 200
    await complete("lora-gsm-v1")
    # passed to vLLM as AReaL sent them: the adapter's name picks the weights there
    assert [(route, body.get("model") or body["lora_name"]) for route, body in front.seen] == [
        ("load_lora_adapter", "lora-gsm-v0"),
        ("completions", "lora-gsm-v0"),
        ("completions", "lora-gsm-v0"),
        ("load_lora_adapter", "lora-gsm-v1"),
        ("completions", "lora-gsm-v1"),
    ]
    loads = [json.loads(line) for line in front.events.read_text().splitlines()]
    assert [(load["event"], load["version"]) for load in loads] == [("adapter", 0), ("adapter", 1)]
    assert loads[1]["served_on_previous"] == {"version": 0, "requests": 2, "tokens": 4}
    state = (await front.client.get("/server_state")).json()
    assert state["weight_version"] == 1 and len(state["weight_loads"]) == 2


async def test_an_adapter_vllm_refuses_is_refused_to_areal_and_changes_no_version(front, tmp_path):
    body = {"lora_name": "lora-gsm-v1", "lora_path": str(tmp_path / "never-saved")}
    answer = await front.client.post("/v1/load_lora_adapter", json=body)
    assert answer.status_code == 400 and "No adapter found" in answer.text
    assert front.front.version == 0 and front.front.log.loads == []


async def test_a_paused_front_holds_new_requests_until_areal_continues(front):
    await front.client.post("/areal_pause_generation")
    pending = asyncio.create_task(front.client.post("/v1/completions", json={"prompt": [1], "max_tokens": 1}))
    await asyncio.sleep(0.2)
    assert not pending.done() and front.seen == []
    await front.client.post("/areal_continue_generation")
    assert (await asyncio.wait_for(pending, 5)).status_code == 200
    assert [route for route, _ in front.seen] == ["completions"]
