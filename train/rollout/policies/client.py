"""The one seam between the rollout core and an engine: token ids in, sampled ids out."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

FinishReason = Literal["stop", "length", "abort"]


# a grammar to sample under: (a JSON schema as text, the call opening a tool call may start with
# instead, or None); see rollout/policies/grammar.py
GrammarKey = tuple[str, str | None]


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    grammar: GrammarKey | None = None  # sampled under it, by a policy that can (ConstrainedSampling)


def derive_seed(*parts: object) -> int:
    """A stable 31-bit seed from parts (a run seed, a task id, a sample index, a turn).

    A seed fixes one request's draws (as vLLM's per-request `seed` does): requests that must
    differ, such as the samples of one group, each get their own."""
    return zlib.crc32("/".join(str(p) for p in parts).encode()) & 0x7FFFFFFF


@dataclass
class Generation:
    """What the policy sampled: ids, one logprob per id, and why it stopped.

    `token_ids` include the stop token when finish_reason is "stop". `versions`, where the engine
    knows them, is the weight version that sampled each id (the trainer's update count: the local
    learner's, verl's `global_steps`, AReaL's version); None where the engine reports none.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason = "stop"
    meta: dict = field(default_factory=dict)
    versions: list[int] | None = None

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"Generation has {len(self.token_ids)} token ids but {len(self.logprobs)} logprobs; "
                "a policy must return one logprob per sampled token"
            )
        if self.versions is not None and len(self.versions) != len(self.token_ids):
            raise ValueError(
                f"Generation has {len(self.token_ids)} token ids but {len(self.versions)} versions; "
                "a policy that reports versions must report one per sampled token"
            )

    @property
    def version(self) -> int | None:
        """The one weight version all its tokens carry; None where there is none, or several."""
        found = set(self.versions or ())
        return found.pop() if len(found) == 1 else None

    def head(self, end: int, finish_reason: FinishReason) -> Generation:
        """The first `end` tokens, with their logprobs and versions."""
        versions = None if self.versions is None else self.versions[:end]
        return Generation(self.token_ids[:end], self.logprobs[:end], finish_reason, self.meta, versions)


@runtime_checkable
class PolicyClient(Protocol):
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation: ...


@runtime_checkable
class ConstrainedSampling(Protocol):
    """A policy that samples under a grammar (`SamplingParams.grammar`): the local transformers
    policy. Others refuse a call that asks for one before it is sampled."""

    def check_grammar(self, key: GrammarKey) -> None:
        """Raise ValueError (with the reason) for a grammar the policy cannot sample under."""
        ...


ScriptStep = str | list[int] | Generation | Callable[[list[int]], "str | list[int] | Generation"]


class ScriptedPolicy:
    """A policy for tests and benches: replies from a script instead of a model.

    Each step is text (tokenised, with the stop token appended), raw ids, a
    Generation, or a function of the prompt ids returning one of those. A
    function may also key its reply on the prompt's content, which lets one
    scripted policy serve many concurrent episodes.
    """

    def __init__(
        self,
        tokenizer,
        script: Sequence[ScriptStep] | Callable[[list[int]], ScriptStep],
        stop_token_id: int | None = None,
        latency_s: float = 0.0,
        logprob: float = -0.5,
        version: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self._script = script
        self._index = 0
        self.stop_token_id = stop_token_id if stop_token_id is not None else tokenizer.eos_token_id
        self.latency_s = latency_s
        self.logprob = logprob
        # stamped on the tokens of the replies it builds, as a trained policy stamps its weights'
        # version (a test moves it on as a learner would); None: no versions, like an engine without
        self.version = version
        self.prompts: list[list[int]] = []
        self.generations: list[Generation] = []

    def _next_step(self, prompt_ids: list[int]) -> ScriptStep:
        if callable(self._script):
            return self._script(prompt_ids)
        if self._index >= len(self._script):
            raise RuntimeError(f"scripted policy ran out of replies after {len(self._script)} calls")
        step = self._script[self._index]
        self._index += 1
        return step

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        self.prompts.append(list(prompt_ids))
        step = self._next_step(prompt_ids)
        if callable(step):
            step = step(prompt_ids)
        if isinstance(step, Generation):
            gen = step
        else:
            ids = (
                self.tokenizer.encode(step, add_special_tokens=False) if isinstance(step, str) else list(step)
            )
            finish: FinishReason = "length"
            if isinstance(step, str) or (ids and ids[-1] == self.stop_token_id):
                if not ids or ids[-1] != self.stop_token_id:
                    ids = ids + [self.stop_token_id]
                finish = "stop"
            if len(ids) > sampling.max_new_tokens:
                ids, finish = ids[: sampling.max_new_tokens], "length"
            # distinct logprobs per position so alignment errors show up in tests
            logprobs = [self.logprob - 0.001 * i for i in range(len(ids))]
            versions = None if self.version is None else [self.version] * len(ids)
            gen = Generation(ids, logprobs, finish, versions=versions)
        self.generations.append(gen)
        return gen
