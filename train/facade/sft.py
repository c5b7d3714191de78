"""`aworld-train sft`: multi-turn SFT on trajectories (AgentGym's records or our eval JSONL),
loss on assistant tokens only, tokenized through the RL token ledger (`rollout/samples/sft_data.py`);
trained by the engine `sft.backend` names (its `sft`: `engines/local/sft.py`, or a rendered run of
verl's SFT trainer, `engines/verl/sft.py`); the result evaluated right after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aworld_train.inputs.config import TrainConfig, load_config
from aworld_train.rollout.samples.sft_data import SFTData, read_sft_records, sft_samples

__all__ = ["build_samples", "run_sft"]


def build_samples(cfg: TrainConfig) -> SFTData:
    """The config's `sft.data` as samples, rendered with `model`'s tokenizer and the rollout's template
    settings. The records are read and checked first: a bad file fails before the tokenizer loads."""
    from aworld_train.core.errors import DatasetError
    from aworld_train.rollout.policies.models import check_model, load_tokenizer
    from aworld_train.rollout.tokens.templates.renderer import ChatRenderer
    from aworld_train.rollout.tokens.turns.stops import stop_token_ids

    sft = cfg.sft
    records = read_sft_records(sft.data, sft.format, sft.system)
    check_model(cfg.model)
    tokenizer = load_tokenizer(cfg.model)
    stops = stop_token_ids(tokenizer)
    stop_id = tokenizer.eos_token_id if tokenizer.eos_token_id in stops else stops[0]
    renderer = ChatRenderer(
        tokenizer, tool_block=cfg.rollout.tool_block, template_kwargs=cfg.rollout.chat_template_kwargs
    )
    data = sft_samples(
        records, renderer, stop_id, sft.only_correct, min_reward=sft.min_reward, max_length=sft.max_length
    )
    vocab = len(tokenizer)
    if any(i >= vocab for s in data.samples for i in s.ids):
        raise DatasetError(
            f"sft.data holds token ids beyond {cfg.model}'s vocabulary ({vocab}): the trajectories were "
            "written with another tokenizer; set `model:` to the model family that produced them"
        )
    return data


def run_sft(
    config: str | Path | dict | TrainConfig | None,
    overrides: list[str] | None = None,
    render_only: bool = False,
    log=print,
) -> dict[str, Any]:
    """Train (or render) and, with `sft.eval_after`, evaluate the result on `data.test`."""
    from aworld_train.core.errors import DatasetError
    from aworld_train.engines import get_engine

    cfg = load_config(config, overrides)
    sft = cfg.sft
    data = build_samples(cfg)
    if not data.samples:
        raise DatasetError(
            f"sft.data gave no samples ({json.dumps(data.summary())}); with sft.only_correct "
            "only trajectories whose reward reaches sft.min_reward are kept"
        )
    log(f"sft data: {json.dumps(data.summary())}")
    run_dir = Path(sft.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    result = get_engine(sft.backend).sft(cfg, data, run_dir, render_only)
    if render_only or "checkpoint" not in result:
        return result  # verl's SFT trainer saves in its own layout: nothing for the eval suite
    if sft.eval_after and cfg.data.test:
        result["eval"] = evaluate_result(cfg, result["checkpoint"], run_dir, log)
    (run_dir / "sft_summary.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def evaluate_result(cfg: TrainConfig, checkpoint: str, run_dir: Path, log=print) -> dict[str, Any]:
    """The eval suite on the SFT result (and the starting model, with sft.eval_base)."""
    from aworld_train.facade.trainer import AgentTrainer

    checkpoints = ([cfg.model] if cfg.sft.eval_base else []) + [checkpoint]
    ev = cfg.eval.model_copy(update={"checkpoints": checkpoints, "out_dir": str(run_dir / "eval")})
    trainer = AgentTrainer(
        config=cfg.model_copy(update={"eval": ev}),
        run_path=run_dir,
    )
    suite = trainer.evaluate_suite(
        output=run_dir / "eval_trajectories.jsonl",
        on_report=lambda label, seed, report: log(f"{label} (seed {seed}): {report.text()}"),
    )
    log(suite.markdown())
    return {
        "table": str(suite.table_md),
        "csv": str(suite.table_csv),
        "plot": str(suite.plot),
        "results": {r.label: {m: r.stats(m) for m in ("pass@1", "pass@k", "mean@k")} for r in suite.results},
    }
