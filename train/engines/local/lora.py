"""LoRA on the local backend (`algorithm.lora`): a peft adapter on the one model that samples and learns.

The rollout's policy and the learner share one model object, so wrapping it once puts the adapter
in both: what the learner trains is what the next batch samples from, with no weight transfer.
The KL reference is the same model with the adapter switched off (peft's `disable_adapter`), not a
second copy.

A LoRA checkpoint keeps the adapter where `rollout/policies/checkpoint_layout.py` says (`adapter/`)
beside the tokenizer and the trainer state; the run's last checkpoint also holds the merged model
(config.json and weights at its top), a `model:` for eval, SFT and GRPO on any backend.
`aworld-train export` merges any other checkpoint's adapter the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from aworld_train.core.errors import ConfigError, ModelError
from aworld_train.inputs.config import LoraConfig
from aworld_train.rollout.policies.checkpoint_layout import adapter_folder, saved_policy_adapters


def peft_settings(lora: LoraConfig):
    """peft's LoraConfig for `algorithm.lora` (or a policy's `lora`)."""
    from peft import LoraConfig as PeftLoraConfig

    return PeftLoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )


def attach(model, lora: LoraConfig, adapter_name: str = "default", field: str = "algorithm.lora"):
    """`model` wrapped with a fresh trainable adapter named `adapter_name` (only its weights require
    grad); `field` names the settings in an error."""
    from peft import get_peft_model

    try:
        # the adapter in the model's dtype: peft's default (float32 beside a bf16 model) keeps a float32
        # copy of every adapted layer's input for backward (measured: 340 MB more at the embedded
        # model's peak); a bf16 adapter gets float32 master weights from the learner like any weight
        return get_peft_model(
            model, peft_settings(lora), adapter_name=adapter_name, autocast_adapter_dtype=False
        )
    except ValueError as exc:  # peft's "Target modules {...} not found in the base model"
        raise ConfigError(
            f"{field}.target_modules={lora.target_modules!r}: {exc}; name modules the model has "
            f"(its linear layers: {', '.join(linear_module_names(model))}) or write all-linear"
        ) from exc


def linear_module_names(model) -> list[str]:
    """The last name part of each linear layer of `model`, once each (what target_modules matches)."""
    import torch

    return sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear)
        }
    )


def load(model, checkpoint: Path, folder: Path | None = None):
    """`model` (the base) with the trainable adapter a checkpoint saved (or the one in `folder`)."""
    from peft import PeftModel

    folder = folder or adapter_folder(checkpoint)
    return PeftModel.from_pretrained(model, str(folder), is_trainable=True, autocast_adapter_dtype=False)


def require_same_settings(checkpoint: Path, lora: LoraConfig) -> None:
    """A resume continues the adapter a checkpoint saved: settings that differ would be ignored
    (peft reads the saved ones), so they are refused."""
    saved = json.loads((adapter_folder(checkpoint) / "adapter_config.json").read_text())
    targets = saved.get("target_modules")
    pairs = {
        "rank": (saved.get("r"), lora.rank),
        "alpha": (saved.get("lora_alpha"), lora.alpha),
        "target_modules": (
            sorted(targets) if isinstance(targets, list) else targets,
            sorted(lora.target_modules) if isinstance(lora.target_modules, list) else lora.target_modules,
        ),
    }
    for name, (was, now) in pairs.items():
        if name == "target_modules" and now == "all-linear":
            continue  # peft saves the module names all-linear resolved to
        if was != now:
            raise ConfigError(
                f"algorithm.lora.{name}={now!r}, but {checkpoint} saved an adapter with {name} {was!r}: "
                f"a resume continues that adapter; set algorithm.lora.{name}: {was!r}, or start a new run folder"
            )


def export_merged(
    base: str, checkpoint: Path, out: Path, tokenizer=None, dtype=None, folder: Path | None = None
) -> Path:
    """A plain model folder at `out`: `base` (a `model:` reference) with the checkpoint's adapter
    (or the one in `folder`) merged into its weights, in `dtype` (default: the base's own). Loads a
    fresh base: a training model keeps its adapter, and merging a copy keeps the merged weights out
    of its rollout."""
    from aworld_train.rollout.policies.models import load_model, load_tokenizer

    folder = folder or adapter_folder(checkpoint)  # no adapter: fails before the base loads
    merged = load(
        load_model(base, dtype=dtype or "auto", device="cpu"), checkpoint, folder
    ).merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out)
    (tokenizer or load_tokenizer(base)).save_pretrained(out)
    return out


def run_base_model(checkpoint: Path) -> str:
    """The `model:` of the run a checkpoint belongs to (its run folder's config.yaml), for export."""
    import yaml

    config = Path(checkpoint).resolve().parents[1] / "config.yaml"
    if config.is_file():
        model = (yaml.safe_load(config.read_text()) or {}).get("model")
        if model:
            return str(model)
    adapter = next(iter(saved_policy_adapters(checkpoint).values()), None) or adapter_folder(checkpoint)
    adapter = adapter / "adapter_config.json"
    base = json.loads(adapter.read_text()).get("base_model_name_or_path")
    if base:
        return str(base)
    raise ModelError(f"{checkpoint}: no run config.yaml names its base model; pass --model BASE")


def trainable_line(model) -> str:
    """The adapter's size against the model's: what a step trains."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return f"{trainable:,} of {total:,} weights train ({trainable / max(total, 1):.2%})"


def export(checkpoint: Path, out: Path, base: str | None = None) -> Path:
    """`aworld-train export`: a LoRA checkpoint (or a run folder's latest) merged into a plain model
    folder at `out` (a run with a policy per agent: `out/<policy>/` each), written whole or not at
    all. Bad input fails before any model loads."""
    from aworld_train.core.atomic_files import complete_folder
    from aworld_train.engines.local.run_folder import RunFolder

    checkpoint = Path(checkpoint)
    if (checkpoint / "checkpoints").is_dir():  # a run folder: its latest complete checkpoint
        latest = RunFolder(checkpoint).latest_checkpoint()
        if latest is None:
            raise ConfigError(f"{checkpoint}: the run folder has no complete checkpoint to export")
        checkpoint = latest[1]
    policies = saved_policy_adapters(checkpoint)
    if not policies:
        adapter_folder(checkpoint)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} exists and is not empty: name a new folder for the merged model")
    base = base or run_base_model(checkpoint)
    with complete_folder(out, exported_from=str(checkpoint), base=base, policies=list(policies)) as tmp:
        if not policies:
            export_merged(base, checkpoint, tmp)
        for name, folder in policies.items():
            export_merged(base, checkpoint, tmp / name, folder=folder)
    return out
