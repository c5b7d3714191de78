"""What every served API shares on the way in: reading a body, checking it against its request
class, and refusing a field by name with why and what to do (`field_rules.py` holds the words).

A silently ignored field would train a policy on prompts or samples the agent never meant, so a
field the gateway cannot honour is refused (400) before any policy call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

import pydantic_core
from pydantic import BaseModel, ConfigDict, ValidationError

from aworld_train.rollout.gateway.field_rules import TEXT_ONLY

# OpenAI's chat roles: pydantic adds a message's role to the path of its fields
ROLES = ("system", "developer", "user", "assistant", "tool")
# pydantic's JSON parser refuses nesting deeper than this (Python's json module raises
# RecursionError near 1000 instead); no OpenAI request nests nearly so deep
MAX_JSON_DEPTH = 200


class RequestError(ValueError):
    """A request the gateway refuses: HTTP 400 in its API's error shape, naming the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ApiRequest(BaseModel):
    """A request body of one of the served APIs: read by pydantic, then `check`ed."""

    # clients send fields the gateway has no use for (user, metadata, store, ...)
    model_config = ConfigDict(extra="allow")
    # per field, why it is refused and what to send (field_rules.py)
    RULES: ClassVar[Mapping[str, str]] = {}

    def check(self) -> None:
        """RequestError (naming the field and the fix) for what the fields' types alone let through."""


def refuse(param: str, fix: str) -> RequestError:
    return RequestError(f"{param}: {fix}", param)


def not_text(where: str, kind: Any, noun: str, give: str) -> RequestError:
    """The refusal of a content part that is not text (an image, audio, a file): the same reason
    whichever API carries it."""
    return refuse(
        where,
        f"{kind!r} {noun} are not served: {TEXT_ONLY}; send {give} (describe what they show in words, or "
        "give the agent a tool that reads them)",
    )


def read_json(raw: bytes) -> Any:
    """A request body's JSON, or RequestError: not JSON, or nested deeper than MAX_JSON_DEPTH.
    NaN and Infinity (which Python's json writes) are read, and refused by the field they reach."""
    try:
        return pydantic_core.from_json(raw, allow_inf_nan=True)
    except ValueError as exc:
        if "recursion limit" in str(exc):
            raise RequestError(
                f"the request body nests deeper than {MAX_JSON_DEPTH} levels ({exc}): flatten it"
            ) from None
        raise RequestError(f"the request body is not JSON ({exc}): send one JSON object") from None


def parse(model: type[BaseModel], body: Any) -> Any:
    """A request of `model` from a JSON body, or RequestError naming the first bad field."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    try:
        request = model.model_validate(body)
    except ValidationError as exc:
        raise first_error(exc, rules=getattr(model, "RULES", {})) from None
    if isinstance(request, ApiRequest):
        request.check()
    return request


# what OpenAI's shape asks of a field nested in a message or tool (pydantic says only what is wrong)
_SHAPE_FIXES = {
    "tool_calls": 'give a list of {"id", "type": "function", "function": {"name", "arguments"}}',
    "tool_call_id": "give the id of the call this result answers",
    "function": 'give {"name", "arguments"} (tools: {"name", "description", "parameters"})',
    "content": "give text, or a list of content parts",
}


def first_error(
    exc: ValidationError, prefix: str | None = None, rules: Mapping[str, str] | None = None
) -> RequestError:
    """The first of pydantic's errors as a RequestError whose `param` is the field's dotted path
    (a message's role, which pydantic adds to the path of its fields, left out). A request field
    with a rule (`rules`, by name) is answered with it and what was sent."""
    first = exc.errors()[0]
    top = str(first["loc"][0]) if first["loc"] else ""
    if rules and top in rules:
        return _ruled(first, rules[top])
    loc = [str(p) for p in first["loc"] if p not in ROLES]
    kind = first["type"]
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        loc.append("role")
        got = first.get("input", {}).get("role") if isinstance(first.get("input"), dict) else None
        message = (
            f"{got!r} is not a role OpenAI's API knows" if got is not None else "every message needs a role"
        ) + f": use one of {', '.join(ROLES)}"
    elif kind == "extra_forbidden":
        message = "not a field of this request: leave it out"
    else:
        hint = next((fix for name, fix in _SHAPE_FIXES.items() if name in loc), None)
        message = first["msg"] + (f": {hint}" if hint else "")
    field = ".".join([*([prefix] if prefix else []), *loc]) or None
    return RequestError(f"{field}: {message}" if field else message, field)


def _ruled(error: Mapping[str, Any], rule: str) -> RequestError:
    """A request field's refusal in its rule's words: its path (the field, then the list indices
    below it; pydantic's names of a union's members left out) and what was sent."""
    path = [str(error["loc"][0])]
    for part in error["loc"][1:]:
        if not isinstance(part, int):
            break
        path.append(str(part))
    field = ".".join(path)
    if error["type"] == "missing":
        return RequestError(f"{field}: missing: {rule}", field)
    sent = json.dumps(error.get("input"), default=str)
    sent = sent if len(sent) <= 80 else sent[:77] + "..."
    return RequestError(f"{field}: got {sent}: {rule}", field)
