"""The calculator agent, reward and rows the backend tests render runs from."""

from __future__ import annotations

from aworld_train import AgentTrainer

AGENT = "aworld_train.agents.calculator:build_agent"
REWARD = "aworld_train.rewards.calculator:exact_answer"
ROWS = [{"prompt": f"What is {i} * 3?", "ground_truth": i * 3} for i in range(1, 5)]


def trainer_for(tmp_path, config, **kwargs) -> AgentTrainer:
    args = {
        "agent": AGENT,
        "reward_func": REWARD,
        "train_dataset": ROWS,
        "test_dataset": ROWS[:2],
        "run_path": tmp_path / "run",
    }
    args.update(kwargs)
    return AgentTrainer(config=config, **args)
