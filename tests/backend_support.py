"""The calculator agent, reward and rows the backend tests render runs from, a scripted calculator
model for the engines' fake servers, and the kwargs an AReaL run folder gives our workflow."""

from __future__ import annotations

import json
import re

import yaml

from aworld_train import AgentTrainer
from aworld_train.inputs.config import is_native_verl

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
    if isinstance(config, dict) and not is_native_verl(config):  # the run starts the calculator
        config = {"env": [{"name": "calculator"}], **config}
    return AgentTrainer(config=config, **args)


def calculator_reply(prompt_text: str) -> str:
    """A calculate call for the last question, then the answer the tool returned."""
    question = re.findall(r"What is ([^?]+)\?", prompt_text)[-1]
    after_question = prompt_text[prompt_text.rindex("What is") :]  # past the agent's few-shot turns
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", after_question)
    if results:
        return f"The answer is {results[-1]}."
    return (
        "<tool_call>\n"
        + json.dumps({"name": "calculate", "arguments": {"expression": question}})
        + "\n</tool_call>"
    )


def workflow_kwargs(run) -> dict:
    return yaml.safe_load((run.folder / "workflow.yaml").read_text())["kwargs"]
