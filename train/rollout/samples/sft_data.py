"""SFT samples from multi-turn trajectories, tokenized as RL sees them.

Two sources:
- our trajectory JSONL (what `aworld-train eval` and GRPO runs write): each ledger segment
  is a sample as it stands, the ids the policy saw and sampled, loss on the sampled ones;
- AgentGym's trajectory records (`item_id`, `conversations` of `{from: human|gpt, value,
  loss?}`) or chat records (`messages` of `{role, content}`): the conversation is replayed
  through the RL token ledger, assistant text standing in for sampled ids. Prompts,
  template text between turns and the end of each assistant turn are then the very ids an
  RL episode of the same conversation holds; assistant turns (with their closing stop
  token) carry the loss, a turn with `loss: false` does not.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aworld_train.core.errors import DatasetError
from aworld_train.rollout.episodes.trajectory import FAILED_STATUSES
from aworld_train.rollout.policies.client import Generation
from aworld_train.rollout.tokens.ledger import TokenLedger
from aworld_train.rollout.tokens.templates.renderer import ChatRenderer

_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


@dataclass
class SFTSample:
    ids: list[int]
    mask: list[int]  # per id: 1 where the id is a training target (an assistant token)
    source: str = ""
    agent: str = ""  # the agent of a team whose ledger segment it is

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class SFTData:
    samples: list[SFTSample]
    counts: Counter = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {
            **dict(self.counts),
            "samples": len(self.samples),
            "tokens": sum(len(s) for s in self.samples),
            "loss_tokens": sum(sum(s.mask) for s in self.samples),
        }


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """A JSON list (or {"data": [...]}), JSONL, or parquet file as a list of records."""
    path = Path(path)
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise DatasetError(f"sft.data: {str(path)!r} {what}: list trajectory files (JSON, JSONL or parquet)")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text()
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"sft.data: {path} is not JSON ({exc}): save it as a JSON list of records"
            ) from None
        data = data.get("data", data) if isinstance(data, dict) else data
        if not isinstance(data, list):
            raise DatasetError(f"sft.data: {path} must hold a JSON list of records")
        return data
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"sft.data: {path} line {number} is not JSON ({exc}): each line must be one JSON object"
                ) from None
    return records


def record_format(record: dict[str, Any], declared: str = "auto", where: str = "a record") -> str:
    if declared != "auto":
        return declared
    if "conversations" in record or ("messages" in record and "segments" not in record):
        return "agentgym"
    if "segments" in record:
        return "trajectory"
    raise DatasetError(
        f"sft.data: {where} has neither `conversations` (AgentGym) nor `segments` (aworld-train "
        f"trajectories); its keys: {sorted(record)[:12]}. List AgentGym trajectory files or the JSONL "
        "`aworld-train eval` writes"
    )


def trajectory_samples(record: dict[str, Any]) -> list[SFTSample]:
    """Each ledger segment of one of our trajectories: the prompt (no loss) and the response
    (loss where the policy sampled)."""
    out = []
    for index, seg in enumerate(record.get("segments") or []):
        prompt, response, mask = seg["prompt_ids"], seg["response_ids"], seg["response_mask"]
        if len(response) != len(mask):
            raise DatasetError(f"trajectory {record.get('episode_id')}: segment {index} has a bad mask")
        out.append(
            SFTSample(
                list(prompt) + list(response),
                [0] * len(prompt) + list(mask),
                record.get("task_id", ""),
                str(seg.get("agent", "")),
            )
        )
    return out


def conversation_messages(record: dict[str, Any], system: str | None = None) -> list[dict[str, Any]]:
    """AgentGym `conversations` (or chat `messages`) as chat messages; `loss` kept per message."""
    turns = record.get("conversations") if "conversations" in record else record.get("messages")
    if not isinstance(turns, list) or not turns:
        raise DatasetError(f"record {record.get('item_id', '?')}: `conversations` must be a non-empty list")
    messages = [{"role": "system", "content": system}] if system else []
    for turn in turns:
        speaker = turn.get("from", turn.get("role"))
        role = _ROLES.get(str(speaker).lower())
        if role is None:
            raise DatasetError(
                f"record {record.get('item_id', '?')}: unknown speaker {speaker!r}; use human/gpt (AgentGym) "
                "or user/assistant/system"
            )
        message = {"role": role, "content": str(turn.get("value", turn.get("content", "")))}
        if "loss" in turn and turn["loss"] is not None:
            message["loss"] = bool(turn["loss"])
        messages.append(message)
    return messages


def conversation_samples(
    messages: list[dict[str, Any]], renderer: ChatRenderer, stop_id: int, source: str = ""
) -> list[SFTSample]:
    """Replay a conversation through the token ledger, as an RL episode of it would run.

    Before each assistant turn the ledger renders the prompt (a whole conversation the first
    time, then only the template's delta after the previous assistant turn); the assistant's
    text, tokenized, plus the stop token stand for what the policy sampled."""
    ledger = TokenLedger(renderer, [stop_id])
    seen: list[dict[str, Any]] = []
    spans: list[tuple[int, int, int, bool]] = []  # (segment, start, end, loss) of assistant ids
    for message in messages:
        plain = {"role": message["role"], "content": message["content"]}
        if message["role"] == "assistant":
            if not seen:
                raise DatasetError(f"record {source or '?'}: the conversation starts with an assistant turn")
            ledger.prompt(seen, None)
            ids = renderer.encode(message["content"]) + [stop_id]
            start = len(ledger.current.response_ids)
            ledger.record(Generation(ids, [0.0] * len(ids), "stop"), plain)
            spans.append((len(ledger.segments) - 1, start, start + len(ids), message.get("loss", True)))
        seen.append(plain)
    samples = []
    for index, seg in enumerate(ledger.segments):
        mask = [0] * len(seg.prompt_ids) + [0] * len(seg.response_ids)
        for seg_index, start, end, loss in spans:
            if seg_index == index and loss:
                offset = len(seg.prompt_ids)
                mask[offset + start : offset + end] = [1] * (end - start)
        if any(mask):
            samples.append(SFTSample(seg.ids, mask, source))
    return samples


@dataclass(frozen=True)
class SFTRecord:
    record: dict[str, Any]
    format: str  # "trajectory" | "agentgym"
    messages: list[dict[str, Any]] | None = None  # an AgentGym record's conversation


def read_sft_records(paths: list[str], declared: str = "auto", system: str | None = None) -> list[SFTRecord]:
    """Every record of every file, its format told and its conversation read: all of `sft.data`'s
    errors, before any tokenizer loads."""
    if not paths:
        raise DatasetError(
            "sft.data is empty: list trajectory files (AgentGym JSON/JSONL with item_id and conversations, "
            "or the JSONL `aworld-train eval` writes)"
        )
    out = []
    for path in paths:
        for number, record in enumerate(read_records(path), 1):
            where = f"{path} record {number}"
            if not isinstance(record, dict):
                raise DatasetError(
                    f"sft.data: {where} is a {type(record).__name__}: each record is a JSON object"
                )
            fmt = record_format(record, declared, where)
            messages = conversation_messages(record, system) if fmt == "agentgym" else None
            out.append(SFTRecord(record, fmt, messages))
    return out


def sft_samples(
    records: list[SFTRecord],
    renderer: ChatRenderer,
    stop_id: int,
    only_correct: bool = True,
    *,
    min_reward: float = 0.999,
    max_length: int | None = None,
) -> SFTData:
    """The records as samples, with counts of what was kept and left out."""
    data = SFTData([])
    counts = data.counts
    for item in records:
        record, fmt = item.record, item.format
        counts["records"] += 1
        reward = record.get("reward")
        if fmt == "trajectory" and record.get("status") in FAILED_STATUSES:
            counts["left_out_failed"] += 1
            continue
        if only_correct and (
            (fmt == "trajectory" and (reward is None or reward < min_reward))
            or (fmt == "agentgym" and reward is not None and reward < min_reward)
        ):
            counts["left_out_incorrect"] += 1
            continue
        if fmt == "trajectory":
            samples = trajectory_samples(record)
        else:
            source = str(record.get("item_id", record.get("id", "")))
            samples = conversation_samples(item.messages, renderer, stop_id, source)
        for sample in samples:
            if max_length is not None and len(sample) > max_length:
                counts["left_out_too_long"] += 1
                continue
            data.samples.append(sample)
        counts["kept"] += 1
    return data


def load_sft_data(
    paths: list[str],
    renderer: ChatRenderer,
    stop_id: int,
    declared: str = "auto",
    *,
    only_correct: bool = True,
    min_reward: float = 0.999,
    system: str | None = None,
    max_length: int | None = None,
) -> SFTData:
    """Every record of every file as samples, with counts of what was kept and left out."""
    records = read_sft_records(paths, declared, system)
    return sft_samples(records, renderer, stop_id, only_correct, min_reward=min_reward, max_length=max_length)
