"""Read the report stream the entry program writes, one JSON object a line (untrusted, like all of it):

    {"rules": ["name", ...]}        the rules found, in checking order
    {"rule": {...}}                 one finished rule, as soon as it is checked
    {"report": {...}}               the rest of the report (all but its rules), last

:func:`read` splits the bytes into those parts; :func:`partial_report` builds the report of a run
that ended before its last line: every finished rule as it was sent, and each rule named but not
finished as an ``error`` saying why (the rule that was running when the run stopped, and those
that never got their turn). Both go through :mod:`gradguard.service.reports` like any report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gradguard.service import reports

__all__ = ["Stream", "read", "whole", "partial_report", "STOPPED_TYPE"]

STOPPED_TYPE = "LimitExceeded"  # the error type of a rule the run's limit cut off


@dataclass
class Stream:
    names: list[str] = field(default_factory=list)
    finished: list[dict[str, Any]] = field(default_factory=list)
    report: dict[str, Any] | None = None
    problem: str | None = None  # why the stream could not be read to its end


def read(raw: bytes) -> Stream:
    """The parts of ``raw``; a line that is not one of the three records ends the reading with a problem."""
    out = Stream()
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except RecursionError:
            out.problem = f"line {number} of the report nests deeper than the schema allows"
            return out
        except ValueError as exc:
            # the last line of a run that was stopped may be cut short: not the sandbox's lie, just the end
            out.problem = None if number == len(lines) else f"line {number} of the report is not JSON ({exc})"
            if number != len(lines):
                return out
            break
        if not isinstance(record, dict) or len(record) != 1:
            out.problem = f"line {number} of the report is not one of the records 'rules', 'rule', 'report'"
            return out
        (kind, value), = record.items()
        if kind == "rules" and isinstance(value, list) and all(isinstance(n, str) for n in value):
            out.names = value[: reports.MAX_RULES]
        elif kind == "rule" and isinstance(value, dict) and len(out.finished) < reports.MAX_RULES:
            out.finished.append(value)
        elif kind == "report" and isinstance(value, dict):
            out.report = value  # its rules are the streamed ones (see whole())
        else:
            out.problem = f"line {number} of the report has a malformed {str(kind)[:40]!r} record"
            return out
    return out


def whole(stream: Stream) -> dict[str, Any]:
    """The finished run's report document: the last record with the streamed rules (whatever rules the
    last record itself carries are not read). Validate it before use."""
    assert stream.report is not None
    return {**stream.report, "rules": stream.finished}


def partial_report(stream: Stream, reason: str) -> dict[str, Any]:
    """The report of a run stopped by ``reason`` (e.g. "exceeded 120 s wall time"): what it finished,
    and an error for every rule it named but did not finish. Raises :class:`reports.InvalidReport`."""
    done = [r.get("name") for r in stream.finished]
    left = list(stream.names)
    for name in done:  # the same name may be declared twice: each finished one accounts for one
        if name in left:
            left.remove(name)
    cut = []
    for i, name in enumerate(left):
        message = (f"not finished: the run {reason} while this rule was being checked" if i == 0 else
                   f"not checked: the run {reason} before this rule's turn")
        cut.append({"name": name, "verdict": "error",
                    "error": {"type": STOPPED_TYPE, "message": message, "traceback": ""}})
    document = {"schema": reports.SCHEMA, "rules": stream.finished + cut}
    return reports.as_json(reports.verdicts(reports.validate_report(document)))
