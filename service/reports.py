"""What the sandbox sends back is untrusted input: the ``gradguard.report/1`` schema the service enforces.

Rule code shares its process with the checker, so it can write any report it likes. The service
therefore reads every report, on the way in and on the way out, through this one strict schema:

    validate_report(data)  -> Report        raises InvalidReport naming the first problems
    verdicts(report)       -> Report        rule verdicts and the summary recomputed from the findings
    run_status(report)     -> (status, error)   the run's status, computed here, never read from the report
    stored_report(raw)     -> dict | None   a stored report, validated again before a page or API shows it
    stored_summary(raw)    -> dict | None   a stored summary, the same

Caps (counts are refused, long texts are cut and marked):

    rules 2,000, findings 200 per rule and 5,000 in all, load errors 200, safety-matrix cells 1,024,
    texts 400 characters (names, ids, paths) to 64,000 (tracebacks, reproducers), the whole report 5 MiB.

Texts lose NUL and other control characters (except tab and newline) and lone surrogates, which
PostgreSQL, XML and browsers cannot take. Free-form maps (``settings``, ``environment``) hold short
scalars, lists of them and one level of maps of them; ``counterexample.draws`` holds texts; so nothing
in a report nests deeper than the schema.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, ValidationError,
                      model_validator)

__all__ = [
    "SCHEMA",
    "InvalidReport",
    "Report",
    "Summary",
    "validate_report",
    "parse_report",
    "verdicts",
    "run_status",
    "stored_report",
    "stored_summary",
    "as_json",
    "as_python",
    "MAX_RULES",
    "MAX_FINDINGS",
    "MAX_FINDINGS_PER_RULE",
    "MAX_REPORT_BYTES",
]

SCHEMA = "gradguard.report/1"
MAX_RULES = 2_000
MAX_FINDINGS_PER_RULE = 200
MAX_FINDINGS = 5_000
MAX_LOAD_ERRORS = 200
MAX_CELLS = 1_024
MAX_REPORT_BYTES = 5 * 2**20

_BAD_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")


class InvalidReport(ValueError):
    """The report is not a ``gradguard.report/1`` document this service accepts."""


def _clean_text(limit: int):  # type: ignore[no-untyped-def]
    def clean(value: Any) -> Any:
        if not isinstance(value, str):
            return value  # the strict str type refuses it with a clear message
        value = _BAD_CHARS.sub("\ufffd", value)
        if len(value) > limit:
            value = value[:limit] + f"… [cut: {len(value) - limit} more characters]"
        return value

    return clean


def _text(limit: int) -> Any:
    return Annotated[str, Field(strict=True), BeforeValidator(_clean_text(limit))]


Name = _text(400)
Short = _text(2_000)
Message = _text(16_000)
Long = _text(64_000)


def _number(value: Any) -> Any:
    # Stored reports keep NaN and infinities as strings (strict JSON has no such numbers).
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        return float(value.replace("Infinity", "inf"))
    if isinstance(value, bool):
        raise ValueError("a number is needed, not a boolean")
    return value


Number = Annotated[float, Field(allow_inf_nan=True), BeforeValidator(_number)]
Duration = Annotated[float, Field(ge=0, allow_inf_nan=False), BeforeValidator(_number)]
Count = Annotated[StrictInt, Field(ge=0, le=10**9)]
Scalar = StrictBool | StrictInt | Number | Short | None
CheckId = Annotated[str, Field(strict=True, pattern=r"^GG\d{1,3}$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class Counterexample(_Model):
    call: Message | None = None
    args: Annotated[list[Message], Field(max_length=64)] = []
    draws: Annotated[dict[Name, Message], Field(max_length=64)] = {}
    shrinking: Message | None = None  # "complete", or how a shrinking budget cut it short


class Finding(_Model):
    check_id: CheckId
    severity: Literal["error", "warning"]
    title: Short
    rule: Name
    message: Message
    location: Short | None = None
    expected: Message | None = None
    actual: Message | None = None
    fix: Message | None = None
    counterexample: Counterexample | None = None
    reproducer: Long | None = None
    source_file: Name | None = None
    source_lines: Annotated[list[Count], Field(max_length=10_000)] | None = None


class RuleError(_Model):
    type: Name
    message: Long
    traceback: Long = ""


class SkippedCheck(_Model):
    id: CheckId
    reason: Short


class PartialCheck(_Model):
    """A check that ran, judged at some drawn inputs and skipped at the others."""

    id: CheckId
    judged: Count
    skipped: Count
    reason: Short


class ExamplesCut(_Model):
    planned: Count  # the inputs the settings asked for
    reason: Literal["input budget", "input size"]
    message: Short


class MatrixCell(_Model):
    context: Name
    engine: Name
    status: Literal["right", "wrong", "raised", "skipped"]
    rel_error: Number | None = None
    message: Message | None = None
    diagnosis: Message | None = None


class MatrixSkip(_Model):
    context: Name
    reason: Short


class SafetyMatrix(_Model):
    contexts: Annotated[list[Name], Field(max_length=64)] = []
    engines: Annotated[list[Name], Field(max_length=16)] = []
    cells: Annotated[list[MatrixCell], Field(max_length=MAX_CELLS)] = []
    skipped: Annotated[list[MatrixSkip], Field(max_length=64)] = []
    descriptions: Annotated[dict[Name, Short], Field(max_length=64)] = {}


class PythonWarning(_Model):
    category: Name  # "" on the entry that counts the warnings not kept
    message: Short
    where: Name


class RuleResult(_Model):
    name: Name
    module: Name | None = None
    source_file: Name | None = None
    source_lines: Annotated[list[Count], Field(max_length=2)] | None = None
    kind: Annotated[str, Field(strict=True, pattern=r"^[a-z][a-z0-9_]{0,31}$")] = "numpy"
    verdict: Literal["pass", "fail", "error"] = "pass"
    findings: Annotated[list[Finding], Field(max_length=MAX_FINDINGS_PER_RULE)] = []
    checks_run: Annotated[list[CheckId], Field(max_length=100)] = []
    checks_skipped: Annotated[list[SkippedCheck], Field(max_length=100)] = []
    checks_partial: Annotated[list[PartialCheck], Field(max_length=100)] = []
    duration_s: Duration = 0.0
    examples: Count = 0
    examples_cut: ExamplesCut | None = None  # why fewer inputs than planned were checked, where they were
    error: RuleError | None = None
    safety_matrix: SafetyMatrix | None = None
    cached: StrictBool = False  # reused from a verdict cache, not checked in that run
    # Python warnings the rule's code raised while checked (checker.raised_warnings keeps 20 and one count)
    python_warnings: Annotated[list[PythonWarning], Field(max_length=21)] = []


class LoadError(_Model):
    path: Name
    traceback: Long


class Summary(_Model):
    rules: Count
    passed: Count
    failed: Count
    errored: Count
    load_errors: Count
    findings: Count
    errors: Count
    warnings: Count
    by_check: Annotated[dict[CheckId, Count], Field(max_length=200)]
    verdict: Literal["pass", "fail", "error"]


_Leaf = Scalar | Annotated[list[Scalar], Field(max_length=200)]
FreeMap = Annotated[dict[Name, _Leaf | Annotated[dict[Name, _Leaf], Field(max_length=64)]], Field(max_length=64)]


class Report(_Model):
    schema_: Literal["gradguard.report/1"] = Field(alias="schema", serialization_alias="schema")
    summary: Summary | None = None  # computed by verdicts(); a report's own summary is dropped unread
    settings: FreeMap = {}
    environment: FreeMap = {}
    duration_s: Duration = 0.0
    load_errors: Annotated[list[LoadError], Field(max_length=MAX_LOAD_ERRORS)] = []
    rules: Annotated[list[RuleResult], Field(max_length=MAX_RULES)] = []

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings", populate_by_name=True)

    @model_validator(mode="after")
    def _total_findings(self) -> "Report":
        total = sum(len(r.findings) for r in self.rules)
        if total > MAX_FINDINGS:
            raise ValueError(f"the report holds {total} findings; at most {MAX_FINDINGS} are accepted")
        return self


def _problems(exc: ValidationError, limit: int = 3) -> str:
    parts = []
    for error in exc.errors(include_url=False)[:limit]:
        where = ".".join(str(p) for p in error.get("loc", ())) or "report"
        parts.append(f"{where}: {error.get('msg')}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more problem(s))" if more > 0 else "")


def validate_report(data: Any) -> Report:
    """``data`` as a :class:`Report`, or :class:`InvalidReport` naming what is wrong (never anything else)."""
    if not isinstance(data, dict):
        raise InvalidReport(f"the report is a JSON {type(data).__name__}, not an object")
    if data.get("schema") != SCHEMA:
        raise InvalidReport(f"the report's schema is {str(data.get('schema'))[:80]!r}, not {SCHEMA!r}")
    data = {k: v for k, v in data.items() if k != "summary"}  # what a report says about itself is not read
    try:
        report = Report.model_validate(data)
    except ValidationError as exc:
        raise InvalidReport(_problems(exc)) from None
    except RecursionError:
        raise InvalidReport("the report nests deeper than the schema allows") from None
    size = len(report.model_dump_json(by_alias=True))
    if size > MAX_REPORT_BYTES:
        raise InvalidReport(f"the report is {size} bytes of JSON; at most {MAX_REPORT_BYTES} are accepted")
    return report


def parse_report(raw: bytes | str) -> dict[str, Any]:
    """The report the sandbox wrote (JSON text), checked and with the service's verdicts, as JSON data;
    raises :class:`InvalidReport` (also for text that is not JSON, or nested deeper than Python reads)."""
    if not raw:
        raise InvalidReport("the checker wrote no report")
    if len(raw) > MAX_REPORT_BYTES:
        raise InvalidReport(f"the report is {len(raw)} bytes; at most {MAX_REPORT_BYTES} are accepted")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise InvalidReport("the report nests deeper than the schema allows") from None
    except ValueError as exc:
        raise InvalidReport(f"the report is not JSON ({exc})") from None
    return as_json(verdicts(validate_report(data)))


def verdicts(report: Report) -> Report:
    """``report`` with each rule's verdict and the summary computed from the findings and errors.

    A rule is ``error`` when it carries an error (or said it errored: a report may only make itself
    worse), else ``fail`` when it has a finding of severity ``error``, else ``pass``.
    """
    rules = []
    for rule in report.rules:
        if rule.error is not None or rule.verdict == "error":
            verdict = "error"
        elif any(f.severity == "error" for f in rule.findings):
            verdict = "fail"
        else:
            verdict = "pass"
        rules.append(rule.model_copy(update={"verdict": verdict}))
    findings = [f for r in rules for f in r.findings]
    by_check: dict[str, int] = {}
    for f in findings:
        by_check[f.check_id] = by_check.get(f.check_id, 0) + 1
    counts = {v: sum(r.verdict == v for r in rules) for v in ("pass", "fail", "error")}
    if report.load_errors or counts["error"] or not rules:
        verdict = "error"
    else:
        verdict = "fail" if counts["fail"] else "pass"
    summary = Summary(rules=len(rules), passed=counts["pass"], failed=counts["fail"], errored=counts["error"],
                      load_errors=len(report.load_errors), findings=len(findings),
                      errors=sum(f.severity == "error" for f in findings),
                      warnings=sum(f.severity == "warning" for f in findings),
                      by_check=dict(sorted(by_check.items())), verdict=verdict)
    return report.model_copy(update={"rules": rules, "summary": summary})


def run_status(report: Report) -> tuple[str, str | None]:
    """``(status, error)`` of a run from its checked report (:func:`verdicts` first)."""
    summary = report.summary
    assert summary is not None, "call verdicts() first"
    if summary.verdict == "pass":
        return "passed", None
    if summary.verdict == "fail":
        return "failed", None
    if not report.rules and not report.load_errors:
        return "error", ("no rules found in the bundle: declare rules with @rrule(...) or jax_rule(...) in the "
                         "submitted modules")
    modules = [str(e.path) for e in report.load_errors]
    errored = [str(r.name) for r in report.rules if r.verdict == "error"]
    parts = []
    for what, names in (("module{} failed to import", modules), ("rule{} could not be checked", errored)):
        if names:
            shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
            parts.append(f"{len(names)} {what.format('' if len(names) == 1 else 's')}: {shown}")
    return "error", "; ".join(parts) + " (the tracebacks are in the report)"


def as_json(report: Report) -> dict[str, Any]:
    """The JSON document to store and serve (NaN and infinities as strings)."""
    return json.loads(report.model_dump_json(by_alias=True))


def as_python(report: dict[str, Any]) -> dict[str, Any]:
    """A checked JSON report with NaN and infinities as floats again (what the checker's renderers read)."""
    return validate_report(report).model_dump(by_alias=True)


def stored_report(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """``(report, problem)``: a stored report checked again (it may predate this schema, or have been
    written by hand); exactly one of the two is None."""
    if raw is None:  # what the database's JSON reader gives for text it cannot read (service.db)
        return None, f"the stored report is not a valid {SCHEMA} document: it is empty, not JSON, or nested too deeply"
    try:
        return as_json(verdicts(validate_report(raw))), None
    except InvalidReport as exc:
        return None, f"the stored report is not a valid {SCHEMA} document: {exc}"


def stored_summary(raw: Any) -> dict[str, Any] | None:
    """A stored run summary if it has the schema's shape, else None."""
    if not isinstance(raw, dict):
        return None
    try:
        return Summary.model_validate(raw).model_dump()
    except (ValidationError, RecursionError):
        return None
