"""The CPU switch of the AReaL engine, in our environment, without running AReaL's trainer (that is
tests/test_areal_cpu_e2e.py): what `areal.cluster.n_gpus_per_node: 0` renders, and the policy
server that samples in SGLang's place: the version of the weights behind every answer it gives."""

from __future__ import annotations

import json

import yaml
from backend_support import trainer_for, workflow_kwargs


def test_a_cpu_run_is_the_gpu_render_with_one_switch(tmp_path):
    """`areal.cluster.n_gpus_per_node: 0`: workers ask for no GPU, the actor computes in float32 and
    saves its weights for our policy server, which the entry point starts in SGLang's place; the
    rest of the render, and the command, are those of a GPU run."""
    gpu = trainer_for(tmp_path / "gpu", {"backend": "areal"}).render()
    cpu = trainer_for(
        tmp_path / "cpu", {"backend": "areal", "areal": {"cluster": {"n_gpus_per_node": 0}}}
    ).render()

    def same_folder(run, where: str, value):
        return json.loads(json.dumps(value).replace(str(tmp_path / where), "RUN"))

    c, g = same_folder(cpu, "cpu", cpu.final), same_folder(gpu, "gpu", gpu.final)
    for spec in (c["actor"]["scheduling_spec"][0], c["rollout"]["scheduling_spec"][0]):
        assert spec["gpu"] == 0 and spec["cmd"] == "python -m aworld_train.engines.areal.worker"
    assert c["actor"]["dtype"] == "float32" and c["actor"]["weight_update_mode"] == "disk"
    assert {key for key in c | g if c.get(key) != g.get(key)} == {"actor", "rollout", "cluster"}
    assert same_folder(cpu, "cpu", workflow_kwargs(cpu)) == same_folder(gpu, "gpu", workflow_kwargs(gpu))
    assert c["rollout"]["use_lora"] == "${actor.use_lora}"  # requests name the adapter the server loaded
    workflow = yaml.safe_load((cpu.folder / "workflow.yaml").read_text())
    assert workflow["cpu_server"] == {"model": cpu.final["actor"]["path"]}
    assert workflow["mismatch_tolerance"] == 0.1  # the step line warns above algorithm.mismatch_tolerance
    assert yaml.safe_load((gpu.folder / "workflow.yaml").read_text())["cpu_server"] is None
    assert cpu.command[1:3] == gpu.command[1:3] == ("-m", "aworld_train.engines.areal.main")


def test_the_cpu_policy_server_drops_an_answer_the_weights_changed_under(tiny_model_dir, tokenizer, stop_ids):
    """A request admitted before AReaL paused for an update, but sampled after the new weights loaded,
    would be stamped by AReaL with the version it knows then, perhaps the old one: the server answers
    it as SGLang answers a request its pause aborted before prefill (no tokens; AReaL asks again), and
    reports the version of the weights that sampled every answer it gives."""
    import asyncio

    import torch

    from aworld_train.engines.areal.cpu.server import PolicyServer
    from aworld_train.rollout.policies.local import LocalPolicy
    from aworld_train.rollout.policies.models import load_model

    policy = LocalPolicy(load_model(str(tiny_model_dir), dtype=torch.float32), tokenizer, stop_ids)
    server = PolicyServer(policy, max_len=256)
    body = {"input_ids": tokenizer.encode("What is 2 + 2?"), "sampling_params": {"max_new_tokens": 4}}
    answer = asyncio.run(server.generate(body))
    assert answer["output_ids"] and answer["meta_info"]["weight_version"] == 0

    sample = policy.generate

    async def load_lands_first(prompt, sampling):  # the load takes the weights before this batch
        policy.load_weights({k: v.clone() for k, v in policy.model.state_dict().items()}, version=1)
        return await sample(prompt, sampling)

    policy.generate = load_lands_first
    answer = asyncio.run(server.generate(body))
    assert answer["meta_info"]["finish_reason"]["type"] == "abort"
    assert answer["meta_info"]["finish_reason"]["message"].startswith("Abort before prefill")
    assert answer["output_ids"] == [] and answer["meta_info"]["output_token_logprobs"] == []
    assert server.served["discarded"] > 0
    policy.generate = sample
    answer = asyncio.run(server.generate(body))
    assert answer["output_ids"] and answer["meta_info"]["weight_version"] == 1


def test_a_load_credits_the_weights_it_replaced_with_only_their_own_tokens(
    tiny_model_dir, tokenizer, stop_ids
):
    """The events file says which version served what: an answer sampled on the new weights before the
    load is recorded (the load runs in a thread; answers finish meanwhile) counts for the new version,
    never for the one the load replaced."""
    import asyncio

    import torch

    from aworld_train.engines.areal.cpu.server import PolicyServer
    from aworld_train.rollout.policies.local import LocalPolicy
    from aworld_train.rollout.policies.models import load_model

    policy = LocalPolicy(load_model(str(tiny_model_dir), dtype=torch.float32), tokenizer, stop_ids)
    server = PolicyServer(policy, max_len=256)
    body = {"input_ids": tokenizer.encode("What is 2 + 2?"), "sampling_params": {"max_new_tokens": 4}}
    on_old = asyncio.run(server.generate(body))
    policy.load_weights({k: v.clone() for k, v in policy.model.state_dict().items()}, version=1)
    on_new = asyncio.run(server.generate(body))  # finishes before the load below is recorded
    assert on_new["meta_info"]["weight_version"] == 1
    record = server.log.record("weights", 0, 1, tiny_model_dir, tensors=1, started=0.0)
    assert record["served_on_previous"] == {
        "version": 0,
        "requests": 1,
        "tokens": len(on_old["output_ids"]),
        "discarded": 0,
    }
    assert server.served == {"requests": 1, "tokens": len(on_new["output_ids"]), "discarded": 0}
