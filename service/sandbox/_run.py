"""Start the entry program at a given level, watch it, and always clean up.

One loop reads stdout, stderr and the report pipe together (each capped),
enforces the wall-time limit and kills the whole run when something is
exceeded: the bubblewrap process (its PID namespace dies with it), the
process group, and, when the run had its own uid, every process of that uid.
"""

from __future__ import annotations

import json
import math
import os
import random
import secrets
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gradguard.service import scratch
from gradguard.service.sandbox import _layout, _seccomp

_TAIL = 8192
_RUN_UIDS = (1_500_000_000, 1_000_000)  # first, count: far from real accounts
_TAG = "GRADGUARD_SANDBOX_RUN"  # rlimits level without a uid of its own: marks the run's processes
_STAGE_PREFIX = "gradguard-sandbox-"  # + the supervisor's owner tag: what a killed supervisor left is found
_WATCH_EVERY_S = 0.1
_DRAIN_S = 0.5


@dataclass
class Raw:
    """What happened, before it is judged: see :func:`gradguard.service.sandbox._judge.judge`."""

    limit_hit: str | None  # "wall" | "output" | "report" | "processes": what the supervisor stopped
    returncode: int | None
    signal: int | None  # the signal that ended the checker, as far as we can tell
    cpu_s: float
    stderr: bytes  # the tail
    report: bytes
    duration_s: float


def run_ids() -> tuple[int, int] | None:
    """A fresh unprivileged uid/gid for one run, when we are root and the id is mapped here."""
    if os.geteuid() != 0:
        return None
    ids = []
    for name in ("uid_map", "gid_map"):
        try:
            rows = [tuple(map(int, line.split())) for line in Path(f"/proc/self/{name}").read_text().splitlines()]
        except OSError:
            rows = [(0, 0, 2**32 - 1)]
        first, count = _RUN_UIDS
        n = random.randrange(count)
        ok = [r for r in rows if r[0] <= first and first + count <= r[0] + r[2]]
        if ok:
            ids.append(first + n)
            continue
        big = max(rows, key=lambda r: r[2])  # a container with a narrow map: its upper half
        if big[2] < 2048:
            return None
        ids.append(big[0] + big[2] // 2 + n % (big[2] // 2 - 1))
    return ids[0], ids[1]


def env(device: str, *, pythonpath: str, tmp: str) -> dict[str, str]:
    """The run's whole environment, built from nothing: no secret of the parent's can leak."""
    out = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": tmp,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "PYTHONPATH": pythonpath,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONUNBUFFERED": "1",
        "GRADGUARD_DEVICE": device,
        "JAX_PLATFORMS": "cpu" if device == "cpu" else "cuda",
        # glibc gives each thread that allocates its own 64 MB heap arena, reserved address space that
        # RLIMIT_AS counts although it is never touched: JAX's and PyTorch's thread pools reserve about
        # 1.9 GB of it that way (0.5 GB with two arenas), which left a 2 GB run no room to work in.
        "MALLOC_ARENA_MAX": "2",
        # Thread pools sized for a run, not for the machine: NumPy's BLAS and XLA's CPU client start one thread
        # per core (NPROC sizes XLA's), and on a 16-core machine those alone passed the run's limit on processes
        # and threads (Limits.processes), so every run there ended "exceeded 64 processes" before its first
        # rule. The entry program also confines the run to a few CPUs (`cpus` in the plan), for the pools
        # that size themselves by the CPUs a process may use.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NPROC": str(RUN_CPUS),
    }
    if device == "gpu":
        # JAX takes 75% of the GPU's memory by default: a second run on the same GPU would find none left.
        out["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if os.environ.get("XLA_FLAGS"):
        out["XLA_FLAGS"] = os.environ["XLA_FLAGS"]
    return out


RUN_CPUS = 4  # the CPUs a run may use at most (fewer where the worker has fewer)


def run_cpus() -> list[int]:
    """A few of the CPUs this process may use, drawn at random so that concurrent runs spread out."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return sorted(random.sample(allowed, min(RUN_CPUS, len(allowed)))) if allowed else []


def rlimits(limits, device: str) -> dict[str, int]:
    """The rlimits the entry program sets on itself, by name."""
    # RLIMIT_AS also counts address space that is only reserved; JAX on the CPU
    # lives within 2 GB of it, but CUDA reserves terabytes, so GPU runs limit the
    # data segment (heap and anonymous mappings) instead.
    return {
        "RLIMIT_CPU": max(1, math.ceil(limits.cpu_s)),
        "RLIMIT_AS" if device == "cpu" else "RLIMIT_DATA": limits.memory_mb * 2**20,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_NPROC": limits.processes,
        "RLIMIT_FSIZE": limits.tmpfs_mb * 2**20,
        "RLIMIT_CORE": 0,
    }


def command(level: str, stage: _layout.Stage, main_args: list[str], limits, device: str, *, size_flag=True):
    """(argv, environment, cwd) for the entry program at ``level``."""
    plan: dict = {"uid": stage.uid, "gid": stage.gid, "limits": rlimits(limits, device), "supervisor": os.getpid(),
                  "cpus": run_cpus()}
    try:
        plan["seccomp"] = _seccomp.program()
    except _seccomp.Unavailable:  # the level probe fails without it: the floor then refuses runs
        pass
    python = [sys.executable, "-s", "-P", "-B"]
    if level == "bubblewrap":
        argv = _layout.bwrap_argv(stage, device, limits.tmpfs_mb, size_flag=size_flag) + python + [_layout.MAIN]
        plan["cwd"] = _layout.BUNDLE
        plan["loopback_down"] = stage.uid is not None  # bwrap kept CAP_NET_ADMIN only then
        plan["supervisor"] = None  # bwrap is our parent; --die-with-parent covers the supervisor
        return argv + ["--plan", json.dumps(plan), _layout.BUNDLE] + main_args, env(
            device, pythonpath=_layout.LIB, tmp=_layout.TMP
        ), None
    if level == "namespaces":
        plan["isolate"] = _layout.namespaces_spec(stage, device, limits.tmpfs_mb)
        plan["cwd"] = _layout.BUNDLE
        argv = python + [_layout.main_script(), "--plan", json.dumps(plan), _layout.BUNDLE] + main_args
        return argv, env(device, pythonpath=_layout.LIB, tmp=_layout.TMP), None
    # rlimits: the host's file system, a private (but not size-limited) temp folder
    tmp = stage.root / "tmp"
    tmp.mkdir(mode=0o700, exist_ok=True)
    if stage.uid is not None:
        os.chown(tmp, stage.uid, stage.gid)
    plan["cwd"] = str(stage.bundle)
    argv = python + [_layout.main_script(), "--plan", json.dumps(plan), str(stage.bundle)] + main_args
    return argv, env(device, pythonpath=str(stage.lib), tmp=str(tmp)), str(stage.bundle)


def execute(level: str, bundle: Path, main_args: list[str], limits, device: str, *, size_flag=True) -> Raw:
    start = time.monotonic()
    ids = run_ids() if level != "rlimits" or _layout_readable() else None
    scratch.remove_orphans()  # stages of supervisors killed mid-run
    with scratch.folder(_STAGE_PREFIX) as root:
        stage = _layout.Stage(root, *(ids or (None, None)))
        stage.copy_bundle(bundle)
        report_r, report_w = os.pipe()
        args = ["--report-fd", str(report_w), "--origin", str(bundle), *main_args]
        argv, environment, cwd = command(level, stage, args, limits, device, size_flag=size_flag)
        tag = None
        if level == "rlimits" and stage.uid is None:  # nothing else bounds or finds its processes
            tag = f"{_TAG}={secrets.token_hex(8)}".encode()
            environment[_TAG] = tag.decode().split("=", 1)[1]
        try:
            proc = subprocess.Popen(
                argv,
                env=environment,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(report_w,),
                start_new_session=True,
            )
        except BaseException:
            os.close(report_r)
            raise
        finally:
            os.close(report_w)
        try:
            budget = limits.memory_mb * 2**20

            def watch() -> str | None:
                if tag and len(tagged(tag)) > limits.processes:
                    return "processes"
                return "memory" if resident_bytes(proc.pid) > budget else None

            limit_hit, out, err, report = _pump(proc, report_r, limits, start, watch)
        finally:
            _kill(proc)
            status, usage = _reap(proc)
            if stage.uid is not None:
                sweep(stage.uid)
            if tag:
                sweep_tagged(tag)
            os.close(report_r)
    code, sig = _decode(status, wrapped=level != "rlimits") if status is not None else (None, None)
    return Raw(limit_hit, code, sig, usage, err, report, time.monotonic() - start)


def _layout_readable() -> bool:
    """rlimits level as root: can a fresh uid reach the installation through the host's folders?"""
    for p in [*_layout.installation(), *_layout.packages().values(), _layout.public_init(), _layout.main_script()]:
        parts = Path(p).parts
        for i in range(1, len(parts)):
            if not os.stat(os.path.join(*parts[:i])).st_mode & 0o001:  # others may not pass
                return False
        if not os.stat(p).st_mode & 0o004:  # others may not read
            return False
    return True


def _pump(proc: subprocess.Popen, report_r: int, limits, start: float, watch=None):
    sel = selectors.DefaultSelector()
    bufs = {"out": bytearray(), "err": bytearray(), "report": bytearray()}
    for name, fd in (("out", proc.stdout.fileno()), ("err", proc.stderr.fileno()), ("report", report_r)):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, name)
    deadline = start + limits.wall_s
    printed = 0
    next_watch = start
    drain_until = None  # once the entry program is gone: what it left in the pipes, briefly
    try:
        while True:
            now = time.monotonic()
            if drain_until is not None and now >= drain_until:
                break  # a process it left behind holds a pipe open: cleanup kills it
            if now >= deadline:
                return "wall", bytes(bufs["out"]), bytes(bufs["err"]), bytes(bufs["report"])
            if watch is not None and now >= next_watch:
                next_watch = now + _WATCH_EVERY_S
                hit = watch()
                if hit:
                    return hit, bytes(bufs["out"]), bytes(bufs["err"]), bytes(bufs["report"])
            if drain_until is None and _exited(proc):
                drain_until = now + _DRAIN_S
            if not sel.get_map():
                if drain_until is not None:
                    break
                time.sleep(min(0.01, deadline - now))
                continue
            timeout = min(_WATCH_EVERY_S, deadline - now, _DRAIN_S if drain_until is None else drain_until - now)
            for key, _ in sel.select(timeout=max(0.0, timeout)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = bufs[key.data]
                buf += chunk
                if key.data == "report":
                    if len(buf) > limits.output_bytes:
                        return "report", bytes(bufs["out"]), bytes(bufs["err"]), b""
                    continue
                printed += len(chunk)
                del buf[:-_TAIL]
                if printed > limits.output_bytes:
                    return "output", bytes(bufs["out"]), bytes(bufs["err"]), bytes(bufs["report"])
        return None, bytes(bufs["out"]), bytes(bufs["err"]), bytes(bufs["report"])
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()


def _kill(proc: subprocess.Popen) -> None:
    """The entry program and its process group; it is not reaped yet, so its pid is still ours.
    (Not ``proc.kill()``: that polls first, and polling reaps.)"""
    for kill in (os.killpg, os.kill):
        try:
            kill(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _exited(proc: subprocess.Popen) -> bool:
    """Has the entry program ended? Leaves it a zombie: its pid (our process group's id) stays
    reserved until :func:`_reap`, so the group kill can never hit a stranger that got the number."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # the host ignores SIGCHLD, so the kernel reaped it already
        return True


def _reap(proc: subprocess.Popen) -> tuple[int | None, float]:
    """(wait status, CPU seconds of the run and the descendants it waited for).

    The status is None when the host process ignores SIGCHLD (some worker pools set SIG_IGN):
    the kernel then reaps the child itself and its status is lost; the report decides."""
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:
        return None, 0.0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return status, usage.ru_utime + usage.ru_stime


def _decode(status: int, *, wrapped: bool) -> tuple[int, int | None]:
    """(returncode, signal): bubblewrap and our PID-1 pass a killed child on as 128+N."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status), os.WTERMSIG(status)
    code = os.WEXITSTATUS(status)
    if wrapped and code > 128:
        return code, code - 128
    return code, None


def sweep(uid: int) -> None:
    """Kill every process whose real uid is the run's (what a double fork may have left), until none is left."""
    _sweep(lambda pid: _real_uid(pid) == uid)


def sweep_tagged(tag: bytes) -> None:
    _sweep(lambda pid: _has_tag(pid, tag))


def tagged(tag: bytes) -> list[int]:
    """Processes whose environment carries ``tag`` (what a run started, unless it exec'd a new environment)."""
    return [pid for pid in _pids() if _has_tag(pid, tag)]


_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes(root: int) -> int:
    """Memory of ``root`` and every process below it (the run's whole tree: what bubblewrap or the PID
    namespace's init started, and what those started): the proportional set size, so pages a fork
    shares with its parent count once; the resident size where the kernel has no ``smaps_rollup``.
    Threads share their process's memory and are not listed."""
    parents: dict[int, int] = {}
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                parents[pid] = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        total += _process_bytes(pid)
    return total


def _process_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _real_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _has_tag(pid: int, tag: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return tag in f.read().split(b"\0")
    except OSError:
        return False


def _sweep(match) -> None:
    me = os.getpid()
    for _ in range(100):  # each round kills what exists; what they forked meanwhile goes next round
        pids = [pid for pid in _pids() if pid != me and match(pid)]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)
