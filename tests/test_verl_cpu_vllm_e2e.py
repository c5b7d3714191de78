"""verl's own trainer with every rollout token sampled by vLLM, on a CPU: `aworld-train run` on
examples/calculator/grpo_verl_cpu.yaml with `rollout.engine=vllm` launches verl's `main_ppo` (V1
trainer, FSDP2 actor on gloo, our AWorldAgentLoop, the real calculator MCP server) for 3 GRPO
steps; its `aworld_cpu` rollout answers verl's token-in/token-out calls through vLLM's own server
(`make setup-vllm`'s environment), each update's weights pushed to it. verl compares vLLM's
logprobs with its actor's recompute token by token: that comparison is what is asserted. One run,
alone at the end of the session (tests/early_runs.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import early_runs
import pytest
from verl_cpu_support import calculator_rows, launch_cpu_run

from aworld_train.rollout.policies.vllm_server import vllm_missing

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

if (missing := vllm_missing()) is not None:
    if os.environ.get("CI"):
        raise RuntimeError(f"CI runs verl with vLLM's sampler: {missing}")
    pytest.skip(missing, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
STEPS = (1, 2, 3)


SHARED_MEMORY = Path("/dev/shm")


def start_run(tmp):
    (tmp / "shm_before.txt").write_text("\n".join(_shared_memory()))
    return launch_cpu_run(
        tmp,
        calculator_rows(6),
        "rollout.engine=vllm",
        f"trainer.steps={len(STEPS)}",
        # the weights of every step, to recompute the logprobs vLLM recorded with them
        "trainer.save_every=1",
        f"trainer.save_total_limit={len(STEPS)}",
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return early_runs.result(__name__, start_run, tmp_path_factory.mktemp("verl_cpu_vllm"))


def test_main_ppo_trains_three_steps_sampled_by_vllm(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert "verl.trainer.main_ppo" in run["log"]
    assert "aworld_cpu: sampling with vLLM's server at http://127.0.0.1:" in run["log"]
    log = (run["run_dir"] / "verl" / "vllm.log").read_text(errors="replace")
    assert "vllm.entrypoints.openai.api_server" in log or "Starting vLLM API server" in log
    # one reload per update that reached the sampler; the completions verl's agent loop asked for
    assert log.count("POST /v1/completions") >= 2 * 2 * len(STEPS)
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
    initial = _model(run["model"])
    assert _worst_gap(initial, _sampled(run, 1)) < 1e-3
    for step in STEPS[1:]:
        tokens = _sampled(run, step)
        pushed = _model(run["model"], run["run_dir"] / f"checkpoints/global_step_{step - 1}/actor")
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
    """vLLM's server shuts down whole when its actor ends: a server killed outright leaves its
    shared memory in /dev/shm (hundreds of MB a run)."""
    served = run["run_dir"] / "verl"
    assert not list(served.glob("aworld-train-vllm-*"))
    left = subprocess.run(["pgrep", "-f", str(served)], capture_output=True, text=True).stdout.split()
    assert left == []
    before = set((run["run_dir"].parent / "shm_before.txt").read_text().split())
    assert {name for name in _shared_memory() if name.startswith("psm_")} <= before


def _shared_memory() -> list[str]:
    return sorted(p.name for p in SHARED_MEMORY.iterdir()) if SHARED_MEMORY.is_dir() else []


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


def _model(initial, actor_checkpoint=None):
    """The tiny model in float32, with the weights of verl's actor checkpoint where one is given."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(initial, dtype=torch.float32).eval()
    if actor_checkpoint is not None:
        shard = torch.load(
            actor_checkpoint / "model_world_size_1_rank_0.pt", weights_only=False, map_location="cpu"
        )
        state = {k: (v.to_local() if hasattr(v, "to_local") else v).float() for k, v in shard.items()}
        model.load_state_dict(state, strict=False)
    return model


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
