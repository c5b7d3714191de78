"""The ledger (ARCHITECTURE.md invariant 1), the tool-call parsers and the turn ends on the real
chat templates of the model families agent RL is trained with (`tests/chat_families.py`).

A scripted policy writes what each family's model writes (tests/chat_family_drive.py): the text of
an assistant turn is the real template's own rendering of that turn, ended by a stop token of the
family. Each episode
goes the way the rollout goes: prompt from the ledger, sampled ids, text decoded and parsed by
the run's call format, calls given ids as the template demands, tool results appended as template
deltas. For each template: one tool round, four tool rounds, two user turns, parallel calls where
the template renders them, thinking where the family thinks; each twice: with
`rollout.tool_parser: auto`, and with the parser derived from the template alone (`template`),
which must read every turn exactly as the family's hand-written parser does (calls, typed
arguments, ids, the text around them). A template that cannot carry tool results, or whose calls
no parser reads, is refused up front, with its reason.

With AWORLD_TRAIN_FAMILY_TABLE=path, the results are written there as a markdown table.
"""

from __future__ import annotations

import os

import pytest
from chat_families import ALL_CASES, CASES
from chat_family_drive import TOOLS, Drive, Turn, script, supports
from chat_tokenizers import Case, case_tokenizer, require_templates

from aworld_train.rollout.tokens.templates.renderer import ChatRenderer
from aworld_train.rollout.tokens.turns.stops import stop_token_ids

SCENARIOS = ("one tool round", "four tool rounds", "two user turns", "parallel calls", "thinking")
RUNS = ("auto", "template")
RESULTS: dict[tuple[str, str, str], dict] = {}
# the one template of the 24 whose calls the derived parser does not read, and why: its turn is a
# sequence of messages on channels, the answer is its final channel, not the text around a call
NOT_A_FRAME = {"openai-gpt-oss-120b": "another frame than an answer"}
REFUSED_RESULTS = ("microsoft-Phi-3.5-mini-instruct", "google-gemma-2-2b-it")


@pytest.fixture(scope="module")
def tokenizers():
    require_templates()
    return {}


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_episode_on_real_template(tokenizers, case, scenario, run):
    if case.name not in tokenizers:
        tokenizers[case.name] = case_tokenizer(case)
    tok = tokenizers[case.name]
    kwargs = case.think_kwargs if scenario == "thinking" and case.think_kwargs is not None else case.kwargs
    d = Drive(case, tok, dict(kwargs), tool_parser=run)
    row = {
        "stops": [tok.decode([i]) for i in d.stops],
        "parser": d.renderer.parser,
        "family": d.renderer.family.name,
    }
    RESULTS[(case.name, run, scenario)] = row
    if d.parser.problem:  # refused up front: no parser reads the template's calls
        row["status"] = f"refused up front: {d.parser.problem}"
        assert run == "template" and any(
            why in d.parser.problem for name, why in NOT_A_FRAME.items() if name == case.name
        ), d.parser.problem
        return
    reason = supports(case, d.renderer, scenario)
    if reason is not None:
        row["status"] = reason
        if reason.startswith("refused"):
            assert case.name in REFUSED_RESULTS, reason
        return
    script(d, scenario, tools_ok=d.renderer.tool_results_problem is None)
    _check_the_ledger(d, tok, row)
    if run == "template" and d.hand is not None:
        row["same_as_hand"] = f"{d.compared}/{d.compared}"
    row["round_trip"] = "exact" if not d.round_trip_diffs else f"normalised in {d.round_trip_diffs}"
    row["status"] = "ok"


def _check_the_ledger(d: Drive, tok, row: dict) -> None:
    """One segment; its mask-1 tokens are the sampled ones with their logprobs; every prompt is its
    prefix; each tool result reaches the next prompt; no stop id inside a sampled turn, and no turn
    end written again after a sampled one. What it finds goes into the family table's `row`."""
    seg = d.ledger.segments[0]
    assert len(d.ledger.segments) == 1, "the template's rendering of history must not split the episode"
    # every mask-1 token is a sampled token, in order, with its logprob; nothing else is mask 1
    picked = [t for t, m in zip(seg.response_ids, seg.response_mask, strict=True) if m]
    row["mask1_sampled"] = picked == [t for g in d.gens for t in g.token_ids]
    lps = [lp for lp, m in zip(seg.response_logprobs, seg.response_mask, strict=True) if m]
    assert row["mask1_sampled"] and lps == [lp for g in d.gens for lp in g.logprobs]
    # every prompt is the ledger prefix, and each generation follows its prompt
    full = seg.ids
    row["prompts_prefix"] = all(
        full[: len(p)] == p and full[len(p) : len(p) + len(g.token_ids)] == g.token_ids
        for p, g in zip(d.prompts, d.gens, strict=True)
    )
    assert row["prompts_prefix"]
    # each tool result is in the delta that opens the next prompt
    reached = []
    for turn_no, result in d.results:
        before = len(d.prompts[turn_no - 1]) + len(d.gens[turn_no - 1].token_ids)
        reached.append(result in tok.decode(d.prompts[turn_no][before:]))
    row["results_reach"] = f"{sum(reached)}/{len(reached)}"
    assert all(reached), d.results
    # no stop id inside a sampled turn: the policy would have stopped there
    assert all(t not in d.stops for g in d.gens for t in g.token_ids[:-1])
    assert "STAND_IN" not in tok.decode(full)
    # a sampled turn end is not written again after it, nor the template's own closer (GLM's role
    # token, gpt-oss's <|end|>), whitespace between them or not
    closers = {tok.convert_tokens_to_ids(c) for c in d.renderer.family.closers} | set(d.stops)
    ends = [len(p) + len(g.token_ids) - 1 for p, g in zip(d.prompts, d.gens, strict=True)]
    for e in ends:
        after = e + 1
        while after < len(full) and not tok.decode(full[after : after + 1]).strip():
            after += 1
        assert after >= len(full) or full[after] not in closers, tok.decode(full[e : after + 1])


@pytest.mark.parametrize("name", REFUSED_RESULTS)
def test_tool_results_go_in_user_turns_where_the_template_has_no_tool_role(name):
    """Phi-3.5 drops tool messages and Gemma-2 refuses them; with rollout.tool_results_as_user the
    results reach the model as a user turn (parallel results in one), and the episode trains."""
    case = next(c for c in CASES if c.name == name)
    tok = case_tokenizer(case)
    assert ChatRenderer(tok).tool_results_problem  # refused without the setting
    d = Drive(case, tok, {}, tool_results_as_user=True)
    assert d.renderer.tool_results_problem is None
    script(d, "parallel calls", tools_ok=True)
    user_turn = {
        "microsoft-Phi-3.5-mini-instruct": "<|user|>",
        "google-gemma-2-2b-it": "<start_of_turn>user",
    }[name]
    before = len(d.prompts[0]) + len(d.gens[0].token_ids)
    delta = tok.decode(d.prompts[1][before:])
    assert delta.count(user_turn) == 1, delta  # both results in one user turn
    assert "<tool_response>\n1776 (first)\n</tool_response>\n<tool_response>\n4 (second)" in delta, delta
    picked = [
        t
        for t, m in zip(d.ledger.segments[0].response_ids, d.ledger.segments[0].response_mask, strict=True)
        if m
    ]
    assert picked == [t for g in d.gens for t in g.token_ids]


def test_every_family_is_recognised(tokenizers):
    """Each template's family, parser and turn ends (the check command names them)."""
    expected = {
        "Qwen3-Coder": "qwen3_coder",
        "Qwen3.5-4B": "qwen3_coder",
        "GLM-4.6": "glm45",
        "GLM-4.7-Flash": "glm45",
        "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
        "Mistral-Small-3.2-24B-Instruct-2506": "mistral",
        "deepseek-ai-DeepSeek-V3.1": "deepseek",
        "moonshotai-Kimi-K2": "kimi_k2",
        "openai-gpt-oss-120b": "harmony",
        "ibm-granite-granite-3.3-2B-Instruct": "granite",
        "meta-llama-Llama-3.1-8B-Instruct": "llama3_json",
        "Qwen-Qwen2.5-7B-Instruct": "hermes",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "hermes",
    }
    for case in CASES:
        if case.name not in expected:
            continue
        tokenizers.setdefault(case.name, case_tokenizer(case))
        tok = tokenizers[case.name]
        assert ChatRenderer(tok).parser == expected[case.name], case.name
    glm = tokenizers["GLM-4.6"]
    assert {glm.decode([i]) for i in stop_token_ids(glm)} == {"<|endoftext|>", "<|user|>", "<|observation|>"}
    oss = tokenizers["openai-gpt-oss-120b"]
    oss_stops = {oss.decode([i]) for i in stop_token_ids(oss)}
    assert {"<|return|>", "<|call|>"} <= oss_stops and "<|end|>" not in oss_stops


def test_turn_ends_are_read_from_the_template():
    """What each template writes after an answer and after its calls are stop ids; what it writes
    inside a turn never is; a turn end the policy sampled is not written again after it."""
    stops = {}
    for case in ALL_CASES:
        if case.name in ("Kimi-K3", "upstage-Solar-Open-100B", "google-gemma-4-31B-it", "unsloth-Apriel-1.5"):
            tok = case_tokenizer(case)
            stops[case.name] = {tok.decode([i]) for i in stop_token_ids(tok)}
    # Kimi-K3 opens every turn with <|close|>think<|sep|>: a stop there ends the turn before it begins
    assert stops["Kimi-K3"] == {"<|end_of_msg|>"}
    # Solar ends a call turn with <|calls|>, Gemma 4 with <|tool_response>: not their answers' end
    assert stops["upstage-Solar-Open-100B"] == {"<|end|>", "<|calls|>"}
    assert stops["google-gemma-4-31B-it"] == {"<turn|>", "<|tool_response>"}
    # Apriel writes "\n<|end|>\n" and its eos (<|end|>) after a turn: once in the ledger
    case = next(c for c in ALL_CASES if c.name == "unsloth-Apriel-1.5")
    renderer = ChatRenderer(case_tokenizer(case))
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "calculate", "arguments": '{"expression": "1"}'},
    }
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    delta = renderer.delta_text(
        history, [{"role": "tool", "tool_call_id": "c", "content": "1"}], TOOLS, "<|end|>"
    )
    assert delta.startswith("<|tool_result|>"), delta
    answer = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "It is 1."}]
    after_answer = renderer.delta_text(answer, [{"role": "user", "content": "Next?"}], TOOLS, "<|end|>")
    assert after_answer.startswith("<|user|>"), after_answer
    # Laguna writes "\n</assistant>\n" after an answer: the sampled </assistant> is not followed by another
    laguna = Case(
        "poolside-Laguna-XS.2", "qwen2", specials=("<user>", "</user>", "<assistant>", "</assistant>")
    )
    tok = case_tokenizer(laguna)
    assert "</assistant>" in {tok.decode([i]) for i in stop_token_ids(tok)}
    after_answer = ChatRenderer(tok).delta_text(
        answer, [{"role": "user", "content": "Next?"}], TOOLS, "</assistant>"
    )
    assert after_answer.lstrip().startswith("<user>"), after_answer


def test_a_dropped_tool_result_ends_the_episode_instead_of_training(tokenizers):
    """Phi-3.5's template renders no tool message: the ledger refuses the delta."""
    from aworld_train.rollout.tokens.templates.renderer import ToolResultsLost

    case = next(c for c in CASES if c.name == "microsoft-Phi-3.5-mini-instruct")
    tok = tokenizers.setdefault(case.name, case_tokenizer(case))
    d = Drive(case, tok, {})
    with pytest.raises(ToolResultsLost, match="not in the next prompt: the chat template drops tool results"):
        d.turn(Turn(calls=["37 * 48"]), ["1776 (calculated)"])
        d.ledger.prompt(d.messages, d.tools)


def test_deepseek_is_shown_its_own_call_tokens(tokenizers):
    """DeepSeek-V3.1's template ignores tools=: the tool block shows its call tokens, not hermes tags."""
    case = next(c for c in CASES if c.name == "deepseek-ai-DeepSeek-V3.1")
    tok = tokenizers.setdefault(case.name, case_tokenizer(case))
    r = ChatRenderer(tok)
    text = tok.decode(r.render_prompt([{"role": "user", "content": "q"}], TOOLS))
    assert (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_name<｜tool▁sep｜>" in text
        and "<tool_call>" not in text
    )
    assert '"expression"' in text


def teardown_module(module) -> None:
    path = os.environ.get("AWORLD_TRAIN_FAMILY_TABLE")
    if not path or not RESULTS:
        return
    lines = [
        "| template | family | run | parser | " + " | ".join(SCENARIOS) + " |",
        "|---|---|---|---|" + "---|" * len(SCENARIOS),
    ]
    keys = sorted({(name, run) for name, run, _ in RESULTS}, key=lambda k: (_order(k[0]), RUNS.index(k[1])))
    for name, run in keys:
        rows = {sc: RESULTS.get((name, run, sc)) for sc in SCENARIOS}
        first = next(r for r in rows.values() if r)
        refused = first.get("status", "").startswith("refused up front")
        cells = [first["status"]] if refused else [_cell(rows[sc]) for sc in SCENARIOS]
        if refused:
            cells += [""] * (len(SCENARIOS) - 1)
        lines.append(
            f"| {name} | {first['family']} | {run} | {first['parser']} | " + " | ".join(cells) + " |"
        )
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")


def _order(name: str) -> int:
    return next(i for i, c in enumerate(ALL_CASES) if c.name == name)


def _cell(row: dict | None) -> str:
    """One scenario: ok with its tool results reached (and the turns read as the hand parser
    does), or why it does not apply."""
    if row is None:
        return "-"
    status = row.get("status", "FAILED")
    if status != "ok":
        return status
    same = f", = hand {row['same_as_hand']}" if row.get("same_as_hand") else ""
    if row["results_reach"] == "0/0":  # the template carries no tool result: the scenario makes no call
        return f"ok, no tool call{same}"
    return f"ok, results {row['results_reach']}{same}"


def _yes(value) -> str:
    return "-" if value is None else ("yes" if value else "NO")
