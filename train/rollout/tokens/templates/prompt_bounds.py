"""How many tokens a text holds at the least, without tokenizing it.

No token of a vocabulary stands for more characters than its longest entry spells (a byte-level
vocabulary spells each byte as one character; a SentencePiece one its text, `▁` for a space), so a
text of C characters is at least C / longest tokens. An episode refuses a call whose messages hold
more characters than the run's token budget could take at that rate before tokenizing it: a
megabyte-long message would otherwise take seconds to tokenize, only to be cut.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

from aworld_train.rollout.tokens.templates.renderer import content_text

_LONGEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def longest_token_chars(tokenizer: Any) -> int:
    """Characters of the vocabulary's longest entry (special and added tokens included)."""
    if tokenizer not in _LONGEST:
        _LONGEST[tokenizer] = max(len(entry) for entry in tokenizer.get_vocab())
    return _LONGEST[tokenizer]


def least_tokens(chars: int, tokenizer: Any) -> int:
    return math.ceil(chars / longest_token_chars(tokenizer))


def message_chars(messages: list[dict[str, Any]]) -> int:
    """Characters of what a chat template writes of `messages`: their text and tool calls."""
    total = 0
    for message in messages:
        total += len(content_text(message.get("content")))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            arguments = function.get("arguments")
            total += len(str(function.get("name") or "")) + len(
                arguments if isinstance(arguments, str) else str(arguments or "")
            )
    return total
