"""The AWorld layer changes AWorld only through one call, and only on the version it was written for."""

from __future__ import annotations

import pytest

from aworld_train.aworld import install, patches


def test_patches_refuse_another_aworld_version(monkeypatch):
    monkeypatch.setattr(patches, "_applied", False)
    monkeypatch.setattr(patches, "AWORLD_VERSION", "0.0.1")
    with pytest.raises(
        patches.UnsupportedVersion, match=r"aworld==0\.0\.1.*pip install --no-deps 'aworld==0\.0\.1'"
    ):
        patches.apply()


def test_install_applies_the_patches_and_registers_the_provider():
    install()
    install()  # idempotent
    from aworld.core.event.message_future import MessageFuture
    from aworld.models.llm import PROVIDER_CLASSES

    from aworld_train.aworld.provider import PROVIDER_NAMES, AworldTrainProvider

    assert MessageFuture._wait_internal is patches._wait_for_node
    from aworld.sandbox.implementations.sandbox import Sandbox

    assert Sandbox.__del__._aworld_train_patched  # released sandboxes skip AWorld's own __del__
    assert all(PROVIDER_CLASSES[name] is AworldTrainProvider for name in PROVIDER_NAMES)


AWORLD_FIRST = """
import sys
from aworld.agents.llm_agent import Agent  # AWorld before aworld_train, as AWorld's own examples do
from aworld_train import AgentTrainer
from aworld_train.agents.calculator import build_agent
print("-- aworld_train imported --", file=sys.stderr, flush=True)
AgentTrainer(agent=build_agent(), config=sys.argv[1], overrides=[f"trainer.run_dir={sys.argv[2]}"])
print("-- constructed --", file=sys.stderr, flush=True)
"""


def test_aworld_imported_first_is_quieted_when_aworld_train_is_imported(tmp_path):
    """A script that imports AWorld first: once aworld_train is imported, building agents (memory,
    sandbox) prints none of AWorld's records, as when aworld_train imports AWorld itself."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "AWORLD_DISABLE_CONSOLE_LOG"}
    out = subprocess.run(
        [sys.executable, "-c", AWORLD_FIRST, "examples/calculator/grpo_local.yaml", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    before, after = out.stderr.split("-- aworld_train imported --")
    assert "| INFO |" in before  # AWorld's own import logs to the console: the case is real
    assert "-- constructed --" in after and "| INFO |" not in after, after[-2000:]
