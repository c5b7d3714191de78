"""The depot-reports agent (examples/long_reports/): reads a depot's daily reports, one call each,
and answers with the crates received over the days a question names.

Its reports overflow a small context budget, so it keeps its context short with AWorld's own
summary (`enable_summary`): from the second report on, the agent's own LLM, the policy, writes notes
on the reports before the latest one, and the next call sees the notes and that report instead of
all of them. The notes are sampled answers of the policy and train with the rest
(docs/REWRITING_AGENTS.md).
`build_agent_without_summary` is the same agent seeing its whole history, which a budget cuts short.
"""

from __future__ import annotations

import json

from aworld_train.agents.mcp_config import AgentText, env_url, one_server_agent, streamable_http
from aworld_train.core.protocol import url_variable
from aworld_train.env.reports import title

URL_VARIABLE = url_variable("reports")
DEFAULT_URL = "http://127.0.0.1:8769/mcp"

SYSTEM_PROMPT = (
    "Read the report of every day the question names with read_report, one call per day. "
    "Then answer with each day's crates and their total."
)

# AWorld's summary prompt, short: its default is about 400 tokens of guidance that a 135M model
# does not follow and that a 1k-token budget cannot hold beside a report. AWorld fills the fields
# with Python lists of the messages.
NOTES_PROMPT = (
    "Task: {user_task}\nNotes so far: {existed_summary}\nNew messages: {to_be_summary}\n"
    "Write the notes again with the crates of every day read so far, like 'day 1: 4 crates'.\nNotes:"
)
# a summary once the history holds a report and the call that read it: every report is read once,
# then replaced by the notes
SUMMARY = {
    "enable_summary": True,
    "summary_rounds": 2,
    "summary_prompts": [{"template": NOTES_PROMPT, "summary_rule": "", "summary_schema": ""}],
}


def _call(call_id: str, depot: str, day: int) -> dict:
    arguments = json.dumps({"depot": depot, "day": day})
    return {"id": call_id, "type": "function", "function": {"name": "read_report", "arguments": arguments}}


def _worked_example(depot: str, crates: list[int]) -> list[dict]:
    days = len(crates)
    turns: list[dict] = [{"role": "user", "content": question(depot, days)}]
    for day, count in enumerate(crates, start=1):
        call_id = f"example_{depot}_{day}"
        report = f"{title(depot, day)}\nCrates received: {count}."
        turns.append({"role": "assistant", "content": "", "tool_calls": [_call(call_id, depot, day)]})
        turns.append({"role": "tool", "content": report, "tool_call_id": call_id})
    listed = ", ".join(f"day {day}: {count}" for day, count in enumerate(crates, start=1))
    turns.append({"role": "assistant", "content": f"{listed}. The answer is {sum(crates)}."})
    return turns


def question(depot: str, days: int) -> str:
    return f"How many crates did depot {depot} receive on days 1 to {days} in total?"


# Two worked examples as real chat turns (a 135M model copies the call format from turns; given one,
# it broke most of its calls), with short reports so that they cost the budget little.
FEW_SHOT = _worked_example("B2", [4, 7]) + _worked_example("F5", [6, 2])


def mcp_config(url: str | None = None, timeout_s: float = 30.0) -> dict:
    """The agent's MCP config. The URL stays an env reference until a worker runs it."""
    return streamable_http("reports", url or env_url(URL_VARIABLE, DEFAULT_URL), timeout_s)


AGENT = AgentText("reports_agent", "Totals a depot's crates from its daily reports", SYSTEM_PROMPT, FEW_SHOT)


def build_agent(url: str | None = None, provider: str = "aworld_train"):
    """The agent with AWorld's summary: notes in place of the reports it has read."""
    return one_server_agent(AGENT, mcp_config(url), provider, memory=SUMMARY)


def build_agent_without_summary(url: str | None = None, provider: str = "aworld_train"):
    """The same agent seeing its whole history (AWorld's default memory)."""
    return one_server_agent(AGENT, mcp_config(url), provider)
