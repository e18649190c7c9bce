"""The report: one versioned JSON schema for everything gradguard says about a set of rules.

Schema ``gradguard.report/1`` (documented field by field in ``docs/report-schema.md``)::

    Report
    ├── environment, settings (seed, max_examples, select, ignore)
    ├── summary (rules, passed, failed, errored, findings, by_check)
    ├── load_errors[]                       modules that failed to import
    └── rules[]  RuleResult
        ├── verdict: pass | fail | error
        ├── examples, examples_cut {planned, reason, message}   inputs checked, and why fewer where they were
        ├── checks_run[], checks_skipped[{id, reason}]
        ├── checks_partial[{id, judged, skipped, reason}]   run checks that some drawn inputs left unjudged
        ├── findings[]  Finding (check_id, severity, message, counterexample, reproducer, ...)
        └── safety_matrix  (contexts x engines, see checker.contexts)

Renderers (text, JUnit XML, Markdown) live in :mod:`gradguard.checker.render`; this module
holds only the data and its JSON round trip.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SCHEMA", "Finding", "RuleResult", "Report", "LoadFailure", "LEFT_OUT", "partial_note"]

SCHEMA = "gradguard.report/1"
# How a skipped check's reason begins where the rule's own declaration (ignore=) left it out: the runner writes it,
# the terminal report reads it.
LEFT_OUT = "left out by the rule's declaration"


def partial_note(part: dict[str, Any]) -> str:
    """What a `RuleResult.checks_partial` entry says, in the one wording every report uses (terminal, JUnit, web):
    "judged at 8 of 20 inputs; skipped at 12, the first because ..."."""
    judged, skipped = part["judged"], part["skipped"]
    return f"judged at {judged} of {judged + skipped} inputs; skipped at {skipped}, the first because {part['reason']}"


@dataclass
class Finding:
    check_id: str
    severity: str  # "error" | "warning"
    title: str
    rule: str
    message: str
    location: str | None = None  # "argument 1 at [2, 0]"
    expected: str | None = None
    actual: str | None = None
    fix: str | None = None
    counterexample: dict[str, Any] | None = None  # {"call": "f(a=array([0.]))", "args": [...], "cotangent": ...}
    reproducer: str | None = None
    source_file: str | None = None
    source_lines: list[int] | None = None  # lines of the rule to highlight / annotate

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


@dataclass
class RuleResult:
    name: str
    module: str | None = None
    source_file: str | None = None
    source_lines: list[int] | None = None  # [first, last]
    kind: str = "numpy"
    verdict: str = "pass"  # "pass" | "fail" | "error"
    findings: list[Finding] = field(default_factory=list)
    checks_run: list[str] = field(default_factory=list)
    checks_skipped: list[dict[str, str]] = field(default_factory=list)
    # Checks that ran (in checks_run) but were skipped on some drawn inputs: {"id", "judged" (inputs judged),
    # "skipped" (inputs not judged), "reason" (the first input's reason)}; a pass then rests on the judged ones.
    checks_partial: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0
    examples: int = 0  # inputs drawn and checked
    # Where fewer inputs were drawn than --max-examples asks: {"planned", "reason" ("input budget" or "input size"),
    # "message"} (gradguard.checker.per_rule._examples_cut); None where every input asked for was drawn.
    examples_cut: dict[str, Any] | None = None
    error: dict[str, Any] | None = None  # {"type", "message", "traceback"} when verdict == "error"
    safety_matrix: dict[str, Any] | None = None
    cached: bool = False  # reused from the verdict cache (checker.cache), not checked in this run
    # Python warnings the code the checks called raised, each distinct one once ({"category", "message", "where"};
    # gradguard.checker.raised_warnings): kept here instead of printed, and not findings
    python_warnings: list[dict[str, str]] = field(default_factory=list)

    @property
    def budget_cut(self) -> bool:
        """A verdict (pass or fail) on fewer inputs than planned because the rule's checks spent the input budget: it
        depends on the machine's speed, which every report shows (a cut for large inputs is by design, shown with -v;
        a rule that errored has no verdict to qualify)."""
        return (self.verdict != "error" and bool(self.examples_cut)
                and self.examples_cut.get("reason") == "input budget")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RuleResult":
        kwargs = {k: data.get(k) for k in cls.__dataclass_fields__ if k in data}
        kwargs["findings"] = [Finding.from_dict(f) for f in data.get("findings", [])]
        return cls(**kwargs)


@dataclass
class LoadFailure:
    path: str
    traceback: str


@dataclass
class Report:
    rules: list[RuleResult] = field(default_factory=list)
    load_errors: list[LoadFailure] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.rules for f in r.findings]

    @property
    def passed(self) -> bool:
        """Every rule passed and every module imported; a report with no rules has checked nothing and
        does not pass."""
        return bool(self.rules) and not self.load_errors and all(r.verdict == "pass" for r in self.rules)

    @property
    def no_rules(self) -> bool:
        """Nothing was found to check: no rule and no module that failed to import."""
        return not self.rules and not self.load_errors

    def summary(self) -> dict[str, Any]:
        by_check: dict[str, int] = {}
        for f in self.findings:
            by_check[f.check_id] = by_check.get(f.check_id, 0) + 1
        verdicts = [r.verdict for r in self.rules]
        return {
            "rules": len(self.rules),
            "passed": verdicts.count("pass"),
            "failed": verdicts.count("fail"),
            "errored": verdicts.count("error"),
            "load_errors": len(self.load_errors),
            "findings": len(self.findings),
            "errors": sum(1 for f in self.findings if f.severity == "error"),
            "warnings": sum(1 for f in self.findings if f.severity == "warning"),
            "by_check": dict(sorted(by_check.items())),
            "verdict": "pass" if self.passed else (
                "error" if self.no_rules or self.load_errors or "error" in verdicts else "fail"),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "summary": self.summary(),
            "settings": self.settings,
            "environment": self.environment,
            "duration_s": round(self.duration_s, 4),
            "load_errors": [asdict(e) for e in self.load_errors],
            "rules": [asdict(r) for r in self.rules],
        }

    def to_json(self, **kwargs: Any) -> str:
        kwargs.setdefault("indent", 2)
        return json.dumps(self.to_dict(), default=str, **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Report":
        if data.get("schema") != SCHEMA:
            raise ValueError(f"Got schema={data.get('schema')!r}, but this gradguard reads {SCHEMA!r} reports.")
        return cls(
            rules=[RuleResult.from_dict(r) for r in data.get("rules", [])],
            load_errors=[LoadFailure(**e) for e in data.get("load_errors", [])],
            settings=data.get("settings", {}),
            environment=data.get("environment", {}),
            duration_s=data.get("duration_s", 0.0),
        )

    @classmethod
    def from_json(cls, text: str) -> "Report":
        return cls.from_dict(json.loads(text))
