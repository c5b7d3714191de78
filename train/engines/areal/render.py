"""backend: areal: render the run folder, then launch AReaL's trainer with its local scheduler.

The final config holds the values derived from the common config plus the
user's native `areal:` keys, by the same rules as verl (see `native.py`); AReaL
fills every other key with its own dataclass defaults when it loads the file.
AReaL cannot share an environment with our pins, so native keys are checked
against `areal_fields.json`, the key tree of AReaL's `GRPOConfig` read from its
source (`scripts/areal_fields.py`), instead of importing AReaL.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from aworld_train.core.errors import ConfigError
from aworld_train.engines.areal.cpu_run import cpu_values, is_cpu_run, server_settings
from aworld_train.engines.areal.facade import facade_values
from aworld_train.engines.areal.worker import scheduling_spec
from aworld_train.engines.native import Derived, fill
from aworld_train.evaluation.held_out import held_out
from aworld_train.inputs.run import RenderedRun, RunInputs
from aworld_train.rollout.samples.codec import TASK_FIELD, task_to_json
from aworld_train.rollout.samples.token_log import TOKENS_DIR

if TYPE_CHECKING:
    from aworld_train.inputs.config import TrainConfig

WORKFLOW = "aworld_train.engines.areal.workflow.AWorldWorkflow"
ENTRY = "aworld_train.engines.areal.main"
AREAL_PYTHON_VARIABLE = "AWORLD_TRAIN_AREAL_PYTHON"
FIELDS_FILE = Path(__file__).with_name("fields.json")
# AReaL's default GPUs per node (cluster.n_gpus_per_node).
DEFAULT_GPUS_PER_NODE = 8
# Sub-configs that carry their own experiment/trial names and file root in AReaL.
_NAMED = ("rollout", "actor", "saver", "evaluator", "recover", "stats_logger")


@cache
def areal_fields() -> dict[str, Any]:
    return json.loads(FIELDS_FILE.read_text())


def check_keys(native: dict[str, Any], tree: dict[str, Any] | None = None, prefix: str = "") -> None:
    """Every key of the `areal:` section must be a field of AReaL's GRPOConfig."""
    fields = areal_fields()
    tree = fields["fields"] if tree is None else tree
    for key, value in native.items():
        dotted = f"{prefix}{key}"
        if key not in tree:
            close = difflib.get_close_matches(str(key), list(tree), n=1)
            hint = f"; did you mean {prefix}{close[0]}?" if close else ""
            raise ConfigError(
                f"areal.{dotted} is not a key of AReaL's GRPOConfig (areal {fields['areal_version']}){hint}: "
                "remove it or fix its spelling"
            )
        if isinstance(tree[key], dict) and isinstance(value, dict):
            check_keys(value, tree[key], f"{dotted}.")


def validate_native(native: dict[str, Any]) -> None:
    """The `areal:` section's keys are AReaL's, and it leaves group normalisation and the evaluation
    before training to us."""
    check_keys(native)
    if (native.get("evaluator") or {}).get("eval_before_train"):
        raise ConfigError(
            "areal.evaluator.eval_before_train: AReaL 1.0.4 runs it after the first update; the trainer "
            "evaluates the weights before any update itself (trainer.eval_before, on by default): remove it"
        )
    if (native.get("actor") or {}).get("reward_norm") is not None:
        raise ConfigError(
            "areal.actor.reward_norm: aworld-train normalises rewards within each task's group in its "
            "workflow, leaving failed episodes out (AReaL's normalisation would count them as reward 0); "
            "remove it, and set algorithm.norm_adv_by_std for the std"
        )


def _placement_values(cfg: TrainConfig, root: Path, model_path: str) -> list[Derived]:
    """Where AReaL's workers run and what they load: names, files, scheduler, backends."""
    return [
        Derived("experiment_name", "aworld-train"),
        Derived("trial_name", root.name),
        Derived("seed", cfg.trainer.seed, "trainer.seed"),
        Derived("cluster.fileroot", str(root / "areal_files")),
        Derived("cluster.n_nodes", 1),
        # AReaL's single-controller mode: this process schedules AReaL's workers on this machine
        Derived("scheduler.type", "local"),
        Derived("tokenizer_path", model_path, "model"),
        Derived("actor.path", model_path, "model"),
        Derived("actor.backend", "fsdp:d1"),
        Derived("rollout.backend", "sglang:d1"),
        # one GPU per worker: AReaL's default spec asks for none, and its scheduler then gives
        # each worker CUDA_VISIBLE_DEVICES=""; our worker masks packed sequences one by one (worker.py)
        Derived("actor.scheduling_spec", [scheduling_spec(1, model_path)]),
        Derived("rollout.scheduling_spec", "${actor.scheduling_spec}"),
        # AReaL's default flash_attention_2 is not installed by areal[sglang]
        Derived("actor.attn_impl", "sdpa"),
        # SGLang serves the actor's model; AReaL leaves its path empty
        Derived("sglang.model_path", model_path, "model"),
        Derived("sglang.random_seed", "${seed}"),
        # agent turns share their conversation's prefix: keep SGLang's prefix cache on
        Derived("sglang.disable_radix_cache", False),
        # AReaL writes recover data only with a mode and a frequency; `run --resume` continues from it
        Derived("recover.mode", "auto"),
        Derived("recover.freq_steps", "${saver.freq_steps}"),
    ]


def derived_values(inputs: RunInputs, folder: Path, model_path: str) -> list[Derived]:
    cfg = inputs.config
    algo, rollout, data, run = cfg.algorithm, cfg.rollout, cfg.data, cfg.trainer
    root = inputs.run_dir.resolve()
    rows = max(1, len(inputs.train_tasks))
    values = [
        *_placement_values(cfg, root, model_path),
        Derived("gconfig.n_samples", algo.group_size, "algorithm.group_size"),
        Derived("gconfig.max_new_tokens", rollout.max_new_tokens, "rollout.max_new_tokens"),
        Derived("gconfig.temperature", rollout.temperature, "rollout.temperature"),
        Derived("gconfig.top_p", rollout.top_p, "rollout.top_p"),
        Derived("actor.max_new_tokens", rollout.max_new_tokens, "rollout.max_new_tokens"),
        Derived("actor.temperature", rollout.temperature, "rollout.temperature"),
        Derived("actor.optimizer.lr", algo.lr, "algorithm.lr"),
        Derived("actor.optimizer.weight_decay", algo.weight_decay, "algorithm.weight_decay"),
        Derived("actor.optimizer.gradient_clipping", algo.grad_clip, "algorithm.grad_clip"),
        Derived(
            "actor.optimizer.warmup_steps_proportion",
            algo.warmup_steps / max(1, run.steps),
            "algorithm.warmup_steps",
        ),
        Derived("actor.eps_clip", algo.clip_low, "algorithm.clip_low"),
        Derived("actor.eps_clip_higher", algo.clip_high, "algorithm.clip_high"),
        Derived("actor.kl_ctl", algo.kl_coef, "algorithm.kl_coef"),
        Derived("actor.ppo_n_minibatches", algo.mini_batches, "algorithm.mini_batches"),
        Derived("actor.mb_spec.max_tokens_per_mb", algo.micro_batch_tokens, "algorithm.micro_batch_tokens"),
        Derived(
            "actor.gradient_checkpointing", algo.gradient_checkpointing, "algorithm.gradient_checkpointing"
        ),
        Derived("train_dataset.path", str(folder / "train.jsonl"), "data.train"),
        Derived("train_dataset.type", "rl"),
        Derived("train_dataset.batch_size", data.batch_size, "data.batch_size"),
        Derived("valid_dataset.path", str(folder / "valid.jsonl"), "data.test"),
        Derived("valid_dataset.type", "rl"),
        Derived("valid_dataset.batch_size", data.batch_size, "data.batch_size"),
        Derived("rollout.consumer_batch_size", data.batch_size, "data.batch_size"),
        Derived("rollout.max_concurrent_rollouts", rollout.concurrency, "rollout.concurrency"),
        Derived("rollout.tokenizer_path", model_path, "model"),
        # AReaL's stats (ours among them: rollout/reward, rollout/status/*) where the local backend's go
        Derived("stats_logger.tensorboard.path", str(root / "tensorboard")),
        Derived("total_train_steps", run.steps, "trainer.steps"),
        # enough passes over the data for `steps`; total_train_steps stops the run
        Derived("total_train_epochs", max(1, math.ceil(run.steps * data.batch_size / rows))),
        Derived("saver.freq_steps", run.save_every or None, "trainer.save_every"),
        *held_out_values(cfg),
        *facade_values(cfg),
    ]
    if algo.kl_coef > 0:
        values.append(Derived("ref.path", model_path, "model"))
        values.append(Derived("ref.backend", "fsdp:d1"))
    for section in _NAMED:
        values.append(Derived(f"{section}.experiment_name", "${experiment_name}"))
        values.append(Derived(f"{section}.trial_name", "${trial_name}"))
        if "fileroot" in areal_fields()["fields"][section]:
            values.append(Derived(f"{section}.fileroot", "${cluster.fileroot}"))
    return values


def held_out_values(cfg: TrainConfig) -> list[Derived]:
    """AReaL's evaluator from the run's held-out settings (`held_out(cfg)`): its cadence, and the
    generation settings of evaluation (`eval_gconfig`: k samples a task, the held-out temperature;
    the rest as `gconfig`). The evaluations before and after training are the trainer's (held_out.py)."""
    held = held_out(cfg)
    return [
        Derived("evaluator.freq_steps", cfg.trainer.eval_every or None, "trainer.eval_every"),
        Derived("evaluator.eval_before_train", False),
        Derived("eval_gconfig.n_samples", held.k, "trainer.eval_k"),
        Derived("eval_gconfig.temperature", held.temperature, "trainer.eval_temperature"),
    ]


def eval_settings(inputs: RunInputs, final: dict[str, Any]) -> dict[str, Any]:
    """workflow.yaml's `held_out` (the evaluations the trainer adds) and `eval_kwargs` (what the
    workflow evaluates with: k samples a task under each held-out seed, the held-out rollout settings)."""
    cfg, held = inputs.config, held_out(inputs.config)
    rollout = held.rollout(cfg.rollout).model_copy(
        update={"temperature": final["eval_gconfig"]["temperature"]}
    )
    tests = bool(inputs.test_tasks)
    return {
        "held_out": {"before": cfg.trainer.eval_before and tests, "after": cfg.trainer.eval_after and tests},
        "eval_kwargs": {
            "group_size": int(final["eval_gconfig"]["n_samples"]),
            "eval_seeds": list(held.seeds),
            "rollout": rollout.model_dump(mode="json"),
        },
    }


def single_gpu_values(native: dict[str, Any], context: int | None) -> list[Derived]:
    """On one GPU the actor and SGLang share the device: weights move through disk (two NCCL ranks
    cannot share one device), SGLang leaves the actor room, and its context fits the model."""
    gpus = (native.get("cluster") or {}).get("n_gpus_per_node", DEFAULT_GPUS_PER_NODE)
    if gpus != 1:
        return []
    values = [Derived("actor.weight_update_mode", "disk"), Derived("sglang.mem_fraction_static", 0.4)]
    if context:
        values.append(Derived("sglang.context_length", context))
    return values


def merge_native(inputs: RunInputs, folder: Path, model_path: str) -> tuple[dict[str, Any], int]:
    """The final AReaL config, and the group size the workflow runs per task.

    GRPO's group baseline must leave failed episodes out; AReaL's group normalisation
    (actor.reward_norm) takes no mask, so the workflow runs each task's group itself and
    normalises it: AReaL gets gconfig.n_samples 1 and no reward_norm."""
    from aworld_train.rollout.policies.models import check_model

    native = inputs.config.areal if inputs.config.backend == "areal" else {}
    validate_native(native)
    # a CPU run's values come first: `fill` keeps the first value derived for a key
    first = cpu_values(inputs.config, model_path) if is_cpu_run(inputs.config) else []
    derived = (
        first
        + derived_values(inputs, folder, model_path)
        + single_gpu_values(native, check_model(inputs.config.model))
    )
    final = fill(native, derived, inputs, "areal")
    group_size = int(final["gconfig"]["n_samples"])
    final["gconfig"]["n_samples"] = 1
    # evaluation generates as training does (adapter name, lengths) but for its own keys
    final["eval_gconfig"] = {**final["gconfig"], **final["eval_gconfig"]}
    return final, group_size


def recover_data(final: dict[str, Any]) -> list[Path]:
    """AReaL's recover files under the run's file root (checkpoints/<user>/<experiment>/<trial>/)."""
    root = Path(final["cluster"]["fileroot"]) / "checkpoints"
    return sorted(root.glob("*/*/*/recover_info")) if root.is_dir() else []


def write_jsonl(tasks, path: Path) -> None:
    """One row per task for AReaL's dataloader; the workflow turns it back into our Task."""
    path.write_text("".join(json.dumps({"task_id": t.id, TASK_FIELD: task_to_json(t)}) + "\n" for t in tasks))


def areal_python() -> str:
    """The Python of AReaL's environment: AWORLD_TRAIN_AREAL_PYTHON, else this one (aworld-train
    installed beside AReaL, as scripts/areal/install_*_env.sh do)."""
    return os.environ.get(AREAL_PYTHON_VARIABLE) or sys.executable


def command(config_path: Path) -> tuple[str, ...]:
    # AReaL's single-controller launch: the entry script starts AReaL's local scheduler
    return (areal_python(), "-m", ENTRY, "--config", str(config_path))


def render(inputs: RunInputs) -> RenderedRun:
    from aworld_train.rollout.policies.models import resolve_model_path

    cfg = inputs.config
    folder = (inputs.run_dir / "areal").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    model_path = str(resolve_model_path(cfg.model))
    final, group_size = merge_native(inputs, folder, model_path)
    write_jsonl(inputs.train_tasks, folder / "train.jsonl")
    write_jsonl(inputs.test_tasks, folder / "valid.jsonl")  # none: AReaL evaluates nothing
    spec_path = inputs.spec.write(folder / "agent_spec.yaml")
    held = eval_settings(inputs, final)
    final["eval_gconfig"]["n_samples"] = 1  # the workflow runs a task's k samples (eval_kwargs)
    workflow = {
        "workflow": WORKFLOW,
        "kwargs": {
            "spec_path": str(spec_path),
            "reward": inputs.reward.reference,
            "reward_kwargs": inputs.reward.kwargs,
            "rollout": cfg.rollout.model_dump(mode="json"),
            "tokenizer": model_path,
            "group_size": group_size,
            "norm_by_std": cfg.algorithm.norm_adv_by_std,
            "advantage": cfg.algorithm.advantage,
            "gamma": cfg.algorithm.gamma,
            "step_weight": cfg.algorithm.step_advantage_weight,
            "episodes_file": str(inputs.run_dir.resolve() / "episodes.jsonl"),
            "tokens_dir": str(inputs.run_dir.resolve() / TOKENS_DIR),
        },
        # on a CPU, the entry point serves the policy itself in SGLang's place
        "cpu_server": server_settings(cfg, model_path) if is_cpu_run(cfg) else None,
        # the step line warns above it (engines/areal/actor.py)
        "mismatch_tolerance": cfg.algorithm.mismatch_tolerance,
        **held,
    }
    (folder / "workflow.yaml").write_text(yaml.safe_dump(workflow, sort_keys=False))
    config_path = folder / "areal_config.yaml"
    config_path.write_text(yaml.safe_dump(final, sort_keys=False))
    # what the run does: AReaL's saver keeps every checkpoint (read back by `eval`, `--resume`)
    kept = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"save_total_limit": None})})
    (inputs.run_dir / "config.yaml").write_text(kept.render())
    return RenderedRun("areal", folder, config_path, command(config_path), final)
