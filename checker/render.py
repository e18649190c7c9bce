"""Renderers of a :class:`~checker.report.Report`: JUnit XML and Markdown (terminal text: :mod:`.terminal`).

All three read only the report's data, so a report loaded back from JSON (the
service stores them) renders exactly like a fresh one.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from typing import Any

from gradguard.checker.report import Finding, Report, RuleResult, partial_note
from gradguard.checker.terminal import matrix_table, render_text, where as _where

__all__ = ["render_text", "render_junit", "render_markdown", "matrix_table"]



# -- JUnit XML ----------------------------------------------------------------------------------

def render_junit(report: Report) -> str:
    """One testcase per (rule, check); findings are failures, skipped checks are skipped, errors are errors."""
    suites = ET.Element("testsuites", name="gradguard")
    by_module: dict[str, list[RuleResult]] = {}
    for rule in report.rules:
        by_module.setdefault(rule.source_file or rule.module or "rules", []).append(rule)
    for module, rules in by_module.items():
        suite = ET.SubElement(suites, "testsuite", name=module)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for rule in rules:
            if rule.verdict == "error" and rule.error:
                case = ET.SubElement(suite, "testcase", classname=rule.name, name="checks", time=f"{rule.duration_s:.3f}")
                err = ET.SubElement(case, "error", type=rule.error["type"], message=rule.error["message"])
                err.text = rule.error.get("traceback") or rule.error["message"]
                counts["tests"] += 1
                counts["errors"] += 1
            per_check: dict[str, list[Finding]] = {}
            for f in rule.findings:
                per_check.setdefault(f.check_id, []).append(f)
            partial = {p["id"]: p for p in rule.checks_partial}
            for check_id in rule.checks_run:
                case = ET.SubElement(suite, "testcase", classname=rule.name, name=check_id)
                counts["tests"] += 1
                findings = per_check.get(check_id, [])
                errors = [f for f in findings if f.severity != "warning"]
                notes = [partial_note(p) for p in [partial.get(check_id)] if p]
                if errors:
                    counts["failures"] += 1
                    fail = ET.SubElement(case, "failure", type=check_id, message=errors[0].message)
                    fail.text = "\n\n".join(_plain(f) for f in findings)
                elif findings or notes:  # a warning passes: its text goes to the test's output, never a <failure>
                    out = ET.SubElement(case, "system-out")
                    out.text = "\n\n".join(notes + ["warning: " + _plain(f) for f in findings])
            for skipped in rule.checks_skipped:
                case = ET.SubElement(suite, "testcase", classname=rule.name, name=skipped["id"])
                ET.SubElement(case, "skipped", message=skipped["reason"])
                counts["tests"] += 1
                counts["skipped"] += 1
        for k, v in counts.items():
            suite.set(k, str(v))
    for failure in report.load_errors:
        suite = ET.SubElement(suites, "testsuite", name=failure.path, tests="1", errors="1", failures="0", skipped="0")
        case = ET.SubElement(suite, "testcase", classname=failure.path, name="import")
        err = ET.SubElement(case, "error", type="ImportError", message=f"{failure.path} failed to import")
        err.text = failure.traceback
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _plain(f: Finding) -> str:
    parts = [f"{f.check_id} {f.title}", f.message]
    if f.counterexample:
        parts.append(f"Failing input: {f.counterexample['call']}")
    if f.expected is not None:
        parts.append(f"Expected: {f.expected}")
    if f.actual is not None:
        parts.append(f"Actual: {f.actual}")
    if f.fix:
        parts.append(f"Fix: {f.fix}")
    return "\n".join(parts)


# -- Markdown (GitHub job summaries, the service's summary.md) ------------------------------------
#
# CommonMark reads nothing inside a code span: an entity such as ``&lt;`` or a backslash escape shows
# literally there. So text in code spans is left as it is (a longer backtick fence when it holds
# backticks), and text outside them is escaped with backslashes, which GitHub and every CommonMark
# renderer read. In a table cell ``|`` is escaped even inside a code span: GFM splits cells first.

_MD_PUNCT = re.compile(r"([\\`*_\[\]<>&|#!~])")
_MD_BLOCK_START = re.compile(r"^(\s*\d*)([-+=.)])")
_MD_LITERAL = re.compile(r"``(.+?)``|`([^`]+)`")


def _md_code(text: Any, *, table: bool = False) -> str:
    """``text`` as one inline code span, shown exactly as it is."""
    body = " ".join(str(text).splitlines())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", body)), default=0) + 1)
    if body.startswith("`") or body.endswith("`") or (body.startswith(" ") and body.endswith(" ") and body.strip()):
        body = f" {body} "
    if table:
        body = body.replace("|", "\\|")
    return f"{fence}{body}{fence}"


def _md_plain(text: Any, *, starts_line: bool = True) -> str:
    """Plain text with every character Markdown or HTML could read as markup escaped."""
    out = _MD_PUNCT.sub(r"\\\1", " ".join(str(text).splitlines()))
    if starts_line:  # "1. x" or "- x" at the start of a line would begin a list
        out = _MD_BLOCK_START.sub(r"\1\\\2", out)
    return out


def _md(text: Any, *, table: bool = False) -> str:
    """A message for Markdown: its ``literal`` and `literal` spans become code spans, the rest is escaped."""
    out, last = [], 0
    text = str(text)
    for m in _MD_LITERAL.finditer(text):
        out += [_md_plain(text[last:m.start()], starts_line=not out), _md_code(m.group(1) or m.group(2), table=table)]
        last = m.end()
    out.append(_md_plain(text[last:], starts_line=not out))
    return "".join(out)


def _md_fence(text: str, info: str = "") -> list[str]:
    """A fenced code block that no line of ``text`` can close early."""
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, text.rstrip(), fence]


def _check_ref(check_id: str, server_url: str | None) -> str:
    """A link to the server's own page for a check, or the command that explains it offline."""
    if server_url:
        return f"[{check_id}]({server_url.rstrip('/')}/checks/{check_id})"
    return _md_code(f"gradguard explain {check_id}", table=True)


def render_markdown(report: Report, *, run_url: str | None = None, server_url: str | None = None) -> str:
    """The report as GitHub-flavoured Markdown.

    ``server_url`` is the address of a gradguard server whose ``/checks/<id>`` pages the check ids link
    to; without one, each check id names ``gradguard explain <id>`` instead.
    """
    s = report.summary()
    icon = {"pass": "✅", "fail": "❌", "error": "⚠️"}
    if s["load_errors"]:
        n = s["load_errors"]
        headline = f"{n} module{'s' if n != 1 else ''} failed to import"
        if s["rules"]:
            headline += f"; {s['passed']}/{s['rules']} rules checked pass"
    else:
        headline = f"{s['passed']}/{s['rules']} rules pass"
    lines = [
        f"## {icon.get(s['verdict'], '')} gradguard: {headline}",
        "",
        f"{s['failed']} failed, {s['errored']} errored, {s['findings']} finding(s) · seed {report.settings.get('seed', 0)}"
        + (f" · [full report]({run_url})" if run_url else ""),
        "",
        "| verdict | rule | where | findings |",
        "|---|---|---|---|",
    ]
    for rule in report.rules:
        ids = ", ".join(_check_ref(i, server_url) for i in sorted({f.check_id for f in rule.findings}))
        detail = ids or (_md(rule.error["message"], table=True) if rule.error else "")
        lines.append(f"| {icon.get(rule.verdict, '')} {rule.verdict} | {_md_code(rule.name, table=True)} "
                     f"| {_md_code(_where(rule), table=True) if _where(rule) else ''} | {detail} |")
    for failure in report.load_errors:
        lines.append(f"| ⚠️ error | {_md_code(failure.path, table=True)} | | failed to import |")
    cut = [r for r in report.rules if r.budget_cut]
    if cut:
        lines.append("")
        lines += [f"- ℹ️ {_md_code(r.name)}: {_md(r.examples_cut['message'])}" for r in cut]
    for rule in report.rules:
        if not rule.findings and not rule.safety_matrix:
            continue
        lines += ["", f"### {_md_code(rule.name)}"]
        for f in rule.findings:
            # the summary line is raw HTML (GitHub's collapsible block), so it is escaped as HTML
            lines += [
                "",
                f"<details><summary><b>{html.escape(f.check_id)}</b> {html.escape(f.title)}</summary>",
                "",
                _md(f.message),
                "",
            ]
            if f.counterexample:
                lines += [f"Failing input: {_md_code(f.counterexample['call'])}", ""]
            if f.expected is not None and f.actual is not None:
                lines += [f"Expected {_md_code(f.expected)}, got {_md_code(f.actual)}", ""]
            elif f.actual is not None:
                lines += [f"Got {_md_code(f.actual)}", ""]
            if f.fix:
                lines += [f"**Fix:** {_md(f.fix)}", ""]
            lines += [f"About {f.check_id}: {_check_ref(f.check_id, server_url)}", ""]
            if f.reproducer:
                lines += [*_md_fence(f.reproducer, "python"), ""]
            lines.append("</details>")
        if rule.safety_matrix:
            header, rows = matrix_table(rule.safety_matrix)
            lines += ["", "Safety matrix:", "", "| " + " | ".join(_md_plain(h) for h in header) + " |",
                      "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(_md_plain(c) for c in row) + " |" for row in rows]
    for failure in report.load_errors:
        lines += ["", f"### {_md_code(failure.path)} failed to import", "", *_md_fence(failure.traceback)]
    return "\n".join(lines) + "\n"
