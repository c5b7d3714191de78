"""docs/ARCHITECTURE.md is the map of the house: every file and folder it names exists. A name is
read from the repository's root, from `train/` (the package's own folders), or, for a bare or
partial name (`episode.py`, `local/`), as the end of some path in the tree."""

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "docs/ARCHITECTURE.md"
# a backticked name ending in .py/.md or /, possibly followed by `: symbol`; placeholders
# (`<name>`) and run-folder paths (`RUN/...`) are not files of the tree
NAME = re.compile(r"`([\w./-]+(?:\.py|\.md|/))(?::[^`]*)?`")
SKIPPED = ("RUN/",)


def _tree() -> list[str]:
    """Every file and folder of the tree (`folder/` for a folder), venvs and run folders left out."""
    ignored = {".git", ".venv", ".venv-areal", ".venv-vllm", ".venv-agents", "runs", ".cache", "__pycache__"}
    paths = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in ignored]
        rel = Path(folder).relative_to(ROOT).as_posix()
        prefix = "" if rel == "." else rel + "/"
        paths += [prefix + d + "/" for d in dirs] + [prefix + f for f in files]
    return paths


def _exists(name: str, tree: list[str]) -> bool:
    if (ROOT / name).exists() or (ROOT / "train" / name).exists():
        return True
    return any(path == name or path.endswith("/" + name) for path in tree)


def test_every_module_and_folder_the_map_names_exists():
    names = {m.group(1) for m in NAME.finditer(MAP.read_text())}
    names = {n for n in names if not n.startswith(SKIPPED)}
    assert len(names) > 40  # the map names the house's rooms
    tree = _tree()
    missing = sorted(n for n in names if not _exists(n, tree))
    assert not missing, f"docs/ARCHITECTURE.md names what does not exist: {missing}"


def test_the_map_keeps_no_history():
    headings = [line for line in MAP.read_text().splitlines() if line.startswith("#")]
    assert not [h for h in headings if "moved" in h.lower()], "where modules moved is git's history"
