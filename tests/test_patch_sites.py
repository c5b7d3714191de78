"""Every function of this package that changes another package's objects is a site that a row of
aworld_train.core.patch_table declares, and every declared site exists: a static reading of our
modules (tests/test_patches.py checks the table's fingerprints and what apply() puts in place)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from aworld_train.core import patch_table

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"train": "aworld_train", "agents": "aworld_train.agents", "rewards": "aworld_train.rewards"}
FOLDERS["env"] = "aworld_train.env"
TABLE = patch_table.PATCHES


def _module_name(path: Path) -> str:
    folder = path.relative_to(ROOT).parts[0]
    parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
    return ".".join([FOLDERS[folder], *parts])


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")}


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
