"""Load a rendered AReaL config with AReaL's own loader and check what a run on this machine needs.
`aworld-train check` (and `run`'s checks) run it with the AReaL environment's Python:

    python -m aworld_train.engines.areal.config_check RUN/areal/areal_config.yaml [--gpus N]
        [--resume-override recover.mode=auto] [--model-must-exist] [KEY=VALUE ...]

Checks (each failure names the key and the fix):
  1. on a GPU node, every worker role that gets its own processes asks for a GPU: LocalScheduler
     gives a worker `CUDA_VISIBLE_DEVICES=",".join(allocated)`, which is "" for `gpu: 0`;
  2. every scheduling spec has a `cmd` (a spec given in YAML replaces AReaL's default list, and
     SchedulingSpec.cmd defaults to None there);
  3. `sglang.model_path` is set (SGLangConfig.build_args passes it as the server's model and
     tokenizer) and is the actor's model;
  4. with one GPU (or actor/rollout colocation), or on a CPU (our policy server loads from disk),
     `actor.weight_update_mode` is `disk`;
  5. the resume override our launcher appends is accepted by AReaL's Hydra composition.
It also reports risks that do not fail the check (attention implementation, SGLang memory and
context length).

Nothing is written to the run folder: AReaL's loader saves a copy of the config only on RANK 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aworld_train.engines.areal.worker import COMMAND as WORKER


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def fail(self, text: str) -> None:
        self.failures.append(text)

    def warn(self, text: str) -> None:
        self.warnings.append(text)


def load(config_path: Path, overrides: list[str]):
    """AReaL's loader, as `areal_main` calls it: Hydra composition, then the GRPOConfig dataclass."""
    from areal.api.cli_args import GRPOConfig, load_expr_config

    rank = os.environ.get("RANK")
    os.environ["RANK"] = "1"  # load_expr_config saves config.yaml under the run's log dir on RANK 0 only
    try:
        config, _ = load_expr_config(["--config", str(config_path), *overrides], GRPOConfig)
    finally:
        if rank is None:
            os.environ.pop("RANK", None)
        else:
            os.environ["RANK"] = rank
    return config


def colocated(strategy, target: str) -> bool:
    return (
        strategy is not None
        and str(strategy.type) in ("colocation", "SchedulingStrategyType.colocation")
        and (strategy.target == target)
    )


def check_roles(config, report: Report, gpus: int) -> None:
    """Roles whose workers the LocalScheduler spawns itself (separation) must ask for a GPU (on a
    GPU node)."""
    roles = {"actor": config.actor, "rollout": config.rollout}
    if config.ref is not None and config.actor.kl_ctl > 0:
        roles["ref"] = config.ref
    for role, section in roles.items():
        specs = list(section.scheduling_spec)
        report.facts[f"{role}.scheduling_spec"] = [{"gpu": s.gpu, "cmd": s.cmd} for s in specs]
        if str(section.scheduling_strategy.type).endswith("colocation"):
            continue  # a colocated role runs on its target's GPUs
        if gpus > 0 and specs[0].gpu < 1:
            report.fail(
                f"{role}.scheduling_spec[0].gpu is {specs[0].gpu}: AReaL's LocalScheduler then starts the "
                f"{role} worker with CUDA_VISIBLE_DEVICES=''. Set "
                f"{role}.scheduling_spec: [{{gpu: 1, cmd: '{WORKER}'}}]"
                + (" (or ${actor.scheduling_spec})" if role != "actor" else "")
            )
        for i, spec in enumerate(specs):
            if not spec.cmd:
                report.fail(
                    f"{role}.scheduling_spec[{i}].cmd is empty: a spec written in YAML replaces AReaL's "
                    f"default one and its cmd defaults to None. Add cmd: '{WORKER}'"
                )


def check_model_path(config, report: Report, must_exist: bool) -> None:
    report.facts["sglang.model_path"] = config.sglang.model_path
    if not config.rollout.backend.startswith("sglang"):
        return
    path = config.sglang.model_path
    if not path:
        report.fail(
            "sglang.model_path is empty: SGLangConfig.build_args gives it to the SGLang server as the "
            "model and the tokenizer. Set sglang.model_path: ${actor.path}"
        )
    elif path != config.actor.path:
        report.fail(
            f"sglang.model_path={path!r} differs from actor.path={config.actor.path!r}: the rollout "
            "would sample from another model than the one trained. Set sglang.model_path: ${actor.path}"
        )
    elif must_exist and not (Path(path) / "config.json").is_file():
        report.fail(f"sglang.model_path={path!r} has no config.json on this machine")


def check_weight_update(config, report: Report, gpus: int) -> None:
    mode = config.actor.weight_update_mode
    report.facts["actor.weight_update_mode"] = mode
    shared = colocated(config.rollout.scheduling_strategy, "actor") or colocated(
        config.actor.scheduling_strategy, "rollout"
    )
    if mode != "disk" and gpus == 0:
        report.fail(
            f"actor.weight_update_mode is {mode!r} on a CPU: our policy server loads the weights the "
            "actor saves to disk. Set actor.weight_update_mode: disk"
        )
    elif mode != "disk" and (gpus == 1 or shared):
        why = "actor and rollout are colocated" if shared else "actor and SGLang share the one GPU"
        report.fail(
            f"actor.weight_update_mode is {mode!r} but {why}: an NCCL ('xccl') weight-update group "
            "cannot hold two ranks on one device. Set actor.weight_update_mode: disk"
        )


def check_resume(config_path: Path, overrides: list[str], resume: str, report: Report) -> None:
    if not resume:
        return
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        config = load(config_path, [*overrides, resume])
    except (HydraException, OmegaConfBaseException, ValueError) as exc:  # composition or validation
        cause = exc.__cause__ or exc
        key = resume.split("=", 1)[0].lstrip("+")
        report.fail(
            f"the resume override {resume!r} is refused: {type(cause).__name__}: {cause}. Render "
            f"{key} into the YAML (then {resume!r} works), or append '++{resume.lstrip('+')}'"
        )
        return
    report.facts["resumed recover.mode"] = config.recover.mode
    if config.recover.mode in ("on", "auto") and not (
        config.recover.freq_steps or config.recover.freq_epochs or config.recover.freq_secs
    ):
        report.warn(
            "recover.freq_steps/freq_epochs/freq_secs are all unset: RecoverHandler.dump never writes "
            "recover_info, so a later resume finds nothing. Set recover.freq_steps (e.g. to saver.freq_steps)"
        )


def check_risks(config, report: Report, gpus: int) -> None:
    for role in ("actor", "ref"):
        section = getattr(config, role)
        if section is None:
            continue
        if section.attn_impl == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
            report.warn(
                f"{role}.attn_impl is flash_attention_2 (AReaL's default) and this environment has no "
                f"flash_attn package; transformers refuses to load the model then. Set {role}.attn_impl: sdpa "
                "or install flash-attn beside AReaL"
            )
    sglang = config.sglang
    if gpus == 1 and (sglang.mem_fraction_static or 0) > 0.5:
        report.warn(
            f"sglang.mem_fraction_static={sglang.mem_fraction_static} leaves little of the one GPU to the "
            "FSDP actor; 0.3-0.4 is what AReaL's own single-GPU tests use"
        )
    model_config = Path(config.actor.path) / "config.json"
    if model_config.is_file():
        limit = json.loads(model_config.read_text()).get("max_position_embeddings")
        if limit and sglang.context_length and sglang.context_length > limit:
            report.warn(
                f"sglang.context_length={sglang.context_length} exceeds the model's "
                f"max_position_embeddings={limit}; SGLang refuses that. Set sglang.context_length <= {limit}"
            )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument(
        "--gpus", type=int, default=None, help="GPUs on the node (default: cluster.n_gpus_per_node)"
    )
    parser.add_argument("--resume-override", default="recover.mode=auto", help="'' skips the resume check")
    parser.add_argument("--model-must-exist", action="store_true")
    args, overrides = parser.parse_known_args(argv)

    report = Report()
    config = load(args.config, overrides)
    gpus = args.gpus if args.gpus is not None else config.cluster.n_gpus_per_node
    report.facts["gpus"] = gpus
    check_roles(config, report, gpus)
    check_model_path(config, report, args.model_must_exist)
    check_weight_update(config, report, gpus)
    check_resume(args.config, overrides, args.resume_override, report)
    check_risks(config, report, gpus)

    import areal

    print(f"loaded {args.config} with AReaL {areal.__version__}'s load_expr_config (GRPOConfig)")
    for key, value in report.facts.items():
        print(f"  {key}: {value}")
    for text in report.warnings:
        print(f"WARNING: {text}")
    for text in report.failures:
        print(f"FAIL: {text}")
    print(f"{len(report.failures)} failed, {len(report.warnings)} warnings")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
