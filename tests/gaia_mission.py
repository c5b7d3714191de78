"""What the GAIA mission test needs beyond the container (tests/test_gaia_container.py).

A random tiny model writes no tool call, so no episode of it would reach the container. Taught on
the GAIA agent's own prompts for a minute (`teach_tool_calls`), it writes the calculator call of
the hermes format, with digits it picks at random; the dense stand-in reward reads the numbers
the calculator returned, so the samples of a group differ and GRPO has a gradient.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

DIGITS = range(1, 10)


def call_text(a: int, b: int) -> str:
    arguments = {"expression": f"{a} + {b}"}
    return f"<tool_call>\n{json.dumps({'name': 'calculate', 'arguments': arguments})}\n</tool_call>"


def tool_results(trajectory, sample) -> float:
    """Dense stand-in reward: the mean of what the calculator returned, over 18 (its largest)."""
    values = []
    for call in trajectory.tool_calls:
        try:
            values.append(float(call.result))
        except (TypeError, ValueError):
            continue
    return sum(values) / len(values) / 18 if values else 0.0


def tiny_model(target: Path) -> Path:
    """A random 2-layer Llama of width 64 with SmolLM2's tokenizer (scripts/gpu/tiny_model): small
    enough to be taught on full GAIA prompts in about a minute of CPU."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8192, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(target)
    tokenizer_files = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "tiny_model"
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tokenizer_files / name, target / name)
    return target


def teach_tool_calls(
    model_dir: Path, prompts: list[list[int]], tokenizer, steps: int = 120, seed: int = 0
) -> float:
    """Fine-tune the model in `model_dir` (in place) to answer each prompt with a calculator call
    of random digits; the last step's loss."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    rng = random.Random(seed)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        rows = []
        for prompt in rng.sample(prompts, k=min(4, len(prompts))):
            target = tokenizer.encode(
                call_text(rng.choice(DIGITS), rng.choice(DIGITS)), add_special_tokens=False
            )
            rows.append((prompt, [*target, end]))
        width = max(len(p) + len(t) for p, t in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        positions, targets = [], []
        for i, (prompt, target) in enumerate(rows):
            row = prompt + target
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
            # the hidden state before each target token predicts it
            positions += [(i, j) for j in range(len(prompt) - 1, len(row) - 1)]
            targets += target
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        rows_at, cols_at = zip(*positions, strict=True)
        # the vocabulary's logits only where a target token is predicted (not over whole prompts)
        logits = model.lm_head(hidden[list(rows_at), list(cols_at)])
        loss = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(targets))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(model_dir)
    return float(loss.detach())
