"""ARCHITECTURE.md invariant 1 on three chat templates: the ledger holds exactly what the
policy sampled (mask 1, with its logprobs), every prompt is the ledger prefix,
and a history rewrite starts a new segment instead of splicing."""

from __future__ import annotations

import json

import pytest

from aworld_train.rollout.policies.client import Generation
from aworld_train.rollout.tokens.ledger import TokenLedger
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer

# A Qwen2.5-style template written for these tests: tools listed in the system
# turn, tool calls as <tool_call> JSON, consecutive tool results grouped into one
# user turn inside <tool_response> tags.
QWEN_STYLE = (
    "{%- if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% else %}You are helpful.{% endif %}\n\n"
    "# Tools\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools><|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}"
    "{%- elif m.role == 'user' or (m.role == 'assistant' and not m.tool_calls) %}"
    "\n<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>"
    "{%- elif m.role == 'assistant' %}"
    "\n<|im_start|>assistant\n{% if m.content %}{{ m.content }}\n{% endif %}"
    "{%- for c in m.tool_calls %}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>'
    "{%- endfor %}<|im_end|>"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}\n<|im_start|>user{% endif %}"
    "\n<tool_response>\n{{ m.content }}\n</tool_response>"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>{% endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}\n<|im_start|>assistant\n{% endif %}"
)

# ChatML that drops the reasoning of earlier assistant turns, as reasoning models' templates do.
DROPS_REASONING = (
    "{%- for m in messages %}"
    "{%- set content = m.content %}"
    "{%- if m.role == 'assistant' and not loop.last and '</think>' in content %}"
    "{%- set content = content.split('</think>')[-1].lstrip() %}"
    "{%- endif %}"
    "<|im_start|>{{ m.role }}\n{{ content }}<|im_end|>\n"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate arithmetic",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
CALL_TEXT = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "37 * 48"}}\n</tool_call>'


def sampled(tokenizer, text: str, stop: int | None, base: float) -> Generation:
    ids = tokenizer.encode(text, add_special_tokens=False) + ([stop] if stop is not None else [])
    return Generation(
        ids, [base - 0.01 * i for i in range(len(ids))], "stop" if stop is not None else "length"
    )


def aworld_echo(call_args: str = '{"expression":"37 * 48"}') -> dict:
    """The assistant turn as AWorld sends it back: list content, compact argument JSON."""
    return {
        "role": "assistant",
        "content": [],
        "tool_calls": [
            {"id": "call_0_0", "type": "function", "function": {"name": "calculate", "arguments": call_args}}
        ],
    }


def run_conversation(tokenizer, stop_ids, im_end, template, think: bool = False):
    renderer = ChatRenderer(tokenizer, chat_template=template, tool_block="auto")
    ledger = TokenLedger(renderer, stop_ids)
    prompts, gens = [], []
    messages = [
        {"role": "system", "content": "You are a calculator."},
        {"role": "user", "content": "What is 37 * 48?"},
    ]
    prompts.append(ledger.prompt(messages, TOOLS))
    first_text = ("<think>multiply them</think>\n" if think else "") + CALL_TEXT
    gens.append(sampled(tokenizer, first_text, im_end, -0.1))
    ledger.record(gens[-1], {"role": "assistant", "content": "", "tool_calls": aworld_echo()["tool_calls"]})
    messages = messages + [
        aworld_echo(),
        {"role": "tool", "content": [{"type": "text", "text": "1776"}], "tool_call_id": "call_0_0"},
    ]
    prompts.append(ledger.prompt(messages, TOOLS))
    gens.append(sampled(tokenizer, "The answer is 1776.", im_end, -0.2))
    ledger.record(gens[-1], {"role": "assistant", "content": "The answer is 1776."})
    # a second user turn of the same task, in the same ledger
    messages = messages + [
        {"role": "assistant", "content": "The answer is 1776."},
        {"role": "user", "content": "And plus 4?"},
    ]
    prompts.append(ledger.prompt(messages, TOOLS))
    gens.append(sampled(tokenizer, "It is 1780.", None, -0.3))  # cut by max_new_tokens: no stop token
    ledger.record(gens[-1], {"role": "assistant", "content": "It is 1780."})
    return renderer, ledger, prompts, gens, messages


def full_conversation(messages):
    return messages + [{"role": "assistant", "content": "It is 1780."}]


@pytest.mark.parametrize(
    "name,template",
    [("smollm2-chatml", None), ("qwen-style-tools", QWEN_STYLE), ("drops-reasoning", DROPS_REASONING)],
)
def test_mask_one_tokens_are_exactly_the_sampled_tokens(tokenizer, stop_ids, im_end, name, template):
    _, ledger, prompts, gens, _ = run_conversation(
        tokenizer, stop_ids, im_end, template, think=name == "drops-reasoning"
    )
    assert len(ledger.segments) == 1
    seg = ledger.segments[0]
    assert len(seg.response_ids) == len(seg.response_mask) == len(seg.response_logprobs)
    picked = [t for t, m in zip(seg.response_ids, seg.response_mask, strict=True) if m]
    assert picked == [t for g in gens for t in g.token_ids]
    picked_lp = [lp for lp, m in zip(seg.response_logprobs, seg.response_mask, strict=True) if m]
    assert picked_lp == [lp for g in gens for lp in g.logprobs]
    assert all(lp == 0.0 for lp, m in zip(seg.response_logprobs, seg.response_mask, strict=True) if not m)
    # prompt k is the ledger prefix, and each generation sits right after its prompt
    full = seg.ids
    for k, (prompt, gen) in enumerate(zip(prompts, gens, strict=True)):
        assert full[: len(prompt)] == prompt, f"prompt {k} is not a prefix of the ledger"
        assert full[len(prompt) : len(prompt) + len(gen.token_ids)] == gen.token_ids
        assert seg.turn_starts[k] == len(prompt)


@pytest.mark.parametrize("template", [None, QWEN_STYLE])
def test_ledger_text_equals_the_template_rendering(tokenizer, stop_ids, im_end, template):
    """Where the model sampled what the template would write, the ledger decodes to the
    template's own rendering of the whole conversation: the deltas are exact."""
    renderer, ledger, _, gens, messages = run_conversation(tokenizer, stop_ids, im_end, template)
    rendered = renderer.render_prompt(full_conversation(messages), TOOLS)
    # the last turn was cut without its stop token, so compare up to the end of the sampled text
    ledger_ids = ledger.segments[0].ids
    assert tokenizer.decode(ledger_ids) == tokenizer.decode(rendered)[: len(tokenizer.decode(ledger_ids))]
    assert tokenizer.decode(rendered).startswith(tokenizer.decode(ledger_ids))


def test_reasoning_stays_in_the_ledger_when_the_template_drops_it(tokenizer, stop_ids, im_end):
    renderer, ledger, prompts, _, messages = run_conversation(
        tokenizer, stop_ids, im_end, DROPS_REASONING, think=True
    )
    text = tokenizer.decode(ledger.segments[0].ids)
    assert "<think>multiply them</think>" in text
    assert "<think>multiply them</think>" in tokenizer.decode(prompts[1])
    # a re-rendering adapter would have shown the policy a different history
    rerendered = tokenizer.decode(renderer.render_prompt(full_conversation(messages), TOOLS))
    assert "<think>" not in rerendered


def test_history_rewrite_starts_a_new_segment(tokenizer, stop_ids, im_end):
    renderer = ChatRenderer(tokenizer, tool_block="auto")
    ledger = TokenLedger(renderer, stop_ids)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "What is 37 * 48?"}]
    first = ledger.prompt(messages, TOOLS)
    gen = sampled(tokenizer, CALL_TEXT, im_end, -0.1)
    ledger.record(gen, aworld_echo())
    # the agent summarised its history instead of appending to it
    summary = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Summary: 37 * 48 = 1776. Answer now."},
    ]
    second = ledger.prompt(summary, TOOLS)
    assert len(ledger.segments) == 2
    assert second == renderer.render_prompt(summary, TOOLS)
    assert ledger.segments[0].prompt_ids == first
    assert ledger.segments[0].response_ids == gen.token_ids  # nothing spliced into the old segment
    assert ledger.segments[1].response_ids == []


def test_changed_tool_list_starts_a_new_segment(tokenizer, stop_ids, im_end):
    ledger = TokenLedger(ChatRenderer(tokenizer, tool_block="auto"), stop_ids)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]
    ledger.prompt(messages, TOOLS)
    ledger.record(sampled(tokenizer, "a", im_end, -0.1), {"role": "assistant", "content": "a"})
    more_tools = TOOLS + [{"type": "function", "function": {"name": "other", "parameters": {}}}]
    ledger.prompt(
        messages + [{"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}], more_tools
    )
    assert len(ledger.segments) == 2


def test_tool_block_goes_into_the_system_turn_only_when_the_template_ignores_tools(tokenizer):
    chatml = ChatRenderer(tokenizer, tool_block="auto")
    qwen = ChatRenderer(tokenizer, chat_template=QWEN_STYLE, tool_block="auto")
    assert not chatml.supports_tools and qwen.supports_tools
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]
    chatml_text = tokenizer.decode(chatml.render_prompt(messages, TOOLS))
    assert "<tools>" in chatml_text and json.dumps(TOOLS[0]) in chatml_text
    assert chatml_text.index("<tools>") < chatml_text.index("<|im_start|>user")
    qwen_text = tokenizer.decode(qwen.render_prompt(messages, TOOLS))
    assert qwen_text.count("<tools>") == 1  # the template's own block, not ours on top
    never = ChatRenderer(tokenizer, tool_block="never")
    assert "<tools>" not in tokenizer.decode(never.render_prompt(messages, TOOLS))


def test_few_shot_turns_are_prompt_after_the_system_message(tokenizer, stop_ids):
    shots = [{"role": "user", "content": "What is 1 + 1?"}, {"role": "assistant", "content": "2"}]
    ledger = TokenLedger(ChatRenderer(tokenizer, tool_block="never"), stop_ids, few_shot=shots)
    text = tokenizer.decode(
        ledger.prompt([{"role": "system", "content": "SYS"}, {"role": "user", "content": "Q"}], TOOLS)
    )
    assert text.index("SYS") < text.index("What is 1 + 1?") < text.index("Q<|im_end|>")


def _answered(tokenizer, stop_ids, im_end, text: str) -> tuple[TokenLedger, list[dict]]:
    """A ledger after one sampled answer `text` (recorded as the agent reads it) and its history."""
    ledger = TokenLedger(ChatRenderer(tokenizer, tool_block="auto"), stop_ids)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "What is 37 * 48?"}]
    ledger.prompt(messages, TOOLS)
    calls = aworld_echo()["tool_calls"] if "<tool_call>" in text else []
    content = text.split("<tool_call>")[0].strip()
    ledger.record(
        sampled(tokenizer, text, im_end, -0.1), {"role": "assistant", "content": content, "tool_calls": calls}
    )
    return ledger, messages


@pytest.mark.parametrize(
    "echo,segments",
    [
        ({"content": "I will multiply.", "tool_calls": aworld_echo()["tool_calls"]}, 1),  # as answered
        (aworld_echo(), 1),  # AWorld replays the text beside a call as empty content: the calls identify it
        ({"content": "I multiply them.", "tool_calls": aworld_echo()["tool_calls"]}, 2),  # its text rewritten
        (aworld_echo('{"expression":"[compacted]"}'), 2),  # its call's arguments compacted
    ],
)
def test_an_earlier_answer_the_agent_changed_begins_a_segment(tokenizer, stop_ids, im_end, echo, segments):
    """The model's own earlier answer, sent back changed, is a rewrite: never merged into the ledger
    (which would train the next turn after what the policy did not see)."""
    ledger, messages = _answered(tokenizer, stop_ids, im_end, "I will multiply.\n" + CALL_TEXT)
    tool = {"role": "tool", "content": "1776", "tool_call_id": "call_0_0"}
    ledger.prompt([*messages, {"role": "assistant", **echo}, tool], TOOLS)
    assert len(ledger.segments) == segments


def test_a_plain_answer_the_agent_changed_begins_a_segment(tokenizer, stop_ids, im_end):
    ledger, messages = _answered(tokenizer, stop_ids, im_end, "It is 1776.")
    again = {"role": "user", "content": "And plus 4?"}
    ledger.prompt([*messages, {"role": "assistant", "content": "It is 1776."}, again], TOOLS)
    assert len(ledger.segments) == 1
    ledger.record(sampled(tokenizer, "1780", im_end, -0.2), {"role": "assistant", "content": "1780"})
    edited = [
        *messages,
        {"role": "assistant", "content": "1776"},
        again,
        {"role": "assistant", "content": "1780"},
    ]
    ledger.prompt([*edited, {"role": "user", "content": "And minus 1?"}], TOOLS)
    assert len(ledger.segments) == 2 and ledger.segments[1].prompt_ids != ledger.segments[0].ids
