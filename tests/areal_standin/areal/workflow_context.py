"""Stand-in for `areal.workflow_context`: the stats scope of the running workflow."""

from __future__ import annotations

IS_EVAL = False


def stat_scope() -> str:
    return "eval-rollout" if IS_EVAL else "rollout"
