"""`harmony`: gpt-oss's harmony messages. After the generation prompt `<|start|>assistant` the
model writes messages `[to=RECIPIENT]<|channel|>CHANNEL [to=RECIPIENT] [<|constrain|>]FORMAT<|message|>BODY`,
each closed by `<|end|>` (and the next opened by `<|start|>assistant`), the last by `<|call|>`
(a tool call: recipient `functions.NAME`, JSON arguments) or `<|return|>` (the `final` answer).

Our own small parser rather than the `openai-harmony` library: the library parses o200k token
ids and loads that vocabulary by download on first use; the ledger decodes whatever tokenizer the
model folder has to text, and a run may have no network.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aworld_train.rollout.tokens.calls.parsers.base import ParsedCall, ParseResult, json_arguments, register

START, CHANNEL, CONSTRAIN, MESSAGE = "<|start|>", "<|channel|>", "<|constrain|>", "<|message|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
_CLOSE = re.compile(r"<\|end\|>|<\|call\|>|<\|return\|>")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


def _messages(text: str) -> list[tuple[str, str]]:
    """(header, body) of each message in one assistant turn."""
    out = []
    for part in _CLOSE.split(text):
        if MESSAGE not in part:
            if part.strip() and part.strip() not in ("assistant", START + "assistant"):
                out.append(("", part))
            continue
        header, body = part.split(MESSAGE, 1)
        header = header.replace(START, " ").replace(CONSTRAIN, " ")
        out.append((header, body))
    return out


def _channel(header: str) -> str:
    words = header.split(CHANNEL, 1)[1].split() if CHANNEL in header else []
    return words[0] if words else ""


@register("harmony")
class HarmonyParser:
    name = "harmony"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        if MESSAGE not in text:
            return ParseResult(content=text.strip())
        final, other = [], []
        result = ParseResult(content="")
        for header, body in _messages(text):
            recipient = _RECIPIENT.search(header)
            channel = _channel(header)
            if recipient and recipient.group(1).startswith("functions."):
                name = recipient.group(1)[len("functions.") :]
                try:
                    result.calls.append(ParsedCall(name, json_arguments(body.strip())))
                except (ValueError, json.JSONDecodeError) as exc:
                    result.errors.append(f"{exc}: {body[:200]!r}")
            elif channel == "final":
                final.append(body)
            elif channel != "analysis":
                other.append(body)
        # the answer is the final channel; a turn without one shows what else it wrote
        result.content = "\n".join(final or ([] if result.calls else other)).strip()
        return result

    def format(self, content: str, calls: list[ParsedCall]) -> str:
        if not calls:
            return f"{CHANNEL}final{MESSAGE}{content}"
        call = calls[0]  # one call per turn: the turn ends at <|call|>
        text = f"{CHANNEL}commentary to=functions.{call.name} {CONSTRAIN}json{MESSAGE}{json.dumps(call.arguments)}"
        return f"{CHANNEL}analysis{MESSAGE}{content}{END}{START}assistant{text}" if content else text
