"""Run the checker on a stranger's bundle in a separate, limited process.

Minimal first version: a child process with a clean environment, rlimits,
a wall-time limit and capped output. Isolation levels come next.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Limits", "SandboxOutcome", "run_check", "sandbox_level"]


@dataclass(frozen=True)
class Limits:
    wall_s: float = 60
    cpu_s: float = 60
    memory_mb: int = 2048
    processes: int = 64
    open_files: int = 256
    output_bytes: int = 5 * 2**20
    tmpfs_mb: int = 64


@dataclass
class SandboxOutcome:
    ok: bool
    report: dict | None
    level: str
    reason: str | None
    duration_s: float
    returncode: int | None
    stderr_tail: str


_TAIL = 8192


def sandbox_level() -> str:
    return "rlimits"


def _fmt(x: float) -> str:
    return f"{x:g}"


def _mb(n: int) -> str:
    return _fmt(n / 2**20)


def _env(tmp: str, device: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": tmp,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "GRADGUARD_DEVICE": device,
        "JAX_PLATFORMS": "cpu" if device == "cpu" else "",
    }


def _rlimits(limits: Limits, device: str):
    def apply() -> None:
        cpu = max(1, int(limits.cpu_s + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        mem = limits.memory_mb * 2**20
        kind = resource.RLIMIT_AS if device == "cpu" else resource.RLIMIT_DATA
        resource.setrlimit(kind, (mem, mem))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_check(
    bundle_dir: Path,
    *,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    seed: int = 0,
    max_examples: int | None = None,
    device: str = "cpu",
    limits: Limits = Limits(),
) -> SandboxOutcome:
    level = sandbox_level()
    start = time.monotonic()
    bundle = str(Path(bundle_dir).resolve())
    report_r, report_w = os.pipe()
    argv = [sys.executable, "-m", "service._sandbox_main", bundle, "--report-fd", str(report_w), "--seed", str(seed)]
    for s in select or []:
        argv += ["--select", s]
    for s in ignore or []:
        argv += ["--ignore", s]
    if max_examples is not None:
        argv += ["--max-examples", str(max_examples)]
    project_root = str(Path(__file__).resolve().parent.parent)
    with tempfile.TemporaryDirectory(prefix="gg-sandbox-") as tmp:
        env = _env(tmp, device)
        env["PYTHONPATH"] = project_root
        proc = subprocess.Popen(
            argv,
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(report_w,),
            start_new_session=True,
            preexec_fn=_rlimits(limits, device),
        )
        os.close(report_w)
        reason, out, err, report_bytes = _pump(proc, report_r, limits, start)
        returncode = proc.returncode
    duration = time.monotonic() - start
    return _outcome(level, reason, returncode, err, report_bytes, limits, duration)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _pump(proc, report_r, limits, start):
    sel = selectors.DefaultSelector()
    bufs = {"out": bytearray(), "err": bytearray(), "report": bytearray()}
    for name, fd in (("out", proc.stdout.fileno()), ("err", proc.stderr.fileno()), ("report", report_r)):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, name)
    deadline = start + limits.wall_s
    reason = None
    printed = 0
    while True:
        now = time.monotonic()
        if now >= deadline:
            reason = f"exceeded {_fmt(limits.wall_s)} s wall time"
            break
        if not sel.get_map() and proc.poll() is not None:
            break
        events = sel.select(timeout=min(0.05, deadline - now)) if sel.get_map() else []
        if not events and not sel.get_map():
            time.sleep(min(0.02, max(0.0, deadline - now)))
        for key, _ in events:
            try:
                chunk = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                sel.unregister(key.fd)
                continue
            buf = bufs[key.data]
            if key.data == "report":
                if len(buf) + len(chunk) > limits.output_bytes:
                    reason = f"exceeded {_mb(limits.output_bytes)} MB report"
                    break
                buf += chunk
            else:
                printed += len(chunk)
                buf += chunk
                del buf[:-_TAIL]
                if printed > limits.output_bytes:
                    reason = f"exceeded {_mb(limits.output_bytes)} MB output"
                    break
        if reason:
            break
    _kill(proc)
    proc.wait()
    for key in list(sel.get_map().values()):
        sel.unregister(key.fd)
    sel.close()
    proc.stdout.close()
    proc.stderr.close()
    os.close(report_r)
    return reason, bytes(bufs["out"]), bytes(bufs["err"]), bytes(bufs["report"])


def _outcome(level, reason, returncode, err, report_bytes, limits, duration):
    tail = err[-_TAIL:].decode(errors="replace")
    report = None
    if reason is None and returncode is not None and returncode < 0:
        sig = -returncode
        if sig == signal.SIGXCPU or sig == signal.SIGKILL and "cpu" in tail.lower():
            reason = f"exceeded {_fmt(limits.cpu_s)} s CPU time"
        else:
            reason = f"checker killed by signal {signal.Signals(sig).name}"
    last = next((line for line in reversed(tail.splitlines()) if line.strip()), "no output")
    if reason is None and returncode != 0 and last.startswith("MemoryError"):
        reason = f"exceeded {limits.memory_mb} MB memory"
    if reason is None and returncode != 0:
        reason = f"checker crashed: {last}"
    if reason is None:
        try:
            report = json.loads(report_bytes)
        except ValueError:
            reason = "checker wrote no valid report"
        else:
            if not isinstance(report, dict) or report.get("schema") != "gradguard.report/1":
                report, reason = None, "checker wrote no valid report"
            else:
                report.setdefault("environment", {})["sandbox"] = level
    return SandboxOutcome(
        ok=reason is None,
        report=report,
        level=level,
        reason=reason,
        duration_s=duration,
        returncode=returncode,
        stderr_tail=tail,
    )
