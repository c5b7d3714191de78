"""The weighted ToolBench reward, with the weights users set in their verl YAML.

score = format_reward_weight * format + function_call_reward_weight * function_call
      + finish_reward_weight * finish + finish_bonus (solved) + error_penalty (any error)

- format: the share of the episode's calls that name one of the task's functions or
  Finish with the declared parameters (every required one, no unknown one); 0 without calls.
- function_call: the share of the task's relevant APIs called successfully at least once.
- finish: 1 when Finish was called successfully with give_answer and a final answer.
- finish_bonus: added when finish is 1, every relevant API was called and nothing failed.
- error_penalty: added (it is negative) when any call failed (an error answer, an unknown
  function, arguments the server refused).

With the defaults (0.1, 0.2, 0.3, -0.5, 0.5) a solved task scores 1.1. Every term is a
reward extra. The weights come from `reward.kwargs`, or from a native verl YAML's
`reward_model` section (see `engines/verl/render.py`).
"""

from __future__ import annotations

from typing import Any

from aworld_train.env.toolbench.catalog import FINISH, GIVE_ANSWER, ToolBenchTask, input_schema, task_from_row

DEFAULTS = {
    "format_reward_weight": 0.1,
    "function_call_reward_weight": 0.2,
    "finish_reward_weight": 0.3,
    "error_penalty": -0.5,
    "finish_bonus": 0.5,
}


def _well_formed(name: str, arguments: Any, task: ToolBenchTask) -> bool:
    if not isinstance(arguments, dict):
        return False
    if name == FINISH:
        return arguments.get("return_type") in ("give_answer", "give_up_and_restart")
    api = task.functions().get(name)
    if api is None:
        return False
    schema = input_schema(api)
    return set(arguments) <= set(schema["properties"]) and set(schema["required"]) <= set(arguments)


def terms(trajectory: Any, task: ToolBenchTask) -> dict[str, float]:
    """The unweighted terms of an episode on `task`."""
    calls = list(trajectory.tool_calls)
    functions = task.functions()
    relevant = set(task.relevant_functions()) or set(functions)
    succeeded = {c.name for c in calls if not c.error and c.result is not None}
    finished = any(
        c.name == FINISH
        and not c.error
        and c.result is not None
        and isinstance(c.arguments, dict)
        and c.arguments.get("return_type") == GIVE_ANSWER
        and str(c.arguments.get("final_answer") or "").strip()
        for c in calls
    )
    errors = sum(1 for c in calls if c.error)
    return {
        "format": sum(_well_formed(c.name, c.arguments, task) for c in calls) / len(calls) if calls else 0.0,
        "function_call": len(relevant & succeeded) / len(relevant),
        "finish": 1.0 if finished else 0.0,
        "errors": float(errors),
    }


def toolbench_reward(
    trajectory: Any,
    sample: dict[str, Any],
    format_reward_weight: float = DEFAULTS["format_reward_weight"],
    function_call_reward_weight: float = DEFAULTS["function_call_reward_weight"],
    finish_reward_weight: float = DEFAULTS["finish_reward_weight"],
    error_penalty: float = DEFAULTS["error_penalty"],
    finish_bonus: float = DEFAULTS["finish_bonus"],
) -> dict[str, float]:
    """The weighted score of a ToolBench episode, with every term as an extra."""
    task = task_from_row(sample)
    t = terms(trajectory, task)
    solved = t["finish"] == 1.0 and t["function_call"] == 1.0 and t["errors"] == 0
    parts = {
        "format_reward": format_reward_weight * t["format"],
        "function_call_reward": function_call_reward_weight * t["function_call"],
        "finish_reward": finish_reward_weight * t["finish"],
        "finish_bonus": finish_bonus if solved else 0.0,
        "error_penalty": error_penalty if t["errors"] else 0.0,
    }
    return {
        "score": round(sum(parts.values()), 10),
        **parts,
        "format": t["format"],
        "function_call": t["function_call"],
        "finish": t["finish"],
        "errors": t["errors"],
        "solved": float(solved),
    }
