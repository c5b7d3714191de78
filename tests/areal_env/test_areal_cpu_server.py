"""Our CPU policy server, spoken to by AReaL's own client (`RemoteSGLangEngine.agenerate`): what it
samples, its logprobs (those the model gives the sampled tokens, recomputed here), batching of
concurrent requests, prefix reuse, and serving the weights it is told to load from disk."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters, InferenceEngineConfig
from areal.api.io_struct import ModelRequest
from areal.engine import RemoteSGLangEngine
from transformers import AutoModelForCausalLM

from aworld_train.engines.areal.cpu.trainer import policy_server
from aworld_train.rollout.tokens.turns.stops import stop_token_ids


@pytest.fixture(scope="module")
def served(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cpu_server")
    with policy_server({"model": str(tiny_model_dir)}, folder) as (host, port):
        config = InferenceEngineConfig(experiment_name="test", trial_name="cpu-server", backend="sglang:d1")
        engine = RemoteSGLangEngine(config)
        engine.initialize(addr=f"{host}:{port}", train_data_parallel_size=1)
        try:
            yield engine, f"http://{host}:{port}", folder
        finally:
            engine.destroy()


def recomputed(model, prompt: list[int], output: list[int]) -> list[float]:
    """log_softmax of the model's logits at each sampled token (temperature 1)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + output])).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return [float(logp[i, t]) for i, t in enumerate(output)]


def request(tokenizer, text: str, stops: list[int], max_new: int = 12) -> ModelRequest:
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    gconfig = GenerationHyperparameters(max_new_tokens=max_new, temperature=1.0, stop_token_ids=stops)
    return ModelRequest(input_ids=list(ids), gconfig=gconfig)


def test_areals_client_gets_sampled_ids_with_the_models_logprobs(served, tiny_model_dir, tokenizer):
    engine, url, _ = served
    stops = stop_token_ids(tokenizer)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    requests = [request(tokenizer, f"What is {i} * 3?", stops) for i in range(6)]

    async def all_at_once():
        return await asyncio.gather(*(engine.agenerate(r) for r in requests))

    responses = asyncio.run(all_at_once())
    for req, resp in zip(requests, responses, strict=True):
        assert 0 < len(resp.output_tokens) <= 12
        assert len(resp.output_logprobs) == len(resp.output_tokens) == len(resp.output_versions)
        assert resp.stop_reason in ("stop", "length")
        if resp.stop_reason == "stop":
            assert resp.output_tokens[-1] in stops
        assert resp.output_logprobs == pytest.approx(
            recomputed(model, list(req.input_ids), resp.output_tokens), abs=1e-4
        )
    state = httpx.get(f"{url}/server_state").json()
    assert state["mean_batch"] > 1  # concurrent requests were sampled together


def test_a_turn_that_extends_the_last_reuses_its_prefix(served, tokenizer):
    engine, url, _ = served
    stops = stop_token_ids(tokenizer)
    first = request(tokenizer, "What is 37 * 48? Use the calculator.", stops)
    response = asyncio.run(engine.agenerate(first))
    before = httpx.get(f"{url}/server_state").json()["prefix_cache"]
    follow = (
        list(first.input_ids) + response.output_tokens + tokenizer.encode("\nok", add_special_tokens=False)
    )
    again = ModelRequest(input_ids=follow, gconfig=first.gconfig)
    asyncio.run(engine.agenerate(again))
    after = httpx.get(f"{url}/server_state").json()["prefix_cache"]
    # all but the new tokens came from the cache
    assert after["hit_tokens"] - before["hit_tokens"] >= len(first.input_ids)


def test_weights_loaded_from_disk_are_the_ones_served(served, tiny_model_dir, tokenizer, tmp_path):
    engine, url, folder = served
    changed = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        for parameter in changed.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    saved = tmp_path / "weight_update_v7"
    changed.save_pretrained(saved)
    assert httpx.post(f"{url}/pause_generation", json={}).json()["success"]
    answer = httpx.post(f"{url}/update_weights_from_disk", json={"model_path": str(saved)}, timeout=60)
    assert answer.status_code == 200 and answer.json()["success"], answer.text
    assert httpx.post(f"{url}/continue_generation", json={}).json()["success"]
    stops = stop_token_ids(tokenizer)
    req = request(tokenizer, "What is 5 * 5?", stops)
    resp = asyncio.run(engine.agenerate(req))
    assert resp.output_logprobs == pytest.approx(
        recomputed(changed, list(req.input_ids), resp.output_tokens), abs=1e-4
    )
    assert httpx.get(f"{url}/health").json()["weight_version"] == 7
    record = (folder / "cpu_server_events.jsonl").read_text().splitlines()[-1]
    assert '"version": 7' in record and str(saved) in record


def test_bad_requests_are_refused_with_the_reason(served, tokenizer):
    _, url, _ = served
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4, "stop_token_ids": [12345]}}
    answer = httpx.post(f"{url}/generate", json=body)
    assert answer.status_code == 400 and "not the model's stop tokens" in answer.json()["message"]
    answer = httpx.post(f"{url}/generate", json={"text": "hello"})
    assert answer.status_code == 400 and "input_ids" in answer.json()["message"]
    answer = httpx.post(f"{url}/update_weights_from_disk", json={"model_path": "/nonexistent"})
    assert answer.status_code == 400 and "/nonexistent" in answer.json()["message"]
