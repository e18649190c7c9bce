"""Run the checker on a stranger's bundle in a separate, isolated, limited process.

    outcome = run_check(bundle_dir, select=["GG2"], limits=Limits(wall_s=60))
    if outcome.ok: store(outcome.report)            # report["environment"]["sandbox"] == outcome.level
    else: fail_run(outcome.reason, outcome.stderr_tail)   # "exceeded 60 s wall time"

Levels, strongest first; :func:`sandbox_level` picks one once per process by
actually starting a sandbox and checking what it prevents (the probe must
reach checker, write its tmpfs, and fail to reach a server the parent runs
on 127.0.0.1):

==============  ===========================================================
``bubblewrap``  ``bwrap``: new mount, PID, network, IPC, UTS and cgroup
                namespaces; a read-only view of the system, the Python
                installation, checker/ and engines/ and a copy of the
                bundle; a private tmpfs; no network (as root, even the
                namespace's own loopback loses its address; otherwise it is
                up but empty); plus everything below.
``namespaces``  the same view built by the entry program itself (unshare,
                bind mounts, pivot_root, a PID-namespace init) where bwrap
                is missing.
``rlimits``     a child process with the limits below, a clean environment
                and a private temp folder; the host's file system and
                network stay reachable. Weak: as root, the run (uid 0
                without capabilities) can still read and write root's files
                and signal root's processes.
==============  ===========================================================

At every level: the environment is built from nothing (no database URL, no
token, nothing of the parent's); the bundle is a private copy of its regular
files; rlimits bound CPU time (RLIMIT_CPU), memory (RLIMIT_AS on the CPU,
RLIMIT_DATA on a GPU, where CUDA reserves terabytes of address space), open
files (RLIMIT_NOFILE), file size (RLIMIT_FSIZE, = tmpfs_mb) and core dumps;
the parent bounds wall time and output and kills everything at the end.
Processes: when the service runs as root, each run gets a fresh unprivileged
uid (random, 1.5e9 and up), so RLIMIT_NPROC counts that run's processes and
threads alone and cleanup kills every process of that uid; without root,
the run's user namespace gives it its own count; at the rlimits level as
root, the parent counts the run's processes (tagged in their environment)
every 0.1 s and kills past the limit. Memory: ``memory_mb`` bounds each
process (RLIMIT_AS) and, counted every 0.1 s by the supervisor, the resident
memory of the run's whole process tree together (its proportional set size:
pages a fork shares with its parent count once; no cgroup is needed). Every run also
gets a seccomp filter: no new namespaces, mounts, ptrace or keyrings
(:mod:`._seccomp`). The run dies with its supervisor.

A limit hit inside the checker (MemoryError, fork failing, EMFILE, ENOSPC)
is recorded by the checker as a load or rule error; the outcome then has
``ok=False``, the limit as ``reason`` and still carries the ``report``.
The report is the run's own word: rule code shares the process with the
checker and could forge its own results (never anyone else's).

``GRADGUARD_SANDBOX_LEVEL=namespaces|rlimits`` forces a weaker level (tests,
or a host where the stronger one misbehaves); a level that does not work
here is never used.

**A floor, never a silent downgrade.** :func:`run_check` takes ``min_level``
(default ``namespaces``: user namespaces with a private network, or
bubblewrap) and refuses to start a run when this machine's level is below it:
the outcome is ``ok=False`` with a reason naming both levels and the fix. The
service passes ``GRADGUARD_SANDBOX_MIN_LEVEL``; ``rlimits`` is accepted there
only together with ``GRADGUARD_SANDBOX_INSECURE=true`` (see
:mod:`gradguard.service.config`).
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Limits", "SandboxOutcome", "run_check", "sandbox_level", "meets", "refusal", "LEVELS", "MIN_LEVEL"]

LEVELS = ("bubblewrap", "namespaces", "rlimits")
MIN_LEVEL = "namespaces"  # the default floor: user namespaces with a private network, or bubblewrap
_STDERR_TAIL = 8192


@dataclass(frozen=True)
class Limits:
    wall_s: float = 60
    cpu_s: float = 60
    memory_mb: int = 2048
    processes: int = 64  # processes and threads (Linux tasks) of the run
    open_files: int = 256
    output_bytes: int = 5 * 2**20  # stdout+stderr together; the report separately
    tmpfs_mb: int = 64

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Got {name}={value!r}, but {name} must be a positive number.")


@dataclass
class SandboxOutcome:
    ok: bool  # the checker ran to completion and produced a report
    report: dict | None  # schema "gradguard.report/1"; environment["sandbox"] = level
    level: str  # "bubblewrap" | "namespaces" | "rlimits"
    reason: str | None  # when not ok: "exceeded 60 s wall time", "checker crashed: <last line>", ...
    duration_s: float
    returncode: int | None
    stderr_tail: str  # last few KB of stderr


@functools.lru_cache(maxsize=None)
def sandbox_level() -> str:
    """The strongest level that works on this machine (detected once, by trying)."""
    forced = os.environ.get("GRADGUARD_SANDBOX_LEVEL", "").strip().lower()
    if forced and forced not in LEVELS:
        raise ValueError(f"Got GRADGUARD_SANDBOX_LEVEL={forced!r}, but it must be one of {', '.join(LEVELS)}.")
    candidates = LEVELS[LEVELS.index(forced) :] if forced else LEVELS
    for level in candidates[:-1]:
        problem = _probe(level)
        if problem is None:
            return level
        if forced == level:
            warnings.warn(f"GRADGUARD_SANDBOX_LEVEL={level} does not work here ({problem}); using a weaker level.")
    return "rlimits"


def meets(level: str, minimum: str) -> bool:
    """Whether ``level`` isolates at least as much as ``minimum`` (both in :data:`LEVELS`)."""
    for name, value in (("level", level), ("minimum", minimum)):
        if value not in LEVELS:
            raise ValueError(f"Got {name}={value!r}, but it must be one of {', '.join(LEVELS)}.")
    return LEVELS.index(level) <= LEVELS.index(minimum)


def refusal(level: str, minimum: str) -> str | None:
    """Why a machine at ``level`` must not check untrusted code under the floor ``minimum``; None if it may."""
    if meets(level, minimum):
        return None
    return (f"refused to run: this worker's sandbox level is '{level}', below the configured minimum "
            f"'{minimum}' (GRADGUARD_SANDBOX_MIN_LEVEL). Make bubblewrap or user namespaces work for the "
            "worker (docs/security.md says how), or, for trusted code only, set GRADGUARD_SANDBOX_MIN_LEVEL="
            "rlimits with GRADGUARD_SANDBOX_INSECURE=true.")


_BWRAP_SIZE_FLAG = True  # bubblewrap older than 0.7 lacks --size; the probe finds out


@functools.lru_cache(maxsize=None)
def _probe(level: str) -> str | None:
    """Start a real sandbox at ``level``; None when it isolates as promised, else what went wrong."""
    global _BWRAP_SIZE_FLAG
    from gradguard.service.sandbox import _run

    if level == "bubblewrap" and shutil.which("bwrap") is None:
        return "bwrap is not installed"
    limits = Limits(wall_s=30, cpu_s=30, memory_mb=1024, output_bytes=2**16)
    from gradguard.service import scratch

    with scratch.folder(_run._STAGE_PREFIX, "probe-") as empty, socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        probe = ["--probe", str(server.getsockname()[1])]
        for size_flag in (True, False) if level == "bubblewrap" else (True,):
            try:
                raw = _run.execute(level, empty, probe, limits, "cpu", size_flag=size_flag)
            except OSError as e:
                return str(e)
            if raw.returncode == 0:
                _BWRAP_SIZE_FLAG = size_flag
                break
        else:
            return f"exit status {raw.returncode}: {raw.stderr.decode(errors='replace').strip()[-300:]}"
    import json

    facts = json.loads(raw.report)
    if (facts.get("host_loopback") or not facts.get("tmp_writable") or facts.get("root_writable")
            or not facts.get("seccomp")):
        return f"isolation incomplete: {facts}"
    return None


def run_check(
    bundle_dir: Path,
    *,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    seed: int = 0,
    max_examples: int | None = None,
    device: str = "cpu",
    limits: Limits = Limits(),
    min_level: str = MIN_LEVEL,
    rule_timeout_s: float | None = None,
    rule_memory_mb: int | None = None,
) -> SandboxOutcome:
    """Check the rule modules in ``bundle_dir`` in a sandbox; never raises for what the rules do.

    Below ``min_level`` nothing runs: the outcome is ``ok=False`` with the refusal as its reason.
    ``rule_timeout_s`` bounds each rule (None: half the wall limit), so a hanging rule ends as its own
    error; a run stopped by a limit keeps every rule it finished (see :mod:`._stream`). ``rule_memory_mb``
    bounds how much each rule may grow the checker's memory (None: a quarter of the run's memory limit, so
    that a rule interrupted at twice its budget is still below it; 0: none), so a rule that eats memory
    ends as its own ``MemoryLimit`` error and the others still run."""
    from gradguard.service.sandbox import _judge, _run

    bundle = Path(bundle_dir).resolve()
    if not bundle.is_dir():
        raise ValueError(f"Got bundle_dir={str(bundle_dir)!r}, but it must be an existing folder.")
    if device not in ("cpu", "gpu"):
        raise ValueError(f"Got device={device!r}, but device must be 'cpu' or 'gpu'.")
    level = sandbox_level()
    refused = refusal(level, min_level)
    if refused:
        return SandboxOutcome(ok=False, report=None, level=level, reason=refused, duration_s=0.0, returncode=None,
                              stderr_tail="")
    args = ["--seed", str(int(seed))]
    for check_id in select or []:
        args += ["--select", str(check_id)]
    for check_id in ignore or []:
        args += ["--ignore", str(check_id)]
    if max_examples is not None:
        args += ["--max-examples", str(int(max_examples))]
    args += ["--rule-timeout", repr(float(rule_timeout_s if rule_timeout_s is not None else limits.wall_s / 2))]
    if rule_memory_mb is None:
        rule_memory_mb = int(limits.memory_mb) // 4
    if isinstance(rule_memory_mb, bool) or not isinstance(rule_memory_mb, int) or not 0 <= 2 * rule_memory_mb <= limits.memory_mb:
        raise ValueError(f"Got rule_memory_mb={rule_memory_mb!r}, but it must be an int from 0 (none) to half the "
                         f"run's memory limit ({int(limits.memory_mb) // 2} MB).")
    args += ["--rule-memory", str(rule_memory_mb)]
    start = time.monotonic()
    raw = _run.execute(level, bundle, args, limits, device, size_flag=_BWRAP_SIZE_FLAG)
    report, reason = _judge.judge(raw, limits, level)
    return SandboxOutcome(
        ok=reason is None,
        report=report,
        level=level,
        reason=reason,
        duration_s=time.monotonic() - start,
        returncode=raw.returncode,
        stderr_tail=raw.stderr[-_STDERR_TAIL:].decode(errors="replace"),
    )
