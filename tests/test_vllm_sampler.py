"""vLLM samples every rollout token of a local GRPO run (`rollout.engine: vllm`): its own engine, in a
server of its own from `make setup-vllm`'s environment, the trainer's weights pushed to it after
every update (full weights through `reload_weights`; a LoRA run's adapter through vLLM's own
adapters), for an agent in process and for one in a process of its own that reaches it through the
gateway.

Each run trains two steps on the embedded model in float32, saving after each. Step 1's tokens are
version 0 and the learner recomputes their logprobs within rounding; step 2's tokens are version 1,
and the model saved after step 1 gives their recorded logprobs within rounding while the weights
before it do not: the update reached the sampler.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from aworld_train import AgentTrainer
from aworld_train.inputs.config import load_config
from aworld_train.rollout.policies.models import load_model
from aworld_train.rollout.policies.vllm_server import vllm_missing

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "calculator" / "grpo_local.yaml"
# the same task with AWorld's agent in a process of its own, its calls through the gateway
GATEWAY_DEMO = ROOT / "examples" / "calculator_gateway" / "grpo_local.yaml"
# the planner and the calculator agent, an adapter each (policies:)
TEAM_POLICIES = ROOT / "examples" / "calculator_team" / "grpo_local_policies.yaml"

if (missing := vllm_missing()) is not None:
    if os.environ.get("CI"):
        raise RuntimeError(f"CI runs vLLM's sampler: {missing}")
    pytest.skip(missing, allow_module_level=True)

pytestmark = pytest.mark.model


def sampled(run: Path, step: int, agent: str | None = None) -> list[tuple[list[int], int, float, int]]:
    """Step `step`'s sampled tokens (of `agent`'s segments, if named): (the ids before it and it, its
    position, recorded logprob, version)."""
    out = []
    for part in sorted((run / "tokens" / f"step_{step:06d}").glob("part-*.parquet")):
        for row in pq.read_table(part).to_pylist():
            for seg in row["segments"]:
                if agent is not None and seg["agent"] != agent:
                    continue
                ids = seg["prompt_ids"] + seg["response_ids"]
                positions = [len(seg["prompt_ids"]) + k for k, m in enumerate(seg["response_mask"]) if m]
                for at, lp, version in zip(positions, seg["sampled_logprobs"], seg["versions"], strict=True):
                    out.append((ids, at, lp, version))
    return out


# The worst token's |recorded - recomputed| logprob: on the weights that sampled it, vLLM's CPU
# kernels and a float32 transformers forward agree to 6e-5 here, and to 4e-3 through vLLM's adapter
# path on a CPU with AMX (its own kernels there); on the weights one step older they differ by more
# than 2 (full and LoRA alike). The bounds sit between, far from both.
SAME_WEIGHTS = 1e-2
OTHER_WEIGHTS = 0.1


def worst_gap(model, tokens, temperature: float) -> float:
    """The largest difference between a token's recorded logprob and `model`'s at that position."""
    worst, cache = 0.0, {}
    for ids, at, recorded, _ in tokens:
        key = tuple(ids)
        if key not in cache:
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].float()
            cache[key] = torch.log_softmax(logits / temperature, -1)
        worst = max(worst, abs(float(cache[key][at - 1, ids[at]]) - recorded))
    return worst


def train_two_steps(tmp_path: Path, *overrides: str, demo: Path = DEMO):
    run = tmp_path / "run"
    config = load_config(
        demo,
        [
            "rollout.engine=vllm",
            "trainer.steps=2",
            "trainer.save_every=1",
            "trainer.save_total_limit=null",  # step 1's checkpoint is read below
            "trainer.eval_before=false",
            "trainer.eval_after=false",
            "algorithm.group_size=2",
            "data.batch_size=2",
            # a reward that differs within every group, so each step's update changes the weights
            "reward.fn=reward_fixtures:text_length",
            f"trainer.run_dir={run}",
            *overrides,
        ],
    )
    summary = AgentTrainer(config=config).train()
    assert summary["steps"] == 2
    return run, config


@pytest.fixture
def float32(monkeypatch):
    monkeypatch.setenv("AWORLD_TRAIN_DTYPE", "float32")


# Full weights for an agent in process, and a LoRA adapter for an agent in a process of its own (the
# gateway reaches the sampler one way whatever weights it holds; the team test below pushes adapters
# for agents in process).
@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("full", id="full-weights-agent-in-process"),
        pytest.param("lora", id="lora-adapter-agent-process-through-gateway"),
    ],
)
def test_vllm_samples_each_step_with_the_weights_the_last_update_pushed(kind, tmp_path, float32):
    if kind == "lora":
        run, config = train_two_steps(
            tmp_path, "algorithm.lora={rank: 8, alpha: 16}", "algorithm.lr=1e-3", demo=GATEWAY_DEMO
        )
    else:
        run, config = train_two_steps(tmp_path, "algorithm.lr=1e-4")
    temperature = config.rollout.temperature
    assert "vLLM" in (run / "vllm.log").read_text() or (run / "vllm.log").stat().st_size > 0
    first, second = sampled(run, 1), sampled(run, 2)
    assert first and second
    assert {v for *_, v in first} == {0} and {v for *_, v in second} == {1}
    if kind == "lora":
        from peft import PeftModel

        base = load_model(config.model, dtype=torch.float32)
        before = base
        after = PeftModel.from_pretrained(
            load_model(config.model, dtype=torch.float32), str(run / "checkpoints/step_000001/adapter")
        )
    else:
        before = load_model(config.model, dtype=torch.float32)
        after = load_model(str(run / "checkpoints/step_000001"), dtype=torch.float32)
    gaps = {
        "before, step 1": worst_gap(before, first, temperature),
        "after, step 2": worst_gap(after, second, temperature),
        "before, step 2": worst_gap(before, second, temperature),
    }
    # step 1: vLLM's logprobs are the starting weights' own
    assert gaps["before, step 1"] < SAME_WEIGHTS, gaps
    # step 2: sampled by the weights step 1 trained, which vLLM had been given; not by the old ones
    assert gaps["after, step 2"] < SAME_WEIGHTS, gaps
    assert gaps["before, step 2"] > OTHER_WEIGHTS, gaps


@pytest.mark.skipif(
    os.environ.get("CI") == "true",
    reason="CI time (about 2 minutes): an adapter served through vLLM is the LoRA run's path above; "
    "run this module outside CI for the adapters of a policy per agent side by side",
)
def test_vllm_serves_an_adapter_per_policy_side_by_side(tmp_path, float32):
    """A team with a policy per agent sampled by vLLM: every policy's adapter is pushed after each
    update and each agent's calls are sampled with its own (step 2's planner tokens have the
    logprobs of the base plus the planner's adapter saved after step 1, not the solver's; and the
    reverse)."""
    from peft import PeftModel

    run, config = train_two_steps(tmp_path, "algorithm.lr=1e-3", demo=TEAM_POLICIES)
    temperature = config.rollout.temperature
    base = load_model(config.model, dtype=torch.float32)
    adapters = run / "checkpoints" / "step_000001" / "policies"
    trained = {
        name: PeftModel.from_pretrained(load_model(config.model, dtype=torch.float32), str(adapters / name))
        for name in ("planner", "solver")
    }
    for agent, own, other in (("planner", "planner", "solver"), ("calculator_agent", "solver", "planner")):
        first, second = sampled(run, 1, agent), sampled(run, 2, agent)
        assert first and second, agent
        assert {v for *_, v in first} == {0} and {v for *_, v in second} == {1}
        gaps = {
            "base, step 1": worst_gap(base, first, temperature),
            "own, step 2": worst_gap(trained[own], second, temperature),
            "other, step 2": worst_gap(trained[other], second, temperature),
        }
        # step 1: both adapters start as the base exactly
        assert gaps["base, step 1"] < SAME_WEIGHTS, (agent, gaps)
        assert gaps["own, step 2"] < SAME_WEIGHTS, (agent, gaps)
        assert gaps["other, step 2"] > OTHER_WEIGHTS, (agent, gaps)
