"""What one episode produced: exact tokens per segment, the conversation, tool calls, status."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from aworld_train.rollout.tokens.ledger import Segment

# Episodes ending in these statuses carry no loss (ARCHITECTURE.md invariant 2); `worker_died`:
# the rollout worker process running it exited mid-episode (rollout/episodes/workers.py);
# `segment_too_long`: an agent rewrote its history into a prompt the run's limits cannot hold
# (rollout/episodes/limits.py), so the episode could not go on as the agent meant it to.
FAILED_STATUSES = frozenset(
    {
        "timeout",
        "tool_timeout",
        "tool_server_down",
        "error",
        "reward_error",
        "prompt_too_long",
        "segment_too_long",
        "worker_died",
    }
)
STATUSES = ("ok", "max_turns", "truncated", "malformed_tool_call", *sorted(FAILED_STATUSES))


@dataclass
class ToolCallRecord:
    id: str
    name: str
    arguments: dict[str, Any]
    result: str | None = None
    error: bool = False
    turn: int = 0  # the LLM call that made it
    user_turn: int = 0  # the user turn it answers
    agent: str = ""  # the agent that made it
    # from the reply that made the call to its result reaching the agent's next LLM call: the
    # tool's time and the agent framework's around it; None: no result arrived
    latency_s: float | None = None


@dataclass
class Task:
    """One dataset row as the episode sees it."""

    id: str
    user_turns: list[str]
    ground_truth: Any = None
    system: str | None = None
    data_source: str = "aworld_train"
    extra_info: dict[str, Any] = field(default_factory=dict)
    row: dict[str, Any] = field(default_factory=dict)

    def sample(self) -> dict[str, Any]:
        """The row as reward functions receive it."""
        return {
            **self.row,
            "task_id": self.id,
            "ground_truth": self.ground_truth,
            "data_source": self.data_source,
            "extra_info": self.extra_info,
        }


@dataclass
class Trajectory:
    episode_id: str
    task_id: str
    status: str = "ok"
    error: str | None = None
    segments: list[Segment] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    final_answer: str = ""
    num_turns: int = 0  # LLM calls
    user_turns: int = 0  # user turns begun
    finish_reasons: list[str] = field(default_factory=list)
    # calls a client's tool_choice forced (their call opening was prompt, not sampled), and tokens
    # sampled under a response format's grammar (rollout/episodes/call_options.py)
    forced_calls: int = 0
    constrained_tokens: int = 0
    reward: float | None = None
    reward_extras: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    ground_truth: Any = None
    reported_reward: float | None = None  # what the agent reported (the gateway's reward endpoint)
    reported_extras: dict[str, Any] = field(default_factory=dict)
    # per agent, what its ledger's last prompt was rendered from ({"messages", "tools", "few_shot"}):
    # the token files keep it, so a viewer can render the conversation afresh and show the drift
    prompt_inputs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def trainable(self, train_on_malformed: bool = False) -> bool:
        if self.status in FAILED_STATUSES:
            return False
        if self.status == "malformed_tool_call" and not train_on_malformed:
            return False
        return any(any(s.response_mask) for s in self.segments)

    # -- weight versions ----------------------------------------------------------------
    @property
    def min_version(self) -> int | None:
        """The oldest weight version that sampled a token of the episode; None where none is known."""
        return min((s.min_version for s in self.segments if s.min_version is not None), default=None)

    @property
    def max_version(self) -> int | None:
        """The newest weight version that sampled a token of the episode; None where none is known."""
        return max((s.max_version for s in self.segments if s.max_version is not None), default=None)

    @property
    def history_rewrites(self) -> int:
        """Segments begun because an agent's messages stopped extending its ledger (a summary, an
        edited or truncated history), over every agent of the episode."""
        return len(self.segments) - len({seg.agent for seg in self.segments})

    @property
    def called_tool(self) -> bool:
        return bool(self.tool_calls)

    # -- a team's agents ----------------------------------------------------------------
    @property
    def agent_rewards(self) -> dict[str, float]:
        """The rewards the reward function gave agents by name (`agent_rewards` in its extras)."""
        named = self.reward_extras.get("agent_rewards")
        return {str(k): float(v) for k, v in named.items()} if isinstance(named, dict) else {}

    def reward_of(self, agent: str) -> float:
        return self.agent_rewards.get(agent, float(self.reward or 0.0))

    def turns_of(self, agent: str) -> int:
        """The agent's LLM calls the ledger holds (over its segments)."""
        return sum(len(seg.turn_starts) for seg in self.segments if seg.agent == agent)

    @property
    def turn_rewards(self) -> dict[str, list[float]]:
        """Per agent, the rewards the reward function gave its turns (`turn_rewards` in its extras:
        a list for a lone agent, `{agent: [...]}` for a team), in the order of its LLM calls."""
        given = self.reward_extras.get("turn_rewards")
        if isinstance(given, dict):
            return {str(k): [float(r) for r in v] for k, v in given.items()}
        if isinstance(given, list):
            return {agent: [float(r) for r in given] for agent in {seg.agent for seg in self.segments}}
        return {}

    def tool_calls_of(self, agent: str) -> int:
        return sum(call.agent == agent for call in self.tool_calls)

    def sampled_tokens_of(self, agent: str) -> int:
        return sum(sum(seg.response_mask) for seg in self.segments if seg.agent == agent)

    def to_dict(self, with_tokens: bool = True) -> dict[str, Any]:
        data = {
            "episode_id": self.episode_id,
            "task_id": self.task_id,
            "status": self.status,
            "error": self.error,
            "reward": self.reward,
            "reward_extras": self.reward_extras,
            "final_answer": self.final_answer,
            "ground_truth": self.ground_truth,
            "num_turns": self.num_turns,
            "user_turns": self.user_turns,
            "finish_reasons": self.finish_reasons,
            "min_version": self.min_version,
            "max_version": self.max_version,
            "timings": self.timings,
            "reported_reward": self.reported_reward,
            "messages": self.messages,
            "tool_calls": [asdict(c) for c in self.tool_calls],
        }
        if with_tokens:
            data["segments"] = [s.to_dict() for s in self.segments]
        return data
