"""`sft.backend: verl`: render a run of verl's SFT trainer (`verl.trainer.sft_trainer`).

The run folder holds `train.parquet` (our ledger's `input_ids` and `loss_mask`, plus the
chat `messages` where a row came from a conversation), `sft_verl.yaml` (verl's
`sft_trainer_engine` config composed by Hydra with our values and the user's native
`sft.verl:` keys, which win) and the launch command. The dataset class verl loads is
ours (`data.custom_cls`), so verl trains on the very tokens RL sees.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aworld_train.core.errors import ConfigError
from aworld_train.engines.native import put, unknown_key_message
from aworld_train.inputs.config import TrainConfig
from aworld_train.rollout.samples.sft_data import SFTSample

CONFIG_NAME = "sft_verl"


@dataclass
class RenderedSFT:
    folder: Path
    config_path: Path
    command: tuple[str, ...]
    config: Any


def sft_defaults(overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """verl's own `sft_trainer_engine` config, composed by Hydra as its trainer would."""
    from hydra import compose, initialize_config_dir

    from aworld_train.engines.verl.verl_config import verl_config_dir

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return compose(config_name="sft_trainer_engine", overrides=list(overrides))


def derived(cfg: TrainConfig, folder: Path, model_path: str) -> dict[str, Any]:
    sft = cfg.sft
    import aworld_train.engines.verl.sft_dataset as verl_dataset

    values = {
        "data.train_files": str(folder / "train.parquet"),
        "data.val_files": None,
        "data.custom_cls.path": verl_dataset.__file__,
        "data.custom_cls.name": "LedgerSFTDataset",
        "data.pad_mode": "no_padding",
        "data.truncation": "error",
        "data.max_length": sft.max_length,
        "data.train_batch_size": sft.batch_size,
        "data.max_token_len_per_gpu": max(sft.micro_batch_tokens, sft.max_length),
        "data.num_workers": 0,
        "model.path": model_path,
        "optim.lr": sft.lr,
        "optim.weight_decay": sft.weight_decay,
        "optim.clip_grad": sft.grad_clip,
        "optim.lr_warmup_steps": sft.warmup_steps or -1,
        "trainer.total_epochs": sft.epochs,
        "trainer.total_training_steps": sft.max_steps,
        "trainer.seed": sft.seed,
        "trainer.default_local_dir": str(folder / "checkpoints"),
        "trainer.project_name": "aworld-train-sft",
        "trainer.experiment_name": Path(sft.run_dir).name,
        "trainer.logger": ["console"],
        "trainer.resume_mode": "disable",
        # the Hugging Face folder too, so a checkpoint can be a `model:` for GRPO
        "checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
    }
    return values


def compose(cfg: TrainConfig, folder: Path, model_path: str) -> Any:
    """verl's defaults, our derived values, then the user's native keys; unknown keys are errors."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError

    native: dict[str, Any] = {}
    for key, value in derived(cfg, folder, model_path).items():
        put(native, key, value)
    base = sft_defaults()
    OmegaConf.set_struct(base, True)
    try:
        merged = OmegaConf.merge(base, OmegaConf.create(native))
        return OmegaConf.merge(merged, OmegaConf.create(cfg.sft.verl))
    except ConfigKeyError as exc:
        raise ConfigError(
            unknown_key_message(base, exc, "sft.verl", "verl's sft_trainer_engine config")
        ) from None


def write_parquet(samples: list[SFTSample], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"input_ids": s.ids, "loss_mask": s.mask, "source": s.source, "agent": s.agent} for s in samples]
    pq.write_table(pa.Table.from_pylist(rows), path)


def command(folder: Path, config_path: Path, gpus: int) -> tuple[str, ...]:
    return (
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc_per_node={gpus}",
        "-m",
        "verl.trainer.sft_trainer",
        f"--config-path={folder}",
        f"--config-name={config_path.stem}",
        f"hydra.run.dir={folder / 'hydra'}",
    )


def render(cfg: TrainConfig, samples: list[SFTSample], run_dir: str | Path) -> RenderedSFT:
    from omegaconf import OmegaConf

    from aworld_train.rollout.policies.models import resolve_model_path

    folder = (Path(run_dir) / "verl_sft").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    final = compose(cfg, folder, str(resolve_model_path(cfg.model)))
    write_parquet(samples, folder / "train.parquet")
    config_path = folder / f"{CONFIG_NAME}.yaml"
    OmegaConf.save(final, config_path, resolve=False)
    (Path(run_dir) / "config.yaml").write_text(cfg.render())
    gpus = int(final.trainer.n_gpus_per_node) * int(final.trainer.nnodes)
    return RenderedSFT(folder, config_path, command(folder, config_path, max(gpus, 1)), final)
