"""Turn what happened in a run into a verdict and a reason a person can act on.

A limit shows in one of three ways: we stopped the run (wall time, output),
the kernel killed it (SIGXCPU, SIGXFSZ, SIGKILL after the hard CPU limit), or
a system call failed inside and the checker recorded the exception in the
report (MemoryError from RLIMIT_AS, EAGAIN from fork under RLIMIT_NPROC,
EMFILE, ENOSPC). The last kind still gives a report; it is kept, but the
run is not ``ok``: a rule that hit a limit has not been checked.
"""

from __future__ import annotations

import re
import signal
from typing import Any

from gradguard.service import reports

_SETUP_CODE = 4  # the entry program could not isolate itself


def _g(x: float) -> str:
    return f"{x:g}"


def limit_reasons(limits) -> dict[str, str]:
    return {
        "wall": f"exceeded {_g(limits.wall_s)} s wall time",
        "cpu": f"exceeded {_g(limits.cpu_s)} s CPU time",
        "memory": f"exceeded {limits.memory_mb} MB memory",
        "processes": f"exceeded {limits.processes} processes",
        "open_files": f"exceeded {limits.open_files} open files",
        "output": f"exceeded {_g(limits.output_bytes / 2**20)} MB output",
        "report": f"exceeded {_g(limits.output_bytes / 2**20)} MB report",
        "tmpfs": f"exceeded {limits.tmpfs_mb} MB tmpfs",
    }


# Exceptions a rule meets when a limit bites (checked against the last line of a traceback).
_TRACES = [
    ("memory", re.compile(r"MemoryError|Cannot allocate memory|std::bad_alloc|RESOURCE_EXHAUSTED: Out of memory")),
    ("processes", re.compile(
        r"BlockingIOError: \[Errno 11\]|Resource temporarily unavailable|can't start new thread|pthread_create"
    )),
    ("open_files", re.compile(r"Too many open files")),
    ("tmpfs", re.compile(r"No space left on device|File too large")),
]


def _tracebacks(report: dict[str, Any]) -> list[str]:
    out = [e.get("traceback") or "" for e in report.get("load_errors") or [] if isinstance(e, dict)]
    for rule in report.get("rules") or []:
        err = rule.get("error") if isinstance(rule, dict) else None
        if isinstance(err, dict):
            out.append(f"{err.get('traceback') or ''}\n{err.get('type')}: {err.get('message')}")
    return out


def _from_text(text: str) -> str | None:
    for kind, pattern in _TRACES:
        if pattern.search(text):
            return kind
    return None


def last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def judge(raw, limits, level: str) -> tuple[dict[str, Any] | None, str | None]:
    """(report, reason): reason is None when the run is ok."""
    reasons = limit_reasons(limits)
    tail = raw.stderr.decode(errors="replace")
    if raw.limit_hit:
        return None, reasons[raw.limit_hit]
    if raw.signal is not None or (raw.returncode or 0) < 0:
        sig = raw.signal or -raw.returncode
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and raw.cpu_s >= limits.cpu_s - 0.5):
            return None, reasons["cpu"]
        if sig == signal.SIGXFSZ:
            return None, reasons["tmpfs"]
        kind = _from_text(last_line(tail)) or _from_text(tail)  # native aborts explain themselves earlier
        if kind:
            return None, reasons[kind]
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return None, f"checker killed by {name}" + (f": {last_line(tail)}" if last_line(tail) else "")
    if raw.returncode not in (0, None):  # None: exit status lost (SIGCHLD ignored); the report decides
        kind = _from_text(last_line(tail))
        if kind:
            return None, reasons[kind]
        if raw.returncode == _SETUP_CODE:
            return None, f"sandbox setup failed: {last_line(tail) or 'no output'}"
        return None, f"checker crashed: {last_line(tail) or f'exit status {raw.returncode}'}"
    if not raw.report:
        return None, "checker wrote no report"
    try:  # untrusted: the submission's code could have written anything to the report pipe
        report = reports.parse_report(raw.report)
    except reports.InvalidReport as exc:
        return None, f"checker wrote an invalid report: {exc}"
    report["environment"]["sandbox"] = level
    for text in _tracebacks(report):
        # exception lines start at column 0; source lines in a traceback are indented
        kind = _from_text("\n".join(line for line in text.splitlines() if line and not line[0].isspace()))
        if kind:
            return report, reasons[kind]
    return report, None
