"""The native tool-call formats, one module each; importing this package registers them all
(`aworld_train.rollout.tokens.calls.registry.get_parser`)."""

from aworld_train.rollout.tokens.calls.parsers import (  # noqa: F401
    deepseek,
    glm,
    granite,
    harmony,
    hermes,
    kimi,
    llama3,
    mistral,
    pythonic,
    qwen3_coder,
)
