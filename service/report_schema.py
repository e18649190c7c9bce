"""The sandbox's report, read as untrusted input.

A submission's code runs in the same process as the checker, so anything the sandbox sends may be
forged: wrong types, huge, deeply nested, hostile strings. Before the service stores a report it
parses it here, with a strict schema (``gradguard.report/1``, see ``docs/report-schema.md``) and
caps on counts, sizes and nesting; the report's own verdicts and summary are never trusted: the
service recomputes every rule's verdict from the validated findings and the summary from those
(:func:`parse`). A report that does not fit is refused with a message naming the first problem, and
the run ends ``error``.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

__all__ = ["ReportInvalid", "parse", "validate", "status_of", "LIMITS"]

SCHEMA = "gradguard.report/1"

LIMITS = {
    "bytes": 32 * 2**20,  # the whole document
    "rules": 2000,
    "findings_per_rule": 200,
    "findings": 20_000,
    "depth": 8,  # free-form objects: settings, environment
    "free_form_items": 200,
}

Name = Annotated[str, StringConstraints(max_length=400)]  # the database's columns for names, titles, places
Path = Annotated[str, StringConstraints(max_length=4096)]
Text = Annotated[str, StringConstraints(max_length=64 * 1024)]
Code = Annotated[str, StringConstraints(max_length=512 * 1024)]  # tracebacks, reproducer scripts
CheckId = Annotated[str, StringConstraints(pattern=r"^[A-Z]{2,4}[0-9]{3}$")]
Lines = Annotated[list[Annotated[int, Field(ge=0, le=10**9)]], Field(max_length=10_000)]
Count = Annotated[int, Field(ge=0, le=10**12)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Counterexample(_Strict):
    call: Text | None = None
    args: Annotated[list[Text], Field(max_length=256)] | None = None
    draws: Annotated[dict[Name, Text], Field(max_length=256)] | None = None


class Finding(_Strict):
    check_id: CheckId
    severity: Literal["error", "warning"]
    title: Name
    rule: Name
    message: Text
    location: Name | None = None
    expected: Text | None = None
    actual: Text | None = None
    fix: Text | None = None
    counterexample: Counterexample | None = None
    reproducer: Code | None = None
    source_file: Path | None = None
    source_lines: Lines | None = None


class Skipped(_Strict):
    id: Name
    reason: Text


class RuleError(_Strict):
    type: Name
    message: Text
    traceback: Code | None = None


class Cell(_Strict):
    context: Name
    engine: Name
    status: Literal["right", "wrong", "raised", "skipped"]
    rel_error: float | None = None
    message: Text | None = None
    diagnosis: Text | None = None


class ContextSkipped(_Strict):
    context: Name
    reason: Text


class Matrix(_Strict):
    contexts: Annotated[list[Name], Field(max_length=200)]
    engines: Annotated[list[Name], Field(max_length=50)]
    descriptions: Annotated[dict[Name, Text], Field(max_length=200)] = {}
    cells: Annotated[list[Cell], Field(max_length=10_000)] = []
    skipped: Annotated[list[ContextSkipped], Field(max_length=200)] = []


class RuleResult(_Strict):
    name: Name
    module: Name | None = None
    source_file: Name | None = None
    source_lines: Lines | None = None
    kind: Annotated[str, StringConstraints(pattern=r"^[a-z_]{1,32}$")] = "numpy"
    verdict: Literal["pass", "fail", "error"] = "pass"  # read, then recomputed from the findings
    findings: Annotated[list[Finding], Field(max_length=LIMITS["findings_per_rule"])] = []
    checks_run: Annotated[list[CheckId], Field(max_length=500)] = []
    checks_skipped: Annotated[list[Skipped], Field(max_length=500)] = []
    duration_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    examples: Count = 0
    error: RuleError | None = None
    safety_matrix: Matrix | None = None

    @field_validator("duration_s", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class LoadFailure(_Strict):
    path: Path
    traceback: Code


class Document(_Strict):
    schema_: Literal["gradguard.report/1"] = Field(alias="schema")
    summary: Any = None  # never read: the service recomputes it
    settings: dict[Name, Any] = {}
    environment: dict[Name, Any] = {}
    duration_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    load_errors: Annotated[list[LoadFailure], Field(max_length=1000)] = []
    rules: Annotated[list[RuleResult], Field(max_length=LIMITS["rules"])] = []

    @field_validator("duration_s", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("settings", "environment")
    @classmethod
    def _free_form(cls, value: dict[str, Any]) -> dict[str, Any]:
        _check_free_form(value, LIMITS["depth"])
        return value


class ReportInvalid(ValueError):
    """The sandbox's report does not fit the schema or its caps; the message names the first problem."""


def _check_free_form(value: Any, depth: int) -> None:
    if depth <= 0:
        raise ValueError(f"nested deeper than {LIMITS['depth']} levels")
    if isinstance(value, dict):
        if len(value) > LIMITS["free_form_items"]:
            raise ValueError(f"more than {LIMITS['free_form_items']} entries")
        for item in value.values():
            _check_free_form(item, depth - 1)
    elif isinstance(value, list):
        if len(value) > LIMITS["free_form_items"]:
            raise ValueError(f"more than {LIMITS['free_form_items']} entries")
        for item in value:
            _check_free_form(item, depth - 1)
    elif isinstance(value, str):
        if len(value) > 4096:
            raise ValueError("a string longer than 4096 characters")
    elif value is not None and not isinstance(value, (bool, int, float)):
        raise ValueError(f"a value of type {type(value).__name__}")


def _verdict(rule: RuleResult) -> str:
    if rule.error is not None:
        return "error"
    return "fail" if any(f.severity == "error" for f in rule.findings) else "pass"


def parse(raw: bytes | str) -> dict[str, Any]:
    """The report in ``raw`` (JSON text), validated, with every rule's verdict and the summary
    computed here from the findings; raises :class:`ReportInvalid`."""
    if len(raw) > LIMITS["bytes"]:
        raise ReportInvalid(f"the report is {len(raw)} bytes, over the {LIMITS['bytes']} byte cap")
    try:
        return _finish(Document.model_validate_json(raw, strict=True))
    except ValidationError as exc:
        raise _invalid(exc) from None


def validate(data: Any) -> dict[str, Any]:
    """:func:`parse` for a report already read from JSON (a stored or handed-over dict)."""
    try:
        return _finish(Document.model_validate(data, strict=True))
    except ValidationError as exc:
        raise _invalid(exc) from None


def _invalid(exc: ValidationError) -> ReportInvalid:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "the document"
    more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
    return ReportInvalid(f"the report does not fit {SCHEMA}: {where}: {first['msg']}{more}")


def _finish(doc: Document) -> dict[str, Any]:
    findings = sum(len(r.findings) for r in doc.rules)
    if findings > LIMITS["findings"]:
        raise ReportInvalid(f"the report has {findings} findings, over the cap of {LIMITS['findings']}")
    for rule in doc.rules:
        rule.verdict = _verdict(rule)  # type: ignore[assignment]
        for cell in (rule.safety_matrix.cells if rule.safety_matrix else []):
            if cell.rel_error is not None and not math.isfinite(cell.rel_error):
                cell.rel_error = None  # JSON in PostgreSQL has no NaN; the cell's status says what happened
    out = doc.model_dump(by_alias=True, exclude={"summary"})
    out["summary"] = _summary(doc)
    return out


def _summary(doc: Document) -> dict[str, Any]:
    """The counts of ``checker.report.Report.summary``, computed by the service from the validated
    rules (the supervisor does not import the checker; a test keeps the two equal)."""
    verdicts = [r.verdict for r in doc.rules]
    findings = [f for r in doc.rules for f in r.findings]
    by_check: dict[str, int] = {}
    for f in findings:
        by_check[f.check_id] = by_check.get(f.check_id, 0) + 1
    passed = bool(doc.rules) and not doc.load_errors and all(v == "pass" for v in verdicts)
    no_rules = not doc.rules and not doc.load_errors
    return {
        "rules": len(doc.rules),
        "passed": verdicts.count("pass"),
        "failed": verdicts.count("fail"),
        "errored": verdicts.count("error"),
        "load_errors": len(doc.load_errors),
        "findings": len(findings),
        "errors": sum(1 for f in findings if f.severity == "error"),
        "warnings": sum(1 for f in findings if f.severity == "warning"),
        "by_check": dict(sorted(by_check.items())),
        "verdict": "pass" if passed else ("error" if no_rules or doc.load_errors or "error" in verdicts else "fail"),
    }


def status_of(report: dict[str, Any]) -> tuple[str, str | None]:
    """The run's status and error text from a report :func:`parse` returned."""
    summary = report["summary"]
    if not report["rules"] and not report["load_errors"]:
        return "error", ("no rules found in the bundle: declare rules with @rrule(...) or jax_rule(...) in the "
                         "submitted modules")
    if summary["verdict"] == "error":
        return "error", ("the checker reported errors (rule modules that failed to import, or rules that "
                         "could not be checked); see the report")
    return ("passed", None) if summary["verdict"] == "pass" else ("failed", None)
