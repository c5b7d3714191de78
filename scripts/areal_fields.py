"""Write train/engines/areal/fields.json: the key tree of AReaL's GRPOConfig.

AReaL cannot share an environment with our pins (see README, "The AReaL backend"), so the
renderer checks native `areal:` keys against this tree instead of importing
AReaL. It is read from AReaL's source with `ast` (nothing is imported):

    pip download areal==1.0.4 --no-deps -d /tmp/areal && unzip -q /tmp/areal/*.whl -d /tmp/areal/src
    python scripts/areal_fields.py /tmp/areal/src 1.0.4
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ROOT = "GRPOConfig"
OUT = Path(__file__).resolve().parents[1] / "train" / "engines" / "areal" / "fields.json"


def dataclasses_of(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def annotation_classes(annotation: ast.expr, known: dict[str, ast.ClassDef]) -> list[str]:
    """Config classes named in an annotation (`X`, `X | None`, `"X"`)."""
    names = []
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id in known:
            names.append(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known:
            names.append(node.value)
    return names


def fields_of(name: str, known: dict[str, ast.ClassDef], seen: tuple[str, ...] = ()) -> dict:
    """{field: subtree or type text}; base classes first, as dataclasses order them."""
    cls = known[name]
    out: dict = {}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in known:
            out.update(fields_of(base.id, known, seen))
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        text = ast.unparse(stmt.annotation)
        if text.startswith("ClassVar"):
            continue
        nested = [c for c in annotation_classes(stmt.annotation, known) if c not in seen]
        if nested and not text.startswith(("list", "dict")):
            out[stmt.target.id] = fields_of(nested[0], known, seen + (name,))
        else:
            out[stmt.target.id] = text
    return out


def interface(api: Path) -> dict[str, list[str]]:
    """Names the workflow relies on: request/response fields and the two async calls' arguments."""
    io = dataclasses_of(ast.parse((api / "io_struct.py").read_text()))
    out = {
        name: [s.target.id for s in io[name].body if isinstance(s, ast.AnnAssign)]
        for name in ("ModelRequest", "ModelResponse")
    }
    for file, cls, method in (
        ("workflow_api.py", "RolloutWorkflow", "arun_episode"),
        ("engine_api.py", "InferenceEngine", "agenerate"),
    ):
        body = dataclasses_of(ast.parse((api / file).read_text()))[cls].body
        fn = next(f for f in body if isinstance(f, ast.AsyncFunctionDef) and f.name == method)
        out[f"{cls}.{method}"] = [a.arg for a in fn.args.args]
    return out


def main(source_root: str, version: str) -> None:
    api = Path(source_root) / "areal" / "api"
    known = dataclasses_of(ast.parse((api / "cli_args.py").read_text()))
    tree = {
        "areal_version": version,
        "root": ROOT,
        "interface": interface(api),
        "fields": fields_of(ROOT, known),
    }
    OUT.write_text(json.dumps(tree, indent=1, sort_keys=False) + "\n")
    print(f"wrote {OUT} ({len(tree['fields'])} top-level keys)")


if __name__ == "__main__":
    main(*sys.argv[1:3])
