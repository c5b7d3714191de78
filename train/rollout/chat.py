"""Chat-template rendering for the ledger: whole prompts, and the template text that
follows an assistant turn (the "delta") without re-rendering what came before.

The delta is rendered against a fixed stand-in conversation, so the ids already
in the ledger, including every token the policy sampled, are never re-tokenised.
"""

from __future__ import annotations

import json
from typing import Any

Message = dict[str, Any]

_STAND_IN = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
    {"role": "assistant", "content": "ASSISTANT_STAND_IN"},
]


def content_text(content: Any) -> str:
    """OpenAI content (None, str, or a list of parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text", "")))
            else:
                parts.append(str(part))
        return "".join(parts)
    return str(content)


def tool_call_text(name: str, arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    return (
        "<tool_call>\n"
        + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        + "\n</tool_call>"
    )


def _example_value(schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return "..."


def tool_block(tools: list[dict[str, Any]]) -> str:
    """The hermes-style tool section we add to the system turn for templates that ignore `tools=`."""
    specs = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    first = tools[0].get("function", tools[0])
    params = first.get("parameters", {}) or {}
    props = params.get("properties", {}) or {}
    required = params.get("required", list(props))
    example_args = {k: _example_value(props.get(k, {})) for k in required}
    example = tool_call_text(first.get("name", "tool"), example_args)
    return (
        "\n\n# Tools\n\nYou can call these functions. Their JSON signatures:\n<tools>\n"
        f"{specs}\n</tools>\n\n"
        "To call one, reply with a JSON object inside <tool_call></tool_call> tags and nothing after it, "
        f"for example:\n{example}\n"
        "The result comes back inside <tool_response></tool_response> tags. "
        "When you know the answer, reply in plain text without a tool call."
    )


class ChatRenderer:
    """Renders messages to ids with a tokenizer's chat template.

    When the template ignores `tools=`, the tool block goes into the system turn,
    assistant tool calls are written as hermes `<tool_call>` text, and tool results
    are wrapped in `<tool_response>` tags.
    """

    def __init__(self, tokenizer, chat_template: str | None = None, tool_block: str = "auto") -> None:
        if tool_block not in ("auto", "never"):
            raise ValueError(f"tool_block must be 'auto' or 'never', not {tool_block!r}")
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.supports_tools = self._detect_tool_support()
        # 'never': the agent's own prompt (e.g. few-shot turns) shows the tools instead
        self.add_tool_block = tool_block == "auto" and not self.supports_tools
        self._close_text = self._assistant_close()

    # -- template probing -------------------------------------------------
    def _apply(self, messages: list[Message], tools=None, add_generation_prompt=False) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            chat_template=self.chat_template,
        )

    def _detect_tool_support(self) -> bool:
        probe = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
        tool = {
            "type": "function",
            "function": {"name": "zz_probe_tool", "description": "d", "parameters": {}},
        }
        try:
            return "zz_probe_tool" in self._apply(probe, tools=[tool])
        except Exception:
            return False

    def _assistant_close(self) -> str:
        """Template text between an assistant message's content and the next message."""
        text = self._apply(self._prepare(_STAND_IN))
        marker = "ASSISTANT_STAND_IN"
        return text[text.rindex(marker) + len(marker) :]

    # -- message preparation ----------------------------------------------
    def _prepare(self, messages: list[Message], tools: list[dict] | None = None) -> list[Message]:
        out: list[Message] = []
        for msg in messages:
            role = msg.get("role")
            item: Message = {"role": role, "content": content_text(msg.get("content"))}
            if role == "assistant" and msg.get("tool_calls"):
                calls = msg["tool_calls"]
                if self.supports_tools:
                    item["tool_calls"] = [_with_dict_arguments(c) for c in calls]
                else:
                    text = "\n".join(
                        tool_call_text(c["function"]["name"], c["function"].get("arguments")) for c in calls
                    )
                    item["content"] = (item["content"] + "\n" if item["content"] else "") + text
            if role == "tool":
                if msg.get("tool_call_id"):
                    item["tool_call_id"] = msg["tool_call_id"]
                if msg.get("name"):
                    item["name"] = msg["name"]
                if not self.supports_tools:
                    item["content"] = f"<tool_response>\n{item['content']}\n</tool_response>"
            out.append(item)
        if tools and self.add_tool_block:
            block = tool_block(tools)
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "content": out[0]["content"] + block}
            else:
                out.insert(0, {"role": "system", "content": block.lstrip()})
        return out

    # -- rendering ----------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def render_prompt(
        self, messages: list[Message], tools: list[dict] | None, few_shot: list[Message] | None = None
    ) -> list[int]:
        """A whole conversation, ending with the generation prompt: the start of a segment.

        `few_shot` example turns go right after the system message; they are prompt, never loss.
        """
        if few_shot:
            at = 1 if messages and messages[0].get("role") == "system" else 0
            messages = [*messages[:at], *few_shot, *messages[at:]]
        prepared = self._prepare(messages, tools)
        text = self._apply(prepared, tools=tools if self.supports_tools else None, add_generation_prompt=True)
        return self.encode(text)

    def render_delta(self, new_messages: list[Message], ended_with_stop: bool, stop_text: str) -> list[int]:
        """Ids that follow a sampled assistant turn: the rest of its closing text, the
        new messages, and the generation prompt."""
        base = self._prepare(_STAND_IN)
        before = self._apply(base)
        after = self._apply(base + self._prepare(new_messages), add_generation_prompt=True)
        if not after.startswith(before):
            raise ValueError("chat template renders earlier turns differently once later turns are added")
        close = self._close_text
        if ended_with_stop and stop_text and close.startswith(stop_text):
            close = close[len(stop_text) :]
        return self.encode(close + after[len(before) :])


def _with_dict_arguments(call: dict[str, Any]) -> dict[str, Any]:
    fn = dict(call.get("function", {}))
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            fn["arguments"] = json.loads(args)
        except json.JSONDecodeError:
            pass
    return {"type": "function", "id": call.get("id"), "function": fn}
