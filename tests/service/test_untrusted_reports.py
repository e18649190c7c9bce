"""The sandbox's report is untrusted input (docs/security.md).

On the way in (:func:`service.lifecycle.finish_run`): validated against the schema, caps enforced,
the run's status computed from the findings, never from the report's own summary. On the way out:
whatever a row holds — forged straight into the database, wrong types, huge, deeply nested, hostile
strings — no page, badge or API answer is a 500. SQLite and the real PostgreSQL.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from sqlalchemy import text, update

from gradguard.service import lifecycle
from gradguard.service.models import BranchHead, FindingRow, ReportRow, RuleResultRow, Run
from gradguard.service.reports import (MAX_FINDINGS, MAX_FINDINGS_PER_RULE, MAX_REPORT_BYTES, MAX_RULES, InvalidReport, parse_report,
                                       validate_report, verdicts)

WORKER = "test-host:1"


def _finding(check_id: str = "GG201", severity: str = "error", **extra: Any) -> dict[str, Any]:
    return {"check_id": check_id, "severity": severity, "title": "pullback disagrees with finite differences",
            "rule": "double_rrule", "message": "the pullback of double_rrule disagrees with finite differences",
            "location": "argument 0 at [0]", "expected": "2.0", "actual": "1.0", "fix": "Re-derive it.",
            "counterexample": {"call": "double(x=array([0.]))", "args": ["array([0.])"], "draws": {"cotangent": "2"}},
            "reproducer": "raise AssertionError('x')", "source_file": "rules.py", "source_lines": [3, 4], **extra}


def _rule(name: str = "double_rrule", findings: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "module": "rules", "source_file": "rules.py", "source_lines": [3, 5], "kind": "numpy",
            "verdict": "fail" if findings else "pass", "findings": findings or [], "checks_run": ["GG101", "GG201"],
            "checks_skipped": [{"id": "GG204", "reason": "does not apply to numpy rules"}], "duration_s": 0.5,
            "examples": 5, "error": None,
            "safety_matrix": {"contexts": ["output-used"], "engines": ["tape[zero]"], "skipped": [],
                              "descriptions": {"output-used": "the output is used"},
                              "cells": [{"context": "output-used", "engine": "tape[zero]", "status": "wrong",
                                         "rel_error": float("nan"), "message": "m", "diagnosis": None}]},
            **extra}


def _report(rules: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"schema": "gradguard.report/1",
            "summary": {"rules": len(rules), "passed": len(rules), "failed": 0, "errored": 0, "load_errors": 0,
                        "findings": 0, "errors": 0, "warnings": 0, "by_check": {}, "verdict": "pass"},
            "settings": {"seed": 0, "max_examples": 5, "checks": ["GG101"], "select": None, "ignore": None},
            "environment": {"gradguard": "0.1.0", "python": "3.11"}, "duration_s": 1.0, "load_errors": [],
            "rules": rules, **extra}


# -- on the way in -----------------------------------------------------------------------------------

def test_the_schema_has_every_field_of_the_checkers_report_and_reads_a_real_one():
    """A field added to checker/report.py must be added to the service's schema (and docs/report-schema.md)."""
    from pathlib import Path

    from gradguard import check
    from gradguard.checker import report as checker_report
    from gradguard.service import reports

    assert set(reports.Finding.model_fields) == set(checker_report.Finding.__dataclass_fields__)
    assert set(reports.RuleResult.model_fields) == set(checker_report.RuleResult.__dataclass_fields__)
    assert set(reports.LoadError.model_fields) == set(checker_report.LoadFailure.__dataclass_fields__)
    examples = Path(__file__).resolve().parents[2] / "examples"
    real = check(examples / "addone.py", max_examples=3).to_dict()
    checked = verdicts(validate_report(real))
    assert checked.summary is not None and checked.summary.model_dump() == real["summary"]
    assert [r.verdict for r in checked.rules] == [r["verdict"] for r in real["rules"]]


def test_the_status_comes_from_the_findings_not_the_reports_own_verdict():
    lying = _report([_rule(findings=[_finding()])])  # summary says pass, verdict says pass: a failing rule
    lying["rules"][0]["verdict"] = "pass"
    checked = verdicts(validate_report(lying))
    assert checked.rules[0].verdict == "fail"
    assert checked.summary is not None
    assert (checked.summary.verdict, checked.summary.failed, checked.summary.errors) == ("fail", 1, 1)
    assert lifecycle.run_status(checked) == ("failed", None)
    # a warning alone does not fail a rule, whatever the rule says about itself
    warned = _report([_rule(findings=[_finding("GG302", "warning")], verdict="fail")])
    assert lifecycle.run_status(verdicts(validate_report(warned))) == ("passed", None)


def test_a_report_with_no_rules_is_an_error_not_a_pass():
    status, error = lifecycle.run_status(verdicts(validate_report(_report([]))))
    assert status == "error"
    assert error is not None and error.startswith("no rules found in the bundle")


@pytest.mark.parametrize("mutate, problem", [
    (lambda r: r.update(rules="many"), "rules: Input should be a valid list"),
    (lambda r: r["rules"][0].update(name=5), "rules.0.name: Input should be a valid string"),
    (lambda r: r["rules"][0]["findings"][0].update(severity="fatal"), "rules.0.findings.0.severity: Input should be 'error' or 'warning'"),
    (lambda r: r["rules"][0].update(examples="5"), "rules.0.examples: Input should be a valid integer"),
    (lambda r: r["rules"][0].update(surprise=1), "rules.0.surprise: Extra inputs are not permitted"),
    (lambda r: r["rules"][0].update(examples_cut={"planned": 20, "reason": "tired", "message": "m"}),
     "rules.0.examples_cut.reason: Input should be 'input budget' or 'input size'"),
    (lambda r: r["rules"][0].update(examples_cut={"planned": -1, "reason": "input size", "message": "m"}),
     "rules.0.examples_cut.planned: Input should be greater than or equal to 0"),
    (lambda r: r["rules"][0].update(examples_cut="fewer"), "rules.0.examples_cut: Input should be a valid dictionary"),
    (lambda r: r["rules"][0].update(checks_partial=[{"id": "GG201", "judged": -1, "skipped": 2, "reason": "r"}]),
     "rules.0.checks_partial.0.judged: Input should be greater than or equal to 0"),
    (lambda r: r["rules"][0].update(checks_partial=[{"id": "<b>", "judged": 1, "skipped": 2, "reason": "r"}]),
     "rules.0.checks_partial.0.id: String should match"),
    (lambda r: r["rules"][0].update(checks_partial=[{"id": "GG201", "judged": 1, "skipped": 2}]),
     "rules.0.checks_partial.0.reason: Field required"),
    (lambda r: r["rules"][0].update(python_warnings=[{"category": "UserWarning", "message": "m", "where": "a.py:1"}] * 22),
     "rules.0.python_warnings: List should have at most 21 items"),
    (lambda r: r["rules"][0].update(python_warnings=[{"category": 5, "message": "m", "where": "a.py:1"}]),
     "rules.0.python_warnings.0.category: Input should be a valid string"),
    (lambda r: r["rules"][0].update(python_warnings=[{"category": "UserWarning", "message": "m"}]),
     "rules.0.python_warnings.0.where: Field required"),
    (lambda r: r["rules"][0]["findings"][0].update(counterexample={"draws": {"x": [[[[1]]]]}}),
     "rules.0.findings.0.counterexample.draws.x: Input should be a valid string"),
    (lambda r: r.update(rules=[_rule(f"r{i}") for i in range(MAX_RULES + 1)]),
     f"rules: List should have at most {MAX_RULES} items after validation, not {MAX_RULES + 1}"),
    (lambda r: r.update(rules=[_rule(f"r{i}", findings=[_finding()] * 200) for i in range(MAX_FINDINGS // 200 + 1)]),
     f"the report holds {MAX_FINDINGS + 200} findings; at most {MAX_FINDINGS} are accepted"),
    (lambda r: r["rules"][0].update(findings=[_finding()] * 201), "rules.0.findings: List should have at most 200 items"),
    (lambda r: r.update(settings={"a": {"b": {"c": 1}}}), "settings.a"),
    (lambda r: r["rules"][0]["findings"][0].update(check_id="<script>"), "rules.0.findings.0.check_id: String should match"),
    (lambda r: r.update(schema="gradguard.report/9"), "the report's schema is 'gradguard.report/9', not 'gradguard.report/1'"),
])
def test_invalid_reports_are_refused_naming_the_problem(mutate, problem):
    report = _report([_rule(findings=[_finding()])])
    mutate(report)
    with pytest.raises(InvalidReport) as info:
        validate_report(report)
    assert problem in str(info.value)


def test_a_deeply_nested_report_is_refused_not_a_crash():
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    report = _report([_rule(findings=[_finding()])])
    report["rules"][0]["findings"][0]["counterexample"]["draws"]["x"] = deep
    with pytest.raises(InvalidReport, match="draws.x: Input should be a valid string"):
        validate_report(report)
    report["environment"] = {"nested": deep}
    with pytest.raises(InvalidReport, match="environment.nested"):
        validate_report(report)


@pytest.mark.parametrize("raw, problem", [
    ("[" * 100_000 + "]" * 100_000, "the report nests deeper than the schema allows"),
    ('{"schema": "gradguard.report/1", "settings": ' + '{"a":' * 50_000 + "1" + "}" * 50_001,
     "the report nests deeper than the schema allows"),
    ("not json", "the report is not JSON"),
    ("", "the checker wrote no report"),
    ("[1, 2, 3]", "the report is a JSON list, not an object"),
    (" " * (MAX_REPORT_BYTES + 1), f"the report is {MAX_REPORT_BYTES + 1} bytes; at most {MAX_REPORT_BYTES} are accepted"),
])
def test_raw_report_text_that_is_deep_broken_or_huge_is_refused_without_a_crash(raw, problem):
    with pytest.raises(InvalidReport) as info:
        parse_report(raw)
    assert str(info.value).startswith(problem)


def test_hostile_strings_are_cleaned_and_long_ones_cut():
    report = _report([_rule(name="a\x00b\ud800c\x1b[31m<script>", findings=[_finding(message="m" * 100_000)])])
    checked = validate_report(report)
    assert checked.rules[0].name == "a\ufffdb\ufffdc\ufffd[31m<script>"
    # a lone surrogate escaped in the JSON text, too
    assert parse_report(json.dumps(_report([_rule(name="a\ud800b")])))["rules"][0]["name"] == "a\ufffdb"
    message = checked.rules[0].findings[0].message
    assert message.startswith("m" * 16_000) and message.endswith("… [cut: 84000 more characters]")


@pytest.fixture
def running_run(migrated):  # type: ignore[no-untyped-def]
    """A run in ``running`` held by WORKER, and a session factory on its database."""
    from gradguard.service.db import make_sessionmaker

    factory = make_sessionmaker(migrated)
    with factory() as session:
        session.execute(text("INSERT INTO projects (slug, name, public, default_branch, token_hash, token_prefix, "
                             "created_at) VALUES ('p', 'p', true, 'main', 'h', 'ggp_', CURRENT_TIMESTAMP)"))
        project_id = session.execute(text("SELECT id FROM projects")).scalar_one()
        run = Run(project_id=project_id, branch="main", device="cpu", status="running", attempts=1, worker=WORKER,
                  seed=0)
        session.add(run)
        session.commit()
        return factory, run.id


def test_an_invalid_report_ends_the_run_as_error_and_is_not_stored(running_run):
    factory, run_id = running_run
    forged = _report([_rule(findings=[_finding(severity="fatal")])])
    with factory() as session:
        status = lifecycle.finish_run(session, run_id=run_id, worker=WORKER, ok=True, report=forged,
                                      level="namespaces", reason=None, duration_s=1.0)
        run = session.get(Run, run_id)
        assert status == "error" and run is not None
        assert run.error == ("the sandbox sent an invalid report (rules.0.findings.0.severity: Input should be "
                             "'error' or 'warning')")
        assert session.get(ReportRow, run_id) is None
        assert run.summary is None


def test_a_lying_report_is_stored_with_the_services_verdicts(running_run):
    factory, run_id = running_run
    lying = _report([_rule(findings=[_finding()], verdict="pass")])
    with factory() as session:
        status = lifecycle.finish_run(session, run_id=run_id, worker=WORKER, ok=True, report=lying,
                                      level="namespaces", reason=None, duration_s=1.0)
        assert status == "failed"
        run = session.get(Run, run_id)
        stored = session.get(ReportRow, run_id)
        assert run is not None and stored is not None
        assert run.summary is not None and run.summary["verdict"] == "fail" and run.summary["failed"] == 1
        assert stored.report["rules"][0]["verdict"] == "fail"
        assert stored.report["environment"]["sandbox"] == "namespaces"
        assert stored.report["rules"][0]["safety_matrix"]["cells"][0]["rel_error"] == "NaN"
        head = session.get(BranchHead, (run.project_id, "main"))
        assert head is not None and head.status == "failed"


# -- on the way out: forged rows, every page, badge and API answer -----------------------------------

DEEP = "[" * 5000 + '{"rules": 1}' + "]" * 5000  # deeper than Python's json reads back: written as text

FORGED: dict[str, tuple[Any, Any]] = {  # name: (summary, report)
    "wrong types": ({"rules": "many", "passed": [1], "failed": None, "verdict": 7},
                    {"schema": "gradguard.report/1", "summary": {"verdict": "pass", "rules": "x"},
                     "rules": [{"name": 5, "findings": "x", "safety_matrix": [1], "source_lines": "a"}],
                     "load_errors": [{"path": None}]}),
    "not objects": ([1, 2, 3], "a string where an object belongs"),
    "huge": ({"rules": 6000, "passed": 0, "failed": 6000, "errored": 0, "load_errors": 0, "findings": 60_000,
              "errors": 60_000, "warnings": 0, "by_check": {"GG201": 60_000}, "verdict": "fail"},
             _report([_rule(f"r{i}", findings=[_finding()] * 3) for i in range(2000)])),
    "deeply nested": (DEEP, DEEP),
    "hostile strings": ({"rules": 1, "passed": 0, "failed": 1, "errored": 0, "load_errors": 0, "findings": 1,
                         "errors": 1, "warnings": 0, "by_check": {"GG201": 1}, "verdict": "fail"},
                        _report([_rule(name='<script>alert(1)</script>\u202e\ufeff"\'',
                                       findings=[_finding(message="]]><x/>\x01", rule="<b>",
                                                          source_lines=[10**6, 10**6 + 1])])])),
}


@pytest.fixture
def web_client(make_settings, migrated):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from gradguard.web.app import create_app

    with TestClient(create_app(make_settings(database_url=migrated, rate_limit_per_minute=0)),
                    raise_server_exceptions=False) as client:
        yield client


def _forge(factory, name: str) -> int:  # type: ignore[no-untyped-def]
    summary, report = copy.deepcopy(FORGED[name])
    with factory() as session:
        project_id = session.execute(text("SELECT id FROM projects WHERE slug = 'forged'")).scalar_one()
        run = Run(project_id=project_id, branch="main", device="cpu", status="failed", attempts=1, seed=0,
                  sandbox_level="namespaces")
        session.add(run)
        session.flush()
        session.add(ReportRow(run_id=run.id, report={"placeholder": True}))
        session.add(RuleResultRow(run_id=run.id, name="<script>", verdict="weird", findings=-1))
        session.add(FindingRow(run_id=run.id, rule="<script>", check_id="GG999", severity="x", message="\u202e"))
        session.add(BranchHead(project_id=project_id, branch="main", run_id=run.id, status="failed"))
        session.commit()
        # the JSON goes in as the database stores it, past SQLAlchemy's own serializer
        import json

        def dumps(value: Any) -> str:
            return value if value is DEEP else json.dumps(lifecycle._json_safe(value))

        session.execute(text("UPDATE runs SET summary = :s WHERE id = :i"), {"s": dumps(summary), "i": run.id})
        session.execute(text("UPDATE reports SET report = :r WHERE run_id = :i"), {"r": dumps(report), "i": run.id})
        session.commit()
        return run.id


@pytest.mark.parametrize("forgery", sorted(FORGED))
def test_no_stored_report_makes_any_answer_a_500(web_client, admin_headers, migrated, forgery):
    from gradguard.service.db import make_sessionmaker

    answer = web_client.post("/api/v1/projects", json={"slug": "forged"}, headers=admin_headers)
    assert answer.status_code == 201, answer.text
    run_id = _forge(make_sessionmaker(migrated), forgery)
    urls = ["/", "/p/forged", f"/runs/{run_id}", f"/runs/{run_id}/status", "/p/forged/rules/%3Cscript%3E",
            "/badge/forged.svg", "/badge/forged.json", "/api/v1/projects/forged/runs", "/api/v1/projects/forged/branches",
            "/api/v1/projects/forged/latest", f"/api/v1/runs/{run_id}", f"/api/v1/runs/{run_id}/report",
            f"/api/v1/runs/{run_id}/junit.xml", f"/api/v1/runs/{run_id}/summary.md", "/metrics"]
    for url in urls:
        answer = web_client.get(url)
        assert answer.status_code < 500, (url, answer.status_code, answer.text[:500])
        assert len(answer.content) < 2_000_000, (url, len(answer.content))
        if answer.headers.get("content-type", "").startswith(("text/html", "image/svg", "application/xml")):
            assert "<script>alert" not in answer.text, url
    if forgery == "hostile strings":  # a valid report: it is shown, escaped
        assert web_client.get(f"/api/v1/runs/{run_id}/report").status_code == 200
        page = web_client.get(f"/runs/{run_id}").text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert web_client.get(f"/api/v1/runs/{run_id}/junit.xml").status_code == 200
    else:  # not a valid report: every reader says so, the same way
        report = web_client.get(f"/api/v1/runs/{run_id}/report")
        assert report.status_code == 404
        assert "is not a valid gradguard.report/1 document" in report.json()["detail"]["message"]
        assert "is not a valid gradguard.report/1 document" in web_client.get(f"/runs/{run_id}").text
        if forgery != "huge":  # the huge summary has the schema's shape; the others do not
            assert web_client.get(f"/api/v1/runs/{run_id}").json()["summary"] is None
            assert web_client.get("/badge/forged.json").json()["message"] == "failing"


def test_hostile_but_valid_reports_at_the_caps_are_served_by_every_page(make_settings, migrated, running_run):
    """A report close to the 5 MiB cap (600 findings), full of markup, NUL, bidi controls and infinities,
    stored through finish_run: every page answers 200, escaped."""
    from fastapi.testclient import TestClient

    from gradguard.web.app import create_app

    factory, run_id = running_run
    hostile = "<script>alert(1)</script>\x00 \u202e\u0000" + "é" * 1000
    finding = _finding(message=hostile, rule=hostile[:400], location=hostile[:400], reproducer=hostile,
                       counterexample={"call": hostile, "args": [hostile], "draws": {hostile[:400]: hostile}},
                       source_lines=[3, 1])
    rule = {"name": hostile[:400], "module": hostile[:400], "source_file": hostile[:400], "source_lines": [10**9, 0],
            "duration_s": 1e300, "findings": [finding] * MAX_FINDINGS_PER_RULE,
            "safety_matrix": {"contexts": [hostile[:400]], "engines": [hostile[:400]],
                              "cells": [{"context": hostile[:400], "engine": "jax", "status": "wrong",
                                         "rel_error": float("inf"), "message": hostile}]},
            "python_warnings": [{"category": hostile[:400], "message": hostile, "where": hostile[:400]}] * 21}
    doc = _report([rule] * 3, environment={"x": float("nan")})
    with factory() as session:
        assert lifecycle.finish_run(session, run_id=run_id, worker=WORKER, ok=True, report=doc, level="bubblewrap",
                                    reason=None, duration_s=1) == "failed"
    with TestClient(create_app(make_settings(database_url=migrated), start_executor=False)) as client:
        for path in ["/", "/p/p", f"/runs/{run_id}", f"/runs/{run_id}/status", "/badge/p.svg", "/badge/p.json",
                     "/p/p/rules/x", f"/api/v1/runs/{run_id}", f"/api/v1/runs/{run_id}/report",
                     f"/api/v1/runs/{run_id}/junit.xml", f"/api/v1/runs/{run_id}/summary.md"]:
            response = client.get(path)
            assert response.status_code == 200, (path, response.text[:500])
            assert "<script>alert(1)" not in response.text or path.endswith(("/report", ".md")), path
