"""BFCL multi-turn rewards: the official checker, turn progress, call format, and a weighted mix.

All take `(trajectory, sample)`; the sample's `task_id` (the row's `id`) is the BFCL entry id (the rows
`aworld_train.env.bfcl.data` builds). The calls scored are the ones the episode
made, grouped by user turn and by model step as BFCL groups a model's results, and
bfcl-eval's own `multi_turn_checker` judges them: it re-executes them in fresh
environment instances and compares state and responses with the possible answer
after every turn. A reward of 1 from `checker` means BFCL counts the entry as solved.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from aworld_train.env.bfcl import catalog

DEFAULT_WEIGHTS = {"checker": 1.0}


def call_text(name: str, arguments: dict[str, Any]) -> str:
    """A call as BFCL writes one: name(key=repr(value), ...)."""
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


def _well_formed(name: str, arguments: Any, docs: dict[str, dict]) -> bool:
    """A call of one of the entry's functions, with declared parameter names and every required one."""
    doc = docs.get(name)
    if doc is None or not isinstance(arguments, dict):
        return False
    params = doc.get("parameters") or {}
    declared = set(params.get("properties") or {})
    return set(arguments) <= declared and set(params.get("required") or []) <= set(arguments)


def model_turns(trajectory: Any, entry: dict[str, Any]) -> list[list[list[str]]]:
    """The episode's calls as BFCL's decoded model result: turn -> step -> calls.

    Only calls of the entry's own functions with identifier keywords are kept: the
    checker evaluates call text, and anything else could only fail there. Turns the
    episode never reached are absent, as in a force-terminated BFCL run.
    """
    names = {d["name"] for d in catalog.revealed_docs(entry, len(entry["question"]))}
    reached = max([trajectory.user_turns] + [c.user_turn + 1 for c in trajectory.tool_calls])
    turns: list[dict[int, list[str]]] = [{} for _ in range(reached)]
    for call in trajectory.tool_calls:
        args = call.arguments if isinstance(call.arguments, dict) else {}
        if call.name in names and all(isinstance(k, str) and k.isidentifier() for k in args):
            turns[call.user_turn].setdefault(call.turn, []).append(call_text(call.name, args))
    return [[steps[k] for k in sorted(steps)] for steps in turns]


def official_check(model: list[list[list[str]]], entry: dict[str, Any], truth: list[list[str]]) -> dict:
    """bfcl-eval's verdict on decoded model results, as its eval runner reaches it."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    if len(model) != len(truth):
        return {"valid": False, "error_type": "multi_turn:force_terminated"}
    # The executor caches instances in its module globals by model name and entry id:
    # a fresh name per check keeps checks independent, and its instances are dropped after.
    name = f"aworld_train_{uuid.uuid4().hex}"
    try:
        return multi_turn_checker(model, truth, entry, entry["id"].rsplit("_", 1)[0], name)
    finally:
        store = vars(multi_turn_utils)
        for key in [k for k in store if k.startswith(name)]:
            del store[key]


def _entry_and_truth(sample: dict[str, Any]) -> tuple[dict[str, Any], list[list[str]]]:
    # task_id is the row's id under every backend (verl's rows carry it in extra_info)
    entry_id = str(sample.get("task_id") or sample.get("id") or "")
    truth = sample.get("ground_truth")
    if isinstance(truth, str):
        truth = json.loads(truth)
    return catalog.entry(entry_id), truth or catalog.possible_answer(entry_id)


def _scores(trajectory: Any, sample: dict[str, Any]) -> dict[str, float]:
    entry, truth = _entry_and_truth(sample)
    model = model_turns(trajectory, entry)
    verdict = official_check(model, entry, truth)
    if verdict["valid"]:
        passed = len(truth)
    else:
        # The checker stops at the first failing turn: the longest passing prefix is the progress.
        passed = 0
        while (
            passed < min(len(model), len(truth))
            and official_check(model[: passed + 1], entry, truth[: passed + 1])["valid"]
        ):
            passed += 1
    docs = {d["name"]: d for d in catalog.revealed_docs(entry, len(truth))}
    calls = trajectory.tool_calls
    formed = sum(_well_formed(c.name, c.arguments, docs) for c in calls)
    well = 0.0 if trajectory.status == "malformed_tool_call" or not calls else formed / len(calls)
    return {
        "checker": 1.0 if verdict["valid"] else 0.0,
        "progress": passed / len(truth) if truth else 0.0,
        "format": well,
        "error_type": verdict.get("error_type", ""),
    }


def checker(trajectory: Any, sample: dict[str, Any]) -> dict[str, Any]:
    """1.0 when bfcl-eval's multi-turn checker accepts the episode's calls, else 0.0."""
    return combined(trajectory, sample, weights={"checker": 1.0})


def progress(trajectory: Any, sample: dict[str, Any]) -> dict[str, Any]:
    """The fraction of user turns passed before the first failing one (the fine-grained reward)."""
    return combined(trajectory, sample, weights={"progress": 1.0})


def format_reward(trajectory: Any, sample: dict[str, Any]) -> dict[str, Any]:
    """The fraction of calls that name one of the entry's functions with valid parameter names."""
    return combined(trajectory, sample, weights={"format": 1.0})


def combined(
    trajectory: Any, sample: dict[str, Any], weights: dict[str, float] | None = None
) -> dict[str, Any]:
    """sum(weight * part) over the parts checker, progress and format; every part is reported.

    Set the weights in the config: `reward: {fn: aworld_train.rewards.bfcl:combined,
    kwargs: {weights: {checker: 1.0, progress: 0.5}}}`.
    """
    weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
    unknown = sorted(set(weights) - {"checker", "progress", "format"})
    if unknown:
        raise ValueError(f"reward.kwargs.weights: unknown part(s) {unknown}; use checker, progress, format")
    parts = _scores(trajectory, sample)
    score = sum(float(w) * float(parts[k]) for k, w in weights.items())
    return {"score": score, **parts}
