"""verl's SFT dataset interface over our pre-tokenized rows (`data.custom_cls` of verl's SFT trainer).

verl's own MultiTurnSFTDataset re-applies the chat template turn by turn; this class
returns the ids and loss mask our ledger produced instead, so verl trains on exactly the
tokens the local SFT backend and RL episodes see. Rows: `input_ids`, `loss_mask` (per
token, 1 on assistant tokens), as written by `aworld-train sft` with `sft.backend: verl`.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class LedgerSFTDataset(Dataset):
    def __init__(self, parquet_files, tokenizer, config, processor=None, max_samples: int = -1) -> None:
        import pyarrow.parquet as pq

        config = config or {}
        self.pad_mode = config.get("pad_mode", "no_padding")
        if self.pad_mode not in ("right", "no_padding"):
            raise ValueError(f"data.pad_mode must be 'right' or 'no_padding', not {self.pad_mode!r}")
        self.max_length = int(config.get("max_length", 1024))
        self.truncation = config.get("truncation", "error")
        self.pad_id = tokenizer.pad_token_id if getattr(tokenizer, "pad_token_id", None) is not None else 0
        files = [parquet_files] if isinstance(parquet_files, str) else list(parquet_files)
        self.rows: list[tuple[list[int], list[int]]] = []
        for path in files:
            table = pq.read_table(path, columns=["input_ids", "loss_mask"]).to_pydict()
            self.rows += list(zip(table["input_ids"], table["loss_mask"], strict=True))
        if max_samples and max_samples > 0:
            self.rows = self.rows[:max_samples]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids, mask = self.rows[index]
        if len(ids) > self.max_length:
            if self.truncation == "error":
                raise ValueError(f"row {index}: {len(ids)} tokens, over data.max_length={self.max_length}")
            keep = slice(-self.max_length, None) if self.truncation == "left" else slice(0, self.max_length)
            ids, mask = ids[keep], mask[keep]
        input_ids = torch.tensor(ids, dtype=torch.long)
        loss_mask = torch.tensor(mask, dtype=torch.long)
        position_ids = torch.arange(len(ids), dtype=torch.long)
        if self.pad_mode == "no_padding":
            return {"input_ids": input_ids, "position_ids": position_ids, "loss_mask": loss_mask}
        pad = self.max_length - len(ids)
        attention = torch.ones_like(input_ids)
        return {
            "input_ids": torch.nn.functional.pad(input_ids, (0, pad), value=self.pad_id),
            "attention_mask": torch.nn.functional.pad(attention, (0, pad)),
            "position_ids": torch.nn.functional.pad(position_ids, (0, pad)),
            "loss_mask": torch.nn.functional.pad(loss_mask, (0, pad)),
        }
