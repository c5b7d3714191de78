"""The ledger (ARCHITECTURE.md invariant 1), the tool-call parsers and the turn ends on the real
chat templates of the model families agent RL is trained with (`tests/chat_families.py`).

A scripted policy writes what each family's model writes: the text of an assistant turn is the
real template's own rendering of that turn, ended by a stop token of the family. Each episode
goes the way the rollout goes: prompt from the ledger, sampled ids, text decoded and parsed by
the run's call format, calls given ids as the template demands, tool results appended as template
deltas. For each template: one tool round, four tool rounds, two user turns, parallel calls where
the template renders them, thinking where the family thinks; each twice: with
`rollout.tool_parser: auto`, and with the parser derived from the template alone (`template`),
which must read every turn exactly as the family's hand-written parser does (calls, typed
arguments, ids, the text around them). A template that cannot carry tool results, or whose calls
no parser reads, is refused up front, with its reason.

With AWORLD_TRAIN_FAMILY_TABLE=path, the results are written there as a markdown table.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import pytest
from chat_families import ALL_CASES, CASES, Case, case_tokenizer, require_templates

from aworld_train.rollout.episodes.llm_call import sampled_text, visible_text
from aworld_train.rollout.policies.client import Generation
from aworld_train.rollout.tokens.calls.registry import ParsedCall
from aworld_train.rollout.tokens.ledger import TokenLedger
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer
from aworld_train.rollout.tokens.turns.stops import stop_token_ids

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate arithmetic",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "the expression"}},
                "required": ["expression"],
            },
        },
    }
]
SCENARIOS = ("one tool round", "four tool rounds", "two user turns", "parallel calls", "thinking")
RUNS = ("auto", "template")
RESULTS: dict[tuple[str, str, str], dict] = {}
# the one template of the 24 whose calls the derived parser does not read, and why: its turn is a
# sequence of messages on channels, the answer is its final channel, not the text around a call
NOT_A_FRAME = {"openai-gpt-oss-120b": "another frame than an answer"}
REFUSED_RESULTS = ("microsoft-Phi-3.5-mini-instruct", "google-gemma-2-2b-it")


@dataclass
class Turn:
    """What the scripted model means to write in one turn."""

    content: str = ""
    calls: list[str] = field(default_factory=list)  # expressions
    thought: str = ""


class Drive:
    """One episode of the rollout on one template, driven by a scripted policy."""

    def __init__(self, case: Case, tok, kwargs: dict, tool_parser: str = "auto", **renderer) -> None:
        self.case, self.tok = case, tok
        self.renderer = ChatRenderer(
            tok, tool_block="auto", template_kwargs=kwargs, tool_parser=tool_parser, **renderer
        )
        self.stops = stop_token_ids(tok)
        self.ledger = TokenLedger(self.renderer, self.stops)
        self.parser = self.renderer.calls
        # the family's hand-written parser where `auto` takes it: the derived one must read alike
        self.hand = None
        if tool_parser == "template":
            auto = ChatRenderer(tok, template_kwargs=kwargs, **renderer).calls
            self.hand = auto.parser if auto.name != "template" else None
        self.tools = TOOLS
        self.messages: list[dict] = [
            {"role": "system", "content": "You are a calculator."},
            {"role": "user", "content": "What is 37 * 48?"},
        ]
        self.prompts: list[list[int]] = []
        self.gens: list[Generation] = []
        self.results: list[tuple[int, str]] = []  # (turn whose next prompt must show it, result)
        self.round_trip_diffs = 0
        self.compared = 0  # turns the derived and the hand-written parser both read
        self.used_ids: set[str] = set()

    # the text the family's model writes for a turn: the real template's rendering of it
    def native_text(self, turn: Turn, turn_no: int) -> tuple[str, list[dict]]:
        calls = []
        for i, expr in enumerate(turn.calls):
            call = ParsedCall("calculate", {"expression": expr})
            call_id = self.renderer.family.call_id(call, turn_no, i, self.used_ids | {c["id"] for c in calls})
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "calculate", "arguments": call.arguments},
                }
            )
        message = {"role": "assistant", "content": turn.content}
        if calls:
            message["tool_calls"] = calls
        if turn.thought:
            message["reasoning_content"] = message["thinking"] = turn.thought
        text = self._rendered_turn(message)
        if turn.thought and turn.thought not in text:  # templates that take reasoning only inline
            message = {**message, "content": f"<think>\n{turn.thought}\n</think>\n\n{turn.content}"}
            text = self._rendered_turn(message)
        return text, calls

    def _rendered_turn(self, message: dict) -> str:
        return self.renderer.turn_text(self.messages, message, self.tools)

    def sample(self, text: str, calls: bool) -> Generation:
        ids = self.tok.encode(text, add_special_tokens=False)
        for k, tid in enumerate(ids):  # the turn ends at the family's first stop token
            if tid in self.stops:
                ids = ids[: k + 1]
                break
        else:  # the template writes no turn end (GLM): the model ends with the next role token
            end = self.case.call_end if calls else self.case.answer_end
            assert end, f"the template ends the turn {text[-40:]!r} with no stop id"
            while ids and self.tok.decode(ids[-1:]).strip() == "":
                ids.pop()
            ids.append(self.tok.convert_tokens_to_ids(end))
        assert ids[-1] in self.stops, f"{self.tok.decode(ids[-1:])!r} ends the turn but is no stop id"
        base = -0.05 * (len(self.gens) + 1)
        return Generation(ids, [base - 0.001 * i for i in range(len(ids))], "stop")

    def turn(self, turn: Turn, results: list[str] = ()) -> None:
        turn_no = len(self.gens)
        self.prompts.append(self.ledger.prompt(self.messages, self.tools))
        text, intended = self.native_text(turn, turn_no)
        gen = self.sample(text, bool(turn.calls))
        self.gens.append(gen)
        sampled = sampled_text(self.tok, gen, self.stops)
        parsed = self.parser.parse(sampled, self.tools)
        assert not parsed.malformed, parsed.errors
        if self.hand is not None:  # the derived parser reads the turn as the hand-written one does
            hand = self.hand.parse(sampled, self.tools)
            assert _read(parsed) == _read(hand), (sampled, _read(parsed), _read(hand))
            self.compared += 1
        assert [(c.name, c.arguments) for c in parsed.calls] == [
            (c["function"]["name"], c["function"]["arguments"]) for c in intended
        ], f"the parser read {parsed.calls} from {text!r}"
        ids = []
        for i, c in enumerate(parsed.calls):
            ids.append(self.renderer.family.call_id(c, turn_no, i, self.used_ids))
            self.used_ids.add(ids[-1])
        echo = {"role": "assistant", "content": visible_text(self.tok, parsed.content)}
        if parsed.calls:
            echo["tool_calls"] = [
                {
                    "id": i,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for i, c in zip(ids, parsed.calls, strict=True)
            ]
        if not parsed.calls:
            assert turn.content in echo["content"], (turn.content, echo["content"])
        # the parsed turn, rendered by the template, gives the sampled text (or a normalised one)
        if self._rendered_turn({**echo, "content": echo["content"]}) != text:
            self.round_trip_diffs += 1
        self.ledger.record(gen, echo)
        self.messages.append(echo)
        for call_id, result in zip(ids, results, strict=True):
            # as AWorld sends it: the call's id, not the tool's name (Kimi-K3 renders a result only
            # with the name, which the renderer takes from the call)
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
            self.results.append((turn_no + 1, result))

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})


def _read(result) -> tuple:
    """What a parse gives the agent: each call's name, typed arguments and id; the text around."""
    return (
        [(c.name, json.dumps(c.arguments, sort_keys=True), c.id) for c in result.calls],
        result.content,
        bool(result.errors),
    )


def _script(d: Drive, scenario: str, tools_ok: bool) -> None:
    think = "Multiply 37 by 48 step by step." if scenario == "thinking" else ""
    if scenario == "parallel calls":
        d.turn(Turn(calls=["37 * 48", "2 + 2"], thought=think), ["1776 (first)", "4 (second)"])
    elif scenario == "four tool rounds":
        for k, expr in enumerate(["37 * 48", "1776 + 1", "1777 * 2", "3554 - 4"]):
            d.turn(Turn(calls=[expr]), [f"result {k}: {eval(expr)}"])  # noqa: S307 - fixed expressions
    elif tools_ok:
        d.turn(Turn(calls=["37 * 48"], thought=think), ["1776 (calculated)"])
    d.turn(Turn(content="The answer is 1776.", thought=think))
    if scenario == "two user turns":
        d.user("And 1776 plus 4?")
        if tools_ok:
            d.turn(Turn(calls=["1776 + 4"]), ["1780 (calculated)"])
        d.turn(Turn(content="It is 1780."))


def _supports(case: Case, renderer: ChatRenderer, scenario: str) -> str | None:
    """Why the template does not support the scenario, or None."""
    if scenario == "thinking" and case.think_kwargs is None:
        return "the family does not think"
    if (
        scenario in ("one tool round", "four tool rounds", "parallel calls", "thinking")
        and renderer.tool_results_problem
    ):
        return f"refused: {renderer.tool_results_problem}"
    if scenario == "parallel calls":
        two = [
            {
                "type": "function",
                "id": renderer.family.call_id(ParsedCall(name, {}), 0, i, {"x"} if i else set()),
                "function": {"name": name, "arguments": {}},
            }
            for i, name in enumerate(("calculate", "zz_second"))
        ]
        msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": two}]
        try:
            text = renderer._apply(renderer._prepare(msgs), tools=TOOLS if renderer.supports_tools else None)
        except Exception as exc:
            return f"the template takes one call per turn ({type(exc).__name__})"
        if "zz_second" not in text:
            return "the template renders one call per turn"
    return None


@pytest.fixture(scope="module")
def tokenizers():
    require_templates()
    return {}


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_episode_on_real_template(tokenizers, case, scenario, run):
    if case.name not in tokenizers:
        tokenizers[case.name] = case_tokenizer(case)
    tok = tokenizers[case.name]
    kwargs = case.think_kwargs if scenario == "thinking" and case.think_kwargs is not None else case.kwargs
    d = Drive(case, tok, dict(kwargs), tool_parser=run)
    row = {
        "stops": [tok.decode([i]) for i in d.stops],
        "parser": d.renderer.parser,
        "family": d.renderer.family.name,
    }
    RESULTS[(case.name, run, scenario)] = row
    if d.parser.problem:  # refused up front: no parser reads the template's calls
        row["status"] = f"refused up front: {d.parser.problem}"
        assert run == "template" and any(
            why in d.parser.problem for name, why in NOT_A_FRAME.items() if name == case.name
        ), d.parser.problem
        return
    reason = _supports(case, d.renderer, scenario)
    if reason is not None:
        row["status"] = reason
        if reason.startswith("refused"):
            assert case.name in REFUSED_RESULTS, reason
        return
    _script(d, scenario, tools_ok=d.renderer.tool_results_problem is None)
    seg = d.ledger.segments[0]
    assert len(d.ledger.segments) == 1, "the template's rendering of history must not split the episode"
    # every mask-1 token is a sampled token, in order, with its logprob; nothing else is mask 1
    picked = [t for t, m in zip(seg.response_ids, seg.response_mask, strict=True) if m]
    row["mask1_sampled"] = picked == [t for g in d.gens for t in g.token_ids]
    lps = [lp for lp, m in zip(seg.response_logprobs, seg.response_mask, strict=True) if m]
    assert row["mask1_sampled"] and lps == [lp for g in d.gens for lp in g.logprobs]
    # every prompt is the ledger prefix, and each generation follows its prompt
    full = seg.ids
    row["prompts_prefix"] = all(
        full[: len(p)] == p and full[len(p) : len(p) + len(g.token_ids)] == g.token_ids
        for p, g in zip(d.prompts, d.gens, strict=True)
    )
    assert row["prompts_prefix"]
    # each tool result is in the delta that opens the next prompt
    reached = []
    for turn_no, result in d.results:
        before = len(d.prompts[turn_no - 1]) + len(d.gens[turn_no - 1].token_ids)
        reached.append(result in tok.decode(d.prompts[turn_no][before:]))
    row["results_reach"] = f"{sum(reached)}/{len(reached)}"
    assert all(reached), d.results
    # no stop id inside a sampled turn: the policy would have stopped there
    assert all(t not in d.stops for g in d.gens for t in g.token_ids[:-1])
    assert "STAND_IN" not in tok.decode(full)
    # a sampled turn end is not written again after it, nor the template's own closer (GLM's role
    # token, gpt-oss's <|end|>), whitespace between them or not
    closers = {tok.convert_tokens_to_ids(c) for c in d.renderer.family.closers} | set(d.stops)
    ends = [len(p) + len(g.token_ids) - 1 for p, g in zip(d.prompts, d.gens, strict=True)]
    for e in ends:
        after = e + 1
        while after < len(full) and not tok.decode(full[after : after + 1]).strip():
            after += 1
        assert after >= len(full) or full[after] not in closers, tok.decode(full[e : after + 1])
    if run == "template" and d.hand is not None:
        row["same_as_hand"] = f"{d.compared}/{d.compared}"
    row["round_trip"] = "exact" if not d.round_trip_diffs else f"normalised in {d.round_trip_diffs}"
    row["status"] = "ok"


@pytest.mark.parametrize("name", REFUSED_RESULTS)
def test_tool_results_go_in_user_turns_where_the_template_has_no_tool_role(name):
    """Phi-3.5 drops tool messages and Gemma-2 refuses them; with rollout.tool_results_as_user the
    results reach the model as a user turn (parallel results in one), and the episode trains."""
    case = next(c for c in CASES if c.name == name)
    tok = case_tokenizer(case)
    assert ChatRenderer(tok).tool_results_problem  # refused without the setting
    d = Drive(case, tok, {}, tool_results_as_user=True)
    assert d.renderer.tool_results_problem is None
    _script(d, "parallel calls", tools_ok=True)
    user_turn = {
        "microsoft-Phi-3.5-mini-instruct": "<|user|>",
        "google-gemma-2-2b-it": "<start_of_turn>user",
    }[name]
    before = len(d.prompts[0]) + len(d.gens[0].token_ids)
    delta = tok.decode(d.prompts[1][before:])
    assert delta.count(user_turn) == 1, delta  # both results in one user turn
    assert "<tool_response>\n1776 (first)\n</tool_response>\n<tool_response>\n4 (second)" in delta, delta
    picked = [
        t
        for t, m in zip(d.ledger.segments[0].response_ids, d.ledger.segments[0].response_mask, strict=True)
        if m
    ]
    assert picked == [t for g in d.gens for t in g.token_ids]


def test_every_family_is_recognised(tokenizers):
    """Each template's family, parser and turn ends (the check command names them)."""
    expected = {
        "Qwen3-Coder": "qwen3_coder",
        "Qwen3.5-4B": "qwen3_coder",
        "GLM-4.6": "glm45",
        "GLM-4.7-Flash": "glm45",
        "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
        "Mistral-Small-3.2-24B-Instruct-2506": "mistral",
        "deepseek-ai-DeepSeek-V3.1": "deepseek",
        "moonshotai-Kimi-K2": "kimi_k2",
        "openai-gpt-oss-120b": "harmony",
        "ibm-granite-granite-3.3-2B-Instruct": "granite",
        "meta-llama-Llama-3.1-8B-Instruct": "llama3_json",
        "Qwen-Qwen2.5-7B-Instruct": "hermes",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "hermes",
    }
    for case in CASES:
        if case.name not in expected:
            continue
        tokenizers.setdefault(case.name, case_tokenizer(case))
        tok = tokenizers[case.name]
        assert ChatRenderer(tok).parser == expected[case.name], case.name
    glm = tokenizers["GLM-4.6"]
    assert {glm.decode([i]) for i in stop_token_ids(glm)} == {"<|endoftext|>", "<|user|>", "<|observation|>"}
    oss = tokenizers["openai-gpt-oss-120b"]
    oss_stops = {oss.decode([i]) for i in stop_token_ids(oss)}
    assert {"<|return|>", "<|call|>"} <= oss_stops and "<|end|>" not in oss_stops


def test_turn_ends_are_read_from_the_template():
    """What each template writes after an answer and after its calls are stop ids; what it writes
    inside a turn never is; a turn end the policy sampled is not written again after it."""
    stops = {}
    for case in ALL_CASES:
        if case.name in ("Kimi-K3", "upstage-Solar-Open-100B", "google-gemma-4-31B-it", "unsloth-Apriel-1.5"):
            tok = case_tokenizer(case)
            stops[case.name] = {tok.decode([i]) for i in stop_token_ids(tok)}
    # Kimi-K3 opens every turn with <|close|>think<|sep|>: a stop there ends the turn before it begins
    assert stops["Kimi-K3"] == {"<|end_of_msg|>"}
    # Solar ends a call turn with <|calls|>, Gemma 4 with <|tool_response>: not their answers' end
    assert stops["upstage-Solar-Open-100B"] == {"<|end|>", "<|calls|>"}
    assert stops["google-gemma-4-31B-it"] == {"<turn|>", "<|tool_response>"}
    # Apriel writes "\n<|end|>\n" and its eos (<|end|>) after a turn: once in the ledger
    case = next(c for c in ALL_CASES if c.name == "unsloth-Apriel-1.5")
    renderer = ChatRenderer(case_tokenizer(case))
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "calculate", "arguments": '{"expression": "1"}'},
    }
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    delta = renderer.delta_text(
        history, [{"role": "tool", "tool_call_id": "c", "content": "1"}], TOOLS, "<|end|>"
    )
    assert delta.startswith("<|tool_result|>"), delta
    answer = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "It is 1."}]
    after_answer = renderer.delta_text(answer, [{"role": "user", "content": "Next?"}], TOOLS, "<|end|>")
    assert after_answer.startswith("<|user|>"), after_answer
    # Laguna writes "\n</assistant>\n" after an answer: the sampled </assistant> is not followed by another
    laguna = Case(
        "poolside-Laguna-XS.2", "qwen2", specials=("<user>", "</user>", "<assistant>", "</assistant>")
    )
    tok = case_tokenizer(laguna)
    assert "</assistant>" in {tok.decode([i]) for i in stop_token_ids(tok)}
    after_answer = ChatRenderer(tok).delta_text(
        answer, [{"role": "user", "content": "Next?"}], TOOLS, "</assistant>"
    )
    assert after_answer.lstrip().startswith("<user>"), after_answer


def test_a_dropped_tool_result_ends_the_episode_instead_of_training(tokenizers):
    """Phi-3.5's template renders no tool message: the ledger refuses the delta."""
    from aworld_train.rollout.tokens.templates.renderer import ToolResultsLost

    case = next(c for c in CASES if c.name == "microsoft-Phi-3.5-mini-instruct")
    tok = tokenizers.setdefault(case.name, case_tokenizer(case))
    d = Drive(case, tok, {})
    with pytest.raises(ToolResultsLost, match="not in the next prompt: the chat template drops tool results"):
        d.turn(Turn(calls=["37 * 48"]), ["1776 (calculated)"])
        d.ledger.prompt(d.messages, d.tools)


def test_deepseek_is_shown_its_own_call_tokens(tokenizers):
    """DeepSeek-V3.1's template ignores tools=: the tool block shows its call tokens, not hermes tags."""
    case = next(c for c in CASES if c.name == "deepseek-ai-DeepSeek-V3.1")
    tok = tokenizers.setdefault(case.name, case_tokenizer(case))
    r = ChatRenderer(tok)
    text = tok.decode(r.render_prompt([{"role": "user", "content": "q"}], TOOLS))
    assert (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_name<｜tool▁sep｜>" in text
        and "<tool_call>" not in text
    )
    assert '"expression"' in text


def teardown_module(module) -> None:
    path = os.environ.get("AWORLD_TRAIN_FAMILY_TABLE")
    if not path or not RESULTS:
        return
    lines = [
        "| template | family | run | parser | " + " | ".join(SCENARIOS) + " |",
        "|---|---|---|---|" + "---|" * len(SCENARIOS),
    ]
    keys = sorted({(name, run) for name, run, _ in RESULTS}, key=lambda k: (_order(k[0]), RUNS.index(k[1])))
    for name, run in keys:
        rows = {sc: RESULTS.get((name, run, sc)) for sc in SCENARIOS}
        first = next(r for r in rows.values() if r)
        refused = first.get("status", "").startswith("refused up front")
        cells = [first["status"]] if refused else [_cell(rows[sc]) for sc in SCENARIOS]
        if refused:
            cells += [""] * (len(SCENARIOS) - 1)
        lines.append(
            f"| {name} | {first['family']} | {run} | {first['parser']} | " + " | ".join(cells) + " |"
        )
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")


def _order(name: str) -> int:
    return next(i for i, c in enumerate(ALL_CASES) if c.name == name)


def _cell(row: dict | None) -> str:
    """One scenario: ok with its tool results reached (and the turns read as the hand parser
    does), or why it does not apply."""
    if row is None:
        return "-"
    status = row.get("status", "FAILED")
    if status != "ok":
        return status
    same = f", = hand {row['same_as_hand']}" if row.get("same_as_hand") else ""
    if row["results_reach"] == "0/0":  # the template carries no tool result: the scenario makes no call
        return f"ok, no tool call{same}"
    return f"ok, results {row['results_reach']}{same}"


def _yes(value) -> str:
    return "-" if value is None else ("yes" if value else "NO")
