"""`aworld-train eval --checkpoints RUN` on an AReaL run folder: the latest folder AReaL's saver
wrote (full weights, or with LoRA the adapter alone), loaded as the run's policy server sampled from
it: in the dtype AReaL's actor saved (float32 on a CPU, where the loader's own choice may be bf16), an
adapter on its base. The whole path, an AReaL run evaluated again token for token, is in
tests/test_areal_cpu_e2e.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from backend_support import trainer_for

from aworld_train.core.errors import ModelError
from aworld_train.evaluation.areal_checkpoints import areal_model
from aworld_train.evaluation.checkpoints import resolve_checkpoint
from aworld_train.rollout.policies import models

CPU = {"backend": "areal", "areal": {"cluster": {"n_gpus_per_node": 0}}}


def saved_root(tmp_path: Path) -> tuple[Path, Path]:
    """A rendered AReaL run folder, and where AReaL's saver writes its checkpoints for it."""
    run = trainer_for(tmp_path, CPU).render()
    fileroot = Path(run.final["cluster"]["fileroot"])
    return run.folder.parent, fileroot / "checkpoints/someone/aworld-train" / run.final[
        "trial_name"
    ] / "default"


def test_an_areal_run_folder_is_its_latest_saved_folder(tmp_path):
    run_dir, root = saved_root(tmp_path)
    with pytest.raises(ModelError, match=r"AReaL run folder, but AReaL's saver wrote no checkpoint"):
        resolve_checkpoint(str(run_dir))
    for step in (1, 3):  # globalstep G: the weights after step G + 1
        (root / f"epoch0epochstep{step}globalstep{step}").mkdir(parents=True)
        (root / f"epoch0epochstep{step}globalstep{step}/config.json").write_text("{}")
    # what the saver leaves that is not a step's weights: a folder made but not written, AReaL's
    # initial adapter and recover checkpoint
    for other in ("epoch1epochstep0globalstep5", "initial_lora", "recover_checkpoint"):
        (root / other).mkdir()
    latest = root / "epoch0epochstep3globalstep3"
    assert resolve_checkpoint(str(run_dir)) == str(latest)
    assert resolve_checkpoint(str(root / "epoch0epochstep1globalstep1")) == str(
        root / "epoch0epochstep1globalstep1"
    )
    lora = root / "epoch1epochstep1globalstep6"  # with actor.use_lora: the adapter alone
    lora.mkdir()
    (lora / "adapter_config.json").write_text("{}")
    assert resolve_checkpoint(str(run_dir)) == resolve_checkpoint(str(lora)) == str(lora)


def test_a_checkpoint_loads_in_the_dtype_areals_actor_saved(tmp_path, tiny_model_dir, monkeypatch):
    """AReaL's CPU actor computes and saves float32 and its policy server samples in float32; where
    the loader's default is bf16 (a GPU) the run's figure would not reproduce. AWORLD_TRAIN_DTYPE,
    where set, decides instead. Any other model folder loads as before."""
    monkeypatch.setattr(models, "best_dtype", lambda: torch.bfloat16)  # a loader whose default is bf16
    monkeypatch.delenv(models.DTYPE_VARIABLE, raising=False)
    _, root = saved_root(tmp_path)
    folder = shutil.copytree(tiny_model_dir, root / "epoch0epochstep1globalstep1")
    tokenizer_ref, model = areal_model(str(folder))
    assert tokenizer_ref == str(folder) and model.dtype == torch.float32
    assert areal_model(str(tiny_model_dir)) is None  # not AReaL's: the caller loads it
    monkeypatch.setenv(models.DTYPE_VARIABLE, "bfloat16")
    assert areal_model(str(folder))[1].dtype == torch.bfloat16


def test_a_lora_checkpoint_loads_its_adapter_on_its_base(tmp_path, tiny_model_dir):
    """AReaL saves the adapter alone, naming its base (`base_model_name_or_path`): it loads there as
    the policy server served it (rollout/policies/adapters.py), with the adapter's own weights."""
    from peft import LoraConfig, PeftModel, get_peft_model

    _, root = saved_root(tmp_path)
    torch.manual_seed(0)
    base = models.load_model(str(tiny_model_dir), dtype=torch.float32)
    adapted = get_peft_model(
        base, LoraConfig(r=2, lora_alpha=4, target_modules="all-linear", init_lora_weights=False)
    )
    folder = root / "epoch0epochstep1globalstep1"
    adapted.save_pretrained(folder)
    tokenizer_ref, model = areal_model(str(folder))
    assert tokenizer_ref == str(tiny_model_dir) and isinstance(model, PeftModel)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, adapted(ids).logits, atol=1e-6)
