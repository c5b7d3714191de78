"""SFT on the local backend: a transformers model on CPU or one GPU, AdamW, token-mean
cross-entropy over assistant tokens only. Checkpoints are model folders (`model:` for GRPO)."""

from __future__ import annotations

import math
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from aworld_train.engines.local.learner import adamw_with_warmup
from aworld_train.engines.local.run_folder import RunFolder
from aworld_train.engines.local.samples import micro_batches
from aworld_train.inputs.config import SFTConfig
from aworld_train.rollout.samples.sft_data import SFTSample

console = Console(stderr=True)


def collate(batch: list[SFTSample], pad_id: int, device) -> dict[str, torch.Tensor]:
    """ids, attention and the loss mask over targets (position t predicts ids[t + 1])."""
    width = max(len(s) for s in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros((len(batch), width - 1))
    for i, s in enumerate(batch):
        ids[i, : len(s)] = torch.tensor(s.ids)
        attention[i, : len(s)] = 1
        mask[i, : len(s) - 1] = torch.tensor(s.mask[1:], dtype=torch.float)
    return {"ids": ids.to(device), "attention": attention.to(device), "mask": mask.to(device)}


def token_nll(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Summed negative log-likelihood of the masked targets; the LM head runs only there."""
    ids, mask = batch["ids"], batch["mask"] > 0
    targets = ids[:, 1:][mask]
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    if decoder is None or head is None or getattr(model.config, "final_logit_softcapping", None):
        logits = model(input_ids=ids, attention_mask=batch["attention"]).logits[:, :-1][mask]
    else:
        hidden = decoder(input_ids=ids, attention_mask=batch["attention"]).last_hidden_state[:, :-1]
        logits = head(hidden[mask])
    return torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum")


def step_batches(samples: list[SFTSample], cfg: SFTConfig) -> list[list[SFTSample]]:
    """The optimizer steps: each epoch a seeded shuffle cut into batch_size pieces."""
    steps = []
    for epoch in range(cfg.epochs):
        order = list(range(len(samples)))
        random.Random(cfg.seed * 1_000_003 + epoch).shuffle(order)
        for start in range(0, len(order), cfg.batch_size):
            steps.append([samples[i] for i in order[start : start + cfg.batch_size]])
    return steps[: cfg.max_steps] if cfg.max_steps else steps


def fine_tune(
    samples: list[SFTSample], model_ref: str, cfg: SFTConfig, run_dir: str | Path
) -> dict[str, Any]:
    from aworld_train.rollout.policies.models import load_model, load_tokenizer

    folder = RunFolder(run_dir)
    torch.manual_seed(cfg.seed)
    tokenizer = load_tokenizer(model_ref)
    model = load_model(model_ref)
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    weights, optimizer, scheduler = adamw_with_warmup(model, cfg.lr, cfg.weight_decay, cfg.warmup_steps)
    steps = step_batches(samples, cfg)
    started = time.perf_counter()
    losses = []
    model.train()
    with Progress(
        TextColumn("[bold]SFT"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.4f}"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        bar = progress.add_task("sft", total=len(steps), loss=float("nan"))
        for step, batch in enumerate(steps, 1):
            t0 = time.perf_counter()
            n_tokens = sum(sum(s.mask[1:]) for s in batch)
            loss = _backward(model, batch, n_tokens, cfg.micro_batch_tokens, pad_id, device)
            grad_norm = weights.step(optimizer, cfg.grad_clip)
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss)
            folder.log(
                step,
                {
                    "loss": loss,
                    "grad_norm": float(grad_norm),
                    "lr": scheduler.get_last_lr()[0],
                    "sequences": len(batch),
                    "loss_tokens": n_tokens,
                    "step_s": time.perf_counter() - t0,
                },
                prefix="sft",
            )
            progress.update(bar, advance=1, loss=loss)
    model.eval()
    path = _save(model, tokenizer, folder.checkpoint_dir(len(steps)))
    curve = plot_loss(folder)
    folder.close()
    return {
        "checkpoint": str(path),
        "steps": len(steps),
        "loss_first": losses[0] if losses else math.nan,
        "loss_last": losses[-1] if losses else math.nan,
        "train_s": round(time.perf_counter() - started, 1),
        "loss_curve": str(curve) if curve else None,
    }


def _backward(model, batch: list[SFTSample], n_tokens: int, micro_tokens: int, pad_id: int, device) -> float:
    """One step's gradients, a micro-batch at a time; its loss, the token mean over the step."""
    total = 0.0
    for micro in micro_batches(batch, micro_tokens):
        nll = token_nll(model, collate(micro, pad_id, device))
        (nll / max(n_tokens, 1)).backward()  # token mean over the whole step
        total += float(nll.detach())
    return total / max(n_tokens, 1)


def _save(model, tokenizer, path: Path) -> Path:
    """The fine-tuned model and its tokenizer, written under a temporary name and renamed."""
    tmp = path.with_name(path.name + ".partial")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    return path


def plot_loss(folder: RunFolder) -> Path | None:
    rows = folder.history("sft")
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], marker=".")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (assistant tokens)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = folder.path / "loss_curve.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
