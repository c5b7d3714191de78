"""verl's LoRA updates on the `aworld_cpu` rollout's model: the adapter loaded into that model in
place, so the server samples from base + adapter.

What verl 0.9.1 sends when the actor trains an adapter it does not merge
(`actor_rollout_ref.model.lora.merge: false`; workers/engine_workers.py, `update_weights`):

- once, at the first update, where `rollout.load_format` contains "dummy": the base weights, named
  as in the base model but with `.base_layer` inserted in the name of each layer the adapter wraps
  (utils/fsdp_utils.py, `collect_lora_params` and `replace_lora_wrapper`); `base_weights` maps them
  back to the model's own names;
- at every update: the adapter's tensors, named as peft's `get_peft_model_state_dict` names them on
  the actor's PeftModel (`base_model.model.<module>.lora_A.weight`), with the adapter's settings
  (`peft_config`, a LoraConfig as a dict). `RolloutAdapter` builds the adapter's layers from those
  settings the first time (peft's `inject_adapter_in_model`: the base's linear layers are wrapped,
  not copied) and replaces its weights every time.

A full-weight update that carries adapter names is the base of an unmerged adapter sent without
the adapter (the one path that does so: a checkpoint engine's, separate_async's standalone
replicas); `refuse_lora_names` stops it rather than serve the base alone.
"""

from __future__ import annotations

from typing import Any

import torch

from aworld_train.rollout.policies.adapters import load_adapter_weights

ACTOR_PREFIX = "base_model.model."  # the PeftModel's own prefix; the rollout's model is unwrapped
BASE_LAYER = ".base_layer"


def base_weights(named: list[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
    """The base weights of an adapted actor under the base model's own names."""
    return [(name.replace(BASE_LAYER, ""), tensor) for name, tensor in named]


def refuse_lora_names(named: list[tuple[str, torch.Tensor]], rollout: str) -> None:
    """A full-weight update holds no LoRA names; one that does lacks its adapter."""
    found = [name for name, _ in named if BASE_LAYER in name or ".lora_" in name]
    if found:
        raise ValueError(
            f"{rollout}: verl sent the base weights of a LoRA actor without its adapter ({found[0]}, ...): "
            "its checkpoint-engine weight path (separate_async's standalone replicas; verl 0.9.1 "
            "workers/engine_workers.py:764) drops the adapter, so this rollout would sample from the base "
            "alone; set actor_rollout_ref.model.lora.merge: true (the actor then sends merged weights)"
        )


class RolloutAdapter:
    """The trainer's LoRA adapter inside `model`, which keeps being the one the rollout samples with."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.settings: dict[str, Any] | None = None  # the peft_config the layers were built from

    def load(self, named: list[tuple[str, torch.Tensor]], peft_config: dict[str, Any]) -> int:
        """Replace the adapter's weights with `named` (building its layers from `peft_config` the
        first time); the number of tensors loaded. The caller holds the model's weights lock."""
        from peft import get_peft_config, inject_adapter_in_model

        settings = dict(peft_config)
        if self.settings is None:
            # inference_mode: the rollout's adapter weights take no gradients
            inject_adapter_in_model(get_peft_config({**settings, "inference_mode": True}), self.model)
            self.model.eval()  # the new layers' dropout off, as for the rest of the model
            self.settings = settings
        elif settings != self.settings:
            changed = sorted(
                k for k in settings.keys() | self.settings.keys() if settings.get(k) != self.settings.get(k)
            )
            raise ValueError(
                f"the actor's LoRA settings changed between updates ({', '.join(changed)}); the rollout's "
                "adapter keeps the layers of the first"
            )
        state = {name.removeprefix(ACTOR_PREFIX): tensor for name, tensor in named}
        try:
            load_adapter_weights(self.model, state)
        except ValueError as exc:
            raise RuntimeError(
                f"the actor's adapter does not match the rollout's adapter layers ({exc})"
            ) from exc
        return len(named)
