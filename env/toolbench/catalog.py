"""ToolBench tasks as StableToolBench's query files hold them, and their tools as functions.

A query record (`solvable_queries/test_instruction/G1_instruction.json` and friends) has
`query`, `query_id`, `api_list` (each API: `category_name`, `tool_name`, `api_name`,
`api_description`, `required_parameters`, `optional_parameters` with `name`, `type`,
`description`, `default`) and `relevant APIs` (pairs `[tool_name, api_name]`).

Function names follow ToolBench's convention, `<api>_for_<tool>` with both parts
standardised, cut to the last 64 characters; the cache folder and the server's
`/virtual` request use the same standardised names. `Finish` ends a task.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

FINISH = "Finish"
GIVE_ANSWER = "give_answer"
GIVE_UP = "give_up_and_restart"
MAX_NAME = 64
_NOT_NAME_CHAR = re.compile(r"[^\u4e00-\u9fa5a-zA-Z0-9_^]")
_RESERVED = ("from", "class", "return", "false", "true", "id", "and")
# ToolBench parameter types -> JSON-schema types; anything else (DATE, ENUM, GEOPOINT...) is text.
_SCHEMA_TYPES = {
    "string": "string",
    "number": "number",
    "integer": "integer",
    "int": "integer",
    "float": "number",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "object": "object",
}


class BadRecord(ValueError):
    """A query record that cannot become a task; the message names the record and the field."""


def standardize(name: str) -> str:
    """StableToolBench's name normal form: non-word characters to `_`, runs of `_` folded,
    lower case, no leading or trailing `_`, a leading digit prefixed with `get_`."""
    text = re.sub(r"_+", "_", _NOT_NAME_CHAR.sub("_", name)).lower().strip("_")
    if text and text[0].isdigit():
        text = "get_" + text
    return text


def api_part(api_name: str) -> str:
    """The standardised API name, with Python keywords the way ToolBench renames them."""
    text = standardize(api_name)
    return "is_" + text if text in _RESERVED else text


def standard_category(category: str) -> str:
    """A category as a folder name: spaces, commas and slashes to `_`, `__` folded once."""
    return category.replace(" ", "_").replace(",", "_").replace("/", "_").replace("__", "_")


@dataclass(frozen=True)
class Api:
    category: str
    tool: str
    api: str
    description: str = ""
    required: tuple[dict[str, Any], ...] = ()
    optional: tuple[dict[str, Any], ...] = ()
    method: str = "GET"

    @property
    def function_name(self) -> str:
        return f"{api_part(self.api)}_for_{standardize(self.tool)}"[-MAX_NAME:]

    def to_json(self) -> dict[str, Any]:
        return {
            "category_name": self.category,
            "tool_name": self.tool,
            "api_name": self.api,
            "api_description": self.description,
            "required_parameters": list(self.required),
            "optional_parameters": list(self.optional),
            "method": self.method,
        }


@dataclass(frozen=True)
class ToolBenchTask:
    query_id: str
    query: str
    apis: tuple[Api, ...]
    relevant: tuple[tuple[str, str], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def functions(self) -> dict[str, Api]:
        """Function name -> API; a name two APIs share after cutting gets a numbered suffix."""
        out: dict[str, Api] = {}
        for api in self.apis:
            name = api.function_name
            suffix = 2
            while name in out or name == FINISH:
                tail = f"_{suffix}"
                name = api.function_name[: MAX_NAME - len(tail)] + tail
                suffix += 1
            out[name] = api
        return out

    def relevant_functions(self) -> list[str]:
        by_pair = {(api.tool, api.api): name for name, api in self.functions().items()}
        return [by_pair[pair] for pair in self.relevant if pair in by_pair]


def _text(record: dict[str, Any], key: str, where: str, required: bool = True) -> str:
    value = record.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise BadRecord(f"{where}: '{key}' must be a non-empty string, got {value!r}")
    return value


def _parameters(api: dict[str, Any], key: str, where: str) -> tuple[dict[str, Any], ...]:
    params = api.get(key) or []
    if not isinstance(params, list):
        raise BadRecord(f"{where}: '{key}' must be a list of parameters, got {type(params).__name__}")
    out = []
    for i, param in enumerate(params):
        if not isinstance(param, dict) or not isinstance(param.get("name"), str) or not param["name"]:
            raise BadRecord(f"{where}: {key}[{i}] needs a 'name' string, got {param!r}")
        out.append(
            {
                "name": param["name"],
                "type": str(param.get("type") or "string"),
                "description": str(param.get("description") or ""),
                "default": param.get("default"),
            }
        )
    return tuple(out)


def parse_record(record: Any, index: int) -> ToolBenchTask:
    """One query record checked and parsed; BadRecord names the record and what is wrong."""
    where = f"record {index}"
    if not isinstance(record, dict):
        raise BadRecord(f"{where} is a {type(record).__name__}, not an object with query and api_list")
    if "query" not in record and "conversations" in record:
        raise BadRecord(
            f"{where} has 'conversations' but no 'query': that is ToolBench's fine-tuning layout, whose API "
            "list lacks the categories StableToolBench's server needs; convert the query files "
            "(solvable_queries/test_instruction/*.json, records with query, query_id and api_list) instead"
        )
    query_id = record.get("query_id")
    if isinstance(query_id, bool) or not isinstance(query_id, int | str) or str(query_id).strip() == "":
        raise BadRecord(f"{where}: 'query_id' must be a number or a string, got {query_id!r}")
    where = f"record {index} (query_id {query_id})"
    query = _text(record, "query", where)
    api_list = record.get("api_list")
    if not isinstance(api_list, list) or not api_list:
        raise BadRecord(f"{where}: 'api_list' must be a non-empty list of APIs, got {api_list!r:.80}")
    apis = []
    for i, raw in enumerate(api_list):
        at = f"{where} api_list[{i}]"
        if not isinstance(raw, dict):
            raise BadRecord(f"{at} is a {type(raw).__name__}, not an object")
        apis.append(
            Api(
                category=_text(raw, "category_name", at),
                tool=_text(raw, "tool_name", at),
                api=_text(raw, "api_name", at),
                description=_text(raw, "api_description", at, required=False),
                required=_parameters(raw, "required_parameters", at),
                optional=_parameters(raw, "optional_parameters", at),
                method=str(raw.get("method") or "GET"),
            )
        )
    relevant = []
    known = {(a.tool, a.api) for a in apis}
    for i, pair in enumerate(record.get("relevant APIs") or []):
        if not (isinstance(pair, list | tuple) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise BadRecord(f"{where}: 'relevant APIs'[{i}] must be [tool_name, api_name], got {pair!r}")
        if tuple(pair) not in known:
            raise BadRecord(f"{where}: 'relevant APIs'[{i}] {pair!r} is not in its api_list")
        relevant.append((pair[0], pair[1]))
    return ToolBenchTask(str(query_id), query, tuple(apis), tuple(relevant))


def api_list_json(task: ToolBenchTask) -> str:
    return json.dumps([api.to_json() for api in task.apis])


def task_from_row(row: dict[str, Any]) -> ToolBenchTask:
    """The task back from a converted row (its extra_info carries the api_list as JSON text)."""
    extra = row.get("extra_info") or {}
    truth = (row.get("reward_model") or {}).get("ground_truth", row.get("ground_truth"))
    truth = json.loads(truth) if isinstance(truth, str) else (truth or {})
    record = {
        "query_id": extra.get("sample_id"),
        "query": "-",
        "api_list": json.loads(extra["api_list"]) if isinstance(extra.get("api_list"), str) else None,
        "relevant APIs": truth.get("relevant_apis") or [],
    }
    return parse_record(record, int(extra.get("index", 0)))


def input_schema(api: Api) -> dict[str, Any]:
    """A JSON schema for the API's parameters; a default is shown, never imposed."""
    properties = {}
    for param in (*api.required, *api.optional):
        prop: dict[str, Any] = {"type": _SCHEMA_TYPES.get(param["type"].strip().lower(), "string")}
        description = param["description"]
        if param.get("default") not in (None, ""):
            description = f"{description} (e.g. {param['default']})".strip()
        if description:
            prop["description"] = description
        properties[param["name"]] = prop
    return {"type": "object", "properties": properties, "required": [p["name"] for p in api.required]}


def description(api: Api) -> str:
    text = f"API '{api.api}' of the tool '{api.tool}' ({api.category})."
    return f"{text} {api.description}".strip() if api.description else text


FINISH_DESCRIPTION = (
    "End the task. With return_type 'give_answer', final_answer is all the user sees, so make it "
    "complete; with 'give_up_and_restart', say that the task cannot be done with these tools."
)
FINISH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "return_type": {"type": "string", "enum": [GIVE_ANSWER, GIVE_UP]},
        "final_answer": {"type": "string", "description": "the answer, required with give_answer"},
    },
    "required": ["return_type"],
}
