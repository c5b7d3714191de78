"""Float32 master weights for a bf16 model, stored as the 16 bits its weights lack.

A bf16 weight holds 8 significant bits: an AdamW step of lr 2e-5 on a weight of typical size
is below half its spacing and rounds away (on the embedded model, one such step changed 4% of
the bf16 weights). Training the bf16 copy directly learned next to nothing. As in the usual
mixed-precision recipe (PyTorch's own optimizers have no such mode), the optimizer steps float32
master weights, and the model, which samples and computes the loss in bf16, gets them rounded
to nearest after every step. A float32 model is stepped directly: nothing is copied.

A bf16 number is the top 16 bits of a float32 one, so a master weight is its model weight (the
master rounded) and the master's low 16 bits, stored here as int16: half the memory of float32
copies (0.27 GB of the embedded model's 3 GB training peak) and the same update, bit for bit.
Which way a master rounded follows from its low bits, except at an exact tie (low bits 0x8000),
where rounding half to even went down only if the bits above were even: those few positions
(about one weight in 130,000) are kept as indices.

The float32 masters and gradients exist a slice at a time (`step`), which AdamW allows: its
state, step count included, is per weight, so stepping the weights in slices is the same update
as one step over all.
"""

from __future__ import annotations

import torch

# float32 masters and gradients alive at once during a step: a few of the embedded model's largest tensors
_SLICE_BYTES = 64 * 2**20
_TIE = -0x8000  # low 16 bits (as int16) of a float32 exactly halfway between two bf16 numbers


def _master(weight: torch.Tensor, low_bits: torch.Tensor, ties_down: torch.Tensor) -> torch.Tensor:
    """The float32 master of bf16 `weight` (the master rounded) and its low bits.

    Read as a signed number, the low bits of a master that rounded up are negative: the master is
    the weight's bits followed by zeros, plus its low bits. A tie that rounded down is the one case
    where that is 0x10000 short."""
    bits = weight.view(torch.int16).to(torch.int32).bitwise_left_shift_(16).add_(low_bits)
    flat = bits.view(-1)
    flat[ties_down] += 0x10000
    return bits.view(torch.float32)


class MasterWeights:
    def __init__(self, model: torch.nn.Module) -> None:
        self.model_params = [p for p in model.parameters() if p.requires_grad]
        unknown = {p.dtype for p in self.model_params} - {torch.float32, torch.bfloat16}
        if unknown:
            raise ValueError(
                f"master weights: weights in {sorted(map(str, unknown))}; load the model in bf16 or float32"
            )
        # a bf16 weight's master: a float32 Parameter for the optimizer, whose data exists only
        # while its slice steps; a float32 weight is its own master
        self.params: list[torch.Tensor] = [
            torch.nn.Parameter(torch.empty(0)) if p.dtype == torch.bfloat16 else p for p in self.model_params
        ]
        # the largest weights (an embedding) step last, when the other gradients are freed
        self._smallest_first = sorted(
            range(len(self.model_params)), key=lambda i: self.model_params[i].numel()
        )
        self.low_bits: dict[int, torch.Tensor] = {}
        self.ties_down: dict[int, torch.Tensor] = {}
        for i, p in enumerate(self.model_params):
            if p.dtype == torch.bfloat16:  # the masters start equal to the model's weights
                self.low_bits[i] = torch.zeros(p.shape, dtype=torch.int16, device=p.device)
                self.ties_down[i] = torch.zeros(0, dtype=torch.long, device=p.device)

    @property
    def copied(self) -> bool:
        """Whether any weight's master is kept here (the model has bf16 weights, not yet dropped)."""
        return bool(self.low_bits)

    def masters(self) -> list[torch.Tensor]:
        """Every weight's float32 master (built afresh: for checks, not inside a step)."""
        return [
            _master(p.detach(), self.low_bits[i], self.ties_down[i]) if i in self.low_bits else p.detach()
            for i, p in enumerate(self.model_params)
        ]

    @torch.no_grad()
    def step(self, optimizer: torch.optim.Optimizer, max_grad_norm: float) -> float:
        """Clip the gradients (after backward) to `max_grad_norm` by their global norm, step
        `optimizer` (built over `params`); the norm before clipping."""
        if not self.copied:
            norm = torch.nn.utils.clip_grad_norm_(self.params, max_grad_norm)
            optimizer.step()
            return float(norm)
        # in float32 without a float32 copy of each gradient (the step below makes one per slice)
        norms = [
            torch.linalg.vector_norm(low.grad, dtype=torch.float32)
            for low in self.model_params
            if low.grad is not None
        ]
        norm = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0
        scale = min(1.0, max_grad_norm / (norm + 1e-6))  # clip_grad_norm_'s rule
        pending: list[int] = []
        pending_bytes = 0
        for i in self._smallest_first:
            low, master = self.model_params[i], self.params[i]
            if low.grad is None:
                continue
            if i not in self.low_bits:  # a float32 weight, its own master
                low.grad.mul_(scale)
            else:
                master.data = _master(low.detach(), self.low_bits[i], self.ties_down[i])
                master.grad = low.grad.float().mul_(scale)
                low.grad = None
            pending.append(i)
            pending_bytes += 2 * master.nbytes
            if pending_bytes >= _SLICE_BYTES:
                self._step_slice(optimizer, pending)
                pending, pending_bytes = [], 0
        if pending:
            self._step_slice(optimizer, pending)
        return norm

    def _step_slice(self, optimizer: torch.optim.Optimizer, indices: list[int]) -> None:
        optimizer.step()  # steps only the weights that hold a gradient: this slice
        for i in indices:
            master = self.params[i]
            master.grad = None
            if i in self.low_bits:
                self._store(i, master.data)
                master.data = master.data.new_empty(0)

    def _store(self, i: int, master: torch.Tensor) -> None:
        """Keep float32 `master` as the model's weight (rounded) and its low bits."""
        self.model_params[i].data.copy_(master)  # rounded half to even (a test holds torch to it)
        bits = master.view(torch.int32)
        low = self.low_bits[i]
        low.copy_(bits)  # int32 to int16 keeps the low 16 bits
        ties = (low == _TIE).flatten().nonzero().squeeze(1)
        # half to even: a tie rounded down where the bits above are even
        self.ties_down[i] = ties[bits.view(-1)[ties].bitwise_and(0x10000) == 0]

    def state_dict(self) -> dict[str, dict[int, torch.Tensor]]:
        """The masters' low bits; with the model's own weights (saved beside) they are the masters."""
        return {"low_bits": self.low_bits, "ties_down": self.ties_down} if self.copied else {}

    @torch.no_grad()
    def load_state_dict(self, state: dict | list) -> None:
        """Restore saved masters: low bits (for the model's weights, loaded from the same
        checkpoint), or float32 masters (older checkpoints). Without them the model's weights stand."""
        if not self.copied or not state:
            return
        if isinstance(state, list):
            for i, saved in enumerate(state):
                if i in self.low_bits:
                    self._store(i, saved.detach().to(torch.float32, copy=True))
            return
        for i in self.low_bits:
            self.low_bits[i].copy_(state["low_bits"][i])
            self.ties_down[i] = state["ties_down"][i].to(self.low_bits[i].device, copy=True)

    def drop(self) -> None:
        """After the last step: the masters serve nothing that follows."""
        self.low_bits.clear()
        self.ties_down.clear()
