"""An agent in a process of its own, trained by verl's own trainer through the gateway, end to end
on a CPU, with a LoRA adapter: `aworld-train run` on examples/calculator/grpo_verl_cpu.yaml with the
calculator agent of examples/calculator_gateway/aworld_agent.py (AWorld's runner and stock `openai`
provider, no aworld-train code) for 2 GRPO steps. Each verl agent-loop worker starts the agent
process and a gateway; the agent's calls reach verl's own server client through its episode's
session. The actor trains an unmerged adapter (`actor_rollout_ref.model.lora_rank`), which verl
sends to the `aworld_cpu` rollout after every update (the base once before it, since the rollout's
`load_format` is verl's default `dummy`). One run, a few minutes on 2 cores, hence `slow`; it runs
after the suite (tests/early_runs.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import early_runs
import pytest
import yaml
from verl_cpu_support import ROOT, calculator_rows, launch_cpu_run

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

RANK, ALPHA = 8, 16
LORA = (
    f"algorithm.lora={{rank: {RANK}, alpha: {ALPHA}}}",  # the facade's key: verl's model.lora_rank, lora_alpha
    "algorithm.lr=1.0e-3",  # an adapter's usual rate (the example's 1e-4 is for every weight)
    "trainer.save_every=1",  # the adapter after step 1: what step 2's episodes were sampled with
    "trainer.save_total_limit=null",  # (verl's max_actor_ckpt_to_keep: every step's kept for the test)
)
ADAPTER_LOADED = re.compile(
    r"aworld_cpu: LoRA adapter loaded \((\d+) tensors, rank (\d+)\) as weights version (\d+); adapter loads (\d+)"
)


def start_run(tmp: Path) -> early_runs.Started:
    return launch_cpu_run(
        tmp,
        calculator_rows(4),
        f"agent={ROOT / 'examples/calculator_gateway/process_agents.py'}:aworld_agent",
        *LORA,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return early_runs.result(__name__, start_run, tmp_path_factory.mktemp("verl_cpu_gateway"))


def test_main_ppo_trains_an_agent_running_in_its_own_process(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert sorted(run["steps"]) == [1, 2]
    spec = yaml.safe_load((run["run_dir"] / "verl/agent_spec.yaml").read_text())  # what every worker read
    assert spec["command"][-1].endswith("examples/calculator_gateway/aworld_agent.py")
    for step, metrics in run["steps"].items():
        assert metrics["actor/grad_norm"] > 0, step
        assert metrics["training/aworld/trained"] == 4, step  # batch 2 x group 2, all through the gateway
        assert metrics["training/aworld/history_rewrites/mean"] == 0, step
        # verl's recompute of every output matches the logprobs its server sampled, as in a
        # full-weight run (test_verl_cpu_e2e.py): step 2's were sampled through step 1's adapter
        assert metrics["training/rollout_probs_diff_max"] < 1e-3, step
        # and the launcher's line after verl's says so, without a warning
        line = next(line for line in run["log"].splitlines() if line.startswith(f"verl step {step}: "))
        assert "rollout probability mismatch" in line and "WARNING" not in line


def test_the_adapter_reaches_the_rollout_after_every_update(run):
    loads = [tuple(map(int, m.groups())) for m in ADAPTER_LOADED.finditer(run["log"])]
    # before step 1 (the actor's initial adapter), then after each step's update: 2 layers x 7
    # linear modules x (A, B) tensors each time
    assert loads == [(28, RANK, 0, 1), (28, RANK, 1, 2), (28, RANK, 2, 3)]


def test_only_the_adapter_trains(run):
    state = checkpoint_state(run, 2)
    initial = load_file_tensors(run["model"])
    base = {
        name.removeprefix("base_model.model.").replace(".base_layer", ""): tensor
        for name, tensor in state.items()
        if ".lora_" not in name
    }
    assert set(initial) <= set(base)
    for name, tensor in initial.items():
        assert (base[name].float() == tensor.float()).all(), name  # weight decay is 0 in the example
    adapter_b = [t for name, t in state.items() if ".lora_B." in name]
    assert len(adapter_b) == 14 and all(float(t.abs().max()) > 0 for t in adapter_b)  # born 0, trained


def test_step_two_sampled_from_base_plus_step_ones_adapter(run):
    """The tokens of step 2 (weights version 1) recomputed here in float32, as the rollout computes:
    with the base and the adapter step 1 saved they agree with the logprobs the rollout recorded;
    with the base alone they do not (the adapter's effect is far above the arithmetic's). verl's own
    figure cannot tell the two apart on this near-uniform model: its probabilities are about
    1/49152, so their difference is tiny either way."""
    import torch

    from aworld_train.engines.local.lora import attach
    from aworld_train.inputs.config import LoraConfig
    from aworld_train.rollout.policies.models import load_model

    model = attach(load_model(str(run["model"]), dtype=torch.float32), LoraConfig(rank=RANK, alpha=ALPHA))
    adapter = {name: t for name, t in checkpoint_state(run, 1).items() if ".lora_" in name}
    assert not model.load_state_dict(adapter, strict=False).unexpected_keys
    temperature = yaml.safe_load((run["run_dir"] / "config.yaml").read_text())["rollout"]["temperature"]
    with_adapter, base_only = [], []
    for segment in sampled_segments(run["run_dir"] / "tokens/step_000002"):
        recorded = torch.tensor(segment["sampled_logprobs"])
        with_adapter.append((recomputed(model.eval(), segment, temperature) - recorded).abs())
        with model.disable_adapter():
            base_only.append((recomputed(model, segment, temperature) - recorded).abs())
    with_adapter, base_only = torch.cat(with_adapter), torch.cat(base_only)
    assert len(with_adapter) >= 20
    assert float(with_adapter.max()) < 1e-4, float(with_adapter.max())
    assert float(base_only.mean()) > 1e-2, float(base_only.mean())


def checkpoint_state(run, step: int) -> dict:
    """The actor's state dict verl saved after `step` (one FSDP2 shard: the whole model)."""
    import torch

    shard = run["run_dir"] / f"checkpoints/global_step_{step}/actor/model_world_size_1_rank_0.pt"
    state = torch.load(shard, weights_only=False, map_location="cpu")
    return {name: t.to_local() if hasattr(t, "to_local") else t for name, t in state.items()}


def load_file_tensors(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(model_dir / "model.safetensors")


def sampled_segments(folder: Path) -> list[dict]:
    import pyarrow.parquet as pq

    rows = [row for part in folder.glob("part-*.parquet") for row in pq.read_table(part).to_pylist()]
    assert rows and {(r["version_min"], r["version_max"]) for r in rows if r["sampled_tokens"]} == {(1, 1)}
    return [seg for row in rows for seg in row["segments"] if seg["sampled_logprobs"]]


def recomputed(model, segment: dict, temperature: float):
    """log_softmax(logits / temperature) of a segment's sampled tokens (mask 1)."""
    import torch

    from aworld_train.engines.local.grpo import token_logprobs

    prompt, response = segment["prompt_ids"], segment["response_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0]
    logprobs = token_logprobs(logits[len(prompt) - 1 : -1], torch.tensor(response), temperature)
    return logprobs[torch.tensor(segment["response_mask"]).bool()]
