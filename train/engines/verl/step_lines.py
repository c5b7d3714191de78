"""verl's step lines read back, and the mismatch line a run adds after each.

verl's console logger prints one line per step, `step:N - key:value - key:value ...`
(verl/utils/logger/aggregate_logger.py, `concat_dict_to_str`; a value may read `np.float64(...)`).
Among its figures, with `rollout.calculate_log_probs` (which the render sets), is the rollout's
agreement with the actor's recomputation of the same tokens before the update
(verl/utils/debug/metrics.py): the mean and max absolute difference of each sampled token's
probability. It is the verl run's proof that the rollout sampled from the weights being trained
(with an unmerged LoRA adapter: that the adapter reached the rollout), and the launcher repeats it
after each step line, with the warning every engine gives above `algorithm.mismatch_tolerance`
(engines/logprob_mismatch.py). A probability difference is at most the logprob difference the local
backend reports, so the same tolerance warns no sooner here.
"""

from __future__ import annotations

import ast
import re

from aworld_train.engines.logprob_mismatch import rollout_mismatch_warning, with_warning

STEP_LINE = re.compile(r"step:(\d+) - (.*)$")
DIFF_MEAN = "training/rollout_probs_diff_mean"
DIFF_MAX = "training/rollout_probs_diff_max"
DIFF_VALID = "training/rollout_probs_diff_valid"  # 0: the step had no sampled token to compare


def parse_step_line(line: str) -> tuple[int, dict[str, float]] | None:
    """The step and its numeric figures from one of verl's step lines; None for any other line."""
    match = STEP_LINE.search(line)
    if not match:
        return None
    metrics: dict[str, float] = {}
    for item in match.group(2).split(" - "):
        key, _, value = item.partition(":")
        value = re.sub(r"^np\.\w+\((.*)\)$", r"\1", value.strip())
        try:
            metrics[key] = float(ast.literal_eval(value))
        except (ValueError, SyntaxError, TypeError):
            continue  # nan, inf and text: no figure to read
    return int(match.group(1)), metrics


def mismatch_line(step: int, metrics: dict[str, float], tolerance: float | None) -> str | None:
    """`verl step N: rollout probability mismatch MEAN (max MAX)`, with its warning where above
    `tolerance`; None where the step measured none."""
    if not metrics.get(DIFF_VALID) or DIFF_MEAN not in metrics:
        return None
    # three significant digits: a rollout that serves the trained weights differs by ~1e-6 here
    line = f"verl step {step}: rollout probability mismatch {metrics[DIFF_MEAN]:.3g}"
    if DIFF_MAX in metrics:
        line += f" (max {metrics[DIFF_MAX]:.3g})"
    warning = rollout_mismatch_warning(metrics[DIFF_MEAN], tolerance, f"token probabilities ({DIFF_MEAN})")
    return with_warning(line, warning)


class MismatchWatch:
    """Reads a verl run's output line by line; after each step line, the line to add (or None)."""

    def __init__(self, tolerance: float | None) -> None:
        self.tolerance = tolerance

    def __call__(self, line: str) -> str | None:
        parsed = parse_step_line(line)
        return None if parsed is None else mismatch_line(*parsed, self.tolerance)
