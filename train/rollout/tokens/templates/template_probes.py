"""What a chat template does, learned by rendering probes: whether it has a system role, shows the
tools it is given, writes assistant tool calls, and carries a tool result. `ChatRenderer` runs them
once, when it is made (its `_apply` renders, its `_prepare` readies messages)."""

from __future__ import annotations

from typing import Any

from aworld_train.rollout.tokens.calls.registry import ParsedCall

Message = dict[str, Any]

PROBE_TOOL = {
    "type": "function",
    "function": {"name": "zz_probe_tool", "description": "d", "parameters": {}},
}
# a tool as agents send them, typed parameters and all: a template that reads
# `parameters.properties` raises on the bare probe above, which says nothing of its tool support
TYPED_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "zz_probe_tool",
        "description": "Look a city up",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "its name"},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        },
    },
}
PROBE_RESULT = "ZZ_PROBE_RESULT"


class TemplateProbes:
    """The probes, for a renderer that has `_apply`, `_prepare`, `family`, `supports_tools` and
    `_probe_tools` (the tool the template was shown)."""

    def _probe_system_role(self) -> bool:
        try:
            text = self._apply(
                [{"role": "system", "content": "zz_probe_system"}, {"role": "user", "content": "hi"}]
            )
        except Exception:
            return False
        return "zz_probe_system" in text

    def _detect_tool_support(self) -> bool:
        """Does the template show the tools it is given? Asked with a typed tool and a bare one
        (templates raise on one or the other); only a template that shows neither ignores tools."""
        probe = self._prepare([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}])
        for tool in (TYPED_PROBE_TOOL, PROBE_TOOL):
            try:
                if "zz_probe_tool" in self._apply(probe, tools=[tool]):
                    self._probe_tools = [tool]  # what the later probes give the template
                    return True
            except Exception:
                continue
        return False

    def _probe_call(self) -> Message:
        call_id = self.family.call_id(ParsedCall("zz_probe_call", {}), 0, 0, set())
        call = {"id": call_id, "type": "function", "function": {"name": "zz_probe_call", "arguments": "{}"}}
        return {"role": "assistant", "content": "", "tool_calls": [call]}

    def _probe_renders_calls(self) -> bool:
        probe = self._prepare([{"role": "user", "content": "hi"}, self._probe_call()])
        try:
            return "zz_probe_call" in self._apply(
                probe, tools=self._probe_tools if self.supports_tools else None
            )
        except Exception:
            return False

    def _probe_tool_results(self) -> str | None:
        call = self._probe_call()
        result = {
            "role": "tool",
            "content": PROBE_RESULT,
            "tool_call_id": call["tool_calls"][0]["id"],
            "name": "zz_probe_call",
        }
        messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}, call, result]
        try:
            text = self._apply(
                self._prepare(messages),
                tools=self._probe_tools if self.supports_tools else None,
                add_generation_prompt=True,
            )
        except Exception as exc:
            return f"the chat template fails on a tool result ({type(exc).__name__}: {exc})"
        if PROBE_RESULT not in text:
            return "the chat template drops tool results (it renders no 'tool' message)"
        return None
