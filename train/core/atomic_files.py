"""Files and folders that are whole or absent, whenever the process dies.

A run folder is read after a crash (`run --resume`, a person looking at it): a file half-written
when the trainer was killed, or lost with the page cache when the machine went down, must never
pass for a complete one. Every file is written under a temporary name in its own folder, flushed
and fsynced, then renamed over its name, and the folder fsynced (a rename is atomic on POSIX
filesystems; the folder's fsync makes the rename itself durable). A folder (a checkpoint) is
written under `NAME.partial`, gets its completion marker last, and is renamed to `NAME`.

Our own small helpers: the steps are a few system calls, and the completion marker is what a
reader of checkpoints checks; no library we depend on writes folders this way.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

PARTIAL_SUFFIX = ".partial"  # a folder being written
REPLACED_SUFFIX = ".replaced"  # a folder's previous copy, for the instant between two renames
MARKER = "complete.json"  # written last in a complete folder: its files and their sizes


def fsync_folder(path: str | Path) -> None:
    """Make the entries of folder `path` (names created, renamed, removed) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` to write; on a clean exit it is fsynced and renamed over
    `path`, and the folder fsynced; on an error it is removed and `path` left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        with tmp.open("rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)


def write_bytes(path: str | Path, data: bytes) -> Path:
    with replacing(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    return write_bytes(path, text.encode())


def write_lines(path: str | Path, lines: list[str]) -> Path:
    """`lines`, one per line, as one atomic file."""
    return write_text(path, "".join(line + "\n" for line in lines))


def append_line(path: str | Path, line: str) -> None:
    """Append one line in one write, fsynced: a reader sees it whole, or (after a power loss at
    that instant) a torn last line it must skip, never a line of another record."""
    with open(path, "ab") as f:
        f.write((line + "\n").encode())
        f.flush()
        os.fsync(f.fileno())


def fsync_tree(root: Path) -> None:
    """fsync every file and folder under `root` (what another library wrote there)."""
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                os.fsync(f.fileno())
        fsync_folder(folder)


def file_sizes(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != MARKER
    }


@contextlib.contextmanager
def complete_folder(path: str | Path, **marker: object) -> Iterator[Path]:
    """A folder `path.partial` to write into; on a clean exit its files are fsynced, the completion
    marker (`marker` and every file's size) written last, and the folder renamed to `path`
    (replacing an older `path`); on an error the partial folder is removed. Only a folder that
    `incomplete` finds nothing wrong with was written whole."""
    path = Path(path)
    tmp = path.with_name(path.name + PARTIAL_SUFFIX)
    shutil.rmtree(tmp, ignore_errors=True)  # a partial folder of an earlier, killed write
    tmp.mkdir(parents=True)
    try:
        yield tmp
        fsync_tree(tmp)
        write_text(tmp / MARKER, json.dumps({**marker, "files": file_sizes(tmp)}, default=str))
        if path.exists():  # saved before: keep it until the new one has its name
            old = path.with_name(path.name + REPLACED_SUFFIX)
            shutil.rmtree(old, ignore_errors=True)
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_folder(path.parent)


def incomplete(path: Path) -> str | None:
    """Why folder `path` is not a complete one (no marker, a file missing or of another size), or None."""
    marker = path / MARKER
    if not marker.is_file():
        return f"it has no {MARKER}, the file a folder gets last (its writing did not finish)"
    try:
        files = json.loads(marker.read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return f"its {MARKER} is unreadable"
    for name, size in files.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} has {file.stat().st_size} bytes where {size} were written"
    return None


def marker_of(path: Path) -> dict:
    """What `complete_folder` recorded in the marker of complete folder `path`."""
    return json.loads((path / MARKER).read_text())
