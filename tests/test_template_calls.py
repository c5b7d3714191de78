"""Tool calls read from the chat template (`rollout/tokens/calls/resolution.py`, `rollout/tokens/calls/derivation.py`):
over every template of the collection `auto` reads the template's own calls or refuses it up
front; the derived parser reads typed arguments as the hand-written parsers do; at run time a turn
that writes the template's call marker but reads as no call is malformed, never an answer.

With AWORLD_TRAIN_TEMPLATE_TABLE=path, the collection's table (template, family, parser chosen,
outcome) is written there as markdown.
"""

from __future__ import annotations

import copy
import json
import os

import pytest
from chat_families import CASES
from chat_tokenizers import TEMPLATES, case_tokenizer, require_templates, vocab_tokenizer

from aworld_train.rollout.episodes.driver import AgentRole
from aworld_train.rollout.episodes.episode import Episode
from aworld_train.rollout.episodes.llm_call import sampled_text
from aworld_train.rollout.episodes.runtime import RolloutRuntime
from aworld_train.rollout.episodes.settings import RolloutSettings
from aworld_train.rollout.episodes.trajectory import Task
from aworld_train.rollout.policies.client import Generation, ScriptedPolicy
from aworld_train.rollout.policies.router import PolicyRouter
from aworld_train.rollout.tokens.calls.derivation import turn_body
from aworld_train.rollout.tokens.calls.parsers.base import ParsedCall
from aworld_train.rollout.tokens.calls.probes import ANSWER
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer, renderer_for
from aworld_train.rollout.tokens.turns.stops import stop_token_ids

WEATHER = {
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
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}
TOOLS = [WEATHER, SEARCH]
TYPED = {
    "city": "São Paulo",
    "days": 3,
    "units": {"temp": "C", "wind": 2},
    "fields": ["rain", 5],
    "hourly": True,
}
QUERY = {"query": "tides at 6 pm"}
HISTORY = [{"role": "user", "content": "Plan my week."}]
# templates of the collection whose calls no parser reads, and why (with the Qwen2 vocabulary)
REFUSED = {
    "muse-glimmer": "no text marks where a call starts",  # a call opens with its name
    "MiniMax-M3": "a parameter's name is not written once",  # arguments as nested tags named by key
    "CohereForAI-c4ai-command-r-plus-tool_use": "cannot render a tool call",  # needs its own variables
    "fireworks-ai-llama-3-firefunction-v2": "cannot render a tool call",
    "meetkai-functionary-medium-v3.1": "cannot render a tool call",
    "meetkai-functionary-medium-v3.2": "cannot render a tool call",
}
TABLE: list[str] = []


def _message(calls: list[tuple[str, dict]], ids: list[str]) -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for (n, a), i in zip(calls, ids, strict=True)
        ],
    }


def _read(result) -> tuple:
    return [(c.name, json.dumps(c.arguments, sort_keys=True)) for c in result.calls], bool(result.errors)


@pytest.fixture(scope="module")
def qwen2():
    require_templates()
    return vocab_tokenizer("qwen2")


@pytest.mark.parametrize("name", sorted(p.stem for p in TEMPLATES.glob("*.jinja")))
def test_auto_reads_every_templates_own_calls_or_refuses_it(qwen2, name):
    """`auto` never picks a parser that misreads the template: the calls the template writes (typed
    arguments, two in parallel) read back exactly and an answer reads as none, or no parser is
    chosen and the run is refused with the reason."""
    tok = copy.copy(qwen2)
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    renderer = ChatRenderer(tok)
    calls = renderer.calls
    if calls.problem:
        TABLE.append(f"| {name} | {renderer.family.name} | none | refused up front: {calls.problem[:160]} |")
        assert name in REFUSED and REFUSED[name] in calls.problem, calls.problem
        assert "Fix: set rollout.tool_parser" in calls.problem
        return
    assert name not in REFUSED
    ids = [renderer._probe_call_id(n, i) for i, n in enumerate(("get_weather", "web_search"))]
    answer = renderer.turn_text(HISTORY, {"role": "assistant", "content": ANSWER}, TOOLS)
    outcomes = []
    for probe in ([("get_weather", TYPED)], [("get_weather", TYPED), ("web_search", QUERY)]):
        try:
            text = renderer.turn_text(HISTORY, _message(probe, ids[: len(probe)]), TOOLS)
        except Exception:  # one call per turn (Llama 3)
            continue
        if not all(n in text for n, _ in probe):  # the template writes one of them (gpt-oss)
            continue
        read = calls.parse(turn_body(text, answer), TOOLS)
        assert _read(read) == ([(n, json.dumps(a, sort_keys=True)) for n, a in probe], False), text
        outcomes.append(f"{len(probe)} call{'s' * (len(probe) > 1)} read")
    assert outcomes, "no call turn was rendered"
    assert _read(calls.parse(turn_body(answer, answer), TOOLS)) == ([], False), answer
    TABLE.append(
        f"| {name} | {renderer.family.name} | {calls.name} | {', '.join(outcomes)}; an answer reads as none |"
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_derived_parser_reads_typed_arguments_as_the_hand_parser(case):
    """Strings, numbers, objects, lists and booleans, one call and two, in the template's own
    rendering cut at the family's stop token: the derived parser reads what the family's parser
    reads (calls, typed arguments, ids, the text around them)."""
    tok = case_tokenizer(case)
    hand = ChatRenderer(tok, template_kwargs=case.kwargs).calls
    if hand.name == "template" or case.name in ("openai-gpt-oss-120b",):
        pytest.skip(
            f"{case.name}: no hand parser to compare with" if hand.name == "template" else "not a frame"
        )
    renderer = ChatRenderer(tok, template_kwargs=case.kwargs, tool_parser="template")
    derived = renderer.calls
    stops = stop_token_ids(tok)
    ids = [renderer._probe_call_id(n, i) for i, n in enumerate(("get_weather", "web_search"))]
    compared = 0
    for probe in ([("get_weather", TYPED)], [("get_weather", TYPED), ("web_search", QUERY)]):
        try:
            text = renderer.turn_text(HISTORY, _message(probe, ids[: len(probe)]), TOOLS)
        except Exception:
            continue
        token_ids = tok.encode(text, add_special_tokens=False)
        end = next((k + 1 for k, t in enumerate(token_ids) if t in stops), len(token_ids))
        sampled = sampled_text(tok, Generation(token_ids[:end], [0.0] * end, "stop"), stops)
        mine, theirs = derived.parse(sampled, TOOLS), hand.parser.parse(sampled, TOOLS)
        assert [(c.name, c.arguments, c.id) for c in mine.calls] == [
            (c.name, c.arguments, c.id) for c in theirs.calls
        ], sampled
        assert mine.content == theirs.content and not mine.errors and not theirs.errors
        assert [c.arguments for c in mine.calls][0] == TYPED and type(mine.calls[0].arguments["days"]) is int
        compared += 1
    assert compared


class _Agent:
    """An agent with one tool and no MCP server: it calls its LLM, answers each call it gets with
    a fixed result, and calls again, until a turn has no call."""

    mcp_config = {"mcpServers": {}}

    def roles(self):
        return [AgentRole("agent")]

    def start(self, endpoint, episode_id, task, max_assistant_turns):
        return _Run(endpoint)


class _Run:
    def __init__(self, endpoint) -> None:
        self.endpoint = endpoint

    async def turn(self, user_turn: int, text: str) -> str | None:
        messages = [{"role": "user", "content": text}]
        for _ in range(3):
            reply = await self.endpoint.complete(messages, [WEATHER])
            messages.append({"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls})
            if not reply.tool_calls:
                return None
            messages += [
                {"role": "tool", "tool_call_id": c["id"], "content": "sunny"} for c in reply.tool_calls
            ]
        return None

    async def release(self) -> None:
        pass


async def _episode(tok, texts: list[str], stop: str):
    cfg = RolloutSettings(tool_block="never")
    policy = ScriptedPolicy(tok, texts, tok.convert_tokens_to_ids(stop))
    runtime = RolloutRuntime(PolicyRouter(policy), renderer_for(tok, cfg), stop_token_ids(tok), cfg)
    return await Episode(_Agent(), Task("t", ["Weather in Lyon?"]), runtime).run()


async def test_a_call_the_frame_cannot_read_is_malformed_never_an_answer():
    """Seed-OSS's family tag says Qwen3-Coder, its calls are `<seed:tool_call>` blocks: the derived
    parser reads them; a turn that opens such a block in another form ends the episode as
    malformed_tool_call with the text, where a parser that knows no marker took it for the answer."""
    case = next(c for c in __import__("chat_families").ALL_CASES if c.name == "ByteDance-Seed-OSS")
    tok = case_tokenizer(case)
    good = "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Lyon</parameter>\n</function>\n</seed:tool_call>"
    traj = await _episode(tok, [good, "It is sunny."], "<seed:eos>")
    assert traj.status == "ok" and traj.final_answer == "It is sunny."
    assert [(c.name, c.arguments, c.result) for c in traj.tool_calls] == [
        ("get_weather", {"city": "Lyon"}, "sunny")
    ]
    broken = '<seed:tool_call>\n<invoke name="get_weather">{"city": "Lyon"}</invoke>\n</seed:tool_call>'
    traj = await _episode(tok, [broken], "<seed:eos>")
    assert traj.status == "malformed_tool_call" and traj.final_answer == ""
    assert "'<seed:tool_call>'" in traj.error and "invoke" in traj.error
    assert traj.reward is None or traj.reward == 0.0


def teardown_module(module) -> None:
    path = os.environ.get("AWORLD_TRAIN_TEMPLATE_TABLE")
    if path and TABLE:
        header = "| template | family | parser (auto) | outcome |\n|---|---|---|---|\n"
        with open(path, "w") as out:
            out.write(header + "\n".join(sorted(TABLE)) + "\n")


def _derived(qwen2, name: str):
    tok = copy.copy(qwen2)
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    calls = ChatRenderer(tok, tool_parser="template").calls
    assert calls.parser is not None, calls.problem
    return calls


def test_a_derived_frame_reads_what_a_model_writes_beside_the_template(qwen2):
    """Whitespace between the frame's tags is not binding, a call cut at the stop token still
    reads, a bare value keeps its own newlines and angle brackets, and a broken call is an error."""
    xml = _derived(qwen2, "Qwen3.5-4B")
    loose = "Let me look.<tool_call><function=get_weather><parameter=city>\nNew\nYork <NY>\n</parameter>"
    read = xml.parse(loose + "<parameter=days>\n4\n</parameter></function>", TOOLS)
    assert [(c.name, c.arguments) for c in read.calls] == [
        ("get_weather", {"city": "New\nYork <NY>", "days": 4})
    ]
    assert read.content == "Let me look." and not read.errors
    broken = xml.parse("<tool_call>\n<parameter=city>\nLyon\n</parameter>\n</tool_call>", TOOLS)
    assert broken.malformed and not broken.calls
    hermes = _derived(qwen2, "Qwen-Qwen2.5-7B-Instruct")
    compact = hermes.parse('<tool_call>{"name":"web_search","arguments":{"query":"a"}}</tool_call>', TOOLS)
    assert [(c.name, c.arguments) for c in compact.calls] == [("web_search", {"query": "a"})]
    answer = hermes.parse('Use {"name": "web_search", "arguments": {}} to search.', TOOLS)
    assert not answer.calls and not answer.errors


def test_a_derived_frame_types_values_as_its_template_writes_them(qwen2):
    """DeepSeek-V3.2 says whether a value is a string; Gemma 4 and LFM2.5 write values in a syntax
    of their own (quotes as tokens, Python literals): each reads back typed, and writes back as
    the template does."""
    dsml = _derived(qwen2, "deepseek-ai-DeepSeek-V3.2")
    text = (
        '<｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="n" string="false">12'
        '</｜DSML｜parameter>\n<｜DSML｜parameter name="s" string="true">12</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
    )
    assert [c.arguments for c in dsml.parse(text).calls] == [{"n": 12, "s": "12"}]  # no schema needed
    for name in ("google-gemma-4-31B-it", "LFM2.5-8B-A1B"):
        frame = _derived(qwen2, name)
        calls = [ParsedCall("get_weather", TYPED), ParsedCall("web_search", {"query": "a, b: {c}"})]
        written = frame.parser.format("", calls)
        read = frame.parse(written, TOOLS)
        assert [(c.name, c.arguments) for c in read.calls] == [(c.name, c.arguments) for c in calls], written
        assert type(read.calls[0].arguments["hourly"]) is bool and not read.errors
