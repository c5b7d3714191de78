"""Two-agent teams for the calculator tasks, both agents training, each on its own ledger:

- `build_pipeline`: an AWorld WorkflowSwarm: a planner rewrites the question as the bare
  expression, then the calculator agent computes it with its MCP tool and answers.
- `build_team`: an AWorld TeamSwarm: a coordinator hands the expression to the calculator
  agent, its tool, and answers with what it got back.
"""

from __future__ import annotations

import json

from aworld_train.agents import calculator

PLANNER_PROMPT = "You plan for a calculator agent. Reply with the arithmetic expression of the question only."
COORDINATOR_PROMPT = (
    "You coordinate a team. Send the arithmetic expression of the question to calculator_agent, "
    "then answer with the number it gives."
)
EXAMPLES = (("What is 12 * 7?", "12 * 7", "84"), ("What is (5 + 9) - 3?", "(5 + 9) - 3", "11"))


def _planner_example(question: str, expression: str) -> list[dict]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": expression}]


def _coordinator_example(question: str, expression: str, answer: str, call_id: str) -> list[dict]:
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "calculator_agent", "arguments": json.dumps({"content": expression})},
    }
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": f"The answer is {answer}.", "tool_call_id": call_id},
        {"role": "assistant", "content": f"The answer is {answer}."},
    ]


def teammate(name: str, desc: str, prompt: str, few_shot: list[dict], *, provider: str):
    """A trained agent of the team with its few-shot turns (read by aworld-train's agent spec)."""
    from aworld_train.aworld.framework import Agent, AgentConfig

    agent = Agent(name=name, desc=desc, system_prompt=prompt, conf=AgentConfig(llm_provider=provider))
    agent.few_shot = few_shot
    return agent


def build_pipeline(url: str | None = None, provider: str = "aworld_train"):
    """The planner, then the calculator agent, as an AWorld WorkflowSwarm."""
    from aworld_train.aworld.framework import SWARM_CLASSES

    planner = teammate(
        "planner",
        "Rewrites an arithmetic question as its expression",
        PLANNER_PROMPT,
        [turn for q, e, _ in EXAMPLES for turn in _planner_example(q, e)],
        provider=provider,
    )
    solver = calculator.build_agent(url, provider)
    return SWARM_CLASSES["workflow"](planner, solver, name="calculator_pipeline")


def build_team(url: str | None = None, provider: str = "aworld_train"):
    """The coordinator with the calculator agent as its tool, as an AWorld TeamSwarm."""
    from aworld_train.aworld.framework import SWARM_CLASSES

    coordinator = teammate(
        "coordinator",
        "Hands arithmetic to the calculator agent and reports its answer",
        COORDINATOR_PROMPT,
        [
            turn
            for i, (q, e, a) in enumerate(EXAMPLES)
            for turn in _coordinator_example(q, e, a, f"example_{i + 1}")
        ],
        provider=provider,
    )
    solver = calculator.build_agent(url, provider)
    return SWARM_CLASSES["team"](coordinator, solver, name="calculator_team")
