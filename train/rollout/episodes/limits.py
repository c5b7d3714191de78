"""The token limits an LLM call runs into, and the status each ends its episode with.

Prompts are never cut: a cut prompt is not what the ledger holds. Every ledger segment is a row of
its own on every engine (verl: its prompt within max_prompt_length, its response within
response_length), so the limits hold per segment: a segment the agent began by rewriting its
history (a summary, a trimmed or compacted history) must fit as the first prompt does.
"""

from __future__ import annotations

from aworld_train.rollout.episodes.settings import RolloutSettings
from aworld_train.rollout.tokens.ledger import TokenLedger


class CallEnded(Exception):
    """A call ran into a limit that ends its episode with `status`."""

    def __init__(self, status: str, error: str | None = None) -> None:
        super().__init__(error or status)
        self.status, self.error = status, error


def token_budget(
    settings: RolloutSettings, ledger: TokenLedger, prompt_ids: list[int], first_prompt: bool, agent: str
) -> int:
    """The tokens the call on `prompt_ids` (the ledger's current segment) may sample; CallEnded
    where none: `prompt_too_long` (the first prompt), `segment_too_long` (a rewritten one),
    `truncated` (the segment grew to its limit)."""
    segment = ledger.current
    if segment is None:
        raise RuntimeError("token_budget() before the ledger's prompt()")
    if first_prompt and settings.max_prompt_tokens and len(prompt_ids) > settings.max_prompt_tokens:
        raise CallEnded(
            "prompt_too_long",
            f"the first prompt of agent {agent!r} has {len(prompt_ids)} tokens, over "
            f"max_prompt_tokens={settings.max_prompt_tokens}",
        )
    if not first_prompt and len(segment.turn_starts) == 1:  # this call began a segment
        check_rewritten(settings, len(segment.prompt_ids), len(ledger.segments), agent)
    budget = settings.max_total_tokens - len(prompt_ids)
    if settings.max_response_tokens is not None:
        budget = min(budget, settings.max_response_tokens - (len(ledger) - len(segment.prompt_ids)))
    if budget <= 0:
        raise CallEnded(
            "truncated",
            f"no tokens left (max_total_tokens={settings.max_total_tokens}, "
            f"max_response_tokens={settings.max_response_tokens})",
        )
    return budget


def check_rewritten(settings: RolloutSettings, length: int, number: int, agent: str) -> None:
    """CallEnded `segment_too_long` where the prompt (`length` tokens) of the agent's segment
    `number` leaves no room to sample."""
    if settings.max_prompt_tokens and length > settings.max_prompt_tokens:
        setting, limit = "rollout.max_prompt_tokens", settings.max_prompt_tokens
    elif length >= settings.max_total_tokens:
        setting, limit = "rollout.max_total_tokens", settings.max_total_tokens
    else:
        return
    raise CallEnded(
        "segment_too_long",
        f"agent {agent!r} rewrote its history (segment {number} of its ledger): the new prompt has "
        f"{length} tokens, over {setting}={limit}; raise {setting} or keep the agent's rewritten "
        "context shorter",
    )
