"""What each page of the viewer shows, as plain data: a run's steps, a step's GRPO groups and
episodes (filtered, a page at a time), one episode token by token, its drift, and two evaluations
side by side."""

from __future__ import annotations

import hashlib
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from aworld_train.inputs.policy_plan import saved_plan
from aworld_train.rollout.episodes.settings import RolloutSettings
from aworld_train.rollout.episodes.trajectory import FAILED_STATUSES
from aworld_train.viewer.drift import episode_drift
from aworld_train.viewer.rewrites import describe, sampled_texts
from aworld_train.viewer.store import CORRECT, EpisodeSet, Run
from aworld_train.viewer.tokenizer import RunTokenizer

NO_TOKENS = "this set has no token files: it was written before runs kept tokens"
# the per-step figures of the local backend's metrics.jsonl the overview plots beside the episodes'
METRIC_KEYS = ("peak_rss_mb", "step_s", "logprob_mismatch_mean", "loss", "grad_norm")


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _step_of(episode_set: EpisodeSet, rows: list[dict[str, Any]]) -> int | None:
    steps = [r["step"] for r in rows if r.get("step") is not None]
    return steps[0] if steps else episode_set.step


def _in_baseline(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The members GRPO compares: those given an advantage where the engine wrote advantages,
    else those that did not fail."""
    if any(r.get("advantage") is not None for r in rows):
        return [r for r in rows if r.get("advantage") is not None]
    return [r for r in rows if r["status"] not in FAILED_STATUSES]


def group_rows(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row.get("group") or row["task_id"]].append(row)
    return groups


def zero_spread(members: list[dict[str, Any]]) -> bool:
    """Every member GRPO compares got the same reward: the group teaches nothing."""
    rewards = [float(r["reward"] or 0.0) for r in _in_baseline(members)]
    return not rewards or max(rewards) - min(rewards) < 1e-9


def set_summary(episode_set: EpisodeSet, rows: list[dict[str, Any]]) -> dict[str, Any]:
    step = _step_of(episode_set, rows)
    n = len(rows)
    rewards = [float(r["reward"] or 0.0) for r in rows]
    staleness = [
        (step - 1) - r["version_min"] for r in rows if r.get("version_min") is not None and step is not None
    ]
    groups = group_rows(rows)
    return {
        "name": episode_set.name,
        "kind": episode_set.kind,
        "step": step,
        "episodes": n,
        "tokens": episode_set.has_token_files or any(r.get("tokens") for r in rows),
        "reward_mean": _mean(rewards),
        "success_rate": sum(r >= CORRECT for r in rewards) / n if n else None,
        "tool_call_rate": sum(bool(r["tool_calls"]) for r in rows) / n if n else None,
        "statuses": dict(Counter(r["status"] for r in rows)),
        "staleness_mean": _mean([float(s) for s in staleness]),
        "sampled_tokens_mean": _mean(
            [float(r["sampled_tokens"]) for r in rows if r.get("sampled_tokens") is not None]
        ),
        "groups": len(groups),
        "zero_spread_groups": sum(zero_spread(m) for m in groups.values())
        if episode_set.kind == "train"
        else None,
    }


def run_overview(run: Run) -> dict[str, Any]:
    sets = run.sets()
    summaries = sorted(
        (set_summary(s, run.index(s, light=True)) for s in sets),
        key=lambda s: (s["kind"] != "train", s["step"] is None, s["step"] or 0, s["name"]),
    )
    metrics: dict[int, dict[str, Any]] = {}
    evals = []
    for row in run.metrics():
        if row.get("phase") == "train":
            metrics[int(row["step"])] = {k: row[k] for k in METRIC_KEYS if k in row}
        elif row.get("phase") == "eval" and "accuracy" in row:
            evals.append({"step": row["step"], "accuracy": row["accuracy"]})
    config = run.config()
    return {
        "name": run.name,
        "path": str(run.path),
        "engine": run.engine(),
        "model": config.get("model"),
        "sets": summaries,
        "metrics": [{"step": step, **values} for step, values in sorted(metrics.items())],
        "eval_accuracy": evals,
        # changes whenever a file of the run does: the page redraws only then
        "signature": hashlib.sha1(
            repr([s.signature() for s in sets] + [len(run.metrics())]).encode()
        ).hexdigest(),
    }


@dataclass
class Filters:
    status: str = ""
    reward_min: float | None = None
    reward_max: float | None = None
    agent: str = ""
    tool: str = ""
    text: str = ""

    def keep(self, row: dict[str, Any]) -> bool:
        reward = float(row["reward"] or 0.0)
        return (
            (not self.status or row["status"] == self.status)
            and (self.reward_min is None or reward >= self.reward_min)
            and (self.reward_max is None or reward <= self.reward_max)
            and (not self.agent or self.agent in (row.get("agents") or []))
            and (not self.tool or self.tool in (row.get("tool_names") or []))
            and (not self.text or self.text.lower() in (row.get("trajectory") or "").lower())
        )


def _listed(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in ("trajectory", "part", "row")}


def episodes_page(run: Run, name: str, filters: Filters, offset: int, *, limit: int) -> dict[str, Any]:
    episode_set = run.episode_set(name)
    rows = run.index(episode_set, light=not filters.text)
    kept = [r for r in rows if filters.keep(r)]
    return {
        "set": name,
        "total": len(rows),
        "matched": len(kept),
        "offset": offset,
        "episodes": [_listed(r) for r in kept[offset : offset + limit]],
        "choices": {
            "statuses": sorted({r["status"] for r in rows}),
            "agents": sorted({a for r in rows for a in r.get("agents") or [] if a}),
            "tools": sorted({t for r in rows for t in r.get("tool_names") or []}),
        },
    }


def groups_page(run: Run, name: str, offset: int, limit: int) -> dict[str, Any]:
    rows = run.index(run.episode_set(name), light=True)
    groups = []
    for key, members in group_rows(rows).items():
        baseline = _in_baseline(members)
        rewards = [float(r["reward"] or 0.0) for r in baseline]
        groups.append(
            {
                "group": key,
                "task_id": members[0]["task_id"],
                "zero_spread": zero_spread(members),
                "spread": max(rewards) - min(rewards) if rewards else None,
                "in_baseline": len(baseline),
                "members": [_listed(r) for r in members],
            }
        )
    return {
        "set": name,
        "total": len(groups),
        "zero_spread": sum(g["zero_spread"] for g in groups),
        "offset": offset,
        "groups": groups[offset : offset + limit],
    }


def _lane_tokens(segment: dict[str, Any], pieces: list[str] | None) -> list[list[Any]]:
    """[id, text, mask, sampled logprob, trainer logprob, version] per token; the last three are
    None wherever the policy did not sample the token (prompt and template tokens)."""
    prompt, response, mask = segment["prompt_ids"], segment["response_ids"], segment["response_mask"]
    sampled = iter(segment["sampled_logprobs"] or [])
    trainer = iter(segment["trainer_logprobs"]) if segment.get("trainer_logprobs") is not None else None
    versions = iter(segment["versions"]) if segment.get("versions") is not None else None
    out = []
    for i, token in enumerate(prompt + response):
        text = pieces[i] if pieces is not None else None
        m = mask[i - len(prompt)] if i >= len(prompt) else 0
        if m:
            out.append(
                [
                    token,
                    text,
                    1,
                    next(sampled),
                    next(trainer) if trainer else None,
                    next(versions) if versions else None,
                ]
            )
        else:
            out.append([token, text, 0, None, None, None])
    return out


# what the episode view shows of a token file's row, and of its trajectory
_EPISODE_FIELDS = (
    "task_id", "group", "step", "phase", "status", "reward", "advantage", "version_min", "version_max", "agents",
)  # fmt: skip
_TRAJECTORY_FIELDS = (
    "reward_extras", "final_answer", "ground_truth", "timings", "num_turns", "finish_reasons", "messages",
)  # fmt: skip


def malformed_note(run: Run, episode_set: EpisodeSet, status: str) -> str | None:
    """How a training step's malformed episode (a call no agent could run) counted: the run's
    rollout.train_on_malformed decides, on every engine; None for other episodes."""
    if status != "malformed_tool_call" or episode_set.kind != "train":
        return None
    default = RolloutSettings.model_fields["train_on_malformed"].default
    if (run.config().get("rollout") or {}).get("train_on_malformed", default):
        return "trained at reward 0 (rollout.train_on_malformed: true)"
    return "left out of the loss and of its group's baseline (rollout.train_on_malformed: false)"


def _lanes(segments: list[dict[str, Any]], tokenizer: RunTokenizer) -> dict[str, dict[str, Any]]:
    """Each agent's segments in order, token by token; a segment after the agent's first with the
    rewrite that began it (rewrites.py: what the agent's history kept, dropped and gained)."""
    lanes: dict[str, dict[str, Any]] = {}
    seen: dict[str, list[tuple[int, dict[str, Any], list[str] | None]]] = {}
    for index, seg in enumerate(segments):
        pieces = tokenizer.pieces(seg["prompt_ids"] + seg["response_ids"])
        earlier = seen.setdefault(seg["agent"], [])
        rewrite = None
        if earlier:
            _, before, before_pieces = earlier[-1]
            sampled = [(i, sampled_texts(s, p)) for i, s, p in earlier]
            rewrite = describe(before, seg, (before_pieces, pieces), sampled)
        lane = lanes.setdefault(seg["agent"], {"agent": seg["agent"], "segments": []})
        lane["segments"].append(
            {
                "index": index,
                "advantage": seg.get("advantage"),
                "prompt_tokens": len(seg["prompt_ids"]),
                "sampled": sum(seg["response_mask"]),
                "first_call": sum(len(s["turn_starts"]) for _, s, _ in earlier),  # the agent's calls before
                "rewrite": rewrite,
                "turn_starts": seg["turn_starts"],
                "turn_rewards": seg.get("turn_rewards"),
                "turn_advantages": seg.get("turn_advantages"),
                "has_trainer": seg.get("trainer_logprobs") is not None,
                "has_versions": seg.get("versions") is not None,
                "tokens": _lane_tokens(seg, pieces),
            }
        )
        earlier.append((index, seg, pieces))
    return lanes


def episode_view(run: Run, tokenizer: RunTokenizer, name: str, episode_id: str) -> dict[str, Any]:
    episode_set = run.episode_set(name)
    episode = run.episode(episode_set, episode_id)
    traj = episode["trajectory"]
    segments = episode.get("segments")
    lanes = _lanes(segments, tokenizer) if segments else {}
    calls = traj.get("tool_calls") or []
    plan = saved_plan(run.config())  # a policy per agent: the lanes coloured by it
    owner = plan.owner
    for lane in lanes.values():
        lane["tool_calls"] = [c for c in calls if c.get("agent", "") == lane["agent"]]
        lane["policy"] = owner.get(lane["agent"])
        lane["policy_index"] = plan.names.index(lane["policy"]) if lane["policy"] in owner.values() else None
    return {
        "set": name,
        "episode_id": episode_id,
        **{k: episode.get(k) for k in _EPISODE_FIELDS},
        "error": traj.get("error"),
        "malformed": malformed_note(run, episode_set, episode.get("status")),
        **{k: traj.get(k) for k in _TRAJECTORY_FIELDS},
        "tool_calls": calls,
        "tokens": {"available": bool(segments), "reason": None if segments else NO_TOKENS},
        "tokenizer": tokenizer.status(),
        "lanes": list(lanes.values()),
    }


def drift_view(run: Run, tokenizer: RunTokenizer, name: str, episode_id: str) -> dict[str, Any]:
    episode = run.episode(run.episode_set(name), episode_id)
    if not episode.get("segments"):
        return {"episode_id": episode_id, "reason": NO_TOKENS, "agents": []}
    agents = []
    for drift in episode_drift(episode, tokenizer):
        if "ledger" in drift:
            drift["ledger_text"] = tokenizer.pieces(drift["ledger"])
            drift["fresh_text"] = tokenizer.pieces(drift["fresh"])
        agents.append(drift)
    return {"episode_id": episode_id, "reason": None, "agents": agents}


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    return {
        k: row.get(k) for k in ("episode_id", "reward", "status", "tool_calls", "num_turns", "sampled_tokens")
    }


def compare_sets(run_a: Run, name_a: str, run_b: Run, name_b: str) -> dict[str, Any]:
    """Two evaluations' episodes task by task (the tasks both ran), the largest change first."""
    a = defaultdict(list)
    for row in run_a.index(run_a.episode_set(name_a), light=True):
        a[row["task_id"]].append(row)
    b = defaultdict(list)
    for row in run_b.index(run_b.episode_set(name_b), light=True):
        b[row["task_id"]].append(row)
    tasks = []
    for task in sorted(set(a) & set(b)):
        mean_a = statistics.fmean(float(r["reward"] or 0.0) for r in a[task])
        mean_b = statistics.fmean(float(r["reward"] or 0.0) for r in b[task])
        tasks.append(
            {
                "task_id": task,
                "a_mean": mean_a,
                "b_mean": mean_b,
                "delta": mean_b - mean_a,
                "a": [_brief(r) for r in a[task]],
                "b": [_brief(r) for r in b[task]],
            }
        )
    tasks.sort(key=lambda t: (-abs(t["delta"]), t["task_id"]))
    return {
        "tasks": tasks,
        "only_a": len(set(a) - set(b)),
        "only_b": len(set(b) - set(a)),
        "a_mean": _mean([t["a_mean"] for t in tasks]),
        "b_mean": _mean([t["b_mean"] for t in tasks]),
    }
