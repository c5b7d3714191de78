"""What an AReaL CPU run leaves in its folder, read back (tests/test_areal_cpu_e2e.py,
tests/test_areal_cpu_vllm_e2e.py): AReaL's stats from its tensorboard events, the adapter it saved
after each step, the run's token files (every sampled segment, each evaluated task's episodes, the
versions that sampled them), and the logprobs a model gives the tokens one version sampled."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path


def scalars(tensorboard: Path) -> dict[str, dict[int, float]]:
    """AReaL's stats as its StatsLogger wrote them: tag -> {step: value}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, dict[int, float]] = {}
    for events in sorted(tensorboard.glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return out


def checkpoints(run) -> dict[int, Path]:
    """The adapter AReaL's saver wrote after each step, by the weight version it became (step + 1)."""
    saved = run["run_dir"].glob("areal_files/checkpoints/*/*/*/default/*globalstep*")
    return {int(folder.name.rsplit("globalstep", 1)[1]) + 1: folder for folder in saved}


def sampled_tokens(run_dir: Path) -> list[dict]:
    """Every segment of the run's token files (prompt, response, mask, the rollout's logprob and
    version of each sampled token)."""
    import pyarrow.parquet as pq

    return [
        segment
        for part in sorted((run_dir / "tokens").glob("**/part-*.parquet"))
        for row in pq.read_table(part).to_pylist()
        for segment in row["segments"]
    ]


def mismatch(model, segments: list[dict], version: int) -> tuple[float, int]:
    """Mean |model's logprob - the rollout's| over the tokens `version` sampled, and their count."""
    import torch

    diffs = []
    for seg in segments:
        ids = seg["prompt_ids"] + seg["response_ids"]
        positions = [len(seg["prompt_ids"]) + i for i, m in enumerate(seg["response_mask"]) if m]
        reported = zip(positions, seg["sampled_logprobs"], seg["versions"], strict=True)
        mine = [(p, lp) for p, lp, v in reported if v == version]
        if mine:
            before = torch.tensor([p - 1 for p, _ in mine])  # the logits before those tokens only
            with torch.no_grad():
                logits = model(torch.tensor([ids]), logits_to_keep=before).logits[0].float()
            logp = torch.log_softmax(logits, -1)
            diffs += [abs(float(logp[i, ids[p]]) - lp) for i, (p, lp) in enumerate(mine)]
    return sum(diffs) / max(1, len(diffs)), len(diffs)


def groups(episodes: list[dict], size: int = 2) -> list[list[dict]]:
    """The workflow writes a task's group in one piece: consecutive lines of `size`."""
    return [episodes[i : i + size] for i in range(0, len(episodes), size)]


def evaluated(folder: Path) -> dict[str, list[tuple[float, list[list[int]]]]]:
    """Each task's evaluated episodes in the token files under `folder`: (reward, the sampled ids of
    each segment), sorted (the order episodes finish in is not the run's)."""
    import pyarrow.parquet as pq

    out: dict[str, list] = defaultdict(list)
    for part in sorted(folder.glob("**/part-*.parquet")):
        for row in pq.read_table(part).to_pylist():
            sampled = [
                [t for t, m in zip(s["response_ids"], s["response_mask"], strict=True) if m]
                for s in row["segments"]
            ]
            out[row["task_id"]].append((row["reward"] or 0.0, sampled))
    return {task: sorted(episodes) for task, episodes in out.items()}


def sampled_versions(folder: Path) -> set[int]:
    import pyarrow.parquet as pq

    return {
        version
        for part in folder.glob("part-*.parquet")
        for row in pq.read_table(part).to_pylist()
        for segment in row["segments"]
        for version in segment["versions"]
    }
