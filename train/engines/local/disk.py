"""A full disk (or quota) while the run folder is written: recognised in whatever error carries it,
and reported as the run's one-line failure with the checkpoint a resume continues from."""

from __future__ import annotations

import errno
import os

from aworld_train.core.errors import RunStoppedByDisk
from aworld_train.engines.local.run_folder import RunFolder

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(exc: BaseException) -> int | None:
    """ENOSPC or EDQUOT where `exc` (or what caused it) is a write that found no space (or quota)
    left, else None. safetensors' writer keeps the errno in its message only: "(os error 28)"."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _DISK_FULL:
            return seen.errno
        for code in _DISK_FULL:
            if f"(os error {code})" in str(seen):
                return code
        seen = seen.__cause__ or seen.__context__
    return None


def disk_error(exc: BaseException, doing: str, folder: RunFolder) -> RunStoppedByDisk:
    """A full disk (or quota) as the run's one-line failure: the cause, the checkpoint a resume
    continues from, and the fix."""
    latest = folder.latest_checkpoint()
    kept = f"checkpoint {latest[1]} (step {latest[0]}) is intact" if latest else "no checkpoint was saved yet"
    code = disk_full(exc) or errno.ENOSPC
    return RunStoppedByDisk(
        f"{doing} failed: {os.strerror(code).lower()} ({errno.errorcode[code]}) in {folder.path} "
        f"({type(exc).__name__}: {exc}): "
        f"the run stopped; {kept}. Free space on that disk (or set trainer.run_dir to a disk with room), "
        "then continue with `aworld-train run CONFIG --resume`"
    )
