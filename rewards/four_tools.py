"""The four-tool assistant's five-part reward.

score = tool_call_weight * tool_call + necessity_weight * necessity + result_use_weight * result_use
      + answer_weight * answer + coherence_weight * coherence        (defaults 0.3, 0.2, 0.2, 0.2, 0.1)

The ground truth (the row's `ground_truth`, JSON text or a dict) lists per user turn the
calls it needs and the answer it expects: `{"turns": [{"calls": [{"name", "arguments"}],
"answer": "444" | null}]}`. A turn's final answer is the last assistant message of that
turn when no tool call or tool result follows it. Each part lies in [0, 1]:

- tool_call: expected calls matched by a successful call of the same turn, the same tool and
  the same arguments (calculator expressions by value, other values as trimmed, case-blind
  text), each expected call matched once, divided by max(expected calls, calls made); 1 when
  neither side has any.
- necessity: per turn, |needed ∩ used| / |needed ∪ used| over tool names (1 when both are
  empty), averaged over the task's turns: calling a tool a turn does not need costs as much
  as leaving out one it needs.
- result_use: of the successful calls whose result holds a number, the share with one of
  those numbers in the final answer of their turn; without such calls, 1 if the task needs
  no tool, else 0.
- answer: the share of turns with an expected answer whose final answer holds it (a number
  equal within 1e-6 relative, or the text, case-blind); 1 when no turn expects one.
- coherence: the share of the task's turns with a final answer that is non-empty, at most
  600 characters and free of tool-call markup.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aworld_train.env.calculator import CalculatorError, evaluate
from aworld_train.rewards.calculator import same_number

DEFAULT_WEIGHTS = {
    "tool_call_weight": 0.3,
    "necessity_weight": 0.2,
    "result_use_weight": 0.2,
    "answer_weight": 0.2,
    "coherence_weight": 0.1,
}
MAX_ANSWER_CHARS = 600
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_MARKUP = ("<tool_call>", "</tool_call>", '{"name"')


def numbers(text: str) -> list[float]:
    return [float(n) for n in _NUMBER.findall((text or "").replace(",", ""))]


def truth_turns(ground_truth: Any) -> list[dict[str, Any]]:
    truth = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    if not isinstance(truth, dict) or not isinstance(truth.get("turns"), list):
        raise ValueError('the four-tool ground truth must be {"turns": [{"calls": [...], "answer": ...}]}')
    return truth["turns"]


def turn_answers(messages: list[dict[str, Any]], turns: int) -> list[str | None]:
    """Each user turn's final answer (None when the turn ended on a tool call or never came)."""
    answers: list[str | None] = []
    segment: list[dict[str, Any]] | None = None
    for message in [*messages, {"role": "user"}]:
        if message.get("role") == "user":
            if segment is not None:
                last = segment[-1] if segment else None
                done = last is not None and last.get("role") == "assistant" and not last.get("tool_calls")
                answers.append(str(last.get("content") or "") if done else None)
            segment = []
        elif segment is not None and message.get("role") in ("assistant", "tool"):
            segment.append(message)
    answers = answers[:turns]
    return answers + [None] * (turns - len(answers))


def _value(name: str, key: str, value: Any) -> Any:
    if name == "calculator" and key == "expression":
        try:
            return float(evaluate(str(value)))
        except (CalculatorError, ValueError):
            return ("unparsable", str(value))
    return " ".join(str(value).split()).lower()


def _matches(expected: dict[str, Any], name: str, arguments: Any) -> bool:
    if expected["name"] != name or not isinstance(arguments, dict):
        return False
    wanted = expected.get("arguments") or {}
    return all(
        k in arguments and _value(name, k, arguments[k]) == _value(name, k, v) for k, v in wanted.items()
    )


def parts(trajectory: Any, ground_truth: Any) -> dict[str, float]:
    """The five unweighted parts of an episode."""
    turns = truth_turns(ground_truth)
    calls = list(trajectory.tool_calls)
    ok_calls = [c for c in calls if not c.error and c.result is not None]
    answers = turn_answers(trajectory.messages, len(turns))
    expected = [(t, e) for t, turn in enumerate(turns) for e in turn.get("calls") or []]
    return {
        "tool_call": _tool_call(expected, calls, ok_calls),
        "necessity": _necessity(turns, calls),
        "result_use": _result_use(ok_calls, answers, bool(expected)),
        "answer": _answer(turns, answers),
        "coherence": _coherence(answers),
    }


def _tool_call(expected: list[tuple[int, dict[str, Any]]], calls: list, ok_calls: list) -> float:
    """Expected calls made (in their turn, with equal arguments) over the larger of expected and made."""
    unmatched = list(expected)
    matched = 0
    for c in ok_calls:
        hit = next(
            ((t, e) for t, e in unmatched if t == c.user_turn and _matches(e, c.name, c.arguments)), None
        )
        if hit is not None:
            unmatched.remove(hit)
            matched += 1
    most = max(len(expected), len(calls))
    return matched / most if most else 1.0


def _necessity(turns: list[dict[str, Any]], calls: list) -> float:
    """Per turn, the overlap (Jaccard) of the tools needed and the tools used; their mean."""
    scores = []
    for t, turn in enumerate(turns):
        needed = {e["name"] for e in turn.get("calls") or []}
        used = {c.name for c in calls if c.user_turn == t}
        scores.append(1.0 if not needed | used else len(needed & used) / len(needed | used))
    return sum(scores) / len(scores) if scores else 1.0


def _result_use(ok_calls: list, answers: list[str | None], expected_any: bool) -> float:
    """The share of numeric tool results whose number the turn's answer repeats."""
    with_numbers = [c for c in ok_calls if numbers(c.result)]
    if not with_numbers:
        return 0.0 if expected_any else 1.0
    used_results = 0
    for c in with_numbers:
        answer = answers[c.user_turn] if c.user_turn < len(answers) else None
        said = numbers(answer or "")
        used_results += any(same_number(a, b) for a in numbers(c.result) for b in said)
    return used_results / len(with_numbers)


def _answer(turns: list[dict[str, Any]], answers: list[str | None]) -> float:
    """The share of graded turns whose answer holds the expected number (or text)."""
    graded = [(answers[t], turn["answer"]) for t, turn in enumerate(turns) if turn.get("answer") is not None]
    right = 0
    for said, wanted in graded:
        if said is None:
            continue
        wanted_numbers = numbers(str(wanted)) if _NUMBER.fullmatch(str(wanted).strip()) else []
        if wanted_numbers:
            right += any(same_number(wanted_numbers[0], n) for n in numbers(said))
        else:
            right += str(wanted).strip().lower() in said.lower()
    return right / len(graded) if graded else 1.0


def _coherence(answers: list[str | None]) -> float:
    """The share of turns answered in plain text: not empty, not too long, no call markup."""
    fine = [
        a is not None and a.strip() != "" and len(a) <= MAX_ANSWER_CHARS and not any(m in a for m in _MARKUP)
        for a in answers
    ]
    return sum(fine) / len(fine) if fine else 0.0


def five_part_reward(
    trajectory: Any,
    sample: dict[str, Any],
    tool_call_weight: float = DEFAULT_WEIGHTS["tool_call_weight"],
    necessity_weight: float = DEFAULT_WEIGHTS["necessity_weight"],
    result_use_weight: float = DEFAULT_WEIGHTS["result_use_weight"],
    answer_weight: float = DEFAULT_WEIGHTS["answer_weight"],
    coherence_weight: float = DEFAULT_WEIGHTS["coherence_weight"],
) -> dict[str, float]:
    """The weighted sum of the five parts; each part is a reward extra."""
    p = parts(trajectory, sample.get("ground_truth"))
    weights = {
        "tool_call": tool_call_weight,
        "necessity": necessity_weight,
        "result_use": result_use_weight,
        "answer": answer_weight,
        "coherence": coherence_weight,
    }
    return {"score": round(sum(weights[k] * p[k] for k in p), 10), **p}
