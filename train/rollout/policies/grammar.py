"""Sampling under a grammar: the JSON schema a client's `response_format` asks an answer to follow.

xgrammar (the grammar engine vLLM and SGLang use for structured output) compiles a schema against
the tokenizer once and gives, before each sampled token, the tokens that keep the answer inside the
schema; the sampler draws only among those. Where the call also offers tools, the grammar admits a
tool call as well: the template's own call opening, then free text (the call's frame is the
template's, not the schema's).

What is recorded for such a token is the policy's own logprob, over the whole vocabulary, as the
trainer recomputes it (and as vLLM reports by default): the mask only chooses among the tokens the
grammar allows. The gradient then treats a constrained token as the policy's sample; the mass the
grammar took away (the renormaliser) is not in it, and `allowed_mass` in a generation's `meta`
keeps how much probability the grammar allowed, token by token, for whoever wants to know.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from aworld_train.rollout.policies.client import GrammarKey

if TYPE_CHECKING:
    import xgrammar


class GrammarError(ValueError):
    """A schema the grammar engine cannot compile (the message says why)."""


@dataclass
class RowGrammar:
    """One row's place in its grammar, token by token."""

    matcher: Any  # xgrammar.GrammarMatcher
    allowed_mass: list[float] = field(default_factory=list)


class Grammars:
    """The grammars of one tokenizer and vocabulary (the model's logits may be wider than the
    tokenizer's vocabulary: padding rows are never allowed)."""

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: list[int]) -> None:
        import xgrammar  # imported here: it takes most of a second, and most runs never constrain

        self.xgrammar = xgrammar
        self.info = xgrammar.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_token_ids)
        )
        self.compiler = xgrammar.GrammarCompiler(self.info)
        self.stop_token_ids = list(stop_token_ids)
        self.vocab_size = vocab_size
        self._compiled = functools.lru_cache(maxsize=64)(self._compile)

    def _compile(self, key: GrammarKey) -> xgrammar.CompiledGrammar:
        xgrammar, (schema, call_opening) = self.xgrammar, key
        try:
            # compact JSON: a grammar that allows any whitespace lets a policy wander in it for a whole turn
            grammar = xgrammar.Grammar.from_json_schema(schema, any_whitespace=False)
            if call_opening:
                # a tool call instead of the answer: the opening, then whatever the call holds
                call = xgrammar.Grammar.from_ebnf(f"root ::= {json.dumps(call_opening)} [^]*")
                grammar = xgrammar.Grammar.union(grammar, call)
            return self.compiler.compile_grammar(grammar)
        except Exception as exc:  # xgrammar raises RuntimeError and ValueError for a schema it refuses
            raise GrammarError(f"the JSON schema cannot be compiled to a grammar: {exc}") from None

    def check(self, key: GrammarKey) -> None:
        """GrammarError for a schema that cannot be sampled under (compiled once, then cached)."""
        self._compiled(key)

    def row(self, key: GrammarKey) -> RowGrammar:
        return RowGrammar(
            self.xgrammar.GrammarMatcher(self._compiled(key), override_stop_tokens=self.stop_token_ids)
        )

    def mask(self, logits: torch.Tensor, rows: list[RowGrammar | None]) -> torch.Tensor:
        """`logits` [n, vocab] with every token a row's grammar forbids at -inf (rows without a
        grammar unchanged); each constrained row's allowed probability mass is kept."""
        indices = [i for i, row in enumerate(rows) if row is not None and not row.matcher.is_terminated()]
        if not indices:
            return logits
        bitmask = self.xgrammar.allocate_token_bitmask(len(rows), self.vocab_size)
        for i in indices:
            rows[i].matcher.fill_next_token_bitmask(bitmask, index=i)
        before = logits[indices].softmax(-1)
        masked = logits.clone()
        self.xgrammar.apply_token_bitmask_inplace(masked, bitmask.to(masked.device), indices=indices)
        allowed = (before * torch.isfinite(masked[indices])).sum(-1).tolist()
        for i, mass in zip(indices, allowed, strict=True):
            rows[i].allowed_mass.append(mass)
        return masked

    @staticmethod
    def advance(rows: list[RowGrammar | None], chosen: list[int], live: list[bool]) -> None:
        """Each live constrained row takes its sampled token (a token the mask allowed)."""
        for row, token, alive in zip(rows, chosen, live, strict=True):
            if row is not None and alive and not row.matcher.is_terminated():
                if not row.matcher.accept_token(token):
                    raise RuntimeError(f"token {token} was sampled outside its grammar")


def mean_log_mass(row: RowGrammar) -> float:
    """The mean log of the probability the grammar allowed per token (0: it never constrained)."""
    masses = [max(m, 1e-30) for m in row.allowed_mass]
    return sum(math.log(m) for m in masses) / len(masses) if masses else 0.0
