"""Every change this package makes to another package's code is declared in one table, and still
fits the upstream source it was written against (aworld_train.core.patch_table)."""

from __future__ import annotations

import ast
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest

from aworld_train.aworld import episode_state, install, patches
from aworld_train.core import patch_table, upstream
from aworld_train.core.upstream import REPLACES, Patch
from aworld_train.env import mcp_fixes

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"train": "aworld_train", "agents": "aworld_train.agents", "rewards": "aworld_train.rewards"}
FOLDERS["env"] = "aworld_train.env"
TABLE = patch_table.PATCHES
FAKE = "0" * 64


def _module_name(path: Path) -> str:
    folder = path.relative_to(ROOT).parts[0]
    parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
    return ".".join([FOLDERS[folder], *parts])


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")}


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


# -- every patch site is declared ----------------------------------------------------------------

STDLIB = set(sys.stdlib_module_names) | {"__main__"}
MUTATORS = {"pop", "popitem", "remove", "clear", "append", "extend", "insert", "add", "discard"}
MUTATORS |= {"update", "setdefault", "__setitem__", "__delitem__"}
ACCESSORS = {"get", "pop", "values", "items", "keys", "setdefault"}  # what they return is the owner's
PASS_THROUGH = {"getattr", "vars", "list", "tuple", "sorted", "iter", "next", "reversed"}


def _foreign(module: str | None) -> bool:
    top = (module or "").split(".")[0]
    return bool(top) and top not in STDLIB and top != "aworld_train"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _bound_names(target: ast.AST) -> list[str]:
    """Names an assignment or loop binds (`a`, `a, b`), not those it only reaches (`a.x = ...`)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [name for element in target.elts for name in _bound_names(element)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


class _Site:
    """What one function of ours does to objects of other packages (a static reading).

    A name is foreign when it is bound to an import of another package (or `sys.modules` /
    `import_module` of one), or taken from a foreign name by assignment, a loop or an accessor;
    private-derived when taken through a private attribute of anything but self/cls. A touch is
    an assignment to, a deletion of or a mutating call on such a thing, a setattr on it, or an
    import of another package's private module."""

    def __init__(self, node: ast.AST, foreign: set[str], own: set[str]) -> None:
        self.node, self.own = node, own
        self.foreign, self.derived = set(foreign), set()
        self._propagate()

    def _origin(self, expr: ast.AST | None) -> bool:
        """Whether `expr` is (part of) another package's object, or reached through private state."""
        while expr is not None:
            if isinstance(expr, ast.Name):
                return expr.id in self.foreign or expr.id in self.derived
            if isinstance(expr, ast.Attribute):
                root = expr
                while isinstance(root, ast.Attribute | ast.Subscript):
                    root = root.value
                mine = isinstance(root, ast.Name) and root.id in {"self", "cls", *self.own}
                if _private(expr.attr) and not mine:
                    return True
                expr = expr.value
            elif isinstance(expr, ast.Subscript | ast.Starred):
                expr = expr.value
            elif isinstance(expr, ast.Call):
                func = expr.func
                text = ast.unparse(func)
                if text in ("sys.modules.get", "importlib.import_module") and expr.args:
                    arg = expr.args[0]
                    return isinstance(arg, ast.Constant) and _foreign(str(arg.value))
                if isinstance(func, ast.Name) and func.id in PASS_THROUGH and expr.args:
                    expr = expr.args[0]
                elif isinstance(func, ast.Attribute) and func.attr in ACCESSORS:
                    expr = func.value
                else:
                    return False
            elif isinstance(expr, ast.Tuple | ast.List | ast.Set):
                return any(self._origin(e) for e in expr.elts)
            elif isinstance(expr, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
                return any(self._origin(g.iter) for g in expr.generators)
            else:
                return False
        return False

    def _bind(self, target: ast.AST, source: ast.AST | None) -> bool:
        if not self._origin(source):
            return False
        names = set(_bound_names(target)) - self.derived
        self.derived |= names
        return bool(names)

    def _propagate(self) -> None:
        grew = True
        while grew:  # until no assignment or loop adds a name
            grew = False
            for node in ast.walk(self.node):
                if isinstance(node, ast.Assign):
                    grew |= any(self._bind(t, node.value) for t in node.targets)
                elif isinstance(node, ast.AnnAssign | ast.NamedExpr):
                    grew |= self._bind(node.target, node.value)
                elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                    grew |= self._bind(node.target, node.iter)

    def touches(self) -> list[str]:
        found = []
        for node in ast.walk(self.node):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign | ast.Delete):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute | ast.Subscript) and self._origin(target):
                    found.append(f"line {node.lineno}: {ast.unparse(target)} changed")
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
                    if self._origin(node.args[0]):
                        found.append(f"line {node.lineno}: {ast.unparse(node)}")
                elif isinstance(func, ast.Attribute) and func.attr in MUTATORS and self._origin(func.value):
                    # a mutator of an imported class or module itself (OmegaConf.update) is its API
                    if not (isinstance(func.value, ast.Name) and func.value.id in self.foreign):
                        found.append(f"line {node.lineno}: {ast.unparse(func)}()")
            if isinstance(node, ast.ImportFrom) and _foreign(node.module) and not node.level:
                names = [*node.module.split("."), *(a.name for a in node.names)]
                if any(_private(n) for n in names):
                    found.append(f"line {node.lineno}: imports {node.module} (private)")
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _foreign(alias.name) and any(_private(n) for n in alias.name.split(".")):
                        found.append(f"line {node.lineno}: imports {alias.name} (private)")
        return found


def patch_sites(source: str, module: str) -> dict[str, list[str]]:
    """The functions of `source` that touch other packages' objects, by dotted name, with how."""
    tree = ast.parse(source)
    foreign, own = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                (foreign if _foreign(alias.name) else own).add(bound)
        elif isinstance(node, ast.ImportFrom):
            bound = {alias.asname or alias.name for alias in node.names}
            if node.level or (node.module or "").split(".")[0] == "aworld_train":
                own |= bound
            elif _foreign(node.module):
                foreign |= bound
    own |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    top_level: list[ast.stmt] = []  # read as one site: names flow between its statements
    sites: list[tuple[str, ast.AST]] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                name = getattr(item, "name", None)
                sites.append((f"{module}.{node.name}" + (f".{name}" if name else ""), item))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            sites.append((f"{module}.{node.name}", node))
        else:
            top_level.append(node)
    sites.append((module, ast.Module(body=top_level, type_ignores=[])))
    found: dict[str, list[str]] = {}
    for name, node in sites:
        touches = _Site(node, foreign, own).touches()
        if touches:
            found.setdefault(name, []).extend(touches)
    return found


def _declared_sites() -> set[str]:
    return {site for patch in TABLE for site in patch.sites}


def test_every_patch_site_in_the_package_is_declared():
    undeclared = []
    for module, path in sorted(_sources().items()):
        for site, touches in patch_sites(path.read_text(), module).items():
            if site not in _declared_sites():
                undeclared.append(f"{site} ({path.name}): {'; '.join(touches)}")
    assert not undeclared, (
        "these change another package's objects but no row of aworld_train.core.patch_table "
        "names them in its sites: declare each (target, version, fingerprint, why):\n" + "\n".join(undeclared)
    )


def test_every_declared_site_exists():
    sources = _sources()
    missing = []
    for site in sorted(_declared_sites()):
        module = max((m for m in sources if site.startswith(m + ".")), key=len)
        scope: ast.AST = ast.parse(sources[module].read_text())
        for name in site[len(module) + 1 :].split("."):
            scope = next((n for n in ast.walk(scope) if getattr(n, "name", None) == name), None)
            if scope is None:
                missing.append(site)
                break
    assert not missing, f"declared sites the package no longer has: {missing}"


SAMPLE = """
import loguru._handler
from aworld.core.agent.base import AgentFactory
from aworld_train.aworld import trims
import sys

def replaces():
    from aworld.models import utils
    utils.usage_process = trims._drop

def through_a_loop():
    import aworld.logs.util as util
    for module in (util,):
        setattr(module, "log_llm_record", None)

def edits_a_registry(storage, key):
    storage._nodes.pop(key, None)
    for table in (AgentFactory._agent_instance,):
        table.clear()

registry = AgentFactory._agent_instance
registry.clear()

def found_in_sys_modules():
    util = sys.modules.get("aworld.logs.util")
    for logger in list(vars(util).values()):
        logger.disable_console = True

def harmless(self, config):
    self._seen = {}
    trims._ssl_context = None
    config.value = 1
    return AgentFactory._agent_instance.get("x")
"""


def test_the_site_scan_finds_each_kind_of_patch():
    sites = patch_sites(SAMPLE, "m")
    assert set(sites) == {
        "m",
        "m.replaces",
        "m.through_a_loop",
        "m.edits_a_registry",
        "m.found_in_sys_modules",
    }
    assert sites["m"] == ["line 2: imports loguru._handler (private)", "line 22: registry.clear()"]
    assert "utils.usage_process changed" in sites["m.replaces"][0]
    assert len(sites["m.edits_a_registry"]) == 2


def test_an_undeclared_patch_fails_the_check(monkeypatch, tmp_path):
    """A new patch in one of our modules, with the table unchanged, fails the test."""
    source = ROOT / "train" / "aworld" / "trims.py"
    added = source.read_text() + "\n\ndef _patch_more():\n    from aworld.models import llm\n    llm.x = 1\n"
    copy = tmp_path / "trims.py"
    copy.write_text(added)
    monkeypatch.setattr(sys.modules[__name__], "_sources", lambda: {"aworld_train.aworld.trims": copy})
    with pytest.raises(AssertionError, match=r"aworld_train\.aworld\.trims\._patch_more .*llm\.x changed"):
        test_every_patch_site_in_the_package_is_declared()


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
