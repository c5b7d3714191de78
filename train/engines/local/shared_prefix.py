"""The learner's forward over a micro-batch whose rows begin with the same tokens (an agent's
system prompt and worked examples, a task's question): that prefix runs once, and every row's own
tokens attend to its keys and values, so a step that trains 16 episodes of a 400-token prompt
computes the prompt once per micro-batch instead of once per row. The hidden states and the
gradient are those of the plain forward (up to float rounding: tests/test_shared_prefix.py).

transformers' gradient checkpointing refuses a key/value cache (it would recompute and append it
twice), so a model trained with `algorithm.gradient_checkpointing` takes the plain forward.
"""

from __future__ import annotations

import torch

# below this, the second forward's overhead outweighs the tokens saved
MIN_SHARED_TOKENS = 32


def shared_prefix_len(ids: torch.Tensor, attention: torch.Tensor) -> int:
    """The length of the prefix every row of `ids` holds (within each row's own tokens)."""
    if ids.shape[0] < 2:
        return 0
    same = (ids == ids[:1]).all(0) & (attention > 0).all(0)
    differs = (~same).nonzero()
    return int(differs[0]) if len(differs) else ids.shape[1]


def decoder_hidden(decoder, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """The decoder's last hidden states for every row ([rows, width, hidden]), the rows' common
    prefix computed once where it is long enough and the decoder keeps a key/value cache."""
    shared = shared_prefix_len(ids, attention)
    # one token of each row is its own: the last position's hidden state predicts the next token
    shared = min(shared, ids.shape[1] - 1)
    if shared < MIN_SHARED_TOKENS or (decoder.training and getattr(decoder, "gradient_checkpointing", False)):
        return decoder(input_ids=ids, attention_mask=attention).last_hidden_state
    rows, width = ids.shape
    prefix = decoder(input_ids=ids[:1, :shared], use_cache=True)
    cache = prefix.past_key_values
    cache.batch_repeat_interleave(rows)  # every row attends to the one prefix; the gradient sums over rows
    positions = torch.arange(shared, width, device=ids.device).expand(rows, -1)
    rest = decoder(
        input_ids=ids[:, shared:], attention_mask=attention, past_key_values=cache, position_ids=positions
    )
    return torch.cat([prefix.last_hidden_state.expand(rows, -1, -1), rest.last_hidden_state], dim=1)
