"""The `eval:` section: what `aworld-train eval` evaluates and how; a sampling setting left unset is
the run's own (`trainer.eval_*`, evaluation/held_out.py), so that the command reproduces a run's
own held-out figure on that run's checkpoint."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EvalConfig(BaseModel):
    """`aworld-train eval`: k samples per task under fixed seeds, over one or more checkpoints; a
    setting left unset is the run's own (`trainer.eval_*`)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    k: int | None = Field(
        None,
        ge=1,
        description="samples per task; pass@k and mean@k are computed from them (unset: trainer.eval_k)",
    )
    seeds: list[int] | None = Field(
        None,
        min_length=1,
        description="one evaluation per seed; the spread is reported (unset: trainer.eval_seeds)",
    )
    checkpoints: list[str] = Field(
        default_factory=list,
        description="models to compare: run folders of any backend, checkpoint folders or embedded:<name> "
        "(empty: `model`)",
    )
    policy_url: str | None = Field(
        None,
        description="an OpenAI-compatible completions endpoint that returns token ids (a vLLM server, "
        "http://host:8000/v1); unset: the local model",
    )
    policy_model: str | None = Field(
        None, description="model name sent to policy_url (default: each checkpoint as given)"
    )
    api_key: str | None = Field(None, description="for policy_url; keep it a ${ENV_VAR} reference")
    request_timeout_s: float = Field(300.0, gt=0, description="seconds one request to policy_url may take")
    temperature: float | None = Field(
        None,
        ge=0,
        description="sampling temperature (unset: trainer.eval_temperature, else rollout.temperature)",
    )
    out_dir: str | None = Field(None, description="table, plot and trajectories (default: <run_dir>/eval)")
