"""Where an agent rewrote its history, and what the rewrite did, for the episode view.

The ledger starts a new segment where an agent's call stops extending its history (a summary, a
trimmed or compacted history, a changed earlier answer). What the agent's history held before the
rewrite is its previous segment, prompt and response; what it holds after is the new segment's
prompt. The two are compared token by token: the spans kept, the spans the rewrite dropped and the
text that replaced them. Text an earlier turn of the same agent sampled (a summary the policy
wrote) is named where it reappears in what was added: it trained there, as the policy's own answer.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

TEXT_CHARS = 4000  # of a dropped or added span's text shown; the token counts are whole
_MATCHED = 4_000_000  # tokens before x after the common ends above which spans are not aligned
_SPECIAL = re.compile(r"<\|[^|>]*\|>|</?s>")  # a template's special tokens, left out of sampled text
_MIN_SAMPLED_CHARS = 8  # shorter sampled answers ("ok") are not looked for in added text
# inside a rewritten stretch, a run of fewer equal tokens is a coincidence (a newline, "The result
# of"), not history the rewrite kept: it joins the span around it so that spans read whole
_MIN_KEPT_RUN = 16


def _text(pieces: list[str] | None, start: int, end: int) -> str | None:
    if pieces is None:
        return None
    text = "".join(pieces[start:end])
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS] + " …"


def _common_ends(before: list[int], after: list[int]) -> tuple[int, int]:
    """The lengths of the longest common prefix and (not overlapping it) suffix."""
    prefix = 0
    while prefix < min(len(before), len(after)) and before[prefix] == after[prefix]:
        prefix += 1
    suffix = 0
    while (
        suffix < min(len(before), len(after)) - prefix
        and before[len(before) - 1 - suffix] == after[len(after) - 1 - suffix]
    ):
        suffix += 1
    return prefix, suffix


def _opcodes(before: list[int], after: list[int]) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes of `before` into `after`; beyond `_MATCHED`, the middle between the common
    ends is one replacement."""
    prefix, suffix = _common_ends(before, after)
    mid_before, mid_after = before[prefix : len(before) - suffix], after[prefix : len(after) - suffix]
    if len(mid_before) * len(mid_after) > _MATCHED:
        middle = [("replace", 0, len(mid_before), 0, len(mid_after))]
    else:
        middle = difflib.SequenceMatcher(a=mid_before, b=mid_after, autojunk=False).get_opcodes()
    ops = [("equal", 0, prefix, 0, prefix)] if prefix else []
    ops += [(op, a1 + prefix, a2 + prefix, b1 + prefix, b2 + prefix) for op, a1, a2, b1, b2 in middle]
    if suffix:
        ops.append(("equal", len(before) - suffix, len(before), len(after) - suffix, len(after)))
    return _coalesce(ops)


def _coalesce(ops: list[tuple[str, int, int, int, int]]) -> list[tuple[str, int, int, int, int]]:
    """Short equal runs between changes folded into one change with their neighbours."""
    merged: list[tuple[str, int, int, int, int]] = []
    for i, op in enumerate(ops):
        inner = 0 < i < len(ops) - 1
        if op[0] == "equal" and (not inner or op[2] - op[1] >= _MIN_KEPT_RUN):
            merged.append(op)
            continue
        if merged and merged[-1][0] != "equal":
            _, a1, _, b1, _ = merged.pop()
            merged.append(("replace", a1, op[2], b1, op[4]))
        else:
            merged.append(("replace", *op[1:]))
    return merged


def _at_line_starts(
    ops: list[tuple[str, int, int, int, int]], pieces: list[str] | None
) -> list[tuple[str, int, int, int, int]]:
    """Each change widened back to the start of its line, so that a span reads as whole messages
    rather than from the middle of one (an equal run maps a-tokens onto b-tokens one to one, so
    both sides move back by the same count)."""
    if pieces is None:
        return ops
    ops = list(ops)
    for i in range(1, len(ops)):
        op, a1, a2, b1, b2 = ops[i]
        prev, pa1, pa2, pb1, pb2 = ops[i - 1]
        if op == "equal" or prev != "equal":
            continue
        back = 0
        while pa2 - back > pa1 and "\n" not in pieces[pa2 - back - 1]:
            back += 1
        ops[i - 1] = (prev, pa1, pa2 - back, pb1, pb2 - back)
        ops[i] = (op, a1 - back, a2, b1 - back, b2)
    return _coalesce([op for op in ops if op[2] > op[1] or op[4] > op[3]])


def sampled_texts(segment: dict[str, Any], pieces: list[str] | None) -> list[str]:
    """The text each turn of a segment sampled (its mask-1 tokens, special tokens left out)."""
    if pieces is None:
        return []
    prompt, mask = len(segment["prompt_ids"]), segment["response_mask"]
    bounds = [*segment["turn_starts"], prompt + len(mask)]
    texts = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        text = "".join(pieces[i] for i in range(max(start, prompt), end) if mask[i - prompt])
        texts.append(_SPECIAL.sub("", text).strip())
    return texts


def describe(
    before: dict[str, Any],
    after: dict[str, Any],
    pieces: tuple[list[str] | None, list[str] | None],
    earlier: list[tuple[int, list[str]]],
) -> dict[str, Any]:
    """The rewrite between an agent's segment `before` (its history: prompt and response) and its
    next segment `after` (the new prompt): token counts kept, dropped and added, each dropped and
    added span with its text (None without a tokenizer), and where added text is what an earlier
    turn sampled (`earlier`: each earlier segment's index and its turns' sampled texts)."""
    old = before["prompt_ids"] + before["response_ids"]
    new = after["prompt_ids"]
    old_pieces, new_pieces = pieces
    dropped, added, kept = [], [], 0
    for op, a1, a2, b1, b2 in _at_line_starts(_opcodes(old, new), old_pieces):
        if op == "equal":
            kept += a2 - a1
            continue
        if a2 > a1:
            dropped.append({"at": a1, "tokens": a2 - a1, "text": _text(old_pieces, a1, a2)})
        if b2 > b1:
            whole = "".join(new_pieces[b1:b2]) if new_pieces is not None else ""
            added.append(
                {
                    "at": b1,
                    "tokens": b2 - b1,
                    "text": _text(new_pieces, b1, b2),
                    "sampled_in": _sampled_in(whole, earlier),
                }
            )
    return {
        "kept": kept,
        "dropped_tokens": sum(s["tokens"] for s in dropped),
        "added_tokens": sum(s["tokens"] for s in added),
        "dropped": dropped,
        "added": added,
    }


def _sampled_in(text: str, earlier: list[tuple[int, list[str]]]) -> list[dict[str, int]]:
    """The earlier turns whose sampled text the added `text` holds: {segment, turn} each."""
    return [
        {"segment": index, "turn": turn}
        for index, texts in earlier
        for turn, sampled in enumerate(texts)
        if len(sampled) >= _MIN_SAMPLED_CHARS and sampled in text
    ]
