"""The trainer's weights as vLLM's server reads them: a model folder it starts from, and the same
folder rewritten after each update for `reload_weights`.

Every weight is written under its own name, tied ones too: vLLM on a CPU keeps its own copy of a
tied output layer (oneDNN prepacks it), which a reload of the embedding alone leaves as it was, so
the folder's config unties them (`tie_word_embeddings: false`) and `lm_head.weight` is written
beside the embedding; the trainer's model stays tied.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

WEIGHTS_FILE = "model.safetensors"


def write_weights(model, folder: Path) -> None:
    """`model`'s weights into `folder`, the output layer among them."""
    state = dict(model.state_dict())
    head = model.get_output_embeddings()
    if head is not None and "lm_head.weight" not in state:
        state["lm_head.weight"] = head.weight
    write_state(state, folder)


def write_state(state: dict[str, torch.Tensor], folder: Path) -> None:
    """Named weights into `folder`'s weights file, each tensor its own copy (safetensors refuses
    shared ones), replacing the file whole: a reload never reads half a file."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in state.items():
        tensor = tensor.detach()
        pointer = tensor.untyped_storage().data_ptr()
        out[name] = tensor.clone() if pointer in seen else tensor.contiguous()
        seen.add(pointer)
    tmp = folder / f".{WEIGHTS_FILE}"
    save_file(out, tmp, metadata={"format": "pt"})
    tmp.replace(folder / WEIGHTS_FILE)


def tied_embedding_name(model) -> str | None:
    """The name of the input embedding a tied output layer shares (which a saved folder holds in its
    place), or None where the model does not tie them."""
    if not getattr(model.config, "tie_word_embeddings", False):
        return None
    embedding = model.get_input_embeddings().weight
    return next(name for name, p in model.named_parameters() if p is embedding)


def write_model_folder(model, folder: Path) -> Path:
    """A model folder vLLM's server starts from: `model`'s config (its output layer untied) and
    weights; the tokenizer is read from the model's own folder (`--tokenizer`)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = model.config.to_dict()
    config["tie_word_embeddings"] = False
    (folder / "config.json").write_text(json.dumps(config, indent=2, default=str))
    write_weights(model, folder)
    return folder
