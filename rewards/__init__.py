"""Reward functions. Each accepts verl's (data_source, solution_str, ground_truth, extra_info=None)."""
