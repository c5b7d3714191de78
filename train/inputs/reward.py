"""One adapter for the two reward-function shapes users bring.

- verl style: `fn(data_source, solution_str, ground_truth, extra_info=None)`
- trajectory aware: `fn(trajectory, sample)`

Either returns a float or a dict with a `score` key (the other keys become
reward extras). `reward.kwargs` from the config are passed as keyword arguments
(say, the weights of a combined reward); they are checked against the signature
when the function is loaded. Functions must be importable by reference, because verl and
AReaL workers import them in other processes: lambdas and closures are refused.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aworld_train.core.errors import AgentSpecError, RewardError
from aworld_train.core.references import import_object

VERL_PARAMS = ("data_source", "solution_str", "ground_truth")
Shape = Literal["verl", "trajectory"]


def _shape_of(fn: Callable, name: str) -> Shape:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise RewardError(f"reward function {name}: cannot read its signature ({exc})") from exc
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if tuple(names[:3]) == VERL_PARAMS:
        return "verl"
    if names[:2] == ["trajectory", "sample"]:
        return "trajectory"
    raise RewardError(
        f"reward function {name} has parameters ({', '.join(names)}); use "
        "(data_source, solution_str, ground_truth, extra_info=None) or (trajectory, sample)"
    )


def reference_of(fn: Callable) -> str:
    """'module:qualname' (or 'file.py:name' for __main__) that a worker can import."""
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    if getattr(fn, "__name__", "") == "<lambda>":
        raise RewardError(
            "reward_func is a lambda, which a worker process cannot import; define it with def at module level"
        )
    if "<locals>" in name:
        raise RewardError(
            f"reward_func {name} is defined inside another function (a closure), which a worker process "
            "cannot import; move it to module level"
        )
    module = getattr(fn, "__module__", None)
    if module == "__main__":
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        if not main_file:
            raise RewardError(
                f"reward_func {name} lives in an interactive session; put it in a file and pass 'file.py:{name}'"
            )
        return f"{Path(main_file).resolve()}:{name}"
    if module is None:
        raise RewardError(f"reward_func {name} has no module; pass 'module:function'")
    return f"{module}:{name}"


def _check_kwargs(fn: Callable, name: str, shape: Shape, kwargs: dict[str, Any]) -> None:
    if not kwargs:
        return
    positional = ("a",) * (4 if shape == "verl" else 2)
    try:
        inspect.signature(fn).bind(*positional, **kwargs)
    except TypeError as exc:
        raise RewardError(
            f"reward.kwargs {sorted(kwargs)} do not fit reward function {name} ({exc}); "
            "remove them or use a function that takes them"
        ) from None


@dataclass
class RewardFunction:
    fn: Callable
    reference: str
    shape: Shape
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(
        cls, source: Any, name: str | None = None, kwargs: dict[str, Any] | None = None
    ) -> RewardFunction:
        """A callable, 'module:function', 'file.py:function', or a file path with `name`."""
        loaded = cls._load(source, name)
        loaded.kwargs = dict(kwargs or {})
        _check_kwargs(loaded.fn, loaded.reference, loaded.shape, loaded.kwargs)
        return loaded

    @classmethod
    def _load(cls, source: Any, name: str | None = None) -> RewardFunction:
        if source is None:
            raise RewardError(
                "reward_func is required: pass a function, 'module:function' or 'file.py:function'"
            )
        if isinstance(source, tuple):
            source, name = source
        if isinstance(source, str | Path):
            text = str(source)
            if name and ":" not in text:
                text = f"{text}:{name}"
            if text.endswith(".py"):
                raise RewardError(f"reward_func {text!r} is a file; name the function: '{text}:my_reward'")
            try:
                fn = import_object(text, "reward_func")
            except AgentSpecError as exc:
                raise RewardError(str(exc)) from None
            if not callable(fn):
                raise RewardError(
                    f"reward_func {text!r} is a {type(fn).__name__}, not callable: name a function"
                )
            return cls(fn, text, _shape_of(fn, text))
        if callable(source):
            ref = reference_of(source)
            return cls(source, ref, _shape_of(source, ref))
        raise RewardError(f"reward_func must be a function or 'module:function', not {type(source).__name__}")

    def __call__(self, trajectory: Any, sample: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        if self.shape == "verl":
            value = self.fn(
                sample.get("data_source", "aworld_train"),
                getattr(trajectory, "final_answer", "") or "",
                sample.get("ground_truth"),
                sample.get("extra_info") or {},
                **self.kwargs,
            )
        else:
            value = self.fn(trajectory, sample, **self.kwargs)
        score, extras = self.normalise(value)
        if "turn_rewards" in extras:
            self._check_turn_rewards(extras["turn_rewards"], trajectory)
        return score, extras

    def _check_turn_rewards(self, given: Any, trajectory: Any) -> None:
        """`turn_rewards`: finite numbers, at most one per LLM call of the agent they are for."""
        agents = sorted({seg.agent for seg in getattr(trajectory, "segments", [])})
        by_agent = given if isinstance(given, dict) else dict.fromkeys(agents, given)
        if not isinstance(given, dict | list) or (isinstance(given, list) and len(agents) > 1):
            raise RewardError(
                f"reward function {self.reference} returned turn_rewards={given!r}; give a list of floats "
                "(one per LLM call) for a lone agent, or {agent: [floats]} for a team"
            )
        for agent, rewards in by_agent.items():
            turns = trajectory.turns_of(agent) if agent in agents else 0
            bad = not isinstance(rewards, list) or not all(
                isinstance(r, int | float) and not isinstance(r, bool) and math.isfinite(r) for r in rewards
            )
            if bad or len(rewards) > turns:
                raise RewardError(
                    f"reward function {self.reference} returned turn_rewards for {agent or 'the agent'!r}: "
                    f"{rewards!r}; the agent made {turns} LLM calls: give at most that many finite floats"
                )

    def normalise(self, value: Any) -> tuple[float, dict[str, Any]]:
        extras: dict[str, Any] = {}
        if isinstance(value, dict):
            if "score" not in value:
                raise RewardError(
                    f"reward function {self.reference} returned a dict without 'score': {sorted(value)}"
                )
            extras = {k: v for k, v in value.items() if k != "score"}
            value = value["score"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
            raise RewardError(
                f"reward function {self.reference} returned {value!r}; return a finite float or {{'score': float}}"
            )
        return float(value), extras
