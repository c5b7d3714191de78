"""The ledger (ARCHITECTURE.md invariant 1) on the chat-template families agent RL is trained
with: SmolLM2's ChatML, Qwen2.5, Qwen3 with thinking on and off, Llama 3.1/3.2, a
Mistral-style and a GLM-4-style template.

The templates and their families are in tests/template_families.py. The special tokens of each
family are added to SmolLM2's tokenizer, so every role token is one id, as in the real tokenizers.

Each family is also checked against verl 0.9.1's own continuous-token builder where verl
has one that fits (its Qwen builder, its GLM builder, its default builder): both must
build the same token sequence.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
from template_families import FAMILIES, TOOLS, Family

from aworld_train.rollout.policies.client import Generation
from aworld_train.rollout.tokens.ledger import TokenLedger
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer


@pytest.fixture(scope="module")
def family_tokenizers(tokenizer):
    made = {}
    for fam in FAMILIES:
        tok = copy.deepcopy(tokenizer)
        if fam.specials:
            tok.add_special_tokens({"additional_special_tokens": fam.specials})
        made[fam.name] = tok
    return made


class Script:
    """A scripted policy and AWorld's side of a conversation, driving one ledger."""

    def __init__(self, fam: Family, tok) -> None:
        self.fam, self.tok = fam, tok
        self.renderer = ChatRenderer(
            tok, chat_template=fam.template, tool_block="auto", template_kwargs=fam.kwargs
        )
        stops = {tok.convert_tokens_to_ids(t) for t in (fam.end, fam.call_end)}
        self.ledger = TokenLedger(self.renderer, sorted(stops))
        self.messages: list[dict] = [
            {"role": "system", "content": "You are a calculator."},
            {"role": "user", "content": "What is 37 * 48, and 2 + 2?"},
        ]
        self.prompts: list[list[int]] = []
        self.gens: list[Generation] = []
        self.thoughts: list[str] = []
        self.calls = 0
        # per policy call: (the messages AWorld sent, the generation, the assistant turn AWorld echoes)
        self.steps: list[tuple[list[dict], Generation, dict]] = []

    def _sample(self, text: str, stop: str | None) -> Generation:
        ids = self.tok.encode(text, add_special_tokens=False)
        if stop is not None:
            ids.append(self.tok.convert_tokens_to_ids(stop))
        base = -0.05 * (len(self.gens) + 1)
        return Generation(
            ids, [base - 0.001 * i for i in range(len(ids))], "length" if stop is None else "stop"
        )

    def _turn(self, text: str, stop: str | None, echo: dict) -> None:
        self.prompts.append(self.ledger.prompt(self.messages, TOOLS))
        if self.fam.think:
            thought = f"<think>\nstep {len(self.gens)}: work it out\n</think>\n\n"
            self.thoughts.append(thought)
            text = thought + text
        gen = self._sample(text, stop)
        self.gens.append(gen)
        self.ledger.record(gen, echo)
        self.steps.append((list(self.messages), gen, echo))
        self.messages.append(echo)

    def call(self, exprs: list[str], results: list[str]) -> None:
        ids = [f"call_{self.calls}_{i}" for i in range(len(exprs))]
        self.calls += 1
        echo = {
            "role": "assistant",
            "content": [],  # AWorld sends list content back, and compact argument JSON
            "tool_calls": [
                {
                    "id": i,
                    "type": "function",
                    "function": {
                        "name": "calculate",
                        "arguments": json.dumps({"expression": e}, separators=(",", ":")),
                    },
                }
                for i, e in zip(ids, exprs, strict=True)
            ],
        }
        self._turn(self.fam.calls(exprs), self.fam.call_end, echo)
        for i, r in zip(ids, results, strict=True):
            self.messages.append(
                {"role": "tool", "content": [{"type": "text", "text": r}], "tool_call_id": i}
            )

    def answer(self, text: str, stop: bool = True) -> None:
        self._turn(
            self.fam.answer_prefix + text,
            self.fam.end if stop else None,
            {"role": "assistant", "content": text},
        )

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})


def run_script(fam: Family, tok) -> Script:
    """Two user turns; several tool calls (in one turn where the family allows it); the last
    answer cut by max_new_tokens, without its stop token."""
    s = Script(fam, tok)
    if fam.parallel:
        s.call(["37 * 48", "2 + 2"], ["1776", "4"])
    else:
        s.call(["37 * 48"], ["1776"])
        s.call(["2 + 2"], ["4"])
    s.answer("The answers are 1776 and 4.")
    s.user("And 1776 plus 4?")
    s.call(["1776 + 4"], ["1780"])
    s.answer("It is 1780.", stop=False)
    return s


@pytest.mark.parametrize("fam", FAMILIES, ids=[f.name for f in FAMILIES])
def test_ledger_is_exact_on_every_template_family(family_tokenizers, fam):
    tok = family_tokenizers[fam.name]
    s = run_script(fam, tok)
    assert len(s.ledger.segments) == 1, "a template's rendering of history must not split the episode"
    seg = s.ledger.segments[0]
    assert len(seg.response_ids) == len(seg.response_mask) == len(seg.response_logprobs)
    # every mask-1 token is a sampled token, in order, with its sampled logprob
    picked = [t for t, m in zip(seg.response_ids, seg.response_mask, strict=True) if m]
    assert picked == [t for g in s.gens for t in g.token_ids]
    picked_lp = [lp for lp, m in zip(seg.response_logprobs, seg.response_mask, strict=True) if m]
    assert picked_lp == [lp for g in s.gens for lp in g.logprobs]
    # every prompt is the ledger prefix, and each generation follows its prompt
    full = seg.ids
    for k, (prompt, gen) in enumerate(zip(s.prompts, s.gens, strict=True)):
        assert full[: len(prompt)] == prompt, f"prompt {k} is not a prefix of the ledger"
        assert full[len(prompt) : len(prompt) + len(gen.token_ids)] == gen.token_ids
        assert seg.turn_starts[k] == len(prompt)
    text = tok.decode(full)
    # tool results and the second user turn arrived through the deltas, each once
    for piece in ("1776", "And 1776 plus 4?", "1780"):
        assert piece in text
    assert text.count("And 1776 plus 4?") == 1
    assert "STAND_IN" not in text
    # thinking blocks stay exactly as sampled, in every later prompt too
    for k, thought in enumerate(s.thoughts):
        assert thought in text
        for later in s.prompts[k + 1 :]:
            assert thought in tok.decode(later)


@pytest.mark.parametrize(
    "fam", [f for f in FAMILIES if f.stable_history], ids=[f.name for f in FAMILIES if f.stable_history]
)
def test_ledger_equals_the_templates_own_rendering(family_tokenizers, fam):
    """Where the template renders earlier turns the same in every prompt and the policy
    sampled what the template would write, the ledger is the template's own rendering of
    the whole conversation: the deltas are exact, not approximations."""
    tok = family_tokenizers[fam.name]
    s = run_script(fam, tok)
    final = s.messages  # the last answer is in; it was cut before its stop token
    r = s.renderer
    rendered = r._apply(r._prepare(final, TOOLS), tools=TOOLS if r.supports_tools else None)
    rendered = tok.decode(r.encode(rendered))
    ledger_text = tok.decode(s.ledger.segments[0].ids)
    assert rendered.startswith(ledger_text)
    assert rendered[len(ledger_text) :] in ("", fam.end, fam.end + "\n")


def test_qwen3_history_changes_do_not_reach_the_ledger(family_tokenizers):
    """The Qwen3 template drops earlier reasoning and adds an empty think block to the last
    assistant turn; the ledger keeps what was sampled and adds no think block of its own."""
    fam = next(f for f in FAMILIES if f.name == "qwen3-thinking")
    tok = family_tokenizers[fam.name]
    s = run_script(fam, tok)
    rerendered = tok.decode(s.renderer.render_prompt(s.messages, TOOLS))
    assert s.thoughts[0] not in rerendered  # a re-rendering adapter would train on another history
    seg = s.ledger.segments[0]
    deltas = _mask0_runs(seg)
    assert deltas and all("<think>" not in tok.decode(d) for d in deltas)
    off = next(f for f in FAMILIES if f.name == "qwen3-no-thinking")
    s_off = run_script(off, family_tokenizers[off.name])
    for prompt in s_off.prompts:  # every generation prompt has the empty think block, as sampled
        assert tok.decode(prompt).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_llama_delta_holds_no_date_header_or_tool_list(family_tokenizers):
    fam = next(f for f in FAMILIES if f.name == "llama3.1")
    tok = family_tokenizers[fam.name]
    s = run_script(fam, tok)
    text = tok.decode(s.ledger.segments[0].ids)
    assert (
        text.count("Today Date:") == 1 and text.count('"name": "calculate"') == 4
    )  # listed once, called three times
    assert text.count("<|start_header_id|>ipython<|end_header_id|>") == 3
    for delta in _mask0_runs(s.ledger.segments[0]):
        assert "Today Date" not in tok.decode(delta) and '"description"' not in tok.decode(delta)


def test_mistral_system_prompt_stays_where_it_was_first_rendered(family_tokenizers):
    """Mistral's template moves the system prompt and the tool list to the last user turn;
    the ledger never re-renders, so the system prompt stays in the first prompt, and a new user
    turn comes with the tool list before it, where the template puts it for the last user turn."""
    fam = next(f for f in FAMILIES if f.name == "mistral")
    tok = family_tokenizers[fam.name]
    s = run_script(fam, tok)
    text = tok.decode(s.ledger.segments[0].ids)
    assert text.count("You are a calculator.") == 1 and text.count("[AVAILABLE_TOOLS]") == 2
    assert "[/AVAILABLE_TOOLS][INST] And 1776 plus 4?[/INST]" in text
    assert '[TOOL_RESULTS] {"content": "1776"}[/TOOL_RESULTS][TOOL_RESULTS] {"content": "4"}' in text


def _mask0_runs(seg) -> list[list[int]]:
    runs, cur = [], []
    for t, m in zip(seg.response_ids, seg.response_mask, strict=True):
        if m:
            if cur:
                runs.append(cur)
            cur = []
        else:
            cur.append(t)
    return runs + ([cur] if cur else [])


@pytest.mark.parametrize("fam", [f for f in FAMILIES if f.verl], ids=[f.name for f in FAMILIES if f.verl])
def test_same_tokens_as_verls_continuous_token_builder(family_tokenizers, fam):
    """verl 0.9.1 builds multi-turn prompts with its own continuous-token builder; on the
    same conversation it must arrive at the same token sequence as the ledger (verl edits
    the boundary: it appends Qwen's newline after <|im_end|>, and drops GLM's sampled
    stop token to re-add it with the next message; the ledger keeps every sampled token
    and leaves the repeated text out of the delta instead)."""
    ct = pytest.importorskip("verl.utils.tokenizer.continuous_token")
    tok = copy.deepcopy(family_tokenizers[fam.name])
    if fam.template is not None:
        tok.chat_template = fam.template
    s = run_script(fam, family_tokenizers[fam.name])
    builder = getattr(ct, fam.verl)(tok, chat_template_kwargs=dict(fam.kwargs))
    prep = s.renderer._prepare
    first = s.steps[0][0]
    # where the template ignores tools=, the renderer writes the tool list into the system turn
    tools = TOOLS if s.renderer.supports_tools else None
    ids = builder.build_initial_tokens(prep(first, TOOLS), tools=tools)
    for k, (before, gen, _echo) in enumerate(s.steps):
        if k > 0:
            prev = prep(s.steps[k - 1][0] + [s.steps[k - 1][2]])
            ids = builder.merge_context_tokens(prev, prep(before), ids, tools=tools).token_ids
        assert ids == s.prompts[k], f"prompt {k} differs from verl's"
        ids = builder.merge_assistant_tokens(ids, gen.token_ids).token_ids
    assert ids == s.ledger.segments[0].ids
    assert re.search(r"STAND_IN", tok.decode(ids)) is None
