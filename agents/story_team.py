"""The story-problem team: a reader turns a short story into its arithmetic expression, then the
calculator agent computes it with its MCP tool and answers (an AWorld WorkflowSwarm). The two roles
need different skills, reading and calling a tool, which is what a policy per agent is for."""

from __future__ import annotations

from aworld_train.agents import calculator
from aworld_train.agents.calculator_team import teammate

READER_PROMPT = (
    "You turn a story into arithmetic. Reply with one expression that gives the final count: "
    "the starting number, then each change in order, in parentheses."
)
EXAMPLES = (
    ("Ann has 12 coins. Ann finds 7 more. How many coins does Ann have now?", "12 + 7"),
    (
        "Ben has 30 pens. Ben sells 4. Ben then has 3 times as many. How many pens does Ben have now?",
        "(30 - 4) * 3",
    ),
)


def build_team(url: str | None = None, provider: str = "aworld_train"):
    """The reader, then the calculator agent, as an AWorld WorkflowSwarm."""
    from aworld_train.aworld.framework import SWARM_CLASSES

    few_shot = [
        turn
        for story, expression in EXAMPLES
        for turn in ({"role": "user", "content": story}, {"role": "assistant", "content": expression})
    ]
    reader = teammate(
        "reader", "Turns a story into its arithmetic expression", READER_PROMPT, few_shot, provider=provider
    )
    solver = calculator.build_agent(url, provider)
    return SWARM_CLASSES["workflow"](reader, solver, name="story_team")
