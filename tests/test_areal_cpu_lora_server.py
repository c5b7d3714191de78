"""AReaL's LoRA updates on our CPU policy server, through its routes as AReaL's SGLang client calls
them (`/load_lora_adapter`, `/unload_lora_adapter`, `lora_path` in `/generate`): it samples from its
one base plus the adapter last loaded, replaced in place, and refuses what it cannot serve."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from starlette.testclient import TestClient

from aworld_train.engines.areal.cpu.app import build_app
from aworld_train.engines.areal.cpu.server import PolicyServer
from aworld_train.rollout.policies.local import LocalPolicy
from aworld_train.rollout.policies.models import load_model

TARGETS = ["q_proj", "v_proj", "down_proj"]


def adapter(tiny_model_dir, folder, rank: int = 4, scale: float = 0.0, seed: int = 0):
    """A peft adapter folder as AReaL's actor saves one (scale 0: its initial adapter, B = 0), and
    the model it describes (a base of its own plus the adapter), to recompute logprobs with."""
    torch.manual_seed(seed)
    model = get_peft_model(
        load_model(str(tiny_model_dir), dtype=torch.float32),
        LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS, task_type="CAUSAL_LM"),
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, scale) if scale else p.zero_()
    model.save_pretrained(folder)
    return model.eval()


def logprobs(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    return torch.log_softmax(logits[len(prompt) - 1 : -1], -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]


@pytest.fixture
def served(tiny_model_dir, tokenizer, stop_ids, tmp_path):
    policy = LocalPolicy(load_model(str(tiny_model_dir), dtype=torch.float32).eval(), tokenizer, stop_ids)
    server = PolicyServer(policy, max_len=256, events=tmp_path / "events.jsonl")
    with TestClient(build_app(server)) as client:
        yield client, server


def generate(client, tokenizer, lora_path: str | None = None, seed: int = 1):
    body = {
        "input_ids": tokenizer.encode("What is 12 * 7?"),
        "sampling_params": {"max_new_tokens": 8, "temperature": 1.0, "sampling_seed": seed},
    }
    if lora_path is not None:
        body["lora_path"] = lora_path
    return client.post("/generate", json=body)


def sampled(answer) -> tuple[list[int], torch.Tensor]:
    pairs = answer.json()["meta_info"]["output_token_logprobs"]
    return [tok for _, tok, _ in pairs], torch.tensor([lp for lp, _, _ in pairs])


def test_it_samples_from_the_base_plus_each_adapter_loaded_in_place(
    served, tiny_model_dir, tokenizer, tmp_path
):
    client, server = served
    prompt = tokenizer.encode("What is 12 * 7?")
    base = load_model(str(tiny_model_dir), dtype=torch.float32).eval()
    base_size = sum(p.numel() for p in base.parameters())

    adapter(tiny_model_dir, tmp_path / "initial_lora")
    loaded = client.post(
        "/load_lora_adapter",
        json={"lora_name": "default_lora-v0", "lora_path": str(tmp_path / "initial_lora")},
    )
    assert loaded.status_code == 200 and loaded.json()["success"], loaded.text
    tokens, reported = sampled(generate(client, tokenizer, "default_lora-v0"))
    assert torch.allclose(reported, logprobs(base, prompt, tokens), atol=1e-4)  # B = 0: the base's own
    lora_tensors = {n: p for n, p in server.policy.model.named_parameters() if ".lora_" in n}

    trained = adapter(tiny_model_dir, tmp_path / "weight_update_v1", scale=0.5, seed=1)
    loaded = client.post(
        "/load_lora_adapter",
        json={"lora_name": "default_lora-v1", "lora_path": str(tmp_path / "weight_update_v1")},
    )
    assert loaded.status_code == 200, loaded.text
    answer = generate(client, tokenizer, "default_lora-v1")
    tokens, reported = sampled(answer)
    assert answer.json()["meta_info"]["weight_version"] == 1
    assert torch.allclose(reported, logprobs(trained, prompt, tokens), atol=1e-4)
    assert (reported - logprobs(base, prompt, tokens)).abs().mean() > 0.05  # the adapter is in effect
    # in place: the same adapter tensors hold the new weights, beside the one base
    now = dict(server.policy.model.named_parameters())
    assert all(now[n] is p for n, p in lora_tensors.items())
    assert sum(p.numel() for p in now.values()) == base_size + sum(p.numel() for p in lora_tensors.values())

    # an adapter of another rank replaces the adapter layers, still on the one base
    other = adapter(tiny_model_dir, tmp_path / "weight_update_v2", rank=8, scale=0.5, seed=2)
    assert (
        client.post(
            "/load_lora_adapter",
            json={"lora_name": "default_lora-v2", "lora_path": str(tmp_path / "weight_update_v2")},
        ).status_code
        == 200
    )
    tokens, reported = sampled(generate(client, tokenizer, "default_lora-v2"))
    assert torch.allclose(reported, logprobs(other, prompt, tokens), atol=1e-4)
    assert sum(p.numel() for p in server.policy.model.parameters()) == sum(
        p.numel() for p in other.parameters()
    )

    state = client.get("/server_state").json()
    assert state["adapter"] == "default_lora-v2" and state["weight_version"] == 2
    assert [(load["event"], load["version"]) for load in state["weight_loads"]] == [
        ("adapter", 0),
        ("adapter", 1),
        ("adapter", 2),
    ]
    assert [load["served_on_previous"]["requests"] for load in state["weight_loads"]] == [0, 1, 1]
    assert all(load["tensors"] == 2 * 2 * len(TARGETS) for load in state["weight_loads"])  # A and B, 2 layers
    assert (tmp_path / "events.jsonl").read_text().count('"event": "adapter"') == 3


def test_a_request_for_a_replaced_adapter_is_aborted_and_asked_again(
    served, tiny_model_dir, tokenizer, tmp_path
):
    """AReaL names the adapter of the version it knows; between the load and AReaL setting the new
    version, a request may name the one replaced: answered as SGLang answers a request its pause
    aborted before prefill (no tokens), which AReaL sends again with the new name."""
    client, _ = served
    for version in (0, 1):
        adapter(tiny_model_dir, tmp_path / f"v{version}", scale=0.5 * version)
        client.post(
            "/load_lora_adapter",
            json={"lora_name": f"default_lora-v{version}", "lora_path": str(tmp_path / f"v{version}")},
        )
    answer = generate(client, tokenizer, "default_lora-v0").json()
    assert answer["meta_info"]["finish_reason"]["message"].startswith("Abort before prefill")
    assert answer["output_ids"] == [] and answer["meta_info"]["weight_version"] == 1
    # AReaL unloads versions beyond the ones it keeps (best effort): a replaced one is gone already
    unloaded = client.post("/unload_lora_adapter", json={"lora_name": "default_lora-v0"})
    assert unloaded.status_code == 200 and "replaced by default_lora-v1" in unloaded.json()["message"]
    assert client.get("/server_state").json()["adapter_unloads"] == 1


def test_what_it_cannot_serve_is_refused_with_the_reason(served, tiny_model_dir, tokenizer, tmp_path):
    client, _ = served
    answer = generate(client, tokenizer, "default_lora-v0")
    assert answer.status_code == 400 and "'default_lora-v0' is not loaded" in answer.json()["message"]
    answer = client.post(
        "/load_lora_adapter", json={"lora_name": "default_lora-v0", "lora_path": str(tmp_path)}
    )
    assert answer.status_code == 400 and "not a peft adapter folder" in answer.json()["message"]
    adapter(tiny_model_dir, tmp_path / "initial")
    answer = client.post(
        "/load_lora_adapter", json={"lora_name": "unversioned", "lora_path": str(tmp_path / "initial")}
    )
    assert answer.status_code == 400 and "<name>-v<version>" in answer.json()["message"]
    assert (
        client.post(
            "/load_lora_adapter",
            json={"lora_name": "default_lora-v0", "lora_path": str(tmp_path / "initial")},
        ).status_code
        == 200
    )

    for lora_path, reason in (
        (None, "name it in lora_path"),
        ("other-v0", "'other-v0' is not loaded"),
        ("default_lora-v3", "'default_lora-v3' is not loaded"),
    ):
        answer = generate(client, tokenizer, lora_path)
        assert answer.status_code == 400 and reason in answer.json()["message"], answer.text
    answer = client.post("/unload_lora_adapter", json={"lora_name": "default_lora-v0"})
    assert answer.status_code == 400 and "the one served" in answer.json()["message"]
    answer = client.post("/update_weights_from_disk", json={"model_path": str(tiny_model_dir)})
    assert answer.status_code == 400 and "/load_lora_adapter" in answer.json()["message"]
    answer = client.post(
        "/load_lora_adapter", json={"lora_name": "other-v1", "lora_path": str(tmp_path / "initial")}
    )
    assert answer.status_code == 400 and "one adapter name per run" in answer.json()["message"]
