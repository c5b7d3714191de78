"""The ids that end an assistant turn, read from the model folder, the tokenizer and the chat
template (`turn_ends.py`): what every policy stops on and the ledger closes a turn with."""

from __future__ import annotations

import json
from pathlib import Path


def stop_token_ids(tokenizer, chat_template: str | None = None) -> list[int]:
    """Ids that end an assistant turn, never a token that occurs inside one.

    The model folder's `generation_config.json` eos ids and the tokenizer's eos, the tokens the
    chat template writes to end an answer turn and a call turn (`rollout/tokens/turns/ends.py`), and the
    other turn ends of the template's family (GLM ends a turn with the next role token, gpt-oss
    with <|return|> or <|call|>); less every token the template writes inside a turn and the
    family's in-turn tokens (<|end|> closes each gpt-oss reasoning message).
    """
    from aworld_train.rollout.tokens.templates.families import GENERIC, detect_family

    template = chat_template or getattr(tokenizer, "chat_template", None)
    family = detect_family(template if isinstance(template, str) else None)
    ends = template_turn_ends(tokenizer, chat_template)
    ids = set(generation_eos_ids(tokenizer))
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    markers = list(ends.written)
    if family is not GENERIC:
        markers.extend(family.turn_ends)
    elif not ends.written:  # nothing read from the template: the common turn ends
        markers.extend(GENERIC.turn_ends)
    for marker in markers:
        tid = _token_id(tokenizer, marker)
        if tid is not None:
            ids.add(tid)
    ids -= {_token_id(tokenizer, token) for token in (*family.in_turn, *ends.in_turn)}
    return sorted(ids)


def template_turn_ends(tokenizer, chat_template: str | None = None):
    """The chat template's turn ends and in-turn tokens (`rollout/tokens/turns/ends.py`), read once per
    template and vocabulary."""
    from aworld_train.rollout.tokens.templates.renderer import ChatRenderer
    from aworld_train.rollout.tokens.turns.ends import TurnEnds, turn_ends

    template = chat_template or getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):
        return TurnEnds((), ())
    # not len(tokenizer): a fast tokenizer counts its vocabulary anew each time (70 ms for Qwen's)
    key = (
        template,
        type(tokenizer).__name__,
        tokenizer.name_or_path,
        tuple(sorted(map(str, tokenizer.all_special_tokens))),
    )
    if key not in _TURN_ENDS:
        _TURN_ENDS[key] = turn_ends(ChatRenderer(tokenizer, chat_template))
    return _TURN_ENDS[key]


_TURN_ENDS: dict[tuple, object] = {}


def _token_id(tokenizer, token: str) -> int | None:
    tid = tokenizer.convert_tokens_to_ids(token)
    if isinstance(tid, int) and tid >= 0 and tid != tokenizer.unk_token_id:
        return tid
    return None


def generation_eos_ids(tokenizer) -> list[int]:
    """eos_token_id of the tokenizer's model folder's generation_config.json (none: [])."""
    folder = Path(str(getattr(tokenizer, "name_or_path", "") or ""))
    path = folder / "generation_config.json"
    if not path.is_file():
        return []
    eos = json.loads(path.read_text()).get("eos_token_id")
    if eos is None:
        return []
    return [int(i) for i in (eos if isinstance(eos, list) else [eos])]
