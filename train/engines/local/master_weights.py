"""Float32 master weights for a model that computes in a lower precision.

A bf16 weight holds 8 significant bits: an AdamW step of lr 2e-5 on a weight of typical size
is below half its spacing and rounds away (on the embedded model, one such step changed 4% of
the bf16 weights). Training the bf16 copy directly learned next to nothing. As in the usual
mixed-precision recipe (PyTorch's own optimizers have no such mode), the optimizer steps float32
copies, and the model, which samples and computes the loss in bf16, gets them rounded after
every step. A float32 model is stepped directly: nothing is copied.

The float32 gradients of all weights would cost as much memory as the master weights; they
exist a slice at a time instead (`step`), which AdamW allows: its state, step count included,
is per weight, so stepping the weights in slices is the same update as one step over all.
"""

from __future__ import annotations

import torch

# float32 gradients alive at once during a step: a few of the embedded model's largest tensors
_SLICE_BYTES = 64 * 2**20


class MasterWeights:
    def __init__(self, model: torch.nn.Module) -> None:
        self.model_params = [p for p in model.parameters() if p.requires_grad]
        self.copied = any(p.dtype != torch.float32 for p in self.model_params)
        self.params: list[torch.Tensor] = (
            [torch.nn.Parameter(p.detach().float().clone()) for p in self.model_params]
            if self.copied
            else self.model_params
        )

    @torch.no_grad()
    def step(self, optimizer: torch.optim.Optimizer, max_grad_norm: float) -> float:
        """Clip the gradients (after backward) to `max_grad_norm` by their global norm, step
        `optimizer` (built over `params`); the norm before clipping."""
        if not self.copied:
            norm = torch.nn.utils.clip_grad_norm_(self.params, max_grad_norm)
            optimizer.step()
            return float(norm)
        grads = [low.grad for low in self.model_params if low.grad is not None]
        norm = (
            float(torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads]))) if grads else 0.0
        )
        scale = min(1.0, max_grad_norm / (norm + 1e-6))  # clip_grad_norm_'s rule
        pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        pending_bytes = 0
        for low, master in zip(self.model_params, self.params, strict=True):
            if low.grad is None:
                continue
            master.grad = low.grad.float().mul_(scale)
            low.grad = None
            pending.append((low, master))
            pending_bytes += master.grad.nbytes
            if pending_bytes >= _SLICE_BYTES:
                self._step_slice(optimizer, pending)
                pending, pending_bytes = [], 0
        if pending:
            self._step_slice(optimizer, pending)
        return norm

    @staticmethod
    def _step_slice(optimizer: torch.optim.Optimizer, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        optimizer.step()  # steps only the weights that hold a gradient: this slice
        for low, master in pairs:
            master.grad = None
            low.copy_(master)  # the model computes with the new weights, rounded

    def state_dict(self) -> list[torch.Tensor]:
        return [p.detach() for p in self.params] if self.copied else []

    @torch.no_grad()
    def load_state_dict(self, state: list[torch.Tensor]) -> None:
        """Restore saved master weights; without them (an older checkpoint) the model's stand."""
        if self.copied and state:
            for master, saved in zip(self.params, state, strict=True):
                master.copy_(saved)

    def drop(self) -> None:
        """After the last step: the master copies serve nothing that follows (the optimizer still
        holds the tensors, so their storage is emptied)."""
        if self.copied:
            for master in self.params:
                master.data = master.data.new_empty(0)
                master.grad = None
