"""The sandbox's report is untrusted input: validated, capped, and never the source of a run's status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from gradguard.service import crud, lifecycle, report_schema
from gradguard.service.db import make_sessionmaker
from gradguard.service.models import ReportRow, Run
from gradguard.service.schemas import ProjectCreate, RunOptions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def real_report() -> dict[str, Any]:
    """What the checker writes for rules with findings, errors of severity warning and a safety matrix."""
    from gradguard.checker import check

    return json.loads(check(str(ROOT / "examples" / "aliasing.py"), max_examples=3).to_json())


def test_a_real_report_validates_and_the_service_computes_the_same_summary(real_report) -> None:
    from gradguard.checker.report import Report

    parsed = report_schema.parse(json.dumps(real_report))
    assert parsed["summary"] == Report.from_dict(real_report).summary() == real_report["summary"]
    assert [r["verdict"] for r in parsed["rules"]] == [r["verdict"] for r in real_report["rules"]]
    assert any(r["safety_matrix"] for r in parsed["rules"])


def _finding(**over: Any) -> dict[str, Any]:
    return {"check_id": "GG202", "severity": "error", "title": "t", "rule": "r", "message": "m", **over}


def _doc(**over: Any) -> dict[str, Any]:
    return {"schema": "gradguard.report/1", "rules": [{"name": "r", "findings": [_finding()]}], **over}


def test_verdicts_and_summary_come_from_the_findings_not_from_the_report() -> None:
    forged = _doc(summary={"verdict": "pass", "rules": "all of them"})
    forged["rules"][0]["verdict"] = "pass"
    forged["rules"].append({"name": "fine", "verdict": "fail", "findings": [_finding(severity="warning")]})
    parsed = report_schema.parse(json.dumps(forged))
    assert [r["verdict"] for r in parsed["rules"]] == ["fail", "pass"]
    assert parsed["summary"]["verdict"] == "fail" and parsed["summary"]["rules"] == 2
    assert report_schema.status_of(parsed) == ("failed", None)


def test_no_rules_is_an_error_never_a_pass() -> None:
    status, error = report_schema.status_of(report_schema.parse(json.dumps(_doc(rules=[]))))
    assert status == "error" and error.startswith("no rules found in the bundle")


HOSTILE = {
    "wrong type": (_doc(rules=[{"name": "r", "findings": [_finding(message=5)]}]),
                   "rules.0.findings.0.message: Input should be a valid string"),
    "unknown severity": (_doc(rules=[{"name": "r", "findings": [_finding(severity="fatal")]}]),
                         "rules.0.findings.0.severity"),
    "unknown field": (_doc(rules=[{"name": "r", "evil": 1}]), "rules.0.evil: Extra inputs are not permitted"),
    "other schema": (_doc(schema="gradguard.report/9"), "schema: Input should be 'gradguard.report/1'"),
    "too many rules": (_doc(rules=[{"name": f"r{i}"} for i in range(report_schema.LIMITS["rules"] + 1)]),
                       f"rules: List should have at most {report_schema.LIMITS['rules']} items"),
    "too many findings": (_doc(rules=[{"name": "r", "findings": [_finding()] * 201}]),
                          "rules.0.findings: List should have at most 200 items"),
    "huge string": (_doc(rules=[{"name": "x" * 401}]), "rules.0.name: String should have at most 400 characters"),
    "nested settings": (_doc(settings={"a": [[[[[[[[[[1]]]]]]]]]]}), "settings: Value error, nested deeper"),
    "check id": (_doc(rules=[{"name": "r", "findings": [_finding(check_id="<script>")]}]),
                 "rules.0.findings.0.check_id: String should match pattern"),
    "not an object": ([1, 2, 3], "Input should be an object"),
    "lone surrogate": (_doc(rules=[{"name": "a\ud800b"}]), "Invalid JSON"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_forged_report_is_refused_naming_the_problem(name: str) -> None:
    doc, expected = HOSTILE[name]
    with pytest.raises(report_schema.ReportInvalid) as info:
        report_schema.parse(json.dumps(doc))
    assert str(info.value).startswith("the report does not fit gradguard.report/1: ")
    assert expected in str(info.value)


@pytest.mark.parametrize("raw", ["[" * 100_000 + "]" * 100_000, '{"schema": "gradguard.report/1", "settings": '
                                 + '{"a":' * 50_000 + "1" + "}" * 50_001, "not json", ""])
def test_deep_or_broken_json_is_refused_without_a_crash(raw: str) -> None:
    with pytest.raises(report_schema.ReportInvalid):
        report_schema.parse(raw)


def test_the_byte_cap_is_checked_before_parsing() -> None:
    with pytest.raises(report_schema.ReportInvalid, match="over the .* byte cap"):
        report_schema.parse(" " * (report_schema.LIMITS["bytes"] + 1))


# --- stored, then served: nothing the sandbox sends can make a page answer 500 -------------------------


def _claimed_run(factory) -> int:  # type: ignore[no-untyped-def]
    with factory() as session:
        project = session.scalar(select(crud.Project).where(crud.Project.slug == "p"))
        if project is None:
            project, _ = crud.create_project(session, data=ProjectCreate(slug="p"))
        run = crud.create_run(session, project=project, options=RunOptions(branch="main"), files={"r.py": b"x = 1\n"})
        session.commit()
        lifecycle.claim_run(session, run_id=run.id, worker="w:1", max_retries=2, lease_s=60)
        return run.id


def test_an_invalid_report_ends_the_run_as_error_and_is_not_stored(migrated: str) -> None:
    factory = make_sessionmaker(migrated)
    run_id = _claimed_run(factory)
    forged = _doc(rules=[{"name": "r", "findings": [_finding(message={"not": "text"})]}])
    with factory() as session:
        assert lifecycle.finish_run(session, run_id=run_id, worker="w:1", ok=True, report=forged, level="bubblewrap",
                                    reason=None, duration_s=1) == "error"
        run = session.get(Run, run_id)
        assert run.error.startswith("checker wrote an invalid report: the report does not fit gradguard.report/1")
        assert session.get(ReportRow, run_id) is None


def test_hostile_but_valid_reports_are_served_by_every_page(make_settings, migrated: str) -> None:
    from fastapi.testclient import TestClient

    from gradguard.web.app import create_app

    factory = make_sessionmaker(migrated)
    run_id = _claimed_run(factory)
    hostile = "<script>alert(1)</script>\x00 \u202e\u0000" + "é" * 1000
    doc = _doc(environment={"x": float("nan")}, rules=[
        {"name": hostile[:400], "module": hostile[:400], "source_file": hostile[:400], "source_lines": [10**9, 0],
         "duration_s": 1e300, "findings": [_finding(message=hostile, rule=hostile[:400], location=hostile[:400],
                                                     counterexample={"call": hostile, "args": [hostile],
                                                                     "draws": {hostile[:400]: hostile}},
                                                     reproducer=hostile, source_lines=[3, 1])] * 200,
         "safety_matrix": {"contexts": [hostile[:400]], "engines": [hostile[:400]],
                           "cells": [{"context": hostile[:400], "engine": "jax", "status": "wrong",
                                      "rel_error": float("inf"), "message": hostile}]}}] * 20)
    with factory() as session:
        assert lifecycle.finish_run(session, run_id=run_id, worker="w:1", ok=True, report=doc, level="bubblewrap",
                                    reason=None, duration_s=1) == "failed"
    with TestClient(create_app(make_settings(database_url=migrated), start_executor=False)) as client:
        for path in ["/", "/p/p", f"/runs/{run_id}", f"/runs/{run_id}/status", "/badge/p.svg", "/badge/p.json",
                     f"/api/v1/runs/{run_id}", f"/api/v1/runs/{run_id}/report", f"/api/v1/runs/{run_id}/junit.xml",
                     f"/api/v1/runs/{run_id}/summary.md"]:
            response = client.get(path)
            assert response.status_code == 200, (path, response.text[:500])
            assert "<script>alert(1)" not in response.text or path.endswith(("/report", ".md")), path
