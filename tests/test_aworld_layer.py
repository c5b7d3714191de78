"""The AWorld layer changes AWorld only through one call, and only on the version it was written for."""

from __future__ import annotations

import pytest

from aworld_train.aworld import install, patches


def test_patches_refuse_another_aworld_version(monkeypatch):
    monkeypatch.setattr(patches, "_applied", False)
    monkeypatch.setattr(patches, "AWORLD_VERSION", "0.0.1")
    with pytest.raises(patches.UnsupportedVersion, match=r"aworld==0\.0\.1.*pip install 'aworld==0\.0\.1'"):
        patches.apply()


def test_install_applies_the_patches_and_registers_the_provider():
    install()
    install()  # idempotent
    from aworld.core.event.message_future import MessageFuture
    from aworld.models.llm import PROVIDER_CLASSES

    from aworld_train.aworld.provider import PROVIDER_NAMES, AworldTrainProvider

    assert MessageFuture._wait_internal is patches._wait_for_node
    assert all(PROVIDER_CLASSES[name] is AworldTrainProvider for name in PROVIDER_NAMES)
