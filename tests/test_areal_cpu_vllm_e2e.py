"""AReaL's own trainer with every rollout token sampled by vLLM, on a CPU: `aworld-train run` on
examples/calculator/grpo_areal_cpu.yaml with `rollout.engine=vllm`, in the AReaL environment.
AReaL's client is its own `RemotevLLMEngine`; it reaches vLLM's own server (`make setup-vllm`'s
environment) through the routes of AReaL's vLLM server (cpu/vllm_front.py), and each update goes
AReaL's own disk path (`/areal_update_weights`). 3 steps, off-policy by up to one version, every
weight trained; one run, alone at the end of the session (tests/early_runs.py). A LoRA adapter goes
vLLM's own adapter route, which the front passes on (tests/test_areal_vllm_front.py) and vLLM serves
as it does for verl's runs (tests/test_verl_cpu_vllm_e2e.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import early_runs
import pytest
from areal_run_support import mismatch, sampled_tokens, scalars
from areal_support import AREAL_PYTHON, needs_areal
from verl_cpu_support import assert_vllm_left_nothing, calculator_rows, cpu_run, note_shared_memory

from aworld_train.rollout.policies.vllm_server import vllm_missing

if (missing := vllm_missing()) is not None:
    if os.environ.get("CI"):
        raise RuntimeError(f"CI runs AReaL with vLLM's sampler: {missing}")
    pytest.skip(missing, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500), needs_areal]

STEPS = [0, 1, 2]  # AReaL counts its steps from 0
FLOAT32_MISMATCH = 1e-4


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


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return early_runs.result(__name__, start_run, tmp_path_factory.mktemp("areal_cpu_vllm"))


def test_areals_trainer_finishes_three_steps_sampled_by_vllm(run):
    assert run["rc"] == 0, run["log"][-4000:]
    assert "aworld_train.engines.areal.main" in run["log"]
    assert "aworld_train.engines.areal.cpu.vllm_front" in run["log"]
    assert "vLLM's server at http://127.0.0.1:" in run["front_log"]
    assert run["vllm_log"].count("POST /v1/completions") >= 2 * 2 * len(STEPS)
    assert all(value > 0 for value in run["stats"]["ppo_actor/update/grad_norm"].values())
    assert sorted(run["stats"]["ppo_actor/update/grad_norm"]) == STEPS


def test_each_update_went_areals_own_path_to_vllm(run):
    """AReaL's disk path, each update a reload of vLLM's weights after the requests of the version
    before it."""
    loads = run["weight_loads"]
    assert [(load["event"], load["version"]) for load in loads] == [("weights", v) for v in (1, 2, 3)]
    assert run["vllm_log"].count("POST /collective_rpc") == len(loads)
    assert all(load["served_on_previous"]["requests"] > 0 for load in loads)
    assert [load["served_on_previous"]["version"] for load in loads] == [0, 1, 2]


def test_vllms_logprobs_are_those_of_the_weights_each_version_pushed(run):
    """AReaL's actor measures vLLM's logprobs against its own forward of the current weights' tokens
    (step 0: float32 against float32); and the tokens each version sampled have the logprobs of the
    weights AReaL saved at that version, while the initial weights are far
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
        trained = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        gap, tokens = mismatch(trained, segments, version)
        if tokens:
            assert gap < FLOAT32_MISMATCH, (version, gap)
            assert mismatch(initial, segments, version)[0] > 10 * FLOAT32_MISMATCH
            checked.append(version)
    assert checked, "no tokens sampled after an update"


def test_no_vllm_process_weights_folder_or_shared_memory_outlives_the_run(run):
    assert_vllm_left_nothing(run["run_dir"] / "areal", run["run_dir"].parent)
