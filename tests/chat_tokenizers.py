"""The tokenizers the template tests run on: real chat templates and vocabularies (fetched by `make
chat-templates`), the special tokens of each family, and a case's tokenizer (tests/chat_families.py
holds the cases: which template on which vocabulary).

Templates are the files llama.cpp vendors (`.cache/chat-templates/.../templates/*.jinja`).
Tokenizers come from its vocabulary-only GGUFs, converted once and kept beside them: Qwen2
(`ggml-vocab-qwen2.gguf`), Qwen3.5 (`qwen35`) and Llama-3 (`llama-bpe`) by transformers, Gemma 4
(`gemma-4`, whose architecture transformers does not convert) from the GGUF's own token list and
merges. Families without a GGUF of their own use the Qwen2 vocabulary with their special tokens in
its unused slots, as their tokenizers declare them (one id each).
"""

from __future__ import annotations

import copy
import json
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import chat_templates  # noqa: E402

FOLDER = chat_templates.folder()
TEMPLATES = FOLDER / "templates"
VOCAB = FOLDER / "vocab"

# Qwen2.5's and Qwen3's added tokens, at the ids their tokenizer configs give them (the GGUF
# holds padding there): (token, special)
QWEN_ADDED = [
    *[
        (t, True)
        for t in (
            "<|object_ref_start|>",
            "<|object_ref_end|>",
            "<|box_start|>",
            "<|box_end|>",
            "<|quad_start|>",
            "<|quad_end|>",
            "<|vision_start|>",
            "<|vision_end|>",
            "<|vision_pad|>",
            "<|image_pad|>",
            "<|video_pad|>",
        )
    ],
    *[
        (t, False)
        for t in (
            "<tool_call>",
            "</tool_call>",
            "<|fim_prefix|>",
            "<|fim_middle|>",
            "<|fim_suffix|>",
            "<|fim_pad|>",
            "<|repo_name|>",
            "<|file_sep|>",
            "<tool_response>",
            "</tool_response>",
            "<think>",
            "</think>",
        )
    ],
]
QWEN_FIRST_ADDED = 151646
# Llama-3's own pre-tokenizer split (transformers 5.10 converts the GGUF with GPT-2's)
LLAMA3_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def require_templates() -> None:
    if not (FOLDER / chat_templates.DONE).is_file():
        pytest.fail(f"the real chat templates are missing from {FOLDER}: run `make chat-templates`")


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


def _gguf_tokenizer(gguf: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(VOCAB, gguf_file=gguf)


def _with_tokens(tokenizer, named: dict[int, tuple[str, bool]], **special):
    """`tokenizer` with the tokens of `named` (id -> (token, special)) at those ids."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    data = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = data["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    added = {a["id"]: a for a in data["added_tokens"]}
    for tid, (token, is_special) in named.items():
        old = by_id.get(tid)
        if old is not None and old != token:
            del vocab[old]
        vocab[token] = tid
        added[tid] = {
            "id": tid,
            "content": token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": is_special,
        }
    data["added_tokens"] = [added[i] for i in sorted(added)]
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(data)), clean_up_tokenization_spaces=False, **special
    )


def gguf_metadata(path: Path) -> dict[str, Any]:
    """A GGUF file's key-value metadata. Our own reader: the `gguf` package builds an array per
    string and takes over half a minute on Gemma 4's 776k vocabulary strings; this takes one."""
    import numpy as np

    scalars = {
        0: "<B",
        1: "<b",
        2: "<H",
        3: "<h",
        4: "<I",
        5: "<i",
        6: "<f",
        7: "<?",
        10: "<Q",
        11: "<q",
        12: "<d",
    }
    arrays = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
              7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}  # fmt: skip
    data = memoryview(path.read_bytes())
    if bytes(data[:4]) != b"GGUF":
        raise ValueError(f"{path} is no GGUF file")
    count = struct.unpack_from("<Q", data, 16)[0]
    pos = 24

    def string(at: int) -> tuple[str, int]:
        n = int.from_bytes(data[at : at + 8], "little")
        return bytes(data[at + 8 : at + 8 + n]).decode("utf-8", errors="replace"), at + 8 + n

    def value(kind: int, at: int) -> tuple[Any, int]:
        if kind == 8:
            return string(at)
        if kind == 9:
            sub, n = struct.unpack_from("<IQ", data, at)
            at += 12
            if sub == 8:
                out = []
                for _ in range(n):
                    item, at = string(at)
                    out.append(item)
                return out, at
            items = np.frombuffer(data, dtype=arrays[sub], count=n, offset=at)
            return items.tolist(), at + items.nbytes
        return struct.unpack_from(scalars[kind], data, at)[0], at + struct.calcsize(scalars[kind])

    meta = {}
    for _ in range(count):
        key, pos = string(pos)
        kind = struct.unpack_from("<I", data, pos)[0]
        meta[key], pos = value(kind, pos + 4)
    return meta


def _gemma4_tokenizer():
    """Gemma 4's vocabulary from its GGUF: byte-fallback BPE over `▁`-marked spaces, its control and
    user-defined tokens (the turn and tool-call tags) special, one id each."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    meta = gguf_metadata(VOCAB / "ggml-vocab-gemma-4.gguf")
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    bpe = models.BPE(
        vocab={t: i for i, t in enumerate(tokens)}, merges=merges, byte_fallback=True, unk_token="<unk>"
    )
    backend = Tokenizer(bpe)
    backend.normalizer = normalizers.Replace(" ", "▁")
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    control, user_defined = 3, 4  # llama.cpp's token types
    backend.add_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, k in zip(tokens, types, strict=True)
            if k in (control, user_defined)
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=tokens[meta["tokenizer.ggml.bos_token_id"]],
        eos_token=tokens[meta["tokenizer.ggml.eos_token_id"]],
        unk_token="<unk>",
        pad_token=tokens[meta["tokenizer.ggml.padding_token_id"]],
        clean_up_tokenization_spaces=False,
    )


def _build(name: str):
    if name == "gemma-4":
        return _gemma4_tokenizer()
    if name == "qwen2" or name == "qwen35":
        base = _gguf_tokenizer(f"ggml-vocab-{name}.gguf")
        named = {QWEN_FIRST_ADDED + i: tok for i, tok in enumerate(QWEN_ADDED)}
        return _with_tokens(base, named, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    if name == "llama-bpe":
        from tokenizers import Regex, pre_tokenizers

        base = _gguf_tokenizer("ggml-vocab-llama-bpe.gguf")
        # Llama 3.1 names two of the reserved tokens
        named = {128008: ("<|eom_id|>", True), 128010: ("<|python_tag|>", True)}
        tok = _with_tokens(base, named, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
            ]
        )
        return tok
    raise ValueError(name)


def vocab_tokenizer(name: str, renamed: dict[int, tuple[str, bool]] | None = None):
    """The tokenizer of one real vocabulary (with `renamed` tokens at their ids), converted from
    its GGUF once and kept as a folder."""
    from transformers import AutoTokenizer

    require_templates()
    key = name + ("-" + "-".join(f"{i}" for i in sorted(renamed)) if renamed else "")
    target = FOLDER / "tokenizers" / key
    with FileLock(str(target) + ".lock"):
        if not (target / "tokenizer.json").is_file():
            tok = vocab_tokenizer(name) if renamed else _build(name)
            if renamed:
                tok = _with_tokens(tok, renamed, bos_token=tok.bos_token, eos_token=tok.eos_token)
            tmp = target.with_name(target.name + ".partial")
            tok.save_pretrained(tmp)
            tmp.rename(target)
    tok = AutoTokenizer.from_pretrained(target)
    tok.clean_up_tokenization_spaces = False
    return tok


@dataclass(frozen=True)
class Case:
    """One real template with the vocabulary it is tested on."""

    template: str  # file name without .jinja
    vocab: str  # qwen2 | qwen35 | llama-bpe
    specials: tuple[str, ...] = ()  # the family's special tokens (stand-in vocabularies)
    plain: tuple[str, ...] = ()  # its added tokens that are not special
    renamed: dict[int, tuple[str, bool]] = field(default_factory=dict)  # tokens at given ids
    bos: str | None = None
    eos: str | None = None
    generation_eos: tuple[str, ...] = ()  # generation_config.json's eos tokens
    answer_end: str | None = None  # the stop token of an answer where the template writes none (GLM)
    call_end: str | None = None  # likewise for a tool-call turn
    kwargs: dict[str, Any] = field(default_factory=dict)
    think_kwargs: dict[str, Any] | None = None  # the family thinks: the template variables for it
    real_vocab: bool = False

    @property
    def name(self) -> str:
        return self.template


# the special tokens of the families, as their tokenizers declare them
QWEN_EOS = ("<|im_end|>", "<|endoftext|>")
DEEPSEEK = (
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁outputs▁begin｜>",
    "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
)
GLM = ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
GLM_TAGS = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "<tool_response>",
    "</tool_response>",
)
MISTRAL = (
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[TOOL_CALLS]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[CALL_ID]",
    "[ARGS]",
    "[TOOL_CONTENT]",
)
KIMI = (
    "<|im_system|>",
    "<|im_user|>",
    "<|im_assistant|>",
    "<|im_middle|>",
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
)
HARMONY = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>")
GRANITE = ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>", "<|tool_call|>")
CHATML_ON_LLAMA = {128002: ("<|im_start|>", True), 128003: ("<|im_end|>", True)}
HERMES_ON_LLAMA = {
    **CHATML_ON_LLAMA,
    128004: ("<tool_call>", False),
    128005: ("</tool_call>", False),
    128011: ("<tool_response>", False),
    128012: ("</tool_response>", False),
}


_BASES: dict[tuple, Any] = {}


_CASES: dict[str, Any] = {}


def case_tokenizer(case: Case):
    """The case's vocabulary with its family's tokens, its template and its bos/eos; made once per
    test process (the template tests only read it)."""
    if case.name not in _CASES:
        _CASES[case.name] = _case_tokenizer(case)
    return _CASES[case.name]


def _case_tokenizer(case: Case):
    key = (case.vocab, tuple(sorted(case.renamed)))
    if key not in _BASES:
        _BASES[key] = vocab_tokenizer(case.vocab, case.renamed or None)
    tok = copy.deepcopy(_BASES[key])
    if case.specials:
        tok.add_special_tokens({"additional_special_tokens": list(case.specials)})
    if case.plain:
        tok.add_tokens(list(case.plain))
    for key, value in (("bos_token", case.bos), ("eos_token", case.eos)):
        if value:
            setattr(tok, key, value)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.chat_template = template(case.template)
    return tok


def write_model_files(case: Case, tokenizer, folder: Path) -> None:
    """What a model folder holds besides weights: the tokenizer (with its template) and
    generation_config.json's eos ids, as the family's models ship them."""
    tokenizer.save_pretrained(folder)
    eos = [tokenizer.convert_tokens_to_ids(t) for t in case.generation_eos]
    config = {"eos_token_id": eos, "pad_token_id": tokenizer.pad_token_id}
    if tokenizer.bos_token_id is not None:
        config["bos_token_id"] = tokenizer.bos_token_id
    (folder / "generation_config.json").write_text(json.dumps(config))
