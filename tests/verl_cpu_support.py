"""Reward for the CPU run of verl's trainer. A random tiny model never answers right, so
exact_answer would give every sample 0 and GRPO no gradient; this dense stand-in scores the
share of distinct characters in the answer, which differs between samples of a group."""

FAILING_TRUTH = -1  # the task whose reward fails: its episodes end as reward_error, inside verl's run


def distinct_chars(data_source, solution_str, ground_truth, extra_info=None):
    if str(ground_truth) == str(FAILING_TRUTH):
        raise ValueError("this task's reward fails on purpose")
    text = solution_str or ""
    return {"score": len(set(text)) / max(1, len(text)), "chars": len(text)}
