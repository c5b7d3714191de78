"""The token ledger: the exact ids of one episode's conversation (ARCHITECTURE.md invariant 1).

Every prompt sent to the policy is the ledger itself. Sampled ids are appended
as they came (mask 1, with their logprobs and the weight version that sampled
each); everything else the template adds (tool results, new user turns, closing
tags) is appended as a template delta (mask 0, version NO_VERSION). History is
never re-rendered: when the agent's messages stop extending what the ledger
holds (a summary, a truncation, a changed tool list), the ledger starts a new
segment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aworld_train.rollout.policies.client import Generation
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer, Message, content_text

# The version of a token no policy sampled (mask 0), or that its engine did not report; AReaL's
# own workflows mark such tokens -1 too.
NO_VERSION = -1


@dataclass
class Segment:
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    # ledger length at each policy call: prompt k is ids[:turn_starts[k]]
    turn_starts: list[int] = field(default_factory=list)
    # per policy call: what the agent observed since its last answer (the first: its whole prompt),
    # the state a step-level advantage groups turns by (rollout/samples/credit.py)
    turn_observations: list[str] = field(default_factory=list)
    agent: str = ""  # the agent whose ledger it is (a team keeps one ledger per agent)
    # per response token: the weight version that sampled it, NO_VERSION where none did or none is
    # known (empty when built without: every token unknown)
    response_versions: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.response_versions:
            self.response_versions = [NO_VERSION] * len(self.response_ids)
        elif len(self.response_versions) != len(self.response_ids):
            raise ValueError(
                f"Segment has {len(self.response_ids)} response ids but {len(self.response_versions)} "
                "versions; give one per response token (NO_VERSION where none sampled it)"
            )

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def sampled_versions(self) -> list[int]:
        """The known versions of its sampled tokens, in order."""
        return [v for v in self.response_versions if v != NO_VERSION]

    @property
    def min_version(self) -> int | None:
        """The oldest weight version among its sampled tokens; None where none is known."""
        return min(self.sampled_versions, default=None)

    @property
    def max_version(self) -> int | None:
        """The newest weight version among its sampled tokens; None where none is known."""
        return max(self.sampled_versions, default=None)

    def append_delta(self, ids: list[int]) -> None:
        """Tokens the template added (tool results, user turns): no loss, no logprob, no version."""
        self.response_ids.extend(ids)
        self.response_mask.extend([0] * len(ids))
        self.response_logprobs.extend([0.0] * len(ids))
        self.response_versions.extend([NO_VERSION] * len(ids))

    def append_sampled(self, generation: Generation) -> None:
        """What the policy sampled, exactly: loss, its logprobs and its versions."""
        n = len(generation.token_ids)
        self.response_ids.extend(generation.token_ids)
        self.response_mask.extend([1] * n)
        self.response_logprobs.extend(float(x) for x in generation.logprobs)
        self.response_versions.extend(generation.versions or [NO_VERSION] * n)

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_ids": self.prompt_ids,
            "response_ids": self.response_ids,
            "response_mask": self.response_mask,
            "response_logprobs": self.response_logprobs,
            "response_versions": self.response_versions,
            "turn_starts": self.turn_starts,
            "turn_observations": self.turn_observations,
            "agent": self.agent,
        }


def observation(messages: list[Message]) -> str:
    """What the messages add after their last assistant message (all of them where none is):
    role and text of each, the state an agent acts on at this call."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    return "\n".join(f"{m.get('role')}: {content_text(m.get('content'))}" for m in messages[last + 1 :])


def _args(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def normalize(message: Message) -> tuple:
    """What must be equal for a message to count as already in the ledger (`same_message`)."""
    role = message.get("role")
    calls = tuple(
        (
            c.get("function", {}).get("name"),
            json.dumps(_args(c.get("function", {}).get("arguments")), sort_keys=True),
        )
        for c in (message.get("tool_calls") or [])
    )
    text = content_text(message.get("content")).strip()
    if role == "assistant" and calls:
        return (role, calls, text)
    return (role, text, calls, message.get("tool_call_id"))


def same_message(held: tuple, given: tuple) -> bool:
    """`given` (a message the agent sent, normalised) is the one the ledger holds as `held`.

    A framework that replays an answer with tool calls may leave its text out (AWorld replays the
    text beside a call as empty content): the calls identify the turn then. Any other change to an
    earlier message, the model's own answers included (their text rewritten, their calls'
    arguments compacted), is a rewrite: the ledger starts a new segment, never merging it."""
    if held == given:
        return True
    with_calls = len(held) == len(given) == 3
    return with_calls and held[:2] == given[:2] and given[2] == ""


class TokenLedger:
    def __init__(
        self,
        renderer: ChatRenderer,
        stop_token_ids: list[int],
        few_shot: list[Message] | None = None,
        agent: str = "",
    ) -> None:
        self.renderer = renderer
        self.agent = agent
        self.few_shot = list(few_shot or [])
        self.stop_token_ids = set(stop_token_ids)
        self.segments: list[Segment] = []
        self._seen: list[tuple] = []
        self._tools_key: str | None = None
        self._last: Generation | None = None
        self._text = ""  # text completions: the prompt text and answers the current segment holds

    @property
    def current(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    def __len__(self) -> int:
        return len(self.current) if self.current else 0

    def extends(self, messages: list[Message], tools: list[dict] | None) -> bool:
        """The call on `messages` and `tools` carries on the current segment (else it begins one)."""
        return self._extends([normalize(m) for m in messages], json.dumps(tools or [], sort_keys=True))

    def _extends(self, norm: list[tuple], tools_key: str) -> bool:
        return (
            self.current is not None
            and self._last is not None
            and tools_key == self._tools_key
            and len(norm) > len(self._seen)
            and all(same_message(held, given) for held, given in zip(self._seen, norm, strict=False))
        )

    def prompt(self, messages: list[Message], tools: list[dict] | None) -> list[int]:
        """Bring the ledger up to `messages` and return the ids to send to the policy."""
        norm = [normalize(m) for m in messages]
        tools_key = json.dumps(tools or [], sort_keys=True)
        seg = self.current
        if self._extends(norm, tools_key):
            last = self._last
            stop_text = ""
            if (
                last.finish_reason == "stop"
                and bool(last.token_ids)
                and last.token_ids[-1] in self.stop_token_ids
            ):
                stop_text = self.renderer.tokenizer.decode([last.token_ids[-1]])
            history, new = messages[: len(self._seen)], messages[len(self._seen) :]
            seg.append_delta(self.renderer.render_delta(history, new, tools, stop_text))
        else:
            self.segments.append(
                Segment(
                    prompt_ids=self.renderer.render_prompt(messages, tools, self.few_shot), agent=self.agent
                )
            )
            seg = self.current
        self._seen = norm
        self._tools_key = tools_key
        self._last = None
        seg.turn_starts.append(len(seg))
        seg.turn_observations.append(observation(messages))
        return seg.ids

    def lead(self, ids: list[int]) -> list[int]:
        """Open the coming answer with `ids` (the template's text a forced tool call starts from):
        held as prompt, never loss (mask 0); the ids to send to the policy."""
        seg = self.current
        if seg is None:
            raise RuntimeError("lead() before prompt()")
        seg.append_delta(ids)
        seg.turn_starts[-1] = len(seg)
        return seg.ids

    def text_prompt(self, prompt: str | list[int]) -> list[int]:
        """A text completion's prompt (text, or ids as given): one that starts with everything the
        ledger holds (its answers' sampled ids, stop ids included) extends it by the rest (mask 0);
        any other starts a new segment, tokenized once."""
        tokenizer = self.renderer.tokenizer
        seg = self.current
        known = seg is not None and self._last is not None
        if isinstance(prompt, list):
            ids, extends = prompt, known and len(prompt) > len(seg) and prompt[: len(seg)] == seg.ids
            delta = prompt[len(seg) :] if extends else []
            self._text = ""
        else:
            extends = (
                known and self._text != "" and len(prompt) > len(self._text) and prompt.startswith(self._text)
            )
            delta = tokenizer.encode(prompt[len(self._text) :], add_special_tokens=False) if extends else []
            ids = [] if extends else tokenizer.encode(prompt, add_special_tokens=False)
            self._text = prompt
        if extends:
            seg.append_delta(delta)
        else:
            self.segments.append(Segment(prompt_ids=list(ids), agent=self.agent))
            seg = self.current
        self._seen, self._tools_key, self._last = [], None, None
        seg.turn_starts.append(len(seg))
        seg.turn_observations.append(tokenizer.decode(delta if extends else ids))
        return seg.ids

    def record_text(self, generation: Generation, text: str) -> None:
        """Append a text completion's sampled ids; `text` is what the client was answered."""
        self.record(generation, {"role": "assistant", "content": text})
        self._text += text

    def record(self, generation: Generation, assistant_message: Message) -> None:
        """Append what the policy sampled, exactly, and remember the message AWorld will echo back."""
        seg = self.current
        if seg is None:
            raise RuntimeError("record() before prompt()")
        seg.append_sampled(generation)
        self._seen.append(normalize(assistant_message))
        self._last = generation
