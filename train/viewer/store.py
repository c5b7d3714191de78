"""A run folder as the viewer reads it: its episode sets, their indexes, one episode at a time.

A set is a training step's episodes (`step_000001`) or an evaluation's (`eval/before`,
`eval/<checkpoint>/seed_0`), found as token files (`rollout/samples/token_log.py`: `RUN/tokens/...`, and
`RUN/<folder>/tokens/...` for `aworld-train eval`'s out_dir) or, in folders written before them, as
trajectory JSONL (`trajectories/step_*.jsonl`, `eval/**/*.jsonl`): those open too, without the token
views unless the JSONL kept the ledger's segments.

Everything is read lazily and cached per file by (modification time, size): a run still being
written shows its new files at the next look, and a 10,000-episode run opens one step's index and
one episode's row group at a time. Part files appear whole (written under a temporary name, then
renamed); a JSONL line cut short by a writer is skipped.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from aworld_train.rollout.samples.token_log import INDEX_COLUMNS, PART_GLOB, TOKENS_DIR

CORRECT = 0.999  # a reward at or above this counts as a correct answer (evaluation/report.py's)
_STEP = re.compile(r"step_(\d+)")
_TRAIN_SET = re.compile(r"^step_(\d+)$")
# the index columns a run's overview reads: the trajectory's JSON only when a set is searched
LIGHT_COLUMNS = [c for c in INDEX_COLUMNS if c not in ("trajectory", "error")]


@dataclass
class EpisodeSet:
    name: str  # step_000001, eval/before, eval/calculator/step_000008/seed_0
    parts: list[Path] = field(default_factory=list)  # token part files
    jsonl: Path | None = None  # a trajectories file (no token files for this set)

    @property
    def kind(self) -> str:
        return "train" if _TRAIN_SET.match(self.name) else "eval"

    @property
    def step(self) -> int | None:
        found = _STEP.findall(self.name)
        return int(found[-1]) if found else None

    @property
    def has_token_files(self) -> bool:
        return bool(self.parts)

    def signature(self) -> tuple:
        files = self.parts or ([self.jsonl] if self.jsonl else [])
        return tuple((str(p), *_stat(p)) for p in files)


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except FileNotFoundError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


class _FileCache:
    """Values computed from a file, recomputed when the file changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple, tuple[tuple[int, int], Any]] = {}

    def get(self, path: Path, key: str, compute):
        stamp = _stat(path)
        with self._lock:
            hit = self._values.get((path, key))
        if hit is not None and hit[0] == stamp:
            return hit[1]
        value = compute(path)
        with self._lock:
            self._values[(path, key)] = (stamp, value)
        return value


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line still being written
            continue
    return rows


def _jsonl_index_row(record: dict[str, Any], row: int, path: Path) -> dict[str, Any]:
    """An old trajectory line as an index row (token counts only where it kept its segments)."""
    segments = record.get("segments") or []
    calls = record.get("tool_calls") or []
    agents = list(dict.fromkeys([s.get("agent", "") for s in segments] + [c.get("agent", "") for c in calls]))
    return {
        "episode_id": str(record.get("episode_id", row)),
        "task_id": str(record.get("task_id", "")),
        "group": "",
        "phase": None,
        "step": None,
        "status": record.get("status", "ok"),
        "reward": record.get("reward"),
        "advantage": None,
        "num_turns": record.get("num_turns", 0),
        "tool_calls": len(calls),
        "tool_errors": sum(bool(c.get("error")) for c in calls),
        "tool_names": sorted({str(c.get("name")) for c in calls}),
        "agents": agents or [""],
        "tokens": sum(len(s.get("prompt_ids", [])) + len(s.get("response_ids", [])) for s in segments)
        if segments
        else None,
        "sampled_tokens": sum(sum(s.get("response_mask", [])) for s in segments) if segments else None,
        "version_min": None,
        "version_max": None,
        "part": str(path),
        "row": row,
    }


def jsonl_segments(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A JSONL record's ledger segments in the token files' form: a logprob per sampled token only
    (those files kept 0.0 at the positions the policy did not sample, which is no logprob)."""
    out = []
    for seg in record.get("segments") or []:
        mask = seg.get("response_mask", [])
        logprobs = seg.get("response_logprobs", [])
        out.append(
            {
                "agent": seg.get("agent", ""),
                "prompt_ids": seg.get("prompt_ids", []),
                "response_ids": seg.get("response_ids", []),
                "response_mask": mask,
                "turn_starts": seg.get("turn_starts", []),
                "sampled_logprobs": [lp for lp, m in zip(logprobs, mask, strict=False) if m],
                "trainer_logprobs": None,
                "versions": None,
                "advantage": None,
            }
        )
    return out


class Run:
    """One run folder."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).resolve()
        self.name = self.path.name
        self._cache = _FileCache()

    # -- what the folder holds -------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        path = self.path / "config.yaml"
        if not path.is_file():
            return {}
        return self._cache.get(path, "config", lambda p: yaml.safe_load(p.read_text()) or {})

    def engine(self) -> str:
        return str(self.config().get("backend") or "local")

    def token_roots(self) -> list[tuple[str, Path]]:
        """(set-name prefix, folder) of every token folder: the run's own, and an evaluation's."""
        roots = [("", self.path / TOKENS_DIR)] if (self.path / TOKENS_DIR).is_dir() else []
        for folder in sorted(self.path.glob(f"*/{TOKENS_DIR}")):
            if folder.is_dir() and folder.parent.name != "checkpoints":
                roots.append((f"{folder.parent.name}/", folder))
        return roots

    def sets(self) -> list[EpisodeSet]:
        found: dict[str, EpisodeSet] = {}
        for prefix, root in self.token_roots():
            for part in root.rglob(PART_GLOB):
                name = prefix + part.parent.relative_to(root).as_posix()
                found.setdefault(name, EpisodeSet(name)).parts.append(part)
        for old in self._jsonl_sets():
            found.setdefault(old.name, old)
        for episode_set in found.values():
            episode_set.parts.sort()
        return sorted(found.values(), key=lambda s: (s.kind != "train", s.step or 0, s.name))

    def _jsonl_sets(self) -> list[EpisodeSet]:
        out = [EpisodeSet(p.stem, jsonl=p) for p in (self.path / "trajectories").glob("step_*.jsonl")]
        eval_dir = self.path / "eval"
        if eval_dir.is_dir():
            for path in eval_dir.rglob("*.jsonl"):
                if TOKENS_DIR not in path.relative_to(eval_dir).parts:
                    out.append(
                        EpisodeSet(
                            "eval/" + path.relative_to(eval_dir).with_suffix("").as_posix(), jsonl=path
                        )
                    )
        return out

    def episode_set(self, name: str) -> EpisodeSet:
        for episode_set in self.sets():
            if episode_set.name == name:
                return episode_set
        raise KeyError(f"run {self.name} has no episode set {name!r}")

    def metrics(self) -> list[dict[str, Any]]:
        path = self.path / "metrics.jsonl"
        return self._cache.get(path, "metrics", _read_jsonl) if path.is_file() else []

    def latest_checkpoint(self) -> Path | None:
        folders = [p.parent for p in (self.path / "checkpoints").glob("**/tokenizer_config.json")]
        return max(folders, key=lambda p: p.stat().st_mtime_ns) if folders else None

    # -- indexes ------------------------------------------------------------------------------------
    def index(self, episode_set: EpisodeSet, light: bool = False) -> list[dict[str, Any]]:
        """One row per episode of the set (no tokens); `light` leaves out the trajectory's JSON."""
        if episode_set.jsonl is not None:
            rows = self._cache.get(episode_set.jsonl, "jsonl-index", self._jsonl_index)
            return rows if not light else [{k: v for k, v in r.items() if k != "trajectory"} for r in rows]
        columns = LIGHT_COLUMNS if light else INDEX_COLUMNS
        rows = []
        for part in episode_set.parts:
            rows.extend(
                self._cache.get(part, "light" if light else "index", lambda p: _part_index(p, columns))
            )
        return rows

    def _jsonl_index(self, path: Path) -> list[dict[str, Any]]:
        rows = []
        for i, record in enumerate(_read_jsonl(path)):
            row = _jsonl_index_row(record, i, path)
            row["trajectory"] = json.dumps(record, default=str)
            rows.append(row)
        return rows

    # -- one episode -----------------------------------------------------------------------------
    def episode(self, episode_set: EpisodeSet, episode_id: str) -> dict[str, Any]:
        """The episode's row: its trajectory (parsed), its segments (None: no tokens kept)."""
        for row in self.index(episode_set, light=True):
            if row["episode_id"] == episode_id:
                break
        else:
            raise KeyError(f"no episode {episode_id!r} in {episode_set.name}")
        path, number = Path(row["part"]), int(row["row"])
        if episode_set.jsonl is not None:
            record = _read_jsonl(path)[number]
            segments = jsonl_segments(record) or None
            return {
                **row,
                "trajectory": record,
                "segments": segments,
                "render_context": None,
                "conversations": None,
            }
        return {**row, **_episode(_read_row(path, number))}


def _episode(row: dict[str, Any]) -> dict[str, Any]:
    """A part file's row with its JSON columns parsed."""
    return {
        **row,
        "trajectory": json.loads(row.get("trajectory") or "{}"),
        "render_context": json.loads(row["render_context"]) if row.get("render_context") else None,
        "conversations": json.loads(row["conversations"]) if row.get("conversations") else None,
    }


def iter_episodes(path: Path):
    """Every episode of a part file, a row group at a time."""
    parquet = pq.ParquetFile(path)
    for group in range(parquet.num_row_groups):
        for row in parquet.read_row_group(group).to_pylist():
            yield _episode(row)


def _part_index(path: Path, columns: list[str]) -> list[dict[str, Any]]:
    table = pq.read_table(path, columns=columns)
    rows = table.to_pylist()
    for number, row in enumerate(rows):
        row["part"], row["row"] = str(path), number
    return rows


def _read_row(path: Path, number: int) -> dict[str, Any]:
    """Row `number` of a part file, decoding only the row group that holds it."""
    parquet = pq.ParquetFile(path)
    start = 0
    for group in range(parquet.num_row_groups):
        rows = parquet.metadata.row_group(group).num_rows
        if number < start + rows:
            return parquet.read_row_group(group).slice(number - start, 1).to_pylist()[0]
        start += rows
    raise IndexError(f"{path} has {start} rows, not {number + 1}")
