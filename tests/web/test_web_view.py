"""The run page's data shaping and the history chart, as pure functions: grid, sources, safety matrix."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from types import SimpleNamespace

from gradguard.web.chart import history_svg
from gradguard.web.queries import Point
from gradguard.web.templating import templates
from gradguard.web.view import excerpt, family_of, find_source, matrix_view, rule_views

MATRIX = {
    "contexts": ["output used", "dot then call"],
    "engines": ["tape", "jax"],
    "cells": [
        {"context": "output used", "engine": "tape", "status": "right", "rel_error": 1e-12, "message": None, "diagnosis": None},
        {"context": "output used", "engine": "jax", "status": "right", "rel_error": 0.0, "message": None, "diagnosis": None},
        {"context": "dot then call", "engine": "tape", "status": "wrong", "rel_error": 0.5,
         "message": "gradient of x off by 50%", "diagnosis": "dot's pullback read x after <addone_> mutated it"},
        {"context": "dot then call", "engine": "jax", "status": "raised", "rel_error": None,
         "message": "TypeError: <boom>", "diagnosis": None},
    ],
    "skipped": [{"context": "tied weights", "reason": "the rule takes one argument"}],
}

REPORT = {
    "schema": "gradguard.report/1",
    "summary": {"rules": 1, "passed": 0, "failed": 1, "errored": 0, "findings": 2, "load_errors": 0, "verdict": "fail"},
    "load_errors": [],
    "rules": [{
        "name": "addone_rrule", "module": "m", "source_file": "pkg/rules.py", "source_lines": [4, 6], "kind": "numpy",
        "verdict": "fail", "examples": 10, "duration_s": 0.1, "error": None,
        "checks_run": ["GG101", "GG201", "GG501"], "checks_skipped": [{"id": "GG301", "reason": "needs <GG201>"}],
        "safety_matrix": MATRIX,
        "findings": [
            {"check_id": "GG501", "severity": "error", "title": "wrong gradient in a context", "rule": "addone_rrule",
             "message": "wrong in <dot then call>", "source_file": "/sandbox/pkg/rules.py", "source_lines": [5],
             "reproducer": "print('<x>')", "counterexample": {"call": "addone_(a=array([0.]))", "draws": {}}},
            {"check_id": "GG201", "severity": "error", "title": "fd", "rule": "addone_rrule", "message": "m",
             "source_file": "elsewhere.py", "source_lines": [1]},
        ],
    }],
}

SOURCE = "import numpy as np\n\n\n@rrule(f)\ndef addone_rrule(a):\n    return a\n\n# end\n"


def test_family_of_follows_the_id_layout() -> None:
    assert [family_of(i) for i in ("GG103", "GG202", "GG303", "GG404", "GG501", "GG602", "XX1", "GG9")] == \
        ["contract", "numeric", "cotangent", "state", "context", "compose", "other", "other"]


def test_find_source_matches_report_paths_to_submitted_files() -> None:
    files = {"pkg/rules.py": b"", "other/rules.py": b"", "solo.py": b""}
    assert find_source(files, "pkg/rules.py") == "pkg/rules.py"
    assert find_source(files, "/tmp/gradguard-run-1/pkg/rules.py") == "pkg/rules.py"
    assert find_source(files, "./solo.py") == "solo.py"
    assert find_source(files, "rules.py") is None  # two candidates: do not guess
    assert find_source(files, None) is None


def test_excerpt_marks_the_lines_with_context() -> None:
    lines = excerpt(SOURCE, span=[4, 6], highlight=[5])
    assert [(line["no"], line["hl"]) for line in lines["lines"]] == \
        [(1, False), (2, False), (3, False), (4, False), (5, True), (6, False), (7, False), (8, False)]
    assert lines["highlight_text"] == "5"
    assert excerpt(SOURCE, span=None, highlight=[4, 5, 6, 8])["highlight_text"] == "4-6, 8"


def test_matrix_view_rows_cells_and_notes() -> None:
    view = matrix_view(MATRIX)
    assert view is not None and view["engines"] == ["tape", "jax"]
    assert [[c["text"] for c in row["cells"]] for row in view["rows"]] == [["right", "right"], ["wrong (5.0e-01)", "raised"]]
    assert [(n["status"], n["where"]) for n in view["notes"]] == [("wrong", "dot then call × tape"), ("raised", "dot then call × jax")]
    assert view["notes"][0]["text"] == "gradient of x off by 50%. dot's pullback read x after <addone_> mutated it."
    assert view["all_right"] is False and view["cells"] == 4
    assert matrix_view(None) is None and matrix_view({"cells": []}) is None


def test_rule_views_build_grid_sources_and_links() -> None:
    (rule,) = rule_views(REPORT, {"pkg/rules.py": SOURCE.encode()}, rule_url="/p/x/rules/{name}")
    grid = {fam: cell["status"] for fam, cell in zip(("contract", "numeric", "cotangent", "state", "context", "compose"), rule["grid"])}
    assert grid == {"contract": "pass", "numeric": "fail", "cotangent": "skipped", "state": "none",
                    "context": "fail", "compose": "none"}
    first, second = rule["findings"]
    assert first["source"]["path"] == "pkg/rules.py" and first["source"]["highlight"] == [5]
    assert "source" not in second  # not among the submitted files
    assert rule["grid"][4]["href"] == "#" + first["anchor"]
    assert rule["history_url"] == "/p/x/rules/addone_rrule"


def test_run_template_renders_matrix_and_escapes_everything() -> None:
    rules = rule_views(REPORT, {"pkg/rules.py": SOURCE.encode()}, rule_url="/p/x/rules/{name}")
    run = SimpleNamespace(id=7, status="failed", branch="<main>", commit_sha="abc", pull_request=None, device="cpu",
                          created_at=datetime(2026, 1, 1, tzinfo=timezone.utc), duration_s=1.0, sandbox_level="rlimits",
                          seed=0, attempts=1, error=None)
    project = SimpleNamespace(name="<p>", slug="p")
    html = templates.env.get_template("run.html").render(
        run=run, project=project, project_url="/p/p", final=True, report=REPORT, rules=rules,
        families=("contract", "numeric", "cotangent", "state", "context", "compose"))
    assert "Safety matrix" in html and "wrong (5.0e-01)" in html and "tied weights" in html
    assert "dot&#39;s pullback read x after &lt;addone_&gt; mutated it" in html
    assert "<boom>" not in html and "<main>" not in html and "<x>" not in html and "<p>" not in html.split("<main")[0]
    assert '<li class="hl"><span class="ln">5</span>' in html


def _point(i: int, passed: int, status: str) -> Point:
    return Point(run_id=i, commit=f"<c{i}>", when=None, status=status, rules=3, passed=passed)


def test_history_chart_is_accessible_escaped_svg() -> None:
    svg = str(history_svg([_point(1, 1, "failed"), _point(2, 3, "passed"), _point(3, 2, "error")], branch="<b>"))
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert root.get("role") == "img" and root.find(f"{ns}title").text == "Rules passing over the last 3 finished runs on <b>"
    links = root.findall(f"{ns}a")
    assert [a.get("href") for a in links] == ["/runs/1", "/runs/2", "/runs/3"]
    assert links[0].get("aria-label") == "run 1 at <c1>: 1/3 rules pass (failed)"
    assert " style=" not in svg
    assert "No finished runs on &lt;b&gt; yet." in str(history_svg([], branch="<b>"))


def _rule_sections(report: dict, status: str) -> list[str]:
    """The run page of ``report`` (a finished run with ``status``), cut into its rules' sections."""
    rules = rule_views(report, {}, rule_url="/p/x/rules/{name}")
    run = SimpleNamespace(id=7, status=status, branch="main", commit_sha="abc", pull_request=None, device="cpu",
                          created_at=datetime(2026, 1, 1, tzinfo=timezone.utc), duration_s=1.0, sandbox_level="rlimits",
                          seed=0, attempts=1, error=None)
    html = templates.env.get_template("run.html").render(
        run=run, project=SimpleNamespace(name="p", slug="p"), project_url="/p/p", final=True, report=report,
        rules=rules, families=("contract", "numeric", "cotangent", "state", "context", "compose"))
    return html.split('<section class="rule"')[1:]


def test_run_template_says_when_a_rule_was_checked_on_fewer_inputs() -> None:
    """A cut by the input budget is a notice (the verdict depends on the machine's speed); a cut for large inputs,
    by design, a quiet line; both count the inputs against those planned, and the message is escaped."""
    import copy

    report = copy.deepcopy(REPORT)
    budget, size, whole = copy.deepcopy(REPORT["rules"][0]), copy.deepcopy(REPORT["rules"][0]), copy.deepcopy(REPORT["rules"][0])
    budget.update(name="slow_rrule", examples=1,
                  examples_cut={"planned": 20, "reason": "input budget", "message": "checked on 1 of 20 inputs: <b>"})
    size.update(name="big_rrule", examples=10,
                examples_cut={"planned": 20, "reason": "input size", "message": "checked on 10 of 20 inputs: big"})
    report["rules"] = [budget, size, whole]
    sections = _rule_sections(report, "failed")
    assert len(sections) == 3
    assert "<li>1 of 20 inputs</li>" in sections[0]
    assert '<div class="notice warn"><p><strong>Fewer inputs:</strong> checked on 1 of 20 inputs: &lt;b&gt;</p></div>' \
        in sections[0]
    assert "<li>10 of 20 inputs</li>" in sections[1] and "Fewer inputs" not in sections[1]
    assert '<p class="crumbs">checked on 10 of 20 inputs: big</p>' in sections[1]
    assert "<li>10 inputs</li>" in sections[2] and "checked on" not in sections[2]


def test_run_template_says_which_checks_were_judged_at_some_inputs_only() -> None:
    import copy

    report = copy.deepcopy(REPORT)
    partial, whole = copy.deepcopy(REPORT["rules"][0]), copy.deepcopy(REPORT["rules"][0])
    partial.update(name="edge_rrule", examples=20, checks_partial=[
        {"id": "GG201", "judged": 12, "skipped": 8, "reason": "finite differences of the primal failed here <b>"}])
    report["rules"] = [partial, whole]
    sections = _rule_sections(report, "passed")
    assert ('<li><a href="/checks/GG201">GG201</a>: judged at 12 of 20 inputs; skipped at 8, the first because finite '
            'differences of the primal failed here &lt;b&gt;</li>') in sections[0]
    assert "judged at some inputs only" in sections[0] and "judged at some inputs only" not in sections[1]
