"""AReaL's workers run `aworld_train.engines.areal.worker`: the model class it registers masks each
packed sequence on its own. AReaL 1.0.4's FSDP engine packs a micro-batch into one row and hands
the model `attention_mask={"full_attention": None, "sliding_attention": None}` with cu_seq_lens
(fsdp_engine.py, `_prepare_mb_inputs`); here the same inputs go to a tiny Qwen2 and a tiny Llama
under sdpa, in AReaL's environment (its transformers)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from aworld_train.engines.areal.worker import register_model

SIZES = dict(
    vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)  # fmt: skip
MASK_MAPPING = {"full_attention": None, "sliding_attention": None}  # what AReaL passes


def packed_inputs(first: torch.Tensor, second: torch.Tensor) -> dict:
    """Two sequences in one row, as AReaL packs them."""
    cu = torch.tensor([0, len(first), len(first) + len(second)], dtype=torch.int32)
    return {
        "input_ids": torch.cat([first, second])[None],
        "position_ids": torch.cat([torch.arange(len(first)), torch.arange(len(second))])[None],
        "attention_mask": dict(MASK_MAPPING),
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": max(len(first), len(second)),
        "max_length_k": max(len(first), len(second)),
        "use_cache": False,
    }


@pytest.fixture(
    params=[(Qwen2Config, Qwen2ForCausalLM), (LlamaConfig, LlamaForCausalLM)], ids=["qwen2", "llama"]
)
def model_dir(request, tmp_path):
    config_cls, model_cls = request.param
    torch.manual_seed(0)
    model_cls(config_cls(**SIZES)).save_pretrained(tmp_path)
    return tmp_path, model_cls


def test_packed_sequences_are_masked_one_by_one(model_dir):
    path, stock_cls = model_dir
    torch.manual_seed(1)
    first, second = torch.randint(0, 100, (7,)), torch.randint(0, 100, (5,))
    stock = stock_cls.from_pretrained(path, attn_implementation="sdpa").eval()
    with torch.no_grad():
        alone = stock(input_ids=second[None], use_cache=False).logits[0]
        if stock_cls is Qwen2ForCausalLM:  # takes the mapping, but masks the whole row causally
            leaked = stock(**packed_inputs(first, second)).logits[0, len(first) :]
            assert (leaked - alone).abs().max() > 0.05
        else:  # Llama's forward takes no mapping
            with pytest.raises(AttributeError, match="ndim"):
                stock(**packed_inputs(first, second))

    safe_cls = register_model(str(path))
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
    assert type(model) is safe_cls and type(model).__name__ == stock_cls.__name__
    with torch.no_grad():
        packed = model(**packed_inputs(first, second)).logits[0]
    assert torch.allclose(packed[len(first) :], alone, atol=1e-5)
    assert torch.allclose(
        packed[: len(first)], model(input_ids=first[None], use_cache=False).logits[0], atol=1e-5
    )


def test_checkpoints_name_the_models_own_architecture(model_dir, tmp_path):
    import json

    path, stock_cls = model_dir
    register_model(str(path))
    AutoModelForCausalLM.from_pretrained(path).save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved/config.json").read_text())["architectures"] == [stock_cls.__name__]
