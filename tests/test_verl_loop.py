"""backend: verl on CPU: our agent loop the way verl runs it, built by verl's registry and Hydra
instantiation against a scripted LLM server client: its outputs (exact ids, mask, logprobs, weight
versions, stop tokens), verl's V0 post-processing and V1 `as_dict`, verl's V1 advantages of a group
with a failed episode, and a validation row's held-out seeds and turn limit."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("verl.experimental.agent_loop.agent_loop")

from backend_support import calculator_reply, trainer_for  # noqa: E402
from verl_loop_support import FakeLLMServerClient, instantiate_like_verl, row_kwargs  # noqa: E402


@pytest.fixture
def verl_run(tmp_path, calculator_server, monkeypatch):
    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    config = {
        "backend": "verl",
        "model": "embedded:smollm2-135m",
        "rollout": {"tool_block": "never", "max_response_tokens": 300},
        "verl": {"data": {"max_prompt_length": 1024}},
    }
    return trainer_for(tmp_path, config).render()


def test_our_loop_runs_through_verls_instantiate_path(verl_run, tokenizer):
    server = FakeLLMServerClient(tokenizer, calculator_reply)
    loop = instantiate_like_verl(verl_run, tokenizer, server)
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    outs = asyncio.run(loop.run(sampling, **row_kwargs(verl_run)))
    assert len(outs) == 1  # one segment
    out = outs[0]
    assert out.reward_score == 1.0 and out.extra_fields["aworld_status"] == "ok"
    assert len({c[0] for c in server.calls}) == 1  # one sticky request id per episode
    assert all(c[2]["max_tokens"] <= 300 for c in server.calls)
    # exact ids: the first prompt is the prompt; the mask-1 tokens are exactly what the server sampled
    assert out.prompt_ids == server.calls[0][1]
    sampled = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m]
    assert sampled == [t for ids in server.outputs for t in ids] and 0 in out.response_mask
    # and every later prompt is a prefix of prompt + response
    for _, prompt, _ in server.calls[1:]:
        assert (out.prompt_ids + out.response_ids)[: len(prompt)] == prompt
    assert out.response_logprobs == [(-0.25 if m else 0.0) for m in out.response_mask]
    assert "<tool_response>\n3\n</tool_response>" in tokenizer.decode(out.response_ids)
    assert set(out.extra_fields["reward_extra_info"]) == {
        "status",
        "num_tool_calls",
        "tool_errors",
        "segments",
        "segments_dropped",
        "agent",
        "truncated",
        "reward_extras",
        "acc",
    }
    assert out.extra_fields["reward_extra_info"]["agent"] == "calculator_agent"


def test_outputs_carry_the_weight_versions_and_stop_tokens_verl_needs(verl_run, tokenizer):
    """verl's V1 trainer reads min/max_global_steps from every output (`int()` of them: a missing
    one crashed it after the first update); vLLM must stop at the end-of-turn token."""
    import numpy as np

    server = FakeLLMServerClient(tokenizer, calculator_reply)
    loop = instantiate_like_verl(verl_run, tokenizer, server)
    [out] = asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(verl_run)))
    assert len(server.calls) == 2  # the tool call, then the answer
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (7, 8)
    np.array([out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]], dtype=int)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert all(im_end in call[2]["stop_token_ids"] for call in server.calls)


def test_each_call_stamps_its_tokens_with_the_version_verl_reports(tokenizer):
    """verl's server names the weight version of each call (`global_steps`); a call its partial
    rollout resumed on newer weights names only the span, so its tokens' versions are unknown."""
    from aworld_train.engines.verl.loop import VerlServerPolicy
    from aworld_train.rollout.policies.client import SamplingParams
    from aworld_train.rollout.tokens.ledger import NO_VERSION

    server = FakeLLMServerClient(tokenizer, lambda _: "hello")
    policy = VerlServerPolicy(server, {"temperature": 1.0})
    first = asyncio.run(policy.generate([1, 2, 3], SamplingParams(max_new_tokens=8)))
    second = asyncio.run(policy.generate([1, 2, 3], SamplingParams(max_new_tokens=8)))
    assert first.versions == [7] * len(first.token_ids) and second.version == 8
    assert (policy.extra_fields["min_global_steps"], policy.extra_fields["max_global_steps"]) == (7, 8)

    async def resumed(request_id, **kwargs):  # aborted at version 8, finished on version 9
        out = await FakeLLMServerClient.generate(server, request_id, **kwargs)
        out.extra_fields = {"global_steps": 9, "min_global_steps": 8, "max_global_steps": 9}
        return out

    server.generate = resumed
    spanning = asyncio.run(policy.generate([1, 2, 3], SamplingParams(max_new_tokens=8)))
    assert spanning.versions == [NO_VERSION] * len(spanning.token_ids)
    assert policy.extra_fields["max_global_steps"] == 9  # the span still reaches verl


def test_a_failed_episode_gives_verl_no_sample(verl_run, tokenizer):
    """verl's V1 trainer leaves an agent loop that returns no output out of its group: no loss,
    no place in the baseline."""

    def server_lost(_):
        raise RuntimeError("server lost")

    loop = instantiate_like_verl(verl_run, tokenizer, FakeLLMServerClient(tokenizer, server_lost))
    assert asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(verl_run))) == []


def test_outputs_pass_verls_v0_postprocess_and_v1_as_dict(verl_run, tokenizer):
    import torch
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.utils.config import omega_conf_to_dataclass

    loop = instantiate_like_verl(verl_run, tokenizer, FakeLLMServerClient(tokenizer, calculator_reply))
    outputs = [asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(verl_run, i)))[0] for i in range(2)]

    as_dict = outputs[0].as_dict()
    assert torch.equal(as_dict["responses"], torch.tensor(outputs[0].response_ids))
    assert torch.equal(as_dict["response_mask"], torch.tensor(outputs[0].response_mask))

    # V0: the worker's own padding/post-processing, on a worker built without Ray
    worker = object.__new__(AgentLoopWorker)
    worker.config = verl_run.final
    worker.rollout_config = omega_conf_to_dataclass(verl_run.final.actor_rollout_ref.rollout)
    worker.tokenizer, worker.processor = tokenizer, None
    worker.mm_processor_kwargs = {}
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    internal = [
        asyncio.run(worker._agent_loop_postprocess(o, False, **row_kwargs(verl_run, i)))
        for i, o in enumerate(outputs)
    ]
    batch = worker._postprocess(internal)
    response_length = worker.rollout_config.response_length
    assert batch.batch["responses"].shape == (2, response_length)
    for i, out in enumerate(outputs):
        n = len(out.response_ids)
        assert batch.batch["responses"][i, :n].tolist() == out.response_ids
        assert batch.batch["response_mask"][i, :n].tolist() == out.response_mask
        assert batch.batch["rm_scores"][i].sum().item() == out.reward_score == 1.0
    assert list(batch.non_tensor_batch["status"]) == ["ok", "ok"]


def test_an_over_long_first_prompt_is_a_failed_episode(verl_run, tokenizer, monkeypatch):
    """Never left-truncated (that breaks the ledger): the episode ends before the policy is called."""
    server = FakeLLMServerClient(tokenizer, calculator_reply)
    loop = instantiate_like_verl(verl_run, tokenizer, server)
    monkeypatch.setattr(loop.settings, "max_prompt_tokens", 16)
    assert asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(verl_run))) == []
    assert server.calls == []


def test_verls_v1_advantages_leave_a_failed_episode_out_of_its_group(verl_run, tokenizer):
    """Our loop's outputs for one group, one episode failed: verl's own V1 advantage code gives the
    others exactly the advantages of the group without it."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    def rewarded(score):
        def reply(prompt_text):
            return f"The answer is {score}."

        return reply

    def server_lost(_):
        raise RuntimeError("server lost")

    sessions = {}
    for session, reply in enumerate([rewarded(3), rewarded(4), server_lost, rewarded(3)]):
        loop = instantiate_like_verl(verl_run, tokenizer, FakeLLMServerClient(tokenizer, reply))
        sessions[session] = asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(verl_run)))
    assert sessions[2] == []  # the failed one: no output at all

    def advantages(outputs: dict[int, list]) -> list[float]:
        keys = [f"uid0_{s}_{i}" for s, outs in outputs.items() for i in range(len(outs))]
        rows = [o for outs in outputs.values() for o in outs]
        width = max(len(o.response_ids) for o in rows)
        mask = torch.zeros(len(rows), width)
        scores = torch.zeros(len(rows), width)
        for r, out in enumerate(rows):
            mask[r, : len(out.response_mask)] = torch.tensor(out.response_mask, dtype=torch.float)
            last = max(i for i, m in enumerate(out.response_mask) if m)
            scores[r, last] = out.reward_score
        data = DataProto.from_dict(
            tensors={"response_mask": mask, "token_level_rewards": scores},
            non_tensors={"uid": np.array(["uid0"] * len(rows), dtype=object)},
        )
        out = compute_advantage_for_multi_trajectories(data, keys, AdvantageEstimator.GRPO)
        first = out.batch["response_mask"].argmax(dim=1)
        return out.batch["advantages"][torch.arange(len(rows)), first].tolist()

    with_failed = advantages(sessions)
    without = advantages({s: o for s, o in sessions.items() if s != 2})
    assert with_failed == pytest.approx(without)
    assert [o[0].reward_score for s, o in sessions.items() if s != 2] == [1.0, 0.0, 1.0]


def test_a_validation_sample_draws_from_the_seed_the_local_backend_gives_it(
    tmp_path, tokenizer, calculator_server, monkeypatch
):
    """A val.parquet row runs under the held-out settings: sample j of task t under eval seed s
    draws from derive_seed(s, t, j), as the local backend's evaluation, and each LLM call from its
    own seed, sent to verl's server; a training row's calls carry none. `acc` is verl's validation
    metric (a session without output counts 0 there)."""
    from aworld_train.rollout.policies.client import derive_seed

    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    config = {
        "backend": "verl",
        "model": "embedded:smollm2-135m",
        "rollout": {"tool_block": "never", "max_response_tokens": 300},
        "trainer": {"eval_seeds": [7, 8]},
        "verl": {"data": {"max_prompt_length": 1024}},
    }
    run = trainer_for(tmp_path / "a", config).render()
    server = FakeLLMServerClient(tokenizer, calculator_reply)
    loop = instantiate_like_verl(run, tokenizer, server)
    kwargs = {**row_kwargs(run, 2, "val.parquet"), "session_id": 1}  # the first task under seed 8
    [out] = asyncio.run(loop.run({"temperature": 1.0}, **kwargs))
    episode = derive_seed(8, kwargs["extra_info"]["task_id"], 1)
    assert [call[2]["seed"] for call in server.calls] == [derive_seed(episode, 0), derive_seed(episode, 1)]
    assert out.extra_fields["reward_extra_info"]["acc"] == 1.0
    server.calls.clear()
    asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(run)))
    assert server.calls and all("seed" not in call[2] for call in server.calls)

    # the held-out turn limit: one call, where the calculator needs two
    limited = trainer_for(tmp_path / "b", {**config, "trainer": {"eval_max_turns": 1}}).render()
    server = FakeLLMServerClient(tokenizer, calculator_reply)
    loop = instantiate_like_verl(limited, tokenizer, server)
    asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(limited, 0, "val.parquet")))
    assert len(server.calls) == 1
    asyncio.run(loop.run({"temperature": 1.0}, **row_kwargs(limited)))  # training: the rollout's limit
    assert len(server.calls) == 3
