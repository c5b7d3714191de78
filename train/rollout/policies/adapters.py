"""A served policy's LoRA adapter: what a policy server that samples from a trainer's adapter does
with each one the trainer sends (verl's and AReaL's CPU rollouts). The first wraps the served model,
the later ones replace the adapter's weights in place, so the base is held once however many
updates arrive. Training an adapter is the local engine's (`engines/local/lora.py`).
"""

from __future__ import annotations

from pathlib import Path

# what an adapter's shape and scale depend on: a new adapter that differs in one of them is loaded
# anew, the others are copied into the layers of the last one
_ADAPTER_SHAPE = ("r", "lora_alpha", "target_modules", "use_rslora", "use_dora", "modules_to_save", "bias")


def serve_adapter(model, folder: Path) -> tuple[object, int]:
    """`model` (a base, or a base wrapped by an earlier call) sampling from the peft adapter saved in
    `folder` (adapter_config.json and its weights), for inference; and the number of adapter tensors
    loaded. An adapter of the same settings as the one served replaces its weights in place; one of
    other settings replaces the adapter layers. A folder that is not a peft adapter, or whose
    weights do not fit its settings, is an error naming the folder."""
    from peft import PeftConfig, PeftModel
    from peft.utils import load_peft_weights

    folder = Path(folder)
    if not (folder / "adapter_config.json").is_file():
        raise ValueError(f"{folder} holds no adapter_config.json: not a peft adapter folder")
    settings = PeftConfig.from_pretrained(str(folder))
    if isinstance(model, PeftModel):
        served = model.peft_config["default"]
        if all(_same(getattr(settings, k, None), getattr(served, k, None)) for k in _ADAPTER_SHAPE):
            weights = load_peft_weights(str(folder), device="cpu")
            try:
                load_adapter_weights(model, weights)
            except ValueError as exc:
                raise ValueError(
                    f"{folder}: its weights do not fit the adapter it describes ({exc})"
                ) from exc
            return model, len(weights)
        model = model.unload()  # the base, without the last adapter's layers
    wrapped = PeftModel.from_pretrained(model, str(folder), is_trainable=False, autocast_adapter_dtype=False)
    loaded = sum(1 for name, _ in wrapped.named_parameters() if ".lora_" in name)
    return wrapped.eval(), loaded


def load_adapter_weights(model, weights: dict) -> None:
    """`weights` (peft's adapter state dict) into `model`'s adapter layers, in place; a ValueError
    naming what did not fit where a name is not one of those layers or a layer was left unloaded."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, weights, adapter_name="default")
    unloaded = [k for k in result.missing_keys if ".lora_" in k]
    if result.unexpected_keys or unloaded:
        raise ValueError(f"unexpected {result.unexpected_keys[:5]}, not loaded {unloaded[:5]}")


def _same(a, b) -> bool:
    """Settings compared as peft saves them: module names in any order."""
    if isinstance(a, list | set | tuple) and isinstance(b, list | set | tuple):
        return sorted(a) == sorted(b)
    return a == b
