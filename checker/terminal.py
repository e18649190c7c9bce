"""The terminal report, in the manner of pytest and ruff.

Default: one line per rule (verdict, name, where, time), then one line per
warning, then the details of every failure (the shrunk input, expected and
actual, the fix), then one summary line. ``verbose`` adds the safety matrix,
skipped checks and skipped contexts of every rule, and warnings in full;
``quiet`` prints only the summary line. Colour only when asked (the CLI asks
on a terminal, unless ``NO_COLOR`` is set).
"""

from __future__ import annotations

import os
from typing import Any, Callable, TextIO

from gradguard.checker.report import LEFT_OUT, Finding, Report, RuleResult, partial_note

__all__ = ["render_text", "use_color", "summary_line", "matrix_table"]

_COLORS = {"pass": "green", "fail": "red", "error": "magenta", "warning": "yellow"}


def use_color(stream: TextIO, env: dict[str, str] | None = None) -> bool:
    """Colour on a terminal only, and never when ``NO_COLOR`` is set (https://no-color.org)."""
    env = os.environ if env is None else env
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _styler(color: bool) -> Callable[..., str]:
    if color:
        import click

        return click.style

    def plain(text: str, **_: Any) -> str:
        return text

    return plain


def where(rule: RuleResult) -> str:
    if not rule.source_file:
        return rule.module or ""
    if rule.source_lines:
        return f"{rule.source_file}:{rule.source_lines[0]}"
    return rule.source_file


def _errors(rule: RuleResult) -> list[Finding]:
    return [f for f in rule.findings if f.severity != "warning"]


def _warnings(rule: RuleResult) -> list[Finding]:
    return [f for f in rule.findings if f.severity == "warning"]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def summary_line(report: Report, style: Callable[..., str] | None = None) -> str:
    """``2 failed, 3 passed, 1 module failed to import · 4 findings, 2 warnings · 9.6 s``."""
    style = style or _styler(False)
    s = report.summary()
    parts = []
    if s["failed"]:
        parts.append(style(f"{s['failed']} failed", fg="red", bold=True))
    if s["passed"]:
        parts.append(style(f"{s['passed']} passed", fg="green", bold=True))
    if s["errored"]:
        parts.append(style(f"{s['errored']} errored", fg="magenta", bold=True))
    if s["load_errors"]:
        n = s["load_errors"]
        parts.append(style(f"{n} module{'s' if n != 1 else ''} failed to import", fg="magenta", bold=True))
    if not parts:
        parts.append(style("no rules found", fg="magenta", bold=True))
    line = ", ".join(parts)
    if s["errors"] or s["warnings"]:
        counts = [_plural(s["errors"], "finding")] if s["errors"] else []
        if s["warnings"]:
            counts.append(style(_plural(s["warnings"], "warning"), fg="yellow"))
        line += " · " + ", ".join(counts)
    return line + f" · {report.duration_s:.2f} s"


def render_text(report: Report, *, color: bool = False, verbose: bool = False, quiet: bool = False) -> str:
    style = _styler(color)
    if quiet:
        lines = []
        if report.no_rules:
            lines.append(_no_rules(style))
        return "\n".join([*lines, summary_line(report, style)]) + "\n"
    settings = report.settings
    n = len(report.rules)
    lines = [
        f"gradguard {report.environment.get('gradguard', '')} · {_plural(n, 'rule')} · "
        f"seed {settings.get('seed', 0)} · {settings.get('max_examples', '?')} examples per check",
        "",
    ]
    width = max((len(r.name) for r in report.rules), default=10)
    place = max((len(where(r)) for r in report.rules), default=10)
    for rule in report.rules:
        verdict = style(f"{rule.verdict.upper():5}", fg=_COLORS.get(rule.verdict), bold=True)
        ids = sorted({f.check_id for f in _errors(rule)})
        detail = ", ".join(ids) if rule.verdict == "fail" else ""
        if rule.verdict == "error" and rule.error:
            detail = f"{rule.error['type']}: {_first_line(rule.error['message'])}"
        line = f"{verdict} {rule.name:<{width}}  {where(rule):<{place}}  {rule.duration_s:6.2f} s"
        lines.append((line + "  " + detail).rstrip())
    for failure in report.load_errors:
        lines.append(f"{style('ERROR', fg='magenta', bold=True)} {failure.path}: the module failed to import")

    warned = [(r, f) for r in report.rules for f in _warnings(r)]
    if warned and not verbose:
        lines += ["", style("warnings", fg="yellow", bold=True) + " (they do not fail a rule)"]
        for rule, f in warned:
            lines.append(f"{style('warning', fg='yellow')} {f.check_id} {rule.name}: {f.title}"
                         f" (gradguard explain {f.check_id})")

    # A verdict on fewer inputs than asked, because the rule's checks spent the input budget, is shown by default:
    # it depends on the machine's speed. Fewer inputs for large inputs (deterministic, by design) only with -v.
    cut = [r for r in report.rules if r.budget_cut]
    if cut and not verbose:
        lines += ["", style("fewer inputs", fg="yellow", bold=True) + " (each verdict rests on the inputs checked)"]
        for rule in cut:
            lines.append(f"{style('note', fg='yellow')} {rule.name}: {rule.examples_cut['message']}")

    raised = [r for r in report.rules if r.python_warnings]
    if raised and not verbose:  # listed with -v; printed as the rule raised them, they buried the report
        lines += ["", f"{style('note', fg='yellow')}: {_plural(len(raised), 'rule')} raised Python warnings while "
                      "checked (not findings; -v lists them)"]

    for rule in report.rules:
        shown = rule.findings if verbose else _errors(rule)
        failed = bool(shown) or (rule.verdict == "error" and rule.error)
        if not failed and not verbose:
            continue
        lines += ["", style(f"── {rule.name}", bold=True) + (f"  ({where(rule)})" if where(rule) else "")]
        if rule.verdict == "error" and rule.error:
            lines.append(f"  {style(rule.error['type'], fg='magenta', bold=True)}: {rule.error['message']}")
            if verbose and rule.error.get("traceback"):
                lines += ["    " + ln for ln in rule.error["traceback"].rstrip().splitlines()]
        for group in _group(shown):
            lines += _finding_lines(group, style)
        context_failure = any(f.check_id.startswith("GG5") for f in _errors(rule))
        if rule.safety_matrix and (verbose or context_failure):
            lines += _matrix_lines(rule.safety_matrix, verbose=verbose)
            left_out = [s["id"] for s in rule.checks_skipped
                        if s["id"] in ("GG501", "GG502") and s["reason"].startswith(LEFT_OUT)]
            if left_out:  # the cells are shown, but no check judges them
                lines.append(f"  (the matrix's cells are not judged: {' and '.join(left_out)} {LEFT_OUT})")
        if verbose:
            if rule.examples_cut:
                lines.append(f"  {style('inputs', fg='yellow')}: {rule.examples_cut['message']}")
            lines.append(f"  checks run: {', '.join(rule.checks_run) or 'none'}")
            for part in rule.checks_partial:
                lines.append(f"  {part['id']} {partial_note(part)}")
            for skipped in rule.checks_skipped:
                lines.append(f"  skipped {skipped['id']}: {skipped['reason']}")
            if rule.python_warnings:
                lines.append("  Python warnings raised while checked (each once; not findings):")
                lines += [f"    {w['category']} at {w['where']}: {w['message']}" if w["category"]
                          else f"    {w['message']}" for w in rule.python_warnings]
            if not rule.findings and rule.verdict == "pass":
                # a rule no check could judge has passed nothing: say so, not "all checks passed"
                lines.append(f"  {style('all checks passed', fg='green')}" if rule.checks_run
                             else f"  {style('no check ran: see the reasons above', fg='yellow')}")

    for failure in report.load_errors:
        lines += ["", style(f"── {failure.path} failed to import", bold=True)]
        lines += ["  " + ln for ln in failure.traceback.rstrip().splitlines()]

    lines.append("")
    if report.no_rules:
        lines.append(_no_rules(style))
    lines.append(summary_line(report, style))
    return "\n".join(lines) + "\n"


def _no_rules(style: Callable[..., str]) -> str:
    return style("no rules found: nothing was checked. Declare rules with @rrule(...) or jax_rule(...) in "
                 "the modules you pass, or name rule files *_rules.py, rules_*.py or put them in a rules/ folder.",
                 fg="magenta", bold=True)


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def _group(findings: list[Finding]) -> list[list[Finding]]:
    """Findings of the same check on the same rule are shown together."""
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.check_id, []).append(f)
    return list(groups.values())


def _finding_lines(group: list[Finding], style: Callable[..., str]) -> list[str]:
    first = group[0]
    sev = style(first.severity, fg="red" if first.severity != "warning" else "yellow")
    out = [f"  {style(first.check_id, bold=True)} {sev}  {first.title}"]
    if len(group) > 1:
        out.append(f"    found {len(group)} distinct failures")
    for f in group:
        out.append(f"    {f.message}")
        if f.counterexample:
            out.append(f"    Failing input: {f.counterexample['call']}")
            for label, value in f.counterexample.get("draws", {}).items():
                out.append(f"      {label}: {value}")
        if f.expected is not None:
            out.append(f"    Expected: {f.expected}")
        if f.actual is not None:
            out.append(f"    Actual:   {f.actual}")
        if f.fix:
            out.append(f"    Fix: {f.fix}")
    out.append(f"    About {first.check_id}: gradguard explain {first.check_id}")
    return out


_STATUS_MARK = {"right": "right", "wrong": "WRONG", "raised": "raised", "skipped": "-"}


def matrix_table(matrix: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The safety matrix as a header and rows of short cell texts (contexts down, engines across)."""
    engines = list(matrix.get("engines", []))
    cells = {(c["context"], c["engine"]): c for c in matrix.get("cells", [])}
    rows = []
    for context in matrix.get("contexts", []):
        row = [context]
        for engine in engines:
            cell = cells.get((context, engine))
            if cell is None:
                row.append("-")
                continue
            text = _STATUS_MARK.get(cell["status"], cell["status"])
            if cell["status"] == "wrong" and cell.get("rel_error") is not None:
                text += f" ({cell['rel_error']:.1e})"
            row.append(text)
        rows.append(row)
    return ["context", *engines], rows


def _matrix_lines(matrix: dict[str, Any], *, verbose: bool) -> list[str]:
    header, rows = matrix_table(matrix)
    out = ["", "  Safety matrix (contexts x engines):", *_table(header, rows, indent=4)]
    # A "raised" cell is an engine that could not run the program at all: why, one line per reason, always (it
    # was in the JSON only, and a column of "raised" read as a crash of the checker).
    raised: dict[str, dict[str, list[str]]] = {}
    for cell in matrix.get("cells", []):
        if cell.get("status") == "raised":
            reason = _first_line(cell.get("message")) or "no reason given"
            raised.setdefault(reason, {}).setdefault(cell["engine"], []).append(cell["context"])
    for reason, engines in raised.items():
        where = "; ".join(f"{engine} in {', '.join(contexts)}" for engine, contexts in engines.items())
        out.append(f"    raised ({where}): {reason}")
    if verbose:
        # A "-" cell says only that there is no verdict: the reason is in the cell (the JSON's message), one line
        # per reason here, with the cells it applies to.
        reasons: dict[str, list[str]] = {}
        for cell in matrix.get("cells", []):
            if cell.get("status") == "skipped":
                reason = _first_line(cell.get("message")) or "no reason given"
                reasons.setdefault(reason, []).append(f"{cell['context']}/{cell['engine']}")
        for reason, where in reasons.items():
            out.append(f"    - {', '.join(where)}: {reason}")
        for skipped in matrix.get("skipped", []):
            out.append(f"    skipped {skipped['context']}: {skipped['reason']}")
    return out


def _first_line(text: Any, limit: int = 300) -> str:
    line = str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _table(header: list[str], rows: list[list[str]], *, indent: int = 0) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    pad = " " * indent

    def line(cells: list[str]) -> str:
        return pad + "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(header), pad + "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
