"""The seams between an episode and what it runs: the agent, and the reward that scores it.

The rollout core (ledger, limits, statuses, codec) knows an agent only through these protocols:
an `AgentDriver` starts one `AgentRun` per episode, whose every LLM call the driver routes to the
episode's `complete` (an `LLMEndpoint`), answered with a `Reply`. The AWorld driver is
`aworld_train.aworld.driver`; its `AgentSpec` is the driver a run is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from aworld_train.rollout.trajectory import Task, Trajectory


@dataclass
class Reply:
    """The answer to one LLM call: the visible text and the parsed tool calls, OpenAI-shaped
    (`{"id", "type": "function", "function": {"name", "arguments"}}`)."""

    id: str
    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: dict[str, int] = field(default_factory=dict)


class LLMEndpoint(Protocol):
    """Where an agent's LLM calls land: the episode."""

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Reply: ...


class AgentRun(Protocol):
    """One agent, built for one episode."""

    async def turn(self, user_turn: int, text: str) -> str | None:
        """Run user turn `user_turn` to its end; why the agent ended it without success, or None."""
        ...

    async def release(self) -> None:
        """Leave nothing of the episode behind in the agent's framework, however it ended."""
        ...


class AgentDriver(Protocol):
    """An agent that episodes can run: picklable (rollout workers get a copy)."""

    few_shot: list[dict[str, Any]]  # example turns placed after the system message of every prompt
    mcp_config: dict[str, Any]  # {"mcpServers": {name: {"url": ...}}}: the tools' servers
    mcp_servers: list[str]  # the servers of mcp_config the agent uses

    def start(self, endpoint: LLMEndpoint, episode_id: str, task: Task, max_turns: int) -> AgentRun:
        """The agent for one episode, its LLM calls sent to `endpoint`; nothing runs yet."""
        ...


class Reward(Protocol):
    """What scores a finished episode (`aworld_train.reward.RewardFunction`); raises RewardError
    with the fix, or returns (score, extras)."""

    reference: str  # names the function in errors

    def __call__(self, trajectory: Trajectory, sample: dict[str, Any]) -> tuple[float, dict[str, Any]]: ...
