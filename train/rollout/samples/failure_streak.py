"""Stop a run that cannot learn: steps in a row where every episode failed for one cause, and a
run that ends having trained on no episode at all.

A reward that returns NaN everywhere, a tool server that is down or a config that breaks every
episode leaves nothing to train on; without a stop the run would print reward 0 for hours and
exit 0. Failures with mixed causes, or any episode that counts, reset the streak. A reward that
fails on every episode of a step stops the run at that step: it scores finished trajectories, so
such a failure is its code's, and no later step will fare otherwise. However short a run, if it
trained on nothing it fails (`TrainedSoFar`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aworld_train.core.errors import RunCannotLearn
from aworld_train.rollout.episodes.trajectory import FAILED_STATUSES, Trajectory

# causes that stop a run at the first step every episode of which failed for them
STOP_AT_ONCE = frozenset({"reward_error"})

# what a user can do about each cause
FIXES = {
    "reward_error": "the reward function fails or returns a non-finite value: see the message and fix reward.fn",
    "tool_server_down": "an MCP server of the agent does not answer: start it, or list it under env:",
    "tool_timeout": "tool calls run past rollout.tool_timeout_s: check the server, or raise the limit",
    "timeout": "episodes run past rollout.episode_timeout_s: raise it, or check the agent and its tools",
    "prompt_too_long": "first prompts do not fit: raise rollout.max_prompt_tokens, or shorten them",
    "segment_too_long": "the agent rewrites its history into prompts that do not fit: raise the limit the "
    "message names (rollout.max_prompt_tokens or rollout.max_total_tokens), or keep its summaries and "
    "trimmed histories shorter",
    "error": "the agent or the policy raises: see the message",
    "worker_died": "rollout worker processes exit mid-episode (killed, out of memory?): check the machine's "
    "memory and logs, or lower rollout.workers or rollout.concurrency",
    "malformed_tool_call": "the policy writes tool calls no agent can run (the parser cannot read them, "
    "or they name a tool the call does not offer: see the example): check rollout.tool_parser, or set "
    "rollout.train_on_malformed: true",
    "stale": "groups finish more than algorithm.max_staleness weight versions behind the learner: raise "
    "algorithm.max_staleness, lower rollout.concurrency, or set algorithm.max_staleness: 0 (synchronous)",
}


def one_failure_cause(trajectories: Sequence[Trajectory]) -> tuple[str, str] | None:
    """(status, an example error) when every trajectory failed with the same status, else None."""
    statuses = {t.status for t in trajectories}
    cause = next(iter(statuses)) if len(statuses) == 1 else None
    if not trajectories or cause not in FAILED_STATUSES:
        return None
    return cause, next((t.error for t in trajectories if t.error), "")


@dataclass
class FailureStreak:
    limit: int  # steps in a row that stop the run; 0 never stops
    cause: str | None = None
    steps: int = 0

    def observe(self, trajectories: Sequence[Trajectory]) -> None:
        """Count this step; raise RunCannotLearn once `limit` steps in a row failed for one cause."""
        self.record(one_failure_cause(trajectories))

    def record(self, failure: tuple[str, str] | None) -> None:
        """Count a step that failed as a whole for (cause, an example), or (None) one that did not."""
        if failure is None:
            self.cause, self.steps = None, 0
            return
        cause, example = failure
        self.steps = self.steps + 1 if cause == self.cause else 1
        self.cause = cause
        if self.limit and (self.steps >= self.limit or cause in STOP_AT_ONCE):
            steps = "the last step" if self.steps == 1 else f"the last {self.steps} steps"
            raise RunCannotLearn(
                f"every {'group' if cause == 'stale' else 'episode'} of {steps} ended as {cause!r}"
                + (f" ({example})" if example else "")
                + f"; nothing can be learned from them: {FIXES.get(cause, 'see the message')}. "
                "trainer.stop_after_failed_steps=0 keeps such a run going"
            )

    # a resumed run goes on counting where its checkpoint was saved
    def state(self) -> dict[str, Any]:
        return {"cause": self.cause, "steps": self.steps}

    def load(self, state: dict[str, Any] | None) -> None:
        if state:
            self.cause, self.steps = state["cause"], state["steps"]


@dataclass
class TrainedSoFar:
    """What a run's steps trained on: a run that ends with no trained episode failed, whatever its
    length (a one-step run of a broken reward ends before any streak limit)."""

    steps: int = 0
    trained: int = 0
    statuses: Counter = field(default_factory=Counter)
    example: str = ""

    def observe(self, trajectories: Sequence[Trajectory], trained: int) -> None:
        self.steps += 1
        self.trained += trained
        self.statuses.update(t.status for t in trajectories)
        self.example = self.example or next((t.error for t in trajectories if t.error), "")

    def state(self) -> dict[str, Any]:
        return {**asdict(self), "statuses": dict(self.statuses)}

    def load(self, state: dict[str, Any] | None) -> None:
        if state:
            self.steps, self.trained, self.example = state["steps"], state["trained"], state["example"]
            self.statuses = Counter(state["statuses"])

    def require_some(self) -> None:
        """RunCannotLearn if the steps so far trained on no episode."""
        if self.trained or not self.steps:
            return
        cause = self.statuses.most_common(1)[0][0] if self.statuses else ""
        listed = ", ".join(f"{status} {n}" for status, n in self.statuses.most_common())
        raise RunCannotLearn(
            f"no episode of the run's {self.steps} step(s) could be trained ({listed}"
            + (f"; e.g. {self.example}" if self.example else "")
            + f"): the run learned nothing; {FIXES.get(cause, 'see the episodes in the run folder')}"
        )
