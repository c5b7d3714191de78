"""Reward functions for the adapter tests (importable by reference, as workers need)."""


def verl_style(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if str(ground_truth) in solution_str else 0.0


def trajectory_style(trajectory, sample):
    return {
        "score": float(len(trajectory.tool_calls)),
        "used_tools": bool(trajectory.tool_calls),
        "id": sample["task_id"],
    }


def wrong_signature(answer, truth):
    return 0.0


def returns_text(data_source, solution_str, ground_truth, extra_info=None):
    return "good"


def make_closure():
    def inner(data_source, solution_str, ground_truth, extra_info=None):
        return 0.0

    return inner


def always_nan(data_source, solution_str, ground_truth, extra_info=None):
    return float("nan")


def text_length(data_source, solution_str, ground_truth, extra_info=None):
    """A score that differs between a group's samples (whatever a random model says): every group
    has an advantage, so every step trains."""
    return len(solution_str) / 100.0
