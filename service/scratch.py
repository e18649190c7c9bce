"""Temporary folders that hold copies of submitted files, and their removal once their owner is gone.

    with scratch.folder("gradguard-run-", f"{run.id}-") as tmp: ...   # gradguard-run-7-<owner>-x1y2z3
    scratch.remove_orphans()   # at a worker's start, before each run, at its exit

Each folder's name carries its owner: a hash of the host name, the pid and the process's start time
(``/proc/PID/stat``), so a folder is removed only when the process that made it, on this host, is
gone (killed, crashed) — never a live worker's, even when a pid has been reused. Folders made by a
process on another host that shares the temp folder are left alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PREFIXES", "owner_tag", "folder", "remove_orphans"]

# Folders holding copies of submitted files: the worker's unpacked run, the sandbox's stage.
PREFIXES = ("gradguard-run-", "gradguard-sandbox-")
_OWNER = re.compile(r"(?:^|-)h([0-9a-f]{8})\.(\d+)\.(\d+)-")


def _host() -> str:
    return f"{zlib.crc32(socket.gethostname().encode()):08x}"


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks after boot, or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: split after its last ")"
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def owner_tag(pid: int | None = None) -> str:
    """``h<host>.<pid>.<start time>``: what a folder's name says about the process that made it."""
    pid = os.getpid() if pid is None else pid
    return f"h{_host()}.{pid}.{_start_time(pid) or 0}"


def _alive(host: str, pid: int, start: int) -> bool:
    if host != _host():
        return True  # another machine's (a shared temp folder): not ours to judge
    return _start_time(pid) == start


@contextlib.contextmanager
def folder(prefix: str, label: str = "") -> Iterator[Path]:
    """A private temporary folder named ``<prefix><label><owner>-<random>``, removed on the way out."""
    if prefix not in PREFIXES:
        raise ValueError(f"Got prefix={prefix!r}, but it must be one of {PREFIXES} (what remove_orphans finds).")
    with tempfile.TemporaryDirectory(prefix=f"{prefix}{label}{owner_tag()}-") as tmp:
        yield Path(tmp)


def remove_orphans(base: str | os.PathLike[str] | None = None) -> list[str]:
    """Remove the folders of :data:`PREFIXES` whose owner process is gone; returns their names."""
    removed = []
    base = Path(base or tempfile.gettempdir())
    for prefix in PREFIXES:
        for path in base.glob(f"{prefix}*"):
            match = _OWNER.search(path.name[len(prefix):])
            if match is None or _alive(match[1], int(match[2]), int(match[3])):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
    return removed
