"""Changes this package makes to other packages' code, declared and checked.

Each `Patch` names the upstream object it replaces, wraps, copies or relies on the internals
of, the release it was written against and a fingerprint of that object's source there. When an
installed release no longer has that source, the patch may no longer fit it: `changed` says which
ones (tests/test_patches.py fails on them) and `guard` refuses to patch at all.

Kept in env/ because the tool servers patch mcp too and may import only this layer; the AWorld
layer's table (aworld_train.core.patch_table) uses the same `Patch`.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import linecache
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.machinery import PathFinder
from importlib.metadata import PackageNotFoundError, version

from aworld_train.core.errors import AworldTrainError

# what a patch does to its target
REPLACES = "replaces"  # our function sits where the upstream one was
WRAPS = "wraps"  # our function sits there and calls the upstream one
COPIES = "copies"  # a modified copy of the upstream body, used instead of it
RELIES_ON = "relies on"  # reads or edits the target's private state, or depends on what it does


class UnsupportedVersion(AworldTrainError):
    pass


@dataclass(frozen=True)
class Patch:
    target: str  # dotted path of the upstream module, class, function or method
    package: str  # the distribution that ships it
    version: str  # the release the patch was written against
    fingerprint: str  # sha256 of inspect.getsource(target) on that release, before any patch
    kind: str  # REPLACES, WRAPS, COPIES or RELIES_ON
    sites: tuple[str, ...]  # our functions (dotted) that make or hold the patch
    why: str
    places: tuple[str, ...] = ()  # where our object sits once applied (dotted; Class.attr for instances)


def installed_version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def check_version(package: str, expected: str, what: str) -> None:
    found = installed_version(package)
    if found != expected:
        raise UnsupportedVersion(
            f"{what} was written for {package}=={expected}, but {package} {found or 'is not installed'} "
            f"is installed: pip install --no-deps '{package}=={expected}' (its other requirements come "
            "with aworld-train; see the README's Pins)"
        )


def _locate(target: str) -> tuple[str, list[str]]:
    """The source file of the longest module at the start of `target`, and the names after it.

    Found without importing anything: the file is the upstream one whatever a patch (or the
    module's own import) did since, and a heavy package costs nothing to check.
    """
    parts = target.split(".")
    spec = importlib.util.find_spec(parts[0])
    if spec is None:
        raise LookupError(f"{parts[0]} is not installed")
    end = 1
    while end < len(parts) and spec.submodule_search_locations:
        inner = PathFinder.find_spec(".".join(parts[: end + 1]), spec.submodule_search_locations)
        if inner is None:
            break
        spec, end = inner, end + 1
    if not (spec.origin or "").endswith(".py"):
        raise LookupError(f"{'.'.join(parts[:end])} has no Python source")
    return spec.origin, parts[end:]


def _definition(body: list[ast.stmt], name: str, kinds: tuple[type, ...]) -> ast.AST | None:
    """The statement defining `name` in `body` (also inside if/try blocks). The last function
    of that name is the one Python keeps; a class is found first, as inspect finds it."""
    found = None
    for node in body:
        if isinstance(node, kinds) and node.name == name:
            if isinstance(node, ast.ClassDef):
                return node
            found = node
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if inner and not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                found = _definition(inner, name, kinds) or found
    return found


def upstream_source(target: str) -> str:
    """What `inspect.getsource(target)` gives for the upstream object: read from its installed
    file (the first decorator to the end of the block), not from the live, perhaps patched, one."""
    path, names = _locate(target)
    linecache.checkcache(path)  # as inspect does: a file replaced since is read again
    lines = linecache.getlines(path)
    if not names:
        return "".join(lines)
    scope: ast.AST = ast.parse("".join(lines))
    for name in names:
        node = _definition(scope.body, name, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        if node is None:
            raise LookupError(f"{path} no longer defines {'.'.join(names)}")
        scope = node
    start = min([scope.lineno] + [d.lineno for d in scope.decorator_list]) - 1
    return "".join(inspect.getblock(lines[start:]))


def fingerprint(target: str) -> str:
    return hashlib.sha256(upstream_source(target).encode()).hexdigest()


def changed(patches: Iterable[Patch]) -> list[str]:
    """One line, with what to do, for each patch whose target's installed source is not the one
    it was written against."""
    out = []
    for patch in patches:
        try:
            now = fingerprint(patch.target)
            seen = f"now {now[:12]}"
        except (ImportError, LookupError, OSError, SyntaxError) as exc:
            now, seen = "", f"now unreadable: {exc}"
        if now != patch.fingerprint:
            found = installed_version(patch.package) or "not installed"
            out.append(
                f"{patch.target} ({patch.package} {found}) is not the source that {', '.join(patch.sites)} "
                f"{patch.kind} ({patch.package}=={patch.version}: sha256 {patch.fingerprint[:12]}, {seen}): "
                "re-read the upstream change, update the patch to it, then its fingerprint"
            )
    return out


def guard(patches: Iterable[Patch], package: str, what: str) -> None:
    """Refuse to patch `package` unless it is the release `patches` were written for, or every
    source they touch is unchanged in the installed one."""
    mine = [p for p in patches if p.package == package]
    found = installed_version(package)
    if all(p.version == found for p in mine):
        return
    stale = changed(mine)
    if stale:
        expected = mine[0].version
        raise UnsupportedVersion(
            f"{what} was written for {package}=={expected}, but {package} {found or 'is not installed'} "
            f"is installed and changed what it patches: pip install '{package}=={expected}' (see the "
            "README's Pins), or:\n" + "\n".join(stale)
        )
