"""What one call of the model's code leaves behind, ended: its processes killed, its disk use
measured against the quota, the files it wrote past the quota removed, and in uid mode what its
uid left in the shared temp folders (sandbox.py calls these as a call ends)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path


def kill_group(pid: int) -> None:
    """SIGKILL the call's process group (it may be gone already)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: a child that takes the uid and signals -1."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            for _ in range(3):  # a fork bomb may still be spawning
                os.kill(-1, signal.SIGKILL)
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def disk_usage(folder: Path) -> int:
    """Bytes allocated under `folder` (blocks, so sparse files count as what they use)."""
    total = 0
    stack = [str(folder)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        stat = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += stat.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def remove_written_since(folder: Path, since: float) -> int:
    removed = 0
    for path in sorted(folder.rglob("*"), reverse=True):
        try:
            if path.is_symlink() or path.is_file():
                if path.lstat().st_mtime >= since:
                    path.unlink()
                    removed += 1
            elif path.is_dir() and path.stat().st_mtime >= since and not any(path.iterdir()):
                path.rmdir()
        except OSError:
            continue
    return removed


SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm")


def remove_owned_by(uid: int, folders: tuple[str, ...] = SHARED_TMP) -> None:
    """Without a mount namespace an episode's uid can write the shared temp folders: what
    it left there goes when its call ends, so it neither fills them nor passes notes."""
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                continue
