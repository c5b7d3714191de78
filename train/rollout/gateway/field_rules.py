"""Why the gateway refuses a request field, and what to send instead, for every field the served
APIs read: a refusal names its field, says why in the terms of the run (its policy, its token
ledger, its `rollout:` settings) and says what to do; pydantic's own text says only what is wrong.

Each request class takes its table as `RULES` (`refusals.ApiRequest`); `refusals.first_error`
answers a field that fails its type or its bounds with the table's sentence and what was sent.
"""

from __future__ import annotations

# why a request may not reweight the policy's distribution (logit_bias, penalties)
REWEIGHTING = (
    "the trainer computes each token's logprob under the policy alone, so a sample drawn under {what} "
    "would be another policy's: remove {name} (the run's rollout.temperature, top_p and top_k shape "
    "sampling)"
)
# why alternatives to the sampled token are not given; each API says where the sampled ones are
TOP_LOGPROBS = (
    "only the sampled token's logprob is known (the policy's other candidates are not kept): leave "
    "top_logprobs out ({instead})"
)
CHAT_TOP_LOGPROBS = TOP_LOGPROBS.format(instead="logprobs: true gives each sampled token's logprob")
RESPONSES_TOP_LOGPROBS = TOP_LOGPROBS.format(
    instead="include 'message.output_text.logprobs' for each sampled token's logprob"
)
# why an image, audio, file or document part is refused, whichever API carries it
TEXT_ONLY = "the policy reads text only, and would be trained on an answer given without seeing them"
CHAT_TOOL_CHOICE = 'give "auto", "none", "required" or {"type": "function", "function": {"name": ...}}'
CHAT_RESPONSE_FORMAT = (
    'give {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": '
    '{"name": ..., "schema": {...}}}'
)
_TOKENS = "give a whole number of tokens, at least 1 (the run's rollout.max_new_tokens caps it)"
_IGNORED = (
    "give a number {bound}, or leave it out: it is ignored, since the run's rollout.{name} stands (the "
    "trainer computes each token's logprob under it)"
)

# the fields every API shares
_COMMON = {
    "model": (
        "name a model as a string: any name is answered by the policy this run trains (GET /models "
        "lists the name the agent's turn hands it)"
    ),
    "stream": "give true or false",
    "temperature": _IGNORED.format(bound="of 0 or more", name="temperature"),
    "top_p": _IGNORED.format(bound="from 0 to 1", name="top_p"),
    "parallel_tool_calls": "give true or false (false: a turn makes one tool call at most)",
}

CHAT = {
    **_COMMON,
    "messages": 'give a list of at least one message, each {"role": ..., "content": ...}',
    "tools": 'give a list of function tools, each {"type": "function", "function": {"name", "parameters"}}',
    "tool_choice": CHAT_TOOL_CHOICE,
    "response_format": CHAT_RESPONSE_FORMAT,
    "n": "give 1 to 16 choices: each is another sample of the policy on the same prompt",
    "stop": "give a string, or a list of at most 4 strings (OpenAI's limit)",
    "max_tokens": _TOKENS,
    "max_completion_tokens": _TOKENS,
    "seed": "give a whole number, or leave it out",
    "stream_options": 'give {"include_usage": true}, or leave it out',
    "logprobs": "give true for each sampled token's logprob, or false",
    "top_logprobs": CHAT_TOP_LOGPROBS,
    "logit_bias": REWEIGHTING.format(what="a bias", name="logit_bias"),
    "frequency_penalty": REWEIGHTING.format(what="a penalty", name="frequency_penalty"),
    "presence_penalty": REWEIGHTING.format(what="a penalty", name="presence_penalty"),
}

COMPLETION = {
    **CHAT,
    "prompt": "give text, or the prompt's token ids (a list of whole numbers)",
    "logprobs": (
        "only the sampled token's logprob is known: give 1 for each sampled token's logprob, or 0 (or "
        "leave it out) for none"
    ),
    "echo": (
        "the prompt is not echoed back: the policy did not sample its tokens, so it has no logprob of "
        "them to give; leave echo out"
    ),
}

RESPONSES = {
    **_COMMON,
    "input": "give text, or a list of input items (messages, function_call and function_call_output items)",
    "instructions": "give the system message as text",
    "tools": 'give a list of function tools, each {"type": "function", "name", "parameters"}',
    "tool_choice": 'give "auto", "none", "required" or {"type": "function", "name": ...}',
    "max_output_tokens": _TOKENS,
    "text": 'give {"format": {"type": "text" | "json_object" | "json_schema", ...}}',
    "top_logprobs": RESPONSES_TOP_LOGPROBS,
    "previous_response_id": "give the id of a response this session answered with",
    "store": "give true or false (the session keeps its responses for the episode either way)",
    "include": "give a list of strings (served: message.output_text.logprobs, reasoning.encrypted_content)",
    "background": "each call is answered while the agent waits, on the episode's clock: leave background out",
    "truncation": "give 'disabled', or leave it out: the gateway never drops input items",
}

MESSAGES = {
    **_COMMON,
    "max_tokens": (
        "give a whole number of tokens, at least 1: Anthropic's API asks for it on every call (the run's "
        "rollout.max_new_tokens caps it)"
    ),
    "messages": 'give a list of at least one message, each {"role": "user" | "assistant", "content": ...}',
    "system": "give text, or a list of text blocks",
    "tools": 'give a list of tools, each {"name", "description", "input_schema"}',
    "tool_choice": 'give {"type": "auto" | "any" | "tool" | "none"} (with the "name" of a "tool" choice)',
    "stop_sequences": "give a list of strings",
    "output_config": 'give {"format": {"type": "json_schema", "schema": {...}}}',
    "top_k": _IGNORED.format(bound="of 1 or more", name="top_k"),
}

REWARD = {
    "reward": 'send a number (finite, not text), the episode\'s reward: {"reward": 1.0, "extras": {...}}',
    "extras": "give an object of named values, kept with the reward (reward_extras)",
}
