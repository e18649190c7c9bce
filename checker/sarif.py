"""A :class:`~gradguard.checker.report.Report` as a SARIF 2.1.0 log, for GitHub code scanning.

Each finding is a result at its rule's source lines (``source_file``, relative to the working directory,
so code scanning places it in the repository); the check catalogue is the tool's rule list. Modules that
failed to import and rules that errored are tool execution notifications, not results: they say the
check did not run, not that code is wrong.
"""

from __future__ import annotations

import json
from typing import Any

from gradguard.checker.report import Finding, Report, RuleResult

__all__ = ["render_sarif", "to_sarif", "SARIF_SCHEMA"]

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _level(finding: Finding) -> str:
    return "warning" if finding.severity == "warning" else "error"


def _location(path: str | None, lines: list[int] | None) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": (path or "").replace("\\", "/"), "uriBaseId": "%SRCROOT%"}}
    if lines:
        physical["region"] = {"startLine": max(1, int(lines[0])), "endLine": max(1, int(lines[-1]))}
    return {"physicalLocation": physical}


def _message(finding: Finding) -> str:
    parts = [finding.message]
    if finding.counterexample:
        parts.append(f"Failing input: {finding.counterexample.get('call')}")
    if finding.expected is not None:
        parts.append(f"Expected: {finding.expected}")
    if finding.actual is not None:
        parts.append(f"Actual: {finding.actual}")
    if finding.fix:
        parts.append(f"Fix: {finding.fix}")
    return "\n".join(parts)


def _result(rule: RuleResult, finding: Finding, index: dict[str, int]) -> dict[str, Any]:
    path = finding.source_file or rule.source_file or rule.module
    lines = finding.source_lines or rule.source_lines
    return {
        "ruleId": finding.check_id,
        "ruleIndex": index[finding.check_id],
        "level": _level(finding),
        "message": {"text": f"{rule.name}: {_message(finding)}"},
        "locations": [_location(path, lines)],
        "partialFingerprints": {"gradguardRule/v1": f"{rule.name}:{finding.check_id}:{finding.location or ''}"},
        "properties": {"rule": rule.name, "title": finding.title},
    }


def to_sarif(report: Report) -> dict[str, Any]:
    from gradguard.checker.checks import catalogue

    checks = catalogue()
    index = {c.id: i for i, c in enumerate(checks)}
    rules = [{
        "id": c.id,
        "name": c.title,
        "shortDescription": {"text": c.title},
        "fullDescription": {"text": " ".join(c.explanation.split())},
        "help": {"text": f"Run `gradguard explain {c.id}` for the explanation and a broken and a fixed example."},
        "defaultConfiguration": {"level": "warning" if c.severity == "warning" else "error"},
        "properties": {"family": c.family},
    } for c in checks]
    results = [_result(rule, f, index) for rule in report.rules for f in rule.findings if f.check_id in index]
    notes = [{
        "level": "error",
        "message": {"text": f"{failure.path} failed to import: {_last_line(failure.traceback)}"},
        "locations": [_location(failure.path, None)],
    } for failure in report.load_errors]
    notes += [{
        "level": "error",
        "message": {"text": f"{rule.name}: {rule.error['type']}: {rule.error['message']}"},
        "locations": [_location(rule.source_file or rule.module, rule.source_lines)],
    } for rule in report.rules if rule.verdict == "error" and rule.error]
    ran = not notes
    # A verdict on fewer inputs than planned because the input budget ran out is a note on a successful run: the
    # rule was checked, on the inputs the note counts.
    notes += [{
        "level": "note",
        "message": {"text": f"{rule.name}: {rule.examples_cut['message']}"},
        "locations": [_location(rule.source_file or rule.module, rule.source_lines)],
    } for rule in report.rules if rule.budget_cut]
    invocation = {"executionSuccessful": ran, "toolExecutionNotifications": notes}
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "gradguard",
                "version": str(report.environment.get("gradguard", "0.1.0")),
                "rules": rules,
            }},
            "invocations": [invocation],
            "originalUriBaseIds": {"%SRCROOT%": {"description": {"text": "the directory gradguard ran in"}}},
            "results": results,
        }],
    }


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "no traceback"


def render_sarif(report: Report) -> str:
    return json.dumps(to_sarif(report), indent=2) + "\n"
