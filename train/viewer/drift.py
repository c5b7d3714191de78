"""Drift: the ledger's tokens beside a fresh render of the same messages by the chat template.

The ledger never re-renders history (ARCHITECTURE.md invariant 1): it holds the ids the policy
sampled, as sampled, and each template delta as rendered then. A trainer that re-rendered the
conversation from its text would train on `render_prompt(messages)` instead; where the two differ (a
sampled text that tokenizes otherwise, a template that rewrites earlier turns or formats a tool call
its own way), that trainer trains on tokens the model never produced. Compared here per agent: its
last segment up to its last sampled token, against the render of the messages of its last call and
its reply, with the run's chat renderer (tools, few-shot turns, tool block). The render's tokens
after the reply (the next turn's opening, which the ledger adds only with a next call) are shown
but not counted.
"""

from __future__ import annotations

import difflib
import threading
from typing import Any

from aworld_train.viewer.store import Run, iter_episodes
from aworld_train.viewer.tokenizer import RunTokenizer


def compare(ledger: list[int], fresh: list[int]) -> dict[str, Any]:
    """Both sides with each token marked same or not, the number of differing tokens, and how many
    of the render's last tokens come after everything the ledger holds (not counted)."""
    same_ledger, same_fresh = [False] * len(ledger), [False] * len(fresh)
    differing = trailing = 0
    matcher = difflib.SequenceMatcher(a=ledger, b=fresh, autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op == "equal":
            same_ledger[a1:a2] = [True] * (a2 - a1)
            same_fresh[b1:b2] = [True] * (b2 - b1)
        elif op == "insert" and a1 == len(ledger) and b2 == len(fresh):
            trailing = b2 - b1
        else:
            differing += max(a2 - a1, b2 - b1)
    return {
        "ledger_same": same_ledger,
        "fresh_same": same_fresh,
        "differing": differing,
        "trailing": trailing,
    }


def _inputs(episode: dict[str, Any], agent: str) -> tuple[list, Any, list] | str:
    """(messages of the agent's last call and its reply, tools, few-shot turns), or why they are not
    known."""
    context = (episode.get("render_context") or {}).get(agent)
    if context is None:
        return "the episode's tools and few-shot turns were not recorded (written before the token files)"
    messages = (episode.get("conversations") or {}).get(agent)
    if not messages:
        return "no messages of this agent were recorded (text completions, or an agent answered elsewhere)"
    if messages[-1].get("role") != "assistant":
        return "the agent's last message is not its policy's reply"
    return messages, context.get("tools"), context.get("few_shot") or []


def agent_drift(episode: dict[str, Any], agent: str, tokenizer: RunTokenizer) -> dict[str, Any]:
    """The drift of one agent's last prompt; `reason` instead where it cannot be computed."""
    segments = [s for s in episode.get("segments") or [] if s["agent"] == agent and s["turn_starts"]]
    if not segments:
        return {"agent": agent, "reason": "no token files for this episode"}
    inputs = _inputs(episode, agent)
    if isinstance(inputs, str):
        return {"agent": agent, "reason": inputs}
    renderer = tokenizer.renderer()
    if renderer is None:
        return {"agent": agent, "reason": tokenizer.reason}
    messages, tools, few_shot = inputs
    segment = segments[-1]
    sampled = [i for i, m in enumerate(segment["response_mask"]) if m]
    end = len(segment["prompt_ids"]) + (sampled[-1] + 1 if sampled else 0)
    ledger = (segment["prompt_ids"] + segment["response_ids"])[:end]
    try:
        fresh = renderer.render_prompt(messages, tools, few_shot)
    except Exception as exc:  # a template that refuses these messages is drift too, shown as such
        return {"agent": agent, "reason": f"the chat template failed on these messages: {exc}"}
    return {
        "agent": agent,
        "segment": episode["segments"].index(segment),
        "earlier_segments": len(segments) - 1,
        "ledger": ledger,
        "fresh": fresh,
        **compare(ledger, fresh),
    }


def episode_drift(episode: dict[str, Any], tokenizer: RunTokenizer) -> list[dict[str, Any]]:
    agents = list(dict.fromkeys(s["agent"] for s in episode.get("segments") or []))
    return [agent_drift(episode, agent, tokenizer) for agent in agents]


AUTO_LIMIT = 2000  # episodes a run's drift count covers without being asked


class DriftCount:
    """The run's drift over every episode with token files, counted in the background, part file by
    part file (a part file is written once, whole: one counted stays counted)."""

    def __init__(self, run: Run, tokenizer: RunTokenizer) -> None:
        self.run = run
        self.tokenizer = tokenizer
        self._lock = threading.Lock()
        self._parts: dict[str, list[tuple[bool, int] | None]] = {}  # per part file, per episode
        self._thread: threading.Thread | None = None
        self._total = 0

    def _count(self) -> None:
        for episode_set in self.run.sets():
            for part in episode_set.parts:
                if str(part) in self._parts:
                    continue
                found = []
                for episode in iter_episodes(part):
                    measured = [d for d in episode_drift(episode, self.tokenizer) if "differing" in d]
                    found.append(
                        (any(d["differing"] for d in measured), sum(d["differing"] for d in measured))
                        if measured
                        else None
                    )
                with self._lock:
                    self._parts[str(part)] = found

    def summary(self, start: bool = False) -> dict[str, Any]:
        """Counted so far. A count starts (again, for new part files) when none is running, by
        itself for a run of up to AUTO_LIMIT episodes, when asked (`start`) for a larger one: it
        renders every episode, minutes of CPU for tens of thousands."""
        sets = [s for s in self.run.sets() if s.has_token_files]
        total = sum(len(self.run.index(s, light=True)) for s in sets)
        new_parts = any(str(p) not in self._parts for s in sets for p in s.parts)
        wanted = start or total <= AUTO_LIMIT or self._thread is not None
        reason = None
        if wanted and self.tokenizer.tokenizer() is None:
            reason = self.tokenizer.reason
        with self._lock:
            idle = self._thread is None or not self._thread.is_alive()
            if reason is None and new_parts and wanted and idle:
                self._thread = threading.Thread(target=self._count, daemon=True)
                self._thread.start()
            counted = [v for found in self._parts.values() for v in found]
            measured = [v for v in counted if v is not None]
            return {
                "episodes": total,
                "started": self._thread is not None,
                "checked": len(counted),
                "compared": len(measured),
                "with_drift": sum(v[0] for v in measured),
                "differing_tokens": sum(v[1] for v in measured),
                "running": self._thread is not None and self._thread.is_alive(),
                "reason": reason,
            }
