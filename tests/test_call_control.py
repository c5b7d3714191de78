"""A client's tool_choice and parallel_tool_calls met in each real chat template's own call text
(`rollout/tokens/calls/forcing.py`): over the whole collection, where a template lets a call be
forced, its own rendering of a call starts with the forced opening and the run's parser reads the
opening and the policy's rest as that call; where a turn can end after its first call, the cut
rendering of two calls reads as the first alone. Templates that allow neither are refused (the
episode's check names them), never half-served."""

from __future__ import annotations

import pytest
from chat_tokenizers import TEMPLATES, require_templates, vocab_tokenizer

from aworld_train.rollout.tokens.calls.derivation import turn_body
from aworld_train.rollout.tokens.calls.forcing import NotControllable, read_control
from aworld_train.rollout.tokens.calls.probes import ANSWER, call_message, probe_tools
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer

HISTORY = [{"role": "user", "content": "zqhi"}]
CALL = {"city": "Paris", "days": 3}
SECOND = {"query": "rain"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "d",
            "parameters": {
                "type": "object",
                "properties": {
                    k: {"type": "string" if isinstance(v, str) else "integer"} for k, v in args.items()
                },
            },
        },
    }
    for name, args in (("get_weather", CALL), ("web_search", SECOND))
]


@pytest.fixture(scope="module")
def qwen2():
    require_templates()
    return vocab_tokenizer("qwen2")


NAMES = sorted(path.stem for path in TEMPLATES.glob("*.jinja")) if TEMPLATES.is_dir() else []


@pytest.mark.parametrize("name", NAMES)
def test_forced_and_single_calls_read_back_as_the_templates_own_calls(qwen2, name):
    renderer = ChatRenderer(qwen2, chat_template=(TEMPLATES / f"{name}.jinja").read_text())
    calls = renderer.calls
    if calls.parser is None:
        pytest.skip("the template's calls are refused up front (test_template_calls.py)")
    render = lambda message: renderer.turn_text(HISTORY, message, probe_tools())  # noqa: E731
    control = read_control(render, renderer._probe_call_id)
    answer = render({"role": "assistant", "content": ANSWER})

    def body(*called) -> str:
        ids = [renderer._probe_call_id(n, i) for i, (n, _) in enumerate(called)]
        return turn_body(
            render(call_message([(n, i, a) for (n, a), i in zip(called, ids, strict=True)])), answer
        )

    try:
        one = body(("get_weather", CALL))
    except Exception:
        pytest.skip("the template renders no call for these tools")
    served = 0
    for tool in (None, "get_weather"):
        try:
            opening = control.forced_opening(tool)
        except NotControllable:
            continue
        served += 1
        assert one.startswith(opening), (opening, one)
        # the policy writes the rest: the run reads the opening and the rest as the template's call
        read = calls.parse(opening + one[len(opening) :], TOOLS)
        assert [(c.name, c.arguments) for c in read.calls] == [("get_weather", CALL)], read
    try:
        end = control.call_end()
    except NotControllable:
        end = None
    if end is not None:
        served += 1
        two = body(("get_weather", CALL), ("web_search", SECOND))
        first = two[: two.index(end) + len(end)]
        read = calls.parse(first, TOOLS)
        assert [(c.name, c.arguments) for c in read.calls] == [("get_weather", CALL)], (first, read)
    if not served:
        pytest.skip(f"the template allows neither: {control.problems}")
