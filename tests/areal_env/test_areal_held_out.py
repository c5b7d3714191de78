"""What our AReaL trainer adds at a run's end (engines/areal/held_out.py), against AReaL 1.0.4's own
PPOTrainer methods: the last step is saved whatever `save_every`, and evaluated after training
rather than by AReaL's evaluator; the evaluations between name their step. The evaluations before
and after training, on a real run: tests/test_areal_cpu_e2e.py."""

from __future__ import annotations

import getpass
from pathlib import Path
from types import SimpleNamespace

from areal import PPOTrainer

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
