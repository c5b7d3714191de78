"""Chat-template families: what a model's template says about its tool calls and turn ends.

A family is recognised by text only its chat template holds (its tool-call tokens or tags) and
gives what rendering alone cannot tell: the tool-call parser, the tokens that end an assistant
turn beyond the one the template writes after it, the tokens that occur inside one turn (never
stop ids), the form of tool-call ids the template demands, and the tool prompt to write when the
template ignores `tools=`. Everything else (tool support, a system role, tool results carried)
is probed by rendering (`rollout/tokens/templates/renderer.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from aworld_train.rollout.tokens.calls.registry import ParsedCall

_ALPHANUMERIC_9 = re.compile(r"^[A-Za-z0-9]{9}$")
_KIMI_ID = re.compile(r"^functions\.[^:\s]+:\d+$")


@dataclass(frozen=True)
class ChatFamily:
    name: str
    parser: str
    markers: tuple[str, ...] = ()  # all of them in the template: this family
    turn_ends: tuple[str, ...] = ()  # tokens that end a turn, beyond the one the template writes
    in_turn: tuple[str, ...] = ()  # tokens that occur inside one assistant turn: never a stop id
    # template text that closes an assistant turn in history and that the sampled turn end stands
    # for (gpt-oss writes <|end|> where the model sampled <|return|>)
    closers: tuple[str, ...] = ()
    call_ids: str = "plain"  # plain: call_T_I | alphanumeric9 (Mistral) | kimi: functions.NAME:N
    tool_prompt: str = "hermes"  # the tool block for templates that ignore tools=: hermes | deepseek
    examples: tuple[str, ...] = field(default=(), compare=False)  # template files of the family

    def matches(self, template: str) -> bool:
        return bool(self.markers) and all(m in template for m in self.markers)

    def call_id(self, call: ParsedCall, turn: int, index: int, used: set[str] | Any) -> str:
        """The id AWorld gets for a call: the model's own where the format has one and it is new in
        the episode, else one in the form the template demands."""
        if call.id and call.id not in used and self.valid_id(call.id):
            return call.id
        if self.call_ids == "alphanumeric9":
            return f"c{turn:04d}{index:04d}"[-9:].rjust(9, "c")
        if self.call_ids == "kimi":
            return f"functions.{call.name}:{len(used)}"
        return f"call_{turn}_{index}"

    def valid_id(self, call_id: str) -> bool:
        if self.call_ids == "alphanumeric9":
            return bool(_ALPHANUMERIC_9.match(call_id))
        if self.call_ids == "kimi":
            return bool(_KIMI_ID.match(call_id))
        return True


FAMILIES: tuple[ChatFamily, ...] = (
    ChatFamily(
        "gpt-oss",
        "harmony",
        markers=("<|channel|>", "<|call|>"),
        turn_ends=("<|return|>", "<|call|>"),
        in_turn=("<|end|>", "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"),
        closers=("<|end|>",),
        examples=("openai-gpt-oss-120b",),
    ),
    ChatFamily(
        "kimi-k2",
        "kimi_k2",
        markers=("<|tool_calls_section_begin|>",),
        turn_ends=("<|im_end|>",),
        call_ids="kimi",
        examples=("moonshotai-Kimi-K2", "Kimi-K2-Instruct"),
    ),
    ChatFamily(
        "deepseek",
        "deepseek",
        markers=("<｜tool▁calls▁begin｜>",),
        turn_ends=("<｜end▁of▁sentence｜>",),
        tool_prompt="deepseek",
        examples=("deepseek-ai-DeepSeek-V3.1",),
    ),
    ChatFamily(
        "glm-4.5",
        "glm45",
        markers=("<arg_key>",),
        # GLM writes no end-of-turn token: the model ends a turn with the next role token
        turn_ends=("<|user|>", "<|observation|>", "<|endoftext|>"),
        examples=("GLM-4.6", "GLM-4.7-Flash"),
    ),
    ChatFamily(
        "qwen3-coder",
        "qwen3_coder",
        markers=("<function=", "<parameter="),
        turn_ends=("<|im_end|>", "<|endoftext|>"),
        examples=("Qwen3-Coder", "Qwen3.5-4B"),
    ),
    ChatFamily(
        "mistral",
        "mistral",
        markers=("[TOOL_CALLS]",),
        turn_ends=("</s>",),
        call_ids="alphanumeric9",
        examples=("mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506"),
    ),
    ChatFamily(
        "granite-3",
        "granite",
        markers=("<|tool_call|>",),
        turn_ends=("<|end_of_text|>",),
        examples=("ibm-granite-granite-3.3-2B-Instruct",),
    ),
    ChatFamily(
        # LFM2's templates list the tools but write no assistant call (LFM2.5-8B's writes them):
        # its models call as a Python list between <|tool_call_start|> and <|tool_call_end|>
        "lfm2",
        "pythonic",
        markers=("List of tools: ",),
        turn_ends=("<|im_end|>",),
        examples=("LFM2-8B-A1B", "LFM2.5-Instruct", "LFM2.5-8B-A1B"),
    ),
    ChatFamily(
        "llama-3",
        "llama3_json",
        markers=("<|eot_id|>", "ipython"),
        turn_ends=("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"),
        examples=("meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct"),
    ),
    ChatFamily(
        "hermes",
        "hermes",
        markers=("<tool_call>",),
        examples=(
            "Qwen-Qwen2.5-7B-Instruct",
            "Qwen-Qwen3-0.6B",
            "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
        ),
    ),
)
# any other template: hermes calls, our tool block where it ignores tools=, the common turn ends
GENERIC = ChatFamily("generic", "hermes", turn_ends=("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"))


def detect_family(template: str | None) -> ChatFamily:
    """The family of a chat template's text (GENERIC when none matches)."""
    for family in FAMILIES:
        if template and family.matches(template):
            return family
    return GENERIC
