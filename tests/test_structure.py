"""The package's layers hold: tool servers import only the protocol, engines never see the facade,
the rollout core knows neither AWorld nor the config, and no import loop exists anywhere in the
package, at any level (module, function, TYPE_CHECKING)."""

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


def _imports(
    path: Path, module_level_only: bool, type_checking: bool = False, prefix: str = "aworld_train"
) -> set[str]:
    """Modules under `prefix` imported by `path` (module level: run at import); TYPE_CHECKING
    imports count only with `type_checking`."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(nodes, top: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.split(".")[0] == prefix)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == prefix:
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


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
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
    return cycles


def test_no_import_cycle_at_any_level():
    """Function-level and TYPE_CHECKING imports count: a loop there is a loop in the design."""
    modules = _modules()
    graph = {
        m: _resolve(_imports(p, module_level_only=False, type_checking=True), modules) - {m}
        for m, p in modules.items()
    }
    assert not _cycles(graph), f"import loops: {_cycles(graph)}"


def test_the_rollout_core_imports_neither_aworld_nor_the_config():
    """Episodes, ledger, statuses and codec reach an agent only through rollout/episodes/driver.py."""
    offenders = {
        m: sorted(
            n
            for n in _imports(p, module_level_only=False, type_checking=True)
            | _imports(p, module_level_only=False, type_checking=True, prefix="aworld")
            if n in ("aworld_train.inputs.config", "aworld")
            or n.startswith(("aworld_train.aworld", "aworld."))
        )
        for m, p in _modules().items()
        if m.startswith("aworld_train.rollout")
    }
    assert not {m: n for m, n in offenders.items() if n}, offenders


# the layers of docs/ARCHITECTURE.md, top to bottom: a module imports only its own layer and those
# below (the longest prefix names a module's layer; `aworld_train` alone is the facade's package)
LAYERS = (
    ("facade", ("aworld_train", "aworld_train.facade", "aworld_train.viewer")),
    ("engines", ("aworld_train.engines",)),
    ("checks and evaluation", ("aworld_train.prerun", "aworld_train.evaluation")),
    ("inputs", ("aworld_train.inputs", "aworld_train.agents", "aworld_train.rewards")),
    ("AWorld layer", ("aworld_train.aworld",)),
    ("rollout core", ("aworld_train.rollout",)),
    ("tool servers", ("aworld_train.env",)),
    ("ground floor", ("aworld_train.core",)),
)
# the rollout core's own floors, top to bottom (rollout/__init__.py and gateway/ on top)
ROLLOUT_FLOORS = ("gateway", "samples", "episodes", "tokens", "policies")


def _layer(module: str) -> int:
    matches = [
        (len(prefix), i)
        for i, (_, prefixes) in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    return max(matches)[1]


def test_imports_go_down_the_layers_only():
    modules = _modules()
    upward = [
        f"{m} ({LAYERS[_layer(m)][0]}) imports {n} ({LAYERS[_layer(n)][0]})"
        for m, p in modules.items()
        for n in _resolve(_imports(p, module_level_only=False, type_checking=True), modules)
        if _layer(n) < _layer(m)
    ]
    assert not upward, "\n".join(sorted(upward))


def test_every_module_has_a_home():
    """No flat module beside the homes: the folder list reads as the layers."""
    homes = {prefix for _, prefixes in LAYERS for prefix in prefixes}
    flat = [m for m in _modules() if m.count(".") == 1 and m not in homes]
    assert not flat, flat


def _floor(module: str) -> int:
    parts = module.split(".")
    return ROLLOUT_FLOORS.index(parts[2]) if len(parts) > 2 and parts[2] in ROLLOUT_FLOORS else 0


def test_the_rollout_floors_import_downwards():
    """policies (the client seam) < tokens (templates, calls, ledger) < episodes < samples < gateway."""
    modules = _modules()
    upward = [
        f"{m} imports {n}"
        for m, p in modules.items()
        if m.startswith("aworld_train.rollout.")
        for n in _resolve(_imports(p, module_level_only=False, type_checking=True), modules)
        if n.startswith("aworld_train.rollout.") and _floor(n) < _floor(m)
    ]
    assert not upward, "\n".join(sorted(upward))


def test_env_imports_only_the_ground_floor():
    allowed = ("aworld_train.env", "aworld_train.core")
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
            if n.startswith(("aworld_train.facade.trainer", "aworld_train.facade.cli"))
        )
        for m, p in _modules().items()
        if m.startswith(("aworld_train.engines", "aworld_train.rollout", "aworld_train.aworld"))
    }
    assert not {m: n for m, n in offenders.items() if n}, offenders


def test_only_the_cli_imports_the_viewer():
    """The viewer reads run folders; nothing that writes them (engines, rollout core) may need it."""
    offenders = {
        m: sorted(
            n
            for n in _imports(p, module_level_only=False, type_checking=True)
            if n.startswith("aworld_train.viewer")
        )
        for m, p in _modules().items()
        if not m.startswith(("aworld_train.viewer", "aworld_train.facade.cli"))
    }
    assert not {m: n for m, n in offenders.items() if n}, offenders


# The run's policy plan (inputs/policy_plan.py) is resolved once, at start, and read where a policy
# matters: validated (config, facade), carried (RunInputs), refused by an engine that takes one policy
# (protocol), built (local startup and team), saved and resumed (local checkpoints), evaluated and
# viewed from a saved run. A module that starts reading it re-derives what these already hold.
PLAN_READERS = {
    "aworld_train.inputs.config",
    "aworld_train.facade.trainer",
    "aworld_train.inputs.run",
    "aworld_train.engines.protocol",
    "aworld_train.engines.local.startup",
    "aworld_train.engines.local.team",
    "aworld_train.engines.local.checkpoints",
    "aworld_train.evaluation.checkpoints",
    "aworld_train.viewer.views",
}


def test_the_policy_plan_is_read_only_where_a_policy_matters():
    modules = _modules()
    readers = {
        name
        for name, path in modules.items()
        if "aworld_train.inputs.policy_plan" in _imports(path, module_level_only=False, type_checking=True)
    }
    assert readers == PLAN_READERS, (
        f"modules importing the policy plan: new {sorted(readers - PLAN_READERS)}, gone "
        f"{sorted(PLAN_READERS - readers)}; take what a policy needs from the modules that read the plan "
        "(startup builds, checkpoints saves and resumes), or name the new reader in PLAN_READERS and why"
    )


def test_protocol_is_the_ground_floor():
    assert _imports(ROOT / "train" / "core" / "protocol.py", module_level_only=False) == set()


def test_structure_checks_can_fail(tmp_path):
    """The import scanner sees function-local imports, and ignores TYPE_CHECKING ones."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aworld_train.facade.trainer import X\n"
        "def f():\n    from aworld_train.rollout.episodes import episode\n"
    )
    assert _imports(source, module_level_only=False) == {
        "aworld_train.rollout.episodes",
        "aworld_train.rollout.episodes.episode",
    }
    assert _imports(source, module_level_only=True) == set()
    assert "aworld_train.facade.trainer" in _imports(source, module_level_only=False, type_checking=True)
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert (
        _layer("aworld_train.inputs.run")
        > _layer("aworld_train.engines.verl.render")
        > _layer("aworld_train")
    )
    assert (
        _floor("aworld_train.rollout.policies.local")
        > _floor("aworld_train.rollout.tokens.ledger")
        > _floor("aworld_train.rollout.gateway.server")
    )


# Size limits for every folder of code (the package's, the benches, the tests, the scripts and the
# examples): a module over MODULE_LINES or a function over FUNCTION_LINES is one a reader cannot hold
# in mind; split it where it does two jobs.
MODULE_LINES = 400
FUNCTION_LINES = 60
SIZED = (*FOLDERS, "bench", "tests", "scripts", "examples")


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    modules, functions = {}, {}
    for path in sorted(p for folder in SIZED for p in (ROOT / folder).rglob("*.py")):
        name = str(path.relative_to(ROOT))
        text = path.read_text()
        modules[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions[f"{name}:{node.lineno} {node.name}"] = node.end_lineno - node.lineno + 1
    return modules, functions


def _over(sizes: dict[str, int], limit: int) -> list[str]:
    return [f"{name}: {size} lines, over {limit}: split it" for name, size in sizes.items() if size > limit]


def test_no_module_or_function_past_its_size_limit():
    modules, functions = _sizes()
    assert {name.split("/")[0] for name in modules} == set(SIZED)
    problems = _over(modules, MODULE_LINES) + _over(functions, FUNCTION_LINES)
    assert not problems, "\n".join(problems)


def test_the_size_check_can_fail():
    assert _over({"a.py": 401, "b.py": 400}, 400) == ["a.py: 401 lines, over 400: split it"]
