"""A chat completion and a text completion as OpenAI's API answers them, from the episode's replies
(the request side is openai_api.py)."""

from __future__ import annotations

import time
from typing import Any

from aworld_train.rollout.episodes.driver import Reply


def _logprobs(reply: Reply) -> dict[str, Any] | None:
    if reply.logprobs is None:
        return None
    return {
        "content": [
            {"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": []}
            for text, lp in reply.logprobs
        ]
    }


def assistant_message(reply: Reply) -> dict[str, Any]:
    """A reply as the assistant message a client sends back (the chat completion's message)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
        message["content"] = reply.content or None  # as OpenAI answers a call without text
    return message


def _usage(replies: list[Reply]) -> dict[str, int]:
    prompt = replies[0].usage.get("prompt_tokens", 0)
    completion = sum(r.usage.get("completion_tokens", 0) for r in replies)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat_completion(reply: Reply, model: str) -> dict[str, Any]:
    replies = [reply, *reply.others]
    return {
        "id": f"chatcmpl-{reply.id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": k,
                "message": assistant_message(r),
                "finish_reason": r.finish_reason,
                "logprobs": _logprobs(r),
            }
            for k, r in enumerate(replies)
        ],
        "usage": _usage(replies),
    }


def chat_chunks(reply: Reply, model: str, include_usage: bool) -> list[dict[str, Any]]:
    """The stream of one answer: per choice its role, its text, its tool calls (one chunk each, by
    index), its finish reason; then the usage if asked. The policy answers a call whole, so the
    stream carries the whole text at once."""
    head = {"id": f"chatcmpl-{reply.id}", "object": "chat.completion.chunk", "created": int(time.time())}
    head["model"] = model
    replies = [reply, *reply.others]

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None, logprobs=None) -> dict:
        choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
        return {**head, "choices": [choice]}

    chunks = []
    for k, r in enumerate(replies):
        chunks.append(chunk(k, {"role": "assistant", "content": ""}))
        if r.content:
            chunks.append(chunk(k, {"content": r.content}, logprobs=_logprobs(r)))
        for i, call in enumerate(r.tool_calls):
            chunks.append(chunk(k, {"tool_calls": [{"index": i, **call}]}))
        chunks.append(chunk(k, {}, r.finish_reason))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": _usage(replies)})
    return chunks


def text_completion(replies: list[Reply], model: str) -> dict[str, Any]:
    """A `text_completion` from a reply per choice."""
    return {
        "id": f"cmpl-{replies[0].id}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": k,
                "text": reply.content,
                "finish_reason": reply.finish_reason,
                "logprobs": None
                if reply.logprobs is None
                else {
                    "tokens": [t for t, _ in reply.logprobs],
                    "token_logprobs": [lp for _, lp in reply.logprobs],
                    "top_logprobs": None,
                    "text_offset": None,
                },
            }
            for k, reply in enumerate(replies)
        ],
        "usage": _usage(replies),
    }
