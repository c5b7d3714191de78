from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class GenerationHyperparameters:
    n_samples: int = 1
    max_new_tokens: int = 16384
    min_new_tokens: int = 0
    max_tokens: int = 32768
    greedy: bool = False
    top_p: float = 1.0
    top_k: int = int(1e8)
    temperature: float = 1.0
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    stop: list[str] | None = None
    frequency_penalty: float = 0.0
    lora_name: str = "default_lora"
    use_beam_search: bool = False

    def new(self, **kwargs) -> GenerationHyperparameters:
        return GenerationHyperparameters(**{**asdict(self), **kwargs})
