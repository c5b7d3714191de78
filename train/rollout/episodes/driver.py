"""The seams between an episode and what it runs: the agent, and the reward that scores it.

The rollout core (ledger, limits, statuses, codec) knows an agent only through these protocols:
an `AgentDriver` starts one `AgentRun` per episode, whose every LLM call the driver routes to the
episode's `complete` (an `LLMEndpoint`), answered with a `Reply`. A driver may run several agents
(a multi-agent team): each call names its agent, and the episode keeps one token ledger per agent.
The AWorld drivers are `aworld_train.aworld.agent_spec.AgentSpec` (one agent) and
`aworld_train.aworld.swarm_spec.SwarmSpec` (an AWorld swarm).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from aworld_train.rollout.episodes.trajectory import Task, Trajectory


@dataclass
class Reply:
    """The answer to one LLM call: the visible text and the parsed tool calls, OpenAI-shaped
    (`{"id", "type": "function", "function": {"name", "arguments"}}`)."""

    id: str
    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: dict[str, int] = field(default_factory=dict)
    logprobs: list[tuple[str, float]] | None = None  # (token text, logprob) per sampled id, if asked
    others: list[Reply] = field(default_factory=list)  # choices 2..n of a call that asked for n


@dataclass(frozen=True)
class CallOptions:
    """What one call may ask beyond its messages and tools (an OpenAI-compatible request's fields).

    Temperature, top-p and top-k stay the run's (`rollout.temperature`, ...): the trainer computes
    its logprobs under them, so a call sampled otherwise would not be the policy it trains."""

    max_tokens: int | None = None  # at most the run's max_new_tokens and the episode's budget
    stop: tuple[str, ...] = ()  # the answer ends before the first of these
    seed: int | None = None  # used when the episode has no seed of its own
    n: int = 1  # choices; the first extends the ledger (ARCHITECTURE.md, the gateway)
    logprobs: bool = False
    # auto: the policy decides; none: an answer (a turn that calls ends the episode malformed);
    # required: a call to any of the tools; function: a call to `tool_name`. A forced call opens
    # with the template's call text up to the name (or the arguments) as prompt, never as loss
    tool_choice: Literal["auto", "none", "required", "function"] = "auto"
    tool_name: str | None = None  # the tool a `function` choice forces
    parallel_tool_calls: bool = True  # False: the turn ends after its first call
    # the JSON schema the answer must follow (json_object: {"type": "object"}): sampled under the
    # schema's grammar by a policy that can constrain sampling (PolicyClient.constrains)
    json_schema: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if (self.tool_choice == "function") != (self.tool_name is not None):
            raise ValueError("tool_name names the tool of tool_choice='function', and only then")


class CallRefused(ValueError):
    """A call an episode cannot take, found before any of it is tokenized: a prompt the run's
    token budget cannot hold, token ids outside the vocabulary. The gateway answers it with
    `status` (naming `param`) and the episode goes on; a call made in-process ends the episode."""

    def __init__(
        self, message: str, param: str | None, status: int = 400, kind: str = "invalid_request_error"
    ):
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind


@dataclass(frozen=True)
class AgentRole:
    """What an episode needs to know of one agent a driver runs."""

    name: str
    few_shot: list[dict[str, Any]] = field(default_factory=list)  # after the system message of its prompts
    mcp_servers: list[str] = field(default_factory=list)  # the servers of the driver's mcp_config it uses


class LLMEndpoint(Protocol):
    """Where an agent's LLM calls land: the episode."""

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        agent: str = "",
        options: CallOptions | None = None,
    ) -> Reply:
        """Answer one LLM call of agent `agent` (one of the driver's roles; "" for its first)."""
        ...

    async def complete_text(
        self, prompt: str | list[int], agent: str = "", options: CallOptions | None = None
    ) -> list[Reply]:
        """A text completion (no chat template): a reply per choice, its text the content."""
        ...

    def report_reward(self, reward: float, extras: dict[str, Any]) -> None:
        """Keep a reward the agent reported for the episode (the reward function may read it)."""
        ...

    def report_answer(self, text: str) -> None:
        """The answer the agent gave for the user turn that just ended (what its framework returned:
        a final-answer tool's argument, a structured response), which the reward reads; without
        one, the last reply that called no tool is the answer."""
        ...

    def check_call(
        self,
        agent: str = "",
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        prompt: str | list[int] | None = None,
        options: CallOptions | None = None,
    ) -> None:
        """Raise CallRefused for a call (chat `messages` and `tools`, or a text `prompt`, with
        `options`) the episode cannot take; cheap, and safe from any thread (it reads no episode
        state)."""
        ...

    def ended(self) -> tuple[str, str | None] | None:
        """Once the episode has ended: its status and why (the error its record keeps); else None."""
        ...


class AgentRun(Protocol):
    """One agent, built for one episode."""

    async def turn(self, user_turn: int, text: str) -> str | None:
        """Run user turn `user_turn` to its end; why the agent ended it without success, or None."""
        ...

    async def release(self) -> None:
        """Leave nothing of the episode behind in the agent's framework, however it ended."""
        ...


class AgentDriver(Protocol):
    """One agent, or a team of agents, that episodes can run: picklable (rollout workers get a copy)."""

    mcp_config: dict[str, Any]  # {"mcpServers": {name: {"url": ...}}}: every agent's tool servers

    def roles(self) -> list[AgentRole]:
        """The agents it runs, the first one first; each keeps its own ledger in an episode."""
        ...

    def start(self, endpoint: LLMEndpoint, episode_id: str, task: Task, max_assistant_turns: int) -> AgentRun:
        """The agent for one episode, its LLM calls sent to `endpoint`; nothing runs yet."""
        ...


class Reward(Protocol):
    """What scores a finished episode (`aworld_train.inputs.reward.RewardFunction`); raises RewardError
    with the fix, or returns (score, extras)."""

    reference: str  # names the function in errors

    def __call__(self, trajectory: Trajectory, sample: dict[str, Any]) -> tuple[float, dict[str, Any]]: ...
