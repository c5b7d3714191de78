"""Each episode's folder for the python tool: where its code runs and its files stay, found again
by a restarted server, owned by the episode's own uid in uid mode (isolation.py)."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path

from aworld_train.env.gaia.isolation import DEFAULT_UIDS, UIDS_ENV, SandboxUnavailable

ROOT_ENV = "GAIA_SANDBOX_ROOT"
SALT_ENV = "GAIA_SANDBOX_SALT"
SANDBOX_DIR_ENV = "GAIA_SANDBOX_DIR"


class Workspaces:
    """One folder per episode under `root`, named by a salted hash of the episode id.

    With the same root and salt (the gateway passes both), a restarted server finds every
    episode's folder again. In root modes each folder is owned by the episode's own uid,
    which is read back from the folder after a restart.
    """

    def __init__(self, root: Path, salt: str, per_episode_uid: bool, uids: tuple[int, int] = DEFAULT_UIDS,
                 capacity: int = 4096) -> None:  # fmt: skip
        self.root = root
        self.salt = salt
        self.per_episode_uid = per_episode_uid
        self.uids = uids
        self.capacity = capacity
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # uids may enter their own folder but not list the others
        self._folders: OrderedDict[str, tuple[Path, int | None]] = OrderedDict()
        self._used = (
            {p.stat().st_uid for p in self.root.iterdir() if p.is_dir()} if per_episode_uid else set()
        )

    def name(self, episode: str) -> str:
        return folder_name(self.salt, episode)

    def folder(self, episode: str) -> tuple[Path, int | None]:
        """(the episode's folder, the uid its code runs as; None when it keeps the server's)."""
        known = self._folders.get(episode)
        if known is not None and known[0].is_dir():
            self._folders.move_to_end(episode)
            return known
        path = self.root / self.name(episode)
        uid: int | None = None
        if path.is_dir():
            uid = path.stat().st_uid if self.per_episode_uid else None
        else:
            path.mkdir(mode=0o700)
            if self.per_episode_uid:
                uid = self._free_uid()
                os.chown(path, uid, uid)
        self._folders[episode] = (path, uid)
        while len(self._folders) > self.capacity:
            _, (old, old_uid) = self._folders.popitem(last=False)
            shutil.rmtree(old, ignore_errors=True)
            self._used.discard(old_uid)
        return path, uid

    def _free_uid(self) -> int:
        low, high = self.uids
        if len(self._used) >= high - low + 1:
            raise RuntimeError(f"all sandbox uids {low}-{high} are in use; widen {UIDS_ENV}")
        while True:
            uid = low + secrets.randbelow(high - low + 1)
            if uid not in self._used:
                self._used.add(uid)
                return uid


def folder_name(salt: str, episode: str) -> str:
    return hashlib.sha256(f"{salt}:{episode}".encode()).hexdigest()[:24]


def parse_uids(value: str | None) -> tuple[int, int]:
    if not value:
        return DEFAULT_UIDS
    try:
        low, high = (int(part) for part in value.split("-"))
    except ValueError:
        raise SandboxUnavailable(f"{UIDS_ENV}={value!r}: write a range like 20000-59999") from None
    if not 0 < low <= high:
        raise SandboxUnavailable(f"{UIDS_ENV}={value!r}: the range must be positive and ascending")
    return low, high


def sandbox_root(base: Path | None = None) -> Path:
    """This gateway's folder for episode files, after removing those of gateways that died."""
    base = base or Path(
        os.environ.get(SANDBOX_DIR_ENV) or Path(tempfile.gettempdir()) / "aworld-gaia-sandbox"
    )
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o711)
    for old in base.glob("run-*"):
        pid = old.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(old, ignore_errors=True)
    root = base / f"run-{os.getpid()}-{secrets.token_hex(4)}"
    root.mkdir(mode=0o711)
    os.chmod(root, 0o711)
    return root
