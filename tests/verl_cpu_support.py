"""For the CPU runs of verl's trainer: their reward, and verl's step lines read back.

A random tiny model never answers right, so exact_answer would give every sample 0 and GRPO no
gradient; this dense stand-in scores the share of distinct characters in the answer, which
differs between samples of a group."""

import ast
import re

FAILING_TRUTH = -1  # the task whose reward fails: its episodes end as reward_error, inside verl's run


def distinct_chars(data_source, solution_str, ground_truth, extra_info=None):
    if str(ground_truth) == str(FAILING_TRUTH):
        raise ValueError("this task's reward fails on purpose")
    text = solution_str or ""
    return {"score": len(set(text)) / max(1, len(text)), "chars": len(text)}


STEP_LINE = re.compile(r"step:(\d+) - (.*)$")


def parse_steps(log: str) -> dict[int, dict[str, float]]:
    """verl's console logger line per step: `step:N - key:value - key:value ...`."""
    steps: dict[int, dict[str, float]] = {}
    for line in log.splitlines():
        match = STEP_LINE.search(line)
        if not match:
            continue
        metrics = {}
        for item in match.group(2).split(" - "):
            key, _, value = item.partition(":")
            value = re.sub(r"^np\.\w+\((.*)\)$", r"\1", value.strip())
            try:
                metrics[key] = float(ast.literal_eval(value))
            except (ValueError, SyntaxError):
                continue
        steps[int(match.group(1))] = metrics
    return steps
