"""How many agent-loop worker processes verl's rollout runs our episodes in."""

from __future__ import annotations

import os
from typing import Any

from aworld_train.engines.native import get
from aworld_train.engines.verl.cpu_run import is_cpu_run
from aworld_train.inputs.run import RunInputs

# Agent-loop worker processes per node when the user sets none. One process runs our AWorld
# episodes at about 17 episodes/s and keeps one CPU core busy (bench/rollout_workers.py: 17 with one
# worker, 29.5 with two on 2 cores); a GPU serving a small or mid-size model answers the LLM calls of
# more episodes than that. So a node gets one worker per core its GPU processes leave (one each),
# at least 2 per GPU and at most MAX_AGENT_WORKERS_PER_NODE, counted on the launching node (a
# cluster's nodes alike).
AGENT_WORKERS_PER_GPU = 2
MAX_AGENT_WORKERS_PER_NODE = 32


def agent_loop_workers(inputs: RunInputs) -> int:
    """verl's agent-loop workers, over all nodes: `rollout.workers` if set, else sized per node from
    its CPUs (above), times `trainer.nnodes`, and at least verl's own 8."""
    cfg = inputs.config
    if inputs.explicit("rollout.workers"):
        return cfg.rollout.workers
    if is_cpu_run(cfg):
        return 1
    gpus = _count(get(cfg.verl, "trainer.n_gpus_per_node"), 8)
    cores_left = (os.cpu_count() or 1) - gpus
    per_node = max(AGENT_WORKERS_PER_GPU * gpus, min(MAX_AGENT_WORKERS_PER_NODE, cores_left))
    return max(8, per_node * _count(get(cfg.verl, "trainer.nnodes"), 1))


def _count(value: Any, default: int) -> int:
    try:
        return max(1, int(value))
    except (TypeError, ValueError):  # blank or "auto": verl's own default
        return default
