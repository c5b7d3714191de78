"""No call is read as an answer: over every real chat template of the collection, the calls the
model is taught to write (the template's own rendering of a call, our tool block's example where
the template ignores tools, the family's format where the template lists tools but writes no call)
read back as those calls with the run's parser, or the template is refused before any model loads.

Two classes of real template used to be read silently: one that raises on a tool without
parameters was taken for ignoring tools (our hermes block paired with the template's own parser),
and one that lists tools but writes no assistant call (LFM2's; its models write Python-style calls
between special markers) kept a parser that reads none of them.
"""

from __future__ import annotations

import copy

import pytest
from chat_tokenizers import TEMPLATES, require_templates, vocab_tokenizer

from aworld_train.rollout.tokens.calls.derivation import turn_body
from aworld_train.rollout.tokens.calls.parsers.pythonic import PythonicParser
from aworld_train.rollout.tokens.calls.probes import ANSWER, call_message, probe_tools
from aworld_train.rollout.tokens.calls.tool_block import example_call, example_call_text
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer

HISTORY = [{"role": "user", "content": "zqhi"}]
CALL = (
    "get_weather",
    {"city": "São Paulo", "days": 3, "units": {"temp": "C"}, "fields": ["rain", 5], "hourly": True},
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The forecast",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "units": {"type": "object"},
                    "fields": {"type": "array"},
                    "hourly": {"type": "boolean"},
                },
                "required": ["city"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def qwen2():
    require_templates()
    return vocab_tokenizer("qwen2")


def renderer_of(tokenizer, name: str) -> ChatRenderer:
    tok = copy.copy(tokenizer)
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    return ChatRenderer(tok)


def read(renderer: ChatRenderer, text: str) -> list[tuple]:
    result = renderer.calls.parse(text, TOOLS)
    assert not result.errors, (text, result.errors)
    return [(c.name, c.arguments) for c in result.calls]


NAMES = sorted(p.stem for p in TEMPLATES.glob("*.jinja")) if TEMPLATES.is_dir() else []


@pytest.mark.parametrize("name", NAMES)
def test_what_the_model_is_taught_to_write_reads_back_as_the_call(qwen2, name):
    renderer = renderer_of(qwen2, name)
    if renderer.calls.problem:
        pytest.skip(f"refused up front: {renderer.calls.problem[:120]}")  # test_template_calls.py names them
    render = lambda message: renderer.turn_text(HISTORY, message, TOOLS)  # noqa: E731
    call_id = renderer._probe_call_id(CALL[0], 0)
    try:
        taught = turn_body(
            render(call_message([(CALL[0], call_id, CALL[1])])),
            render({"role": "assistant", "content": ANSWER}),
        )
    except Exception:
        pytest.skip("the template renders no call with these tools")
    assert read(renderer, taught) == [CALL], taught
    if renderer.add_tool_block:  # the block's own example is what the prompt shows
        call = example_call(probe_tools())
        shown = example_call_text(call, renderer.family.tool_prompt, renderer._block_writer(renderer.calls))
        assert read(renderer, shown) == [(call.name, call.arguments)], shown


def test_a_template_that_raises_on_a_bare_tool_is_not_taken_for_ignoring_tools(qwen2):
    """ByteDance Seed-OSS reads `parameters.properties`: the bare probe raises, a typed tool shows.
    It lists the tools itself, so no block of ours is added, and its own format is read."""
    renderer = renderer_of(qwen2, "ByteDance-Seed-OSS")
    assert renderer.supports_tools and renderer.renders_calls and not renderer.add_tool_block
    assert renderer.calls.name == "template" and renderer.calls.problem is None
    text = renderer.render_prompt([{"role": "user", "content": "hi"}], TOOLS)
    assert "get_weather" in qwen2.decode(text) and "<tool_call>" not in qwen2.decode(text)


@pytest.mark.parametrize("name", ["LFM2-8B-A1B", "LFM2.5-Instruct"])
def test_a_template_that_lists_tools_but_writes_no_call_reads_its_familys_pythonic_calls(qwen2, name):
    renderer = renderer_of(qwen2, name)
    assert renderer.supports_tools and not renderer.renders_calls
    assert renderer.family.name == "lfm2" and renderer.calls.name == "pythonic"
    two = "<|tool_call_start|>[get_weather(city='Paris', days=3, hourly=False), web_search(query=\"rain\")]<|tool_call_end|>"
    assert read(renderer, "Let me look. " + two) == [
        ("get_weather", {"city": "Paris", "days": 3, "hourly": False}),
        ("web_search", {"query": "rain"}),
    ]
    # the history writes a call back in the same form, so the next prompt shows the model its own call
    history = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    prompt = qwen2.decode(renderer.render_prompt(history, TOOLS))
    assert "<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|>" in prompt


def test_the_family_reads_the_calls_of_the_lfm2_template_that_writes_them(qwen2):
    renderer = renderer_of(qwen2, "LFM2.5-8B-A1B")
    assert renderer.renders_calls and renderer.family.name == "lfm2"
    call = {"id": "c1", "type": "function", "function": {"name": CALL[0], "arguments": CALL[1]}}
    text = renderer.turn_text(HISTORY, {"role": "assistant", "content": "", "tool_calls": [call]}, TOOLS)
    assert "<|tool_call_start|>[get_weather(city='São Paulo'" in text
    assert read(renderer, text.split("<|im_end|>")[0]) == [CALL]


def test_a_template_that_lists_tools_without_a_known_call_format_is_refused_with_the_fix(qwen2):
    """Without its family marker LFM2's template is of no known family: no format is guessed."""
    tok = copy.copy(qwen2)
    tok.chat_template = (TEMPLATES / "LFM2-8B-A1B.jinja").read_text().replace("List of tools: ", "Tools: ")
    problem = ChatRenderer(tok).calls.problem
    assert problem and "lists the tools but writes no assistant tool call" in problem
    assert "set rollout.tool_parser to the model's own format" in problem and "pythonic" in problem
    # the user's word on the format is taken
    assert ChatRenderer(tok, tool_parser="pythonic").calls.problem is None


def test_pythonic_calls_read_literals_only():
    parser = PythonicParser()
    got = parser.parse("[f(a='x', n=1.5, flag=True, none=None, items=[1, 'b'], d={'k': [2]})]")
    assert [(c.name, c.arguments) for c in got.calls] == [
        ("f", {"a": "x", "n": 1.5, "flag": True, "none": None, "items": [1, "b"], "d": {"k": [2]}})
    ]
    for bad in (
        "<|tool_call_start|>[f(a=__import__('os'))]<|tool_call_end|>",
        "<|tool_call_start|>[f(1)]<|tool_call_end|>",
        "<|tool_call_start|>[obj.f(a=1)]<|tool_call_end|>",
        "<|tool_call_start|>[f(**x)]<|tool_call_end|>",
        "<|tool_call_start|>[f(a=1<|tool_call_end|>",
    ):
        result = parser.parse(bad)
        assert result.malformed and not result.calls, bad
    # an answer is an answer, a list of numbers included
    assert not parser.parse("The answer is [1, 2].").calls and not parser.parse("[1, 2]").calls
    assert (
        parser.format("", [parser.parse("[f(a='x')]").calls[0]])
        == "<|tool_call_start|>[f(a='x')]<|tool_call_end|>"
    )
