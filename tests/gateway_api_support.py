"""What the tests of the gateway's APIs share: the calculator's tool as each API declares it, and an
episode that records each call the gateway makes of it (the `recorded_session` fixture of
tests/conftest.py opens a gateway session on one). Used by tests/test_gateway_api*.py,
tests/test_gateway_refusals.py and tests/test_gateway_unoffered_tools.py."""

from __future__ import annotations

from aworld_train.rollout.episodes.driver import Reply

SCHEMA = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}
RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "calculate",
        "description": "Evaluate an arithmetic expression",
        "parameters": SCHEMA,
        "strict": True,
    }
]
ANTHROPIC_TOOLS = [
    {"name": "calculate", "description": "Evaluate an arithmetic expression", "input_schema": SCHEMA}
]
CHAT_TOOLS = [{"type": "function", "function": {"name": "calculate", "parameters": SCHEMA}}]


class Recording:
    """An episode that answers every call with `reply` and keeps each call's messages, tools and
    options; `ended` is what its `ended()` says."""

    def __init__(self, reply: Reply | None = None, ended: tuple[str, str | None] | None = None) -> None:
        self.reply = reply or Reply(id="r", content="ok", usage={"prompt_tokens": 3, "completion_tokens": 1})
        self.calls: list[tuple] = []
        self.end = ended

    def check_call(self, agent="", messages=None, tools=None, prompt=None, options=None) -> None:
        pass

    def ended(self):
        return self.end

    async def complete(self, messages, tools, agent="", options=None) -> Reply:
        self.calls.append((messages, tools, options))
        return self.reply
