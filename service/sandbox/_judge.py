"""Turn what happened in a run into a verdict and a reason a person can act on.

A limit shows in one of three ways: we stopped the run (wall time, output),
the kernel killed it (SIGXCPU, SIGXFSZ, SIGKILL after the hard CPU limit), or
a system call failed inside and the checker recorded the exception in the
report (MemoryError from RLIMIT_AS, EAGAIN from fork under RLIMIT_NPROC,
EMFILE, ENOSPC). The last kind still gives a report; it is kept, but the
run is not ``ok``: a rule that hit a limit has not been checked, so it is an
``error`` naming the limit, and what a check made of the exception (a GG101
"forward raised MemoryError") is dropped: a limit is never a finding.

Results stream per rule (:mod:`._stream`): a run stopped by a limit or a crash
keeps every rule it finished, and each rule it did not finish is an error
naming the reason.
"""

from __future__ import annotations

import re
import signal
from typing import Any

from gradguard.service import reports
from gradguard.service.sandbox import _stream

_SETUP_CODE = 4  # the entry program could not isolate itself
_STUCK_CODE = 6  # a rule stuck in native code past its time limit stopped the checker (checker._deadline.STUCK_EXIT)


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


def _from_text(text: str) -> str | None:
    for kind, pattern in _TRACES:
        if pattern.search(text):
            return kind
    return None


def last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def _stopped(raw, limits, reasons: dict[str, str], tail: str) -> str | None:
    """Why the run ended before its report was complete, or None if the entry program finished."""
    if raw.limit_hit:
        return reasons[raw.limit_hit]
    if raw.signal is not None or (raw.returncode or 0) < 0:
        sig = raw.signal or -raw.returncode
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and raw.cpu_s >= limits.cpu_s - 0.5):
            return reasons["cpu"]
        if sig == signal.SIGXFSZ:
            return reasons["tmpfs"]
        kind = _from_text(last_line(tail)) or _from_text(tail)  # native aborts explain themselves earlier
        if kind:
            return reasons[kind]
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"checker killed by {name}" + (f": {last_line(tail)}" if last_line(tail) else "")
    if raw.returncode not in (0, None):  # None: exit status lost (SIGCHLD ignored); the report decides
        kind = _from_text(last_line(tail))
        if kind:
            return reasons[kind]
        if raw.returncode == _SETUP_CODE:
            return f"sandbox setup failed: {last_line(tail) or 'no output'}"
        if raw.returncode == _STUCK_CODE:  # the checker's own last resort: a rule its time limit could not stop
            return "was " + (last_line(tail) or "stopped by a rule stuck in native code past its time limit")
        return f"checker crashed: {last_line(tail) or f'exit status {raw.returncode}'}"
    return None


def _limit_kind(texts: list[str]) -> str | None:
    for text in texts:
        # exception lines start at column 0; source lines in a traceback are indented
        kind = _from_text("\n".join(line for line in text.splitlines() if line and not line[0].isspace()))
        if kind:
            return kind
    return None


def _limits_as_errors(report: dict[str, Any], reasons: dict[str, str]) -> tuple[dict[str, Any], str | None]:
    """Each rule that met a limit becomes an error naming it, without the findings the limit caused."""
    first = None
    rules = []
    for rule in report["rules"]:
        err = rule.get("error") or {}
        # The GPU's memory running out (the checker's DeviceMemory error) is not the run's host memory limit.
        host = err and err.get("type") != "DeviceMemory"
        kind = _limit_kind([f"{err.get('traceback') or ''}\n{err.get('type')}: {err.get('message')}"] if host else [])
        caused = [f for f in rule["findings"] if _limit_kind([f.get("message") or ""])]
        kind = kind or (_limit_kind([caused[0]["message"]]) if caused else None)
        if kind is None:
            rules.append(rule)
            continue
        first = first or reasons[kind]
        rules.append({**rule, "findings": [f for f in rule["findings"] if f not in caused], "error": {
            "type": _stream.STOPPED_TYPE, "traceback": (err.get("traceback") or "") if err else "",
            "message": f"{reasons[kind]} while this rule was being checked; it has no verdict. Check it with "
                       "smaller inputs, or raise the run's limit (docs/service.md)."}})
    if first is None:
        kind = _limit_kind([e.get("traceback") or "" for e in report.get("load_errors") or []])
        return report, (reasons[kind] if kind else None)
    fixed = reports.as_json(reports.verdicts(reports.validate_report({**report, "rules": rules})))
    return fixed, first


def _kept(raw_report: bytes, reason: str, level: str) -> dict[str, Any] | None:
    """What a stopped run still has to show: its finished rules, the rest as errors naming ``reason``."""
    stream = _stream.read(raw_report)
    if not stream.names and not stream.finished:
        return None
    try:
        report = _stream.partial_report(stream, reason)
    except reports.InvalidReport:
        return None
    report["environment"]["sandbox"] = level
    return report


def judge(raw, limits, level: str) -> tuple[dict[str, Any] | None, str | None]:
    """(report, reason): reason is None when the run is ok. A run that stopped early still has a report
    when it finished a rule or named the rules it was going to check."""
    reasons = limit_reasons(limits)
    tail = raw.stderr.decode(errors="replace")
    stopped = _stopped(raw, limits, reasons, tail)
    if stopped is not None:
        return _kept(raw.report, stopped, level), stopped
    if not raw.report:
        return None, "checker wrote no report"
    # untrusted: the submission's code could have written anything to the report pipe
    stream = _stream.read(raw.report)
    if stream.problem:
        return None, f"checker wrote an invalid report: {stream.problem}"
    if stream.report is None:
        reason = "checker ended without its final report"
        return _kept(raw.report, reason, level), reason
    try:
        report = reports.as_json(reports.verdicts(reports.validate_report(_stream.whole(stream))))
    except reports.InvalidReport as exc:
        return None, f"checker wrote an invalid report: {exc}"
    report, reason = _limits_as_errors(report, reasons)
    report["environment"]["sandbox"] = level
    return report, reason
