"""AReaL's own trainer with every rollout token sampled by vLLM, on a CPU: `aworld-train run` on
examples/calculator/grpo_areal_cpu.yaml with `rollout.engine=vllm`, in the AReaL environment.
AReaL's client is its own `RemotevLLMEngine`; it reaches vLLM's own server (`make setup-vllm`'s
environment) through the routes of AReaL's vLLM server (cpu/vllm_front.py), and each update goes
AReaL's own disk path (`/areal_update_weights`), or with a LoRA adapter vLLM's own adapter route
(`/v1/load_lora_adapter`). 3 steps, off-policy by up to one version. Two runs (every weight, an
adapter), alone at the end of the session (tests/early_runs.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import early_runs
import pytest
from areal_support import AREAL_PYTHON, needs_areal
from test_areal_cpu_e2e import mismatch, sampled_tokens, scalars
from verl_cpu_support import assert_vllm_left_nothing, calculator_rows, cpu_run, note_shared_memory

from aworld_train.rollout.policies.vllm_server import vllm_missing

if (missing := vllm_missing()) is not None:
    if os.environ.get("CI"):
        raise RuntimeError(f"CI runs AReaL with vLLM's sampler: {missing}")
    pytest.skip(missing, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500), needs_areal]

STEPS = [0, 1, 2]  # AReaL counts its steps from 0
FLOAT32_MISMATCH = 1e-4
# an adapter at an adapter's learning rate (AReaL's actor.use_lora, lora_rank, lora_alpha)
LORA = ("algorithm.lora={rank: 8, alpha: 16}", "algorithm.lr=1e-3")


def start_run(tmp: Path, *overrides: str) -> early_runs.Started | None:
    if not AREAL_PYTHON:
        return None
    note_shared_memory(tmp)
    command, run_dir, model = cpu_run(
        AREAL_PYTHON,
        "examples/calculator/grpo_areal_cpu.yaml",
        tmp,
        calculator_rows(6),
        "rollout.engine=vllm",
        # the mechanics' scale, not the example's (the demo's): 3 steps of 2 of the 6 tasks x 2 samples
        "algorithm.group_size=2",
        "algorithm.lr=1.0e-4",
        "data.batch_size=2",
        "rollout.max_response_tokens=128",
        "rollout.max_assistant_turns=2",
        "rollout.max_new_tokens=24",
        "rollout.temperature=1.0",
        "trainer.eval_before=false",
        "trainer.eval_after=false",
        f"trainer.steps={len(STEPS)}",
        "algorithm.max_staleness=1",
        # every step's weights, to recompute what each version sampled
        "trainer.save_every=1",
        "areal.recover.freq_steps=100",
        *overrides,
    )

    def collect(returncode: int, log: str) -> dict:
        folder = run_dir / "areal"
        events = folder / "cpu_server_events.jsonl"
        return {
            "rc": returncode,
            "log": log,
            "run_dir": run_dir,
            "model": model,
            "stats": scalars(run_dir / "tensorboard"),
            "front_log": (folder / "cpu_server.log").read_text(errors="replace"),
            "vllm_log": (folder / "vllm.log").read_text(errors="replace")
            if (folder / "vllm.log").is_file()
            else "",
            "weight_loads": [json.loads(line) for line in events.read_text().splitlines()]
            if events.is_file()
            else [],
        }

    return early_runs.launch(command, tmp, 1400, collect, cwd=tmp)


@pytest.fixture(scope="module", params=["full", "lora"])
def run(request, tmp_path_factory):
    lora = request.param == "lora"
    folder = tmp_path_factory.mktemp(f"areal_cpu_vllm_{request.param}")
    return {
        **early_runs.variant(__name__, request.param, start_run, folder, *(LORA if lora else ())),
        "lora": lora,
    }


def test_areals_trainer_finishes_three_steps_sampled_by_vllm(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert "aworld_train.engines.areal.main" in run["log"]
    assert "aworld_train.engines.areal.cpu.vllm_front" in run["log"]
    assert "vLLM's server at http://127.0.0.1:" in run["front_log"]
    assert run["vllm_log"].count("POST /v1/completions") >= 2 * 2 * len(STEPS)
    assert all(value > 0 for value in run["stats"]["ppo_actor/update/grad_norm"].values())
    assert sorted(run["stats"]["ppo_actor/update/grad_norm"]) == STEPS


def test_each_update_went_areals_own_path_to_vllm(run):
    """Full weights: AReaL's disk path as reloads; an adapter: the initial one before any request,
    then each update's, through vLLM's adapter route."""
    loads = run["weight_loads"]
    if run["lora"]:
        assert [(load["event"], load["version"]) for load in loads] == [("adapter", v) for v in (0, 1, 2, 3)]
        assert loads[0]["served_on_previous"]["requests"] == 0
        loads = loads[1:]
        assert run["vllm_log"].count("POST /v1/load_lora_adapter") == 4
        assert "POST /collective_rpc" not in run["vllm_log"]
    else:
        assert [(load["event"], load["version"]) for load in loads] == [("weights", v) for v in (1, 2, 3)]
        assert run["vllm_log"].count("POST /collective_rpc") == len(loads)
    assert all(load["served_on_previous"]["requests"] > 0 for load in loads)
    assert [load["served_on_previous"]["version"] for load in loads] == [0, 1, 2]


def test_vllms_logprobs_are_those_of_the_weights_each_version_pushed(run):
    """AReaL's actor measures vLLM's logprobs against its own forward of the current weights' tokens
    (step 0: float32 against float32); and the tokens each version sampled have the logprobs of the
    weights (the base and adapter) AReaL saved at that version, while the initial weights are far
    off from step 1 on."""
    import torch
    from transformers import AutoModelForCausalLM

    assert run["stats"]["ppo_actor/update/logprob_mismatch/avg"][0] < FLOAT32_MISMATCH
    saved = {
        int(folder.name.rsplit("globalstep", 1)[1]) + 1: folder
        for folder in run["run_dir"].glob("areal_files/checkpoints/*/*/*/default/*globalstep*")
    }
    assert sorted(saved) == [1, 2, 3], saved
    segments = sampled_tokens(run["run_dir"])
    initial = AutoModelForCausalLM.from_pretrained(run["model"], dtype=torch.float32).eval()
    gap, tokens = mismatch(initial, segments, 0)
    assert tokens and gap < FLOAT32_MISMATCH
    checked = []
    for version, folder in sorted(saved.items()):
        if run["lora"]:
            from peft import PeftModel

            base = AutoModelForCausalLM.from_pretrained(run["model"], dtype=torch.float32)
            trained = PeftModel.from_pretrained(base, str(folder)).eval()
        else:
            trained = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        gap, tokens = mismatch(trained, segments, version)
        if tokens:
            assert gap < FLOAT32_MISMATCH, (version, gap)
            assert mismatch(initial, segments, version)[0] > 10 * FLOAT32_MISMATCH
            checked.append(version)
    assert checked, "no tokens sampled after an update"


def test_no_vllm_process_weights_folder_or_shared_memory_outlives_the_run(run):
    assert_vllm_left_nothing(run["run_dir"] / "areal", run["run_dir"].parent)
