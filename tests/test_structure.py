"""The package's layers hold: tool servers import only the protocol, engines never see the facade,
and no module-level import loop exists anywhere in the package."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "train": "aworld_train",
    "agents": "aworld_train.agents",
    "rewards": "aworld_train.rewards",
    "env": "aworld_train.env",
}


def _module_name(path: Path) -> str:
    folder = path.relative_to(ROOT).parts[0]
    rel = path.relative_to(ROOT / folder).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([FOLDERS[folder], *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, module_level_only: bool) -> set[str]:
    """aworld_train modules imported by `path` (module level: run at import, outside TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(nodes, top: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("aworld_train"))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aworld_train"):
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if not module_level_only:
                    visit(node.body, False)
            elif hasattr(node, "body") and isinstance(node.body, list):
                visit(node.body, top)
                for extra in ("orelse", "finalbody", "handlers"):
                    visit(getattr(node, extra, []) or [], top)

    visit(tree.body, True)
    return found


def _resolve(names: set[str], modules: dict[str, Path]) -> set[str]:
    """Imported names narrowed to modules (`from a.b import c` imports a.b, or a.b.c if a module)."""
    return {n for n in names if n in modules}


def test_no_module_level_import_cycle():
    modules = _modules()
    graph = {m: _resolve(_imports(p, module_level_only=True), modules) - {m} for m, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            connect(v)
    assert not cycles, f"module-level import loops: {cycles}"


def test_env_imports_only_the_protocol_layer():
    allowed = ("aworld_train.env", "aworld_train.protocol", "aworld_train.errors")
    offenders = {
        m: sorted(n for n in _imports(p, module_level_only=False) if not n.startswith(allowed))
        for m, p in _modules().items()
        if m.startswith("aworld_train.env")
    }
    assert not {m: n for m, n in offenders.items() if n}, offenders


def test_engines_never_import_the_facade():
    offenders = {
        m: sorted(
            n
            for n in _imports(p, module_level_only=False)
            if n.startswith(("aworld_train.trainer", "aworld_train.cli"))
        )
        for m, p in _modules().items()
        if m.startswith(("aworld_train.engines", "aworld_train.rollout", "aworld_train.aworld"))
    }
    assert not {m: n for m, n in offenders.items() if n}, offenders


def test_protocol_is_the_ground_floor():
    assert _imports(ROOT / "train" / "protocol.py", module_level_only=False) == set()


def test_structure_checks_can_fail(tmp_path):
    """The import scanner sees function-local imports, and ignores TYPE_CHECKING ones."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aworld_train.trainer import X\n"
        "def f():\n    from aworld_train.rollout import episode\n"
    )
    assert _imports(source, module_level_only=False) == {
        "aworld_train.rollout",
        "aworld_train.rollout.episode",
    }
    assert _imports(source, module_level_only=True) == set()
