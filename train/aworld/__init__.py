"""Everything that touches AWorld's internals: its import, our LLM provider, the agent spec.

`install()` is the one call that changes AWorld for training (version-checked patches,
the provider registered under its names); episodes make it before they build an agent.
"""

from __future__ import annotations


def install() -> None:
    """Apply this package's AWorld patches and register its provider; idempotent."""
    from aworld_train.aworld import patches, provider

    patches.apply()
    provider.register()
