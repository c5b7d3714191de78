"""`aworld-train eval --checkpoints RUN` on a verl run folder: its latest whole checkpoint's
transformers folder, never a folder that holds verl's config and tokenizer without weights, and in
the dtype verl's CPU rollout sampled the run's own validation with. The whole path, a verl run
evaluated again token for token, is in tests/test_verl_cpu_e2e.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from aworld_train.core.errors import ModelError
from aworld_train.evaluation.checkpoints import checkpoint_label, resolve_checkpoint
from aworld_train.evaluation.verl_checkpoints import sampling_dtype


def verl_run(
    root: Path, steps: tuple[int, ...] = (2, 4), named: int | None = 4, weights: bool = True
) -> Path:
    """A verl run folder as verl 0.9.1 leaves it: global_step_N/actor/ with its huggingface/ folder
    (config and tokenizer always, the weights only with hf_model), and the tracker file."""
    checkpoints = root / "checkpoints"
    for step in steps:
        model = checkpoints / f"global_step_{step}" / "actor" / "huggingface"
        model.mkdir(parents=True)
        (model / "config.json").write_text("{}")
        (model / "tokenizer.json").write_text("{}")
        if weights:
            (model / "model.safetensors").write_bytes(b"")
    if named is not None:
        (checkpoints / "latest_checkpointed_iteration.txt").write_text(f"{named}\n")
    return root


def test_a_verl_run_folder_is_its_latest_whole_checkpoint(tmp_path):
    run = verl_run(tmp_path / "calc")
    latest = run / "checkpoints/global_step_4/actor/huggingface"
    assert resolve_checkpoint(str(run)) == str(latest)
    assert resolve_checkpoint(str(run / "checkpoints")) == str(latest)
    earlier = run / "checkpoints/global_step_2"
    for ref in (earlier, earlier / "actor", earlier / "actor/huggingface"):
        assert resolve_checkpoint(str(ref)) == str(earlier / "actor/huggingface")
    assert checkpoint_label(str(run), str(latest)) == "calc/global_step_4"


def test_a_verl_checkpoint_without_weights_is_refused_naming_the_fix(tmp_path):
    """verl writes config.json into actor/huggingface/ without hf_model: a loader would build a
    random model from it, or fail past the point where the fix could be named."""
    run = verl_run(tmp_path / "no-weights", weights=False)
    for ref in (run, run / "checkpoints/global_step_4/actor/huggingface"):
        with pytest.raises(
            ModelError, match=r"no weights: the run did not save hf_model .*verl.model_merger"
        ):
            resolve_checkpoint(str(ref))
    lora = verl_run(tmp_path / "lora")
    (lora / "checkpoints/global_step_4/actor/lora_train_meta.json").write_text('{"r": 8}')
    with pytest.raises(ModelError, match=r"LoRA adapter, kept in verl's sharded format"):
        resolve_checkpoint(str(lora))
    unnamed = verl_run(tmp_path / "cut-short", named=None)
    with pytest.raises(ModelError, match=r"holds no verl checkpoint that was saved whole"):
        resolve_checkpoint(str(unnamed))


def test_a_verl_cpu_runs_weights_load_in_float32_as_its_rollout_sampled(tmp_path, monkeypatch):
    monkeypatch.delenv("AWORLD_TRAIN_DTYPE", raising=False)
    model = str(verl_run(tmp_path / "cpu") / "checkpoints/global_step_4/actor/huggingface")
    (tmp_path / "cpu/verl").mkdir()
    rendered = tmp_path / "cpu/verl/verl_config.yaml"
    rendered.write_text("trainer:\n  device: cpu\n")
    import torch

    assert sampling_dtype(model) is torch.float32
    monkeypatch.setenv("AWORLD_TRAIN_DTYPE", "bfloat16")  # the user's choice wins
    assert sampling_dtype(model) is None
    monkeypatch.delenv("AWORLD_TRAIN_DTYPE")
    rendered.write_text("trainer:\n  device: cuda\n")  # a GPU run: the loader's own choice
    assert sampling_dtype(model) is None
    assert sampling_dtype(str(tmp_path)) is None
