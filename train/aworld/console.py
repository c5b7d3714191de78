"""AWorld's console logs off, whether AWorld or aworld_train is imported first.

AWorld 0.3.2 decides at import whether its loggers write to the console
(`AWORLD_DISABLE_CONSOLE_LOG`) and where their files go (`AWORLD_LOG_PATH`, else `./logs`).
Set before AWorld's import, the two variables keep it quiet; where a script imported AWorld
first (as AWorld's own examples do), the console sinks it already added are removed. A user
who sets `AWORLD_DISABLE_CONSOLE_LOG=false` keeps them. Imports nothing of AWorld. What it
relies on in AWorld's loggers is a row of `patch_table`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aworld_train.core.paths import cache_dir


def quiet_aworld_console() -> None:
    os.environ.setdefault("AWORLD_DISABLE_CONSOLE_LOG", "true")
    os.environ.setdefault("AWORLD_LOG_PATH", str(Path(cache_dir()) / "aworld-logs"))
    util = sys.modules.get("aworld.logs.util")
    if util is None or os.environ["AWORLD_DISABLE_CONSOLE_LOG"].lower() not in ("true", "1", "yes"):
        return
    for logger in list(vars(util).values()):
        if isinstance(logger, util.AWorldLogger) and not logger.disable_console:
            util.base_logger.remove(logger.log_id)
            logger.disable_console = True
