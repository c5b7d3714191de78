"""verl's own trainer with every rollout token sampled by vLLM, on a CPU: `aworld-train run` on
examples/calculator/grpo_verl_cpu.yaml with `rollout.engine=vllm` launches verl's `main_ppo` (V1
trainer, FSDP2 actor on gloo, our AWorldAgentLoop, the real calculator MCP server) for 3 GRPO
steps; its `aworld_cpu` rollout answers verl's token-in/token-out calls through vLLM's own server
(`make setup-vllm`'s environment), each update's weights pushed to it. One run, alone at the end of
the session (tests/early_runs.py), training an unmerged LoRA adapter, which vLLM serves as one of
its own adapters beside the base verl sends once; each step's tokens are recomputed with the base
and the adapter the step before saved. The every-weight run (`params=["full", "lora"]`) passes
too: CI leaves it out for time, since every weight pushed to vLLM's server is the local sampler's
path (tests/test_vllm_sampler.py) and AReaL's (tests/test_areal_cpu_vllm_e2e.py).
"""

from __future__ import annotations

import os
import re

import early_runs
import pytest
from verl_cpu_support import assert_vllm_left_nothing, calculator_rows, launch_cpu_run, note_shared_memory

from aworld_train.rollout.policies.vllm_server import vllm_missing

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

if (missing := vllm_missing()) is not None:
    if os.environ.get("CI"):
        raise RuntimeError(f"CI runs verl with vLLM's sampler: {missing}")
    pytest.skip(missing, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
STEPS = (1, 2, 3)
RANK, ALPHA = 8, 16
# an unmerged adapter at an adapter's learning rate (the example's 1e-4 is for every weight)
LORA = (f"algorithm.lora={{rank: {RANK}, alpha: {ALPHA}}}", "algorithm.lr=1.0e-3")


def start_run(tmp, *overrides: str):
    note_shared_memory(tmp)
    return launch_cpu_run(
        tmp,
        calculator_rows(6),
        "rollout.engine=vllm",
        f"trainer.steps={len(STEPS)}",
        # the weights of every step, to recompute the logprobs vLLM recorded with them
        "trainer.save_every=1",
        f"trainer.save_total_limit={len(STEPS)}",
        *overrides,
    )


@pytest.fixture(scope="module", params=["lora"])
def run(request, tmp_path_factory):
    lora = request.param == "lora"
    folder = tmp_path_factory.mktemp(f"verl_cpu_vllm_{request.param}")
    return {
        **early_runs.variant(__name__, request.param, start_run, folder, *(LORA if lora else ())),
        "lora": lora,
    }


def test_main_ppo_trains_three_steps_sampled_by_vllm(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert "verl.trainer.main_ppo" in run["log"]
    assert "aworld_cpu: sampling with vLLM's server at http://127.0.0.1:" in run["log"]
    log = (run["run_dir"] / "verl" / "vllm.log").read_text(errors="replace")
    assert "vllm.entrypoints.openai.api_server" in log or "Starting vLLM API server" in log
    # the completions verl's agent loop asked for; a reload per update that reached the sampler,
    # or with an adapter the base once and an adapter per update
    assert log.count("POST /v1/completions") >= 2 * 2 * len(STEPS)
    if run["lora"]:
        assert log.count("POST /collective_rpc") == 1
        assert log.count("POST /v1/load_lora_adapter") >= len(STEPS)
        loaded = re.findall(r"aworld_cpu: LoRA adapter loaded \(\d+ tensors, rank (\d+)\)", run["log"])
        assert len(loaded) >= len(STEPS) and set(loaded) == {str(RANK)}
    else:
        assert log.count("POST /collective_rpc") >= len(STEPS) - 1
    assert sorted(run["steps"]) == list(STEPS)
    for metrics in run["steps"].values():
        assert metrics["actor/grad_norm"] > 0
        assert metrics["training/aworld/trained"] == 4


def test_vllms_logprobs_match_verls_actor_on_the_weights_each_step_pushed(run):
    """verl's rollout_probs_diff (vLLM's sampled probabilities against the FSDP actor's recompute of
    the same tokens, both float32) stays within rounding. A random model's probabilities are too
    small for that difference to show a lost push, so logprobs are recomputed here too: each step's
    tokens have the logprobs of the weights the step before saved, not those of the initial
    weights."""
    for step, metrics in run["steps"].items():
        assert metrics["training/rollout_probs_diff_max"] < 1e-4, (step, metrics)
        assert metrics["training/off_policy/trajectory_staleness/max"] == 0
    initial = _model(run["model"], lora=run["lora"])  # an adapter starts as the base (lora_B is 0)
    assert _worst_gap(initial, _sampled(run, 1)) < 1e-3
    for step in STEPS[1:]:
        tokens = _sampled(run, step)
        checkpoint = run["run_dir"] / f"checkpoints/global_step_{step - 1}/actor"
        pushed = _model(run["model"], checkpoint, lora=run["lora"])
        assert _worst_gap(pushed, tokens) < 1e-3, step
        assert _worst_gap(initial, tokens) > 1e-2, step


def test_every_sampled_token_carries_the_version_vllm_held(run):
    import pyarrow.parquet as pq

    for step in STEPS:
        folder = run["run_dir"] / "tokens" / f"step_{step:06d}"
        rows = [r for part in folder.glob("part-*.parquet") for r in pq.read_table(part).to_pylist()]
        sampled = [r for r in rows if r["sampled_tokens"]]
        assert sampled and {(r["version_min"], r["version_max"]) for r in sampled} == {(step - 1, step - 1)}


def test_no_vllm_process_weights_folder_or_shared_memory_outlives_the_run(run):
    assert_vllm_left_nothing(run["run_dir"] / "verl", run["run_dir"].parent)


def _sampled(run, step: int) -> list[tuple[list[int], int, float]]:
    """Step `step`'s sampled tokens: (the ids up to and with it, its position, recorded logprob)."""
    import pyarrow.parquet as pq

    out = []
    for part in (run["run_dir"] / "tokens" / f"step_{step:06d}").glob("part-*.parquet"):
        for row in pq.read_table(part).to_pylist():
            for seg in row["segments"]:
                ids = seg["prompt_ids"] + seg["response_ids"]
                positions = [len(seg["prompt_ids"]) + k for k, m in enumerate(seg["response_mask"]) if m]
                out.extend((ids, at, lp) for at, lp in zip(positions, seg["sampled_logprobs"], strict=True))
    assert out, step
    return out


def _model(initial, actor_checkpoint=None, lora: bool = False):
    """The tiny model in float32 (with the run's adapter layers for a LoRA run), with the weights
    (or the adapter) of verl's actor checkpoint where one is given."""
    import torch

    from aworld_train.engines.local.lora import attach
    from aworld_train.inputs.config import LoraConfig
    from aworld_train.rollout.policies.models import load_model

    model = load_model(str(initial), dtype=torch.float32)
    if lora:
        model = attach(model, LoraConfig(rank=RANK, alpha=ALPHA))
    if actor_checkpoint is not None:
        shard = torch.load(
            actor_checkpoint / "model_world_size_1_rank_0.pt", weights_only=False, map_location="cpu"
        )
        state = {k: (v.to_local() if hasattr(v, "to_local") else v).float() for k, v in shard.items()}
        if lora:
            state = {k: v for k, v in state.items() if ".lora_" in k}
        result = model.load_state_dict(state, strict=False)
        assert state and not result.unexpected_keys, result.unexpected_keys[:3]
    return model.eval()


def _worst_gap(model, tokens) -> float:
    """The largest difference between a token's recorded logprob and `model`'s (temperature 1)."""
    import torch

    worst, cache = 0.0, {}
    for ids, at, recorded in tokens:
        key = tuple(ids)
        if key not in cache:
            with torch.no_grad():
                cache[key] = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
        worst = max(worst, abs(float(cache[key][at - 1, ids[at]]) - recorded))
    return worst
