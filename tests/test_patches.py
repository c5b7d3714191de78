"""Every change this package makes to another package's code is declared in one table, and still
fits the upstream source it was written against (aworld_train.core.patch_table); what apply() puts
in place is what the table declares. That the package patches nothing else: tests/test_patch_sites.py."""

from __future__ import annotations

import sys
import types
from dataclasses import replace

import pytest

from aworld_train.aworld import episode_state, install, patches
from aworld_train.core import patch_table, upstream
from aworld_train.core.upstream import REPLACES, Patch
from aworld_train.env import mcp_fixes

TABLE = patch_table.PATCHES
FAKE = "0" * 64


# -- fingerprints --------------------------------------------------------------------------------


def test_every_patched_upstream_source_is_the_one_its_patch_was_written_for():
    installed = [p for p in TABLE if upstream.installed_version(p.package)]
    stale = upstream.changed(installed)
    assert not stale, "\n".join(stale)
    # AReaL never shares this environment: its rows are checked in its own (tests/areal_env)
    missing = sorted({p.package for p in TABLE if p.package != "areal"} - {p.package for p in installed})
    if missing:
        pytest.skip(f"not installed, not checked: {', '.join(missing)}")


def test_a_changed_upstream_source_fails_with_its_target_and_the_fix():
    real = next(p for p in TABLE if p.target.endswith("MessageFuture._wait_internal"))
    (message,) = upstream.changed([replace(real, fingerprint=FAKE)])
    assert message.startswith(real.target) and "patches._patch_message_wait" in message
    assert "re-read the upstream change, update the patch to it, then its fingerprint" in message
    gone = replace(real, target=real.target + "_renamed")
    assert "no longer defines MessageFuture._wait_internal_renamed" in upstream.changed([gone])[0]
    assert upstream.changed([real]) == []


def test_an_edited_upstream_file_is_seen(tmp_path, monkeypatch):
    (tmp_path / "upstream_pkg").mkdir()
    (tmp_path / "upstream_pkg" / "__init__.py").write_text("")
    module = tmp_path / "upstream_pkg" / "mod.py"
    module.write_text("class A:\n    @staticmethod\n    def f():\n        return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    target = "upstream_pkg.mod.A.f"
    row = Patch(target, "upstream-pkg", "1.0", upstream.fingerprint(target), REPLACES, ("m.f",), "test")
    assert upstream.changed([row]) == []
    module.write_text("class A:\n    @staticmethod\n    def f():\n        return 10\n")
    (message,) = upstream.changed([row])
    assert message.startswith(f"{target} (upstream-pkg not installed) is not the source that m.f replaces")


def test_the_fingerprint_is_inspect_getsource_of_the_unpatched_object():
    """Read from the file, so that it is the same before and after a patch replaced the object."""
    import importlib
    import inspect

    import aworld_train.aworld.framework  # noqa: F401  (AWorld's modules import in its order only)

    state_manager = importlib.import_module("aworld.runners.state_manager")
    from loguru._file_sink import FileSink

    for obj, target in (
        (state_manager.InMemoryStateStorage, "aworld.runners.state_manager.InMemoryStateStorage"),
        (FileSink.__init__, "loguru._file_sink.FileSink.__init__"),
        (state_manager, "aworld.runners.state_manager"),
    ):
        assert upstream.upstream_source(target) == inspect.getsource(obj)
    install()  # `update` is wrapped now; its fingerprint is still the upstream one
    assert state_manager.InMemoryStateStorage.update.__module__ == "aworld_train.aworld.patches"
    assert upstream.changed([p for p in TABLE if p.target.endswith("InMemoryStateStorage.update")]) == []


# -- the mcp and loguru guards at apply time -----------------------------------------------------


def _another_release(monkeypatch, package: str) -> None:
    real = upstream.installed_version
    monkeypatch.setattr(upstream, "installed_version", lambda p: "9.9.9" if p == package else real(p))


@pytest.mark.parametrize("package", ["mcp", "loguru"])
def test_apply_refuses_a_release_whose_patched_source_changed(monkeypatch, package):
    _another_release(monkeypatch, package)
    monkeypatch.setattr(patches, "_applied", False)
    changed = tuple(replace(p, fingerprint=FAKE) for p in patches.LIBRARY_PATCHES)
    monkeypatch.setattr(patches, "LIBRARY_PATCHES", changed)
    target = next(p.target for p in changed if p.package == package)
    with pytest.raises(
        patches.UnsupportedVersion, match=rf"{package}==.* {package} 9\.9\.9 is installed"
    ) as err:
        patches.apply()
    assert target in str(err.value) and "update the patch" in str(err.value)


def test_another_release_with_the_same_sources_is_accepted(monkeypatch):
    _another_release(monkeypatch, "loguru")
    upstream.guard(TABLE, "loguru", "test")


def test_the_mcp_log_filter_refuses_an_mcp_whose_source_changed(monkeypatch):
    _another_release(monkeypatch, "mcp")
    monkeypatch.setattr(
        mcp_fixes, "SERVER_PATCHES", tuple(replace(p, fingerprint=FAKE) for p in mcp_fixes.SERVER_PATCHES)
    )
    with pytest.raises(upstream.UnsupportedVersion, match="_handle_get_request"):
        mcp_fixes.contain_session_errors()


# -- what apply() leaves in AWorld is what the table declares ------------------------------------

SCANNED = ("aworld", "mcp", "loguru")


def _ours(value: object) -> bool:
    kind = value if isinstance(value, type | types.FunctionType) else type(value)
    return getattr(kind, "__module__", "").startswith("aworld_train")


def placements() -> dict[str, object]:
    """Where objects of aworld_train sit inside the scanned packages: module attributes, attributes
    of the classes a module defines, and of its module-level instances (named by their class)."""
    found: dict[str, object] = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in SCANNED:
            continue
        for attr, value in list(vars(module).items()):
            try:
                if _ours(value):
                    found[f"{name}.{attr}"] = value
                    continue
                if isinstance(value, type):
                    owner, items = (value if value.__module__ == name else None), vars(value)
                elif isinstance(value, types.ModuleType | types.FunctionType):
                    continue
                else:
                    owner, items = type(value), getattr(value, "__dict__", None)
                if owner is None or not isinstance(items, dict | types.MappingProxyType):
                    continue
                for key, item in list(items.items()):
                    item = getattr(item, "__func__", item)  # staticmethod, classmethod
                    if _ours(item):
                        found[f"{owner.__module__}.{owner.__qualname__}.{key}"] = item
            except Exception:  # an odd module attribute (a lazy proxy) is not ours
                continue
    return found


def _undeclared(found: dict[str, object], declared: set[str]) -> list[str]:
    """Placements no row declares. `from x import f` of a patched f, run after the patch, is
    not a patch of its own: a module attribute holding the object of a declared place of the
    same name passes."""
    by_name: dict[str, set[int]] = {}
    for place in declared & set(found):
        by_name.setdefault(place.rsplit(".", 1)[1], set()).add(id(found[place]))
    return sorted(
        place
        for place, value in found.items()
        if place not in declared and id(value) not in by_name.get(place.rsplit(".", 1)[1], set())
    )


def test_apply_puts_exactly_the_declared_patches_in_place():
    from aworld_train.aworld import trims

    if trims.aworld_log_level() != "WARNING":
        pytest.skip("the declared places are those of the default AWORLD_TRAIN_AWORLD_LOG_LEVEL")
    install()
    found = placements()
    declared = {place for p in TABLE if p.package in SCANNED for place in p.places}
    missing = sorted(declared - set(found))
    assert not missing, f"declared in patch_table but not put in place by install(): {missing}"
    extra = _undeclared(found, declared)
    assert not extra, f"install() put these in place but no row of patch_table declares them: {extra}"


def test_an_undeclared_replacement_fails_the_check(monkeypatch):
    install()
    from aworld.core.factory import Factory

    monkeypatch.setattr(Factory, "extra", episode_state.claim_sandbox, raising=False)
    declared = {place for p in TABLE if p.package in SCANNED for place in p.places}
    assert _undeclared(placements(), declared) == ["aworld.core.factory.Factory.extra"]


def test_every_row_is_well_formed():
    kinds = {upstream.REPLACES, upstream.WRAPS, upstream.COPIES, upstream.RELIES_ON}
    for patch in TABLE:
        assert isinstance(patch, Patch) and patch.kind in kinds and patch.sites and patch.why, patch
        assert len(patch.fingerprint) == 64 and patch.version, patch
        if patch.kind in (upstream.REPLACES, upstream.WRAPS):
            assert patch.places, f"{patch.target}: where does our object sit?"
        if patch.kind == upstream.RELIES_ON:
            assert not patch.places, f"{patch.target}: nothing of ours sits there"
