"""One episode of the rollout on a real chat template, driven by a scripted policy that writes what
the family's model writes (tests/test_chat_families.py): the text of an assistant turn is the
template's own rendering of that turn, ended by a stop token of the family; the scenarios' scripts,
and whether a template supports a scenario."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from chat_tokenizers import Case

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


def script(d: Drive, scenario: str, tools_ok: bool) -> None:
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


def supports(case: Case, renderer: ChatRenderer, scenario: str) -> str | None:
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
