"""Turn a ``gradguard.report/1`` dict and the submitted files into what the run page shows.

Pure functions of data (no request, no database), so they are tested and benchmarked alone:
the rules x check-family grid, each finding's source excerpt with the rule's lines highlighted,
and the safety matrix as rows of cells.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from gradguard.checker.checks.registry import FAMILIES
from gradguard.checker.report import partial_note

__all__ = ["family_of", "rule_views", "find_source", "excerpt", "matrix_view", "CONTEXT_LINES"]

CONTEXT_LINES = 3
MAX_EXCERPT_LINES = 80


def family_of(check_id: str) -> str:
    """``GG2xx`` -> ``numeric``: the family is the first digit of the id (``gradguard.checker.checks`` layout)."""
    digits = check_id[2:3] if check_id.startswith("GG") else ""
    index = int(digits) - 1 if digits.isdigit() else -1
    return FAMILIES[index] if 0 <= index < len(FAMILIES) else "other"


def find_source(files: Mapping[str, bytes], path: str | None) -> str | None:
    """The submitted file a report path names: exact, else the longest path-suffix match, else by name."""
    if not path or not files:
        return None
    norm = path.replace("\\", "/").lstrip("./")
    if norm in files:
        return norm
    inside = [name for name in files if norm.endswith("/" + name)]  # an absolute path of the bundle folder
    if inside:
        return max(inside, key=len)
    for candidates in ([n for n in files if n.endswith("/" + norm)],
                       [n for n in files if n.rsplit("/", 1)[-1] == norm.rsplit("/", 1)[-1]]):
        if len(candidates) == 1:
            return candidates[0]
    return None  # ambiguous or absent: do not guess


def _ranges(lines: list[int]) -> str:
    out: list[str] = []
    for n in sorted(set(lines)):
        if out and out[-1][1] == n - 1:
            out[-1] = (out[-1][0], n)  # type: ignore[assignment]
        else:
            out.append((n, n))  # type: ignore[arg-type]
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)  # type: ignore[misc]


def excerpt(text: str, *, span: list[int] | None, highlight: list[int] | None) -> dict[str, Any]:
    """Lines of ``text`` around ``span`` ([first, last] of the rule) with ``highlight`` lines marked."""
    lines = text.splitlines()
    marked = set(highlight or [])
    anchor = sorted(set(span or []) | marked)
    if anchor:
        first = max(1, anchor[0] - CONTEXT_LINES)
        last = min(len(lines), anchor[-1] + CONTEXT_LINES)
    else:
        first, last = 1, len(lines)
    last = min(last, first + MAX_EXCERPT_LINES - 1)
    return {
        "lines": [{"no": n, "text": lines[n - 1], "hl": n in marked} for n in range(first, last + 1)],
        "highlight": sorted(marked),
        "highlight_text": _ranges(list(marked)),
    }


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _grid(rule: dict[str, Any], finding_anchors: dict[str, str]) -> list[dict[str, Any]]:
    run = {family_of(c) for c in rule.get("checks_run") or []}
    skipped: dict[str, list[str]] = {}
    for s in rule.get("checks_skipped") or []:
        skipped.setdefault(family_of(s.get("id", "")), []).append(f"{s.get('id')}: {s.get('reason')}")
    failing: dict[str, list[dict[str, Any]]] = {}
    for f in rule.get("findings") or []:
        failing.setdefault(family_of(f.get("check_id", "")), []).append(f)
    cells = []
    for family in FAMILIES:
        found = failing.get(family)
        if found:
            ids = sorted({f.get("check_id", "") for f in found})
            errors = [f for f in found if f.get("severity") != "warning"]
            status, text = ("fail", f"{len(errors)} failing") if errors else (
                "warning", f"{len(found)} warning{'s' if len(found) != 1 else ''}")
            cells.append({"status": status, "text": text, "title": ", ".join(ids),
                          "href": "#" + finding_anchors[ids[0]] if ids[0] in finding_anchors else None})
        elif rule.get("verdict") == "error" and family not in run:
            cells.append({"status": "error", "text": "not run", "title": "the rule errored", "href": None})
        elif family in run:
            cells.append({"status": "pass", "text": "pass", "title": f"{family} checks passed", "href": None})
        elif family in skipped:
            cells.append({"status": "skipped", "text": "skipped", "title": "; ".join(skipped[family]), "href": None})
        else:
            cells.append({"status": "none", "text": "—", "title": "not selected or not applicable", "href": None})
    return cells


def matrix_view(matrix: dict[str, Any] | None) -> dict[str, Any] | None:
    """The safety matrix as header, rows of cells, and notes for wrong or raised cells."""
    if not matrix or not matrix.get("cells"):
        return None
    contexts = list(matrix.get("contexts") or [])
    engines = list(matrix.get("engines") or [])
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    for cell in matrix["cells"]:
        ctx, eng = cell.get("context"), cell.get("engine")
        if ctx not in contexts:
            contexts.append(ctx)
        if eng not in engines:
            engines.append(eng)
        by_key[(ctx, eng)] = cell
    rows = []
    notes: dict[tuple[str, str], dict[str, list[str]]] = {}  # (status, text) -> {context: [engines]}
    for ctx in contexts:
        cells = []
        for eng in engines:
            cell = by_key.get((ctx, eng))
            if cell is None:
                cells.append(None)
                continue
            status = cell.get("status", "skipped")
            err = cell.get("rel_error")
            text = status
            if status == "wrong" and isinstance(err, (int, float)):
                text = f"wrong ({err:.1e})"
            detail = _sentences(cell.get("message"), cell.get("diagnosis"))
            cells.append({"status": status, "text": text, "title": detail or text})
            if status in ("wrong", "raised") and detail:
                notes.setdefault((status, detail), {}).setdefault(ctx, []).append(eng)
        rows.append({"context": ctx, "cells": cells})
    grouped = [{"status": status, "text": text,
                "where": "; ".join(f"{ctx} × {', '.join(engs)}" for ctx, engs in places.items())}
               for (status, text), places in notes.items()]
    all_right = all(c is None or c["status"] in ("right", "skipped") for row in rows for c in row["cells"])
    return {"engines": engines, "rows": rows, "notes": grouped, "skipped": matrix.get("skipped") or [],
            "all_right": all_right, "cells": sum(c is not None for row in rows for c in row["cells"])}


def _sentences(*parts: Any) -> str:
    """Join message parts into one text, each ending as a sentence."""
    out = []
    for part in parts:
        text = str(part).strip() if part else ""
        if text:
            out.append(text if text[-1] in ".!?:;)" else text + ".")
    return " ".join(out)


def rule_views(report: dict[str, Any], files: Mapping[str, bytes], *, rule_url: str) -> list[dict[str, Any]]:
    """Everything the run page shows per rule, in report order. ``rule_url`` has a ``{name}`` field."""
    texts: dict[str, str] = {}
    views = []
    for i, rule in enumerate(report.get("rules") or []):
        anchor = f"rule-{i + 1}"
        findings, first_of = [], {}
        for j, f in enumerate(rule.get("findings") or []):
            fv = dict(f)
            fv["anchor"] = f"{anchor}-finding-{j + 1}"
            first_of.setdefault(f.get("check_id", ""), fv["anchor"])
            path = find_source(files, f.get("source_file") or rule.get("source_file"))
            if path is not None:
                if path not in texts:
                    texts[path] = _decode(files[path])
                fv["source"] = {"path": path, **excerpt(texts[path], span=rule.get("source_lines"),
                                                         highlight=f.get("source_lines") or rule.get("source_lines"))}
            findings.append(fv)
        where = rule.get("source_file") or rule.get("module") or ""
        if rule.get("source_file") and rule.get("source_lines"):
            where += f":{rule['source_lines'][0]}"
        views.append({
            "anchor": anchor,
            "name": rule.get("name", "?"),
            "verdict": rule.get("verdict", "error"),
            "kind": rule.get("kind", "numpy"),
            "examples": rule.get("examples", 0),
            "examples_cut": rule.get("examples_cut"),
            "duration_s": rule.get("duration_s", 0.0),
            "where": where,
            "error": rule.get("error"),
            "findings": findings,
            "grid": _grid(rule, first_of),
            "matrix": matrix_view(rule.get("safety_matrix")),
            "checks_skipped": rule.get("checks_skipped") or [],
            "python_warnings": rule.get("python_warnings") or [],
            "checks_partial": [dict(part, note=partial_note(part)) for part in rule.get("checks_partial") or []],
            "history_url": rule_url.format(name=quote(str(rule.get("name", "")), safe="")),
        })
    return views
