"""The held-out evaluation on AReaL. What our AReaL trainer adds at a run's end
(engines/areal/held_out.py), against AReaL 1.0.4's own PPOTrainer methods: the last step is saved
whatever `save_every`, and evaluated after training rather than by AReaL's evaluator; the
evaluations between name their step. Our workflow's evaluation, built as AReaL builds it: each
sample drawn from its held-out seed, which AReaL's own request builders send. The evaluations before
and after training, on a real run: tests/test_areal_cpu_e2e.py."""

from __future__ import annotations

import asyncio
import getpass
from pathlib import Path
from types import SimpleNamespace

import yaml
from areal import PPOTrainer
from areal_workflow_support import FakeEngine, rows, workflow_like_areal
from backend_support import calculator_reply, trainer_for

from aworld_train.engines.areal.held_out import HeldOutPPOTrainer


def trainer(tmp_path: Path) -> HeldOutPPOTrainer:
    """A trainer of 3 steps (4 a epoch, 2 epochs, total_train_steps 3) without AReaL's workers."""
    made = object.__new__(HeldOutPPOTrainer)
    saver = SimpleNamespace(experiment_name="exp", trial_name="trial", fileroot=str(tmp_path))
    made.config = SimpleNamespace(total_train_epochs=2, total_train_steps=3, saver=saver)
    made.train_dataloader = [None] * 4
    made.tokenizer = made.processor = None
    made.saved = []
    made.actor = SimpleNamespace(save=lambda meta: made.saved.append(meta))
    return made


def folder(tmp_path: Path, step: int) -> Path:
    """Where AReaL's Saver writes step `step` of epoch 0."""
    return (
        tmp_path / f"checkpoints/{getpass.getuser()}/exp/trial/default/epoch0epochstep{step}globalstep{step}"
    )


def test_the_last_step_is_saved_when_areals_saver_skips_it(tmp_path, monkeypatch):
    monkeypatch.setattr(PPOTrainer, "_save_hf", lambda self, epoch, epoch_step, global_step: None)
    made = trainer(tmp_path)
    for step in range(3):
        made._save_hf(0, step, step)
    (meta,) = made.saved
    assert meta.path == str(folder(tmp_path, 2)) and meta.weight_format == "hf" and not meta.with_optim


def test_a_last_step_areals_saver_wrote_is_not_saved_again(tmp_path, monkeypatch):
    def saver_writes(self, epoch, epoch_step, global_step):
        path = folder(tmp_path, global_step)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text("{}")

    monkeypatch.setattr(PPOTrainer, "_save_hf", saver_writes)
    made = trainer(tmp_path)
    made._save_hf(0, 2, 2)
    assert made.saved == []


def test_areals_evaluator_names_its_step_and_leaves_the_last_to_the_evaluation_after(monkeypatch):
    asked = []
    monkeypatch.setattr(
        PPOTrainer,
        "_evaluate",
        lambda self, workflow, kwargs, epoch, epoch_step, global_step: asked.append(kwargs["eval_set"]),
    )
    made = trainer(Path("/nonexistent"))
    for step in range(3):
        made._evaluate("workflow", {"group_size": 2}, 0, step, step)
    assert asked == ["step_000001", "step_000002"]  # the weights after steps 1 and 2; step 3's: `after`


def test_the_evaluation_draws_each_sample_from_its_held_out_seed(
    tmp_path, calculator_server, monkeypatch, tokenizer
):
    """As the local backend's and `aworld-train eval`'s: sample j of a task under held-out seed s draws
    from derive_seed(s, task id, j), and each of its LLM calls from derive_seed(that, call), which
    AReaL's own SGLang and vLLM request builders then send (engines/areal/seeds.py); the episodes run at
    the held-out settings and their tokens go to the set the trainer names."""
    from areal.engine.sglang_remote import SGLangBackend
    from areal.engine.vllm_remote import VLLMBackend

    from aworld_train.evaluation.report import held_out_group
    from aworld_train.evaluation.run_summary import eval_sets, rewards_by_group
    from aworld_train.rollout.policies.client import derive_seed

    monkeypatch.setenv("CALCULATOR_MCP_URL", calculator_server.url)
    config = {"backend": "areal", "rollout": {"tool_block": "never", "max_new_tokens": 64}}
    held = ["trainer.eval_k=2", "trainer.eval_seeds=[3, 9]", "trainer.eval_temperature=0.25"]
    run = trainer_for(tmp_path, config, overrides=held).render()
    spec = yaml.safe_load((run.folder / "workflow.yaml").read_text())
    workflow = workflow_like_areal(run, **spec["eval_kwargs"], group_baseline=False, eval_set="before")
    engine = FakeEngine(tokenizer, calculator_reply)
    row = rows(run)[1]  # "What is 2 * 3?": a call, then the answer
    batch = asyncio.run(workflow.arun_episode(engine, row))
    assert batch["input_ids"].shape[0] == 4 and batch["rewards"].tolist() == [1.0] * 4  # raw rewards
    samples = [derive_seed(s, row["task_id"], j) for s in (3, 9) for j in range(2)]
    sent = sorted(r.metadata["sampling_seed"] for r in engine.requests)
    assert sent == sorted(derive_seed(sample, call) for sample in samples for call in (0, 1))
    assert {r.gconfig.temperature for r in engine.requests} == {0.25}

    request = engine.requests[0]
    seed = request.metadata["sampling_seed"]
    sglang = SGLangBackend().build_generation_request(request, with_lora=False, version=0).payload
    assert sglang["sampling_params"]["sampling_seed"] == seed
    assert VLLMBackend().build_generation_request(request, with_lora=False, version=0).payload["seed"] == seed
    request.metadata.clear()  # a training request: no seed sent
    assert (
        "sampling_seed"
        not in SGLangBackend().build_generation_request(request, False, 0).payload["sampling_params"]
    )

    run_dir = run.folder.parent
    assert eval_sets(run_dir) == ("eval/before", None)
    assert rewards_by_group(run_dir, "eval/before") == {
        held_out_group(row["task_id"], seed): [1.0] * 2 for seed in (3, 9)
    }
