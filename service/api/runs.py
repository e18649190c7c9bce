"""Routes under ``/api/v1/runs``: a run's status, its report as JSON, JUnit XML and Markdown."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from gradguard.service import crud
from gradguard.service.api.deps import ReadableRun, SessionDep, SettingsDep, base_url
from gradguard.service.errors import Unavailable
from gradguard.service.reports import as_python
from gradguard.service.schemas import RunOut, run_out

__all__ = ["router"]

router = APIRouter(prefix="/runs", tags=["runs"])


@router.get("/{run_id}", response_model=RunOut)
def read_run(run: ReadableRun, request: Request, settings: SettingsDep) -> RunOut:
    """Status, timings, attempts, sandbox level and summary of a run."""
    return run_out(run, base_url(request, settings))


@router.get("/{run_id}/report", response_class=Response,
            responses={200: {"content": {"application/json": {}}, "description": "a gradguard.report/1 document"}})
def read_report(run: ReadableRun, session: SessionDep) -> Response:
    """The full ``gradguard.report/1`` JSON of a finished run."""
    report = crud.get_report(session, run=run)
    return Response(json.dumps(report, separators=(",", ":")), media_type="application/json")


def _report_object(data: dict[str, Any]) -> Any:
    from gradguard.checker.report import Report

    return Report.from_dict(as_python(data))


def _renderer(name: str) -> Any:
    try:
        from gradguard.checker import render
    except ImportError as exc:
        raise Unavailable(f"renderer: this installation has no checker.render ({exc}).", field="format",
                          fix="Fetch /report (JSON) instead, or upgrade gradguard.") from exc
    return getattr(render, name)


@router.get("/{run_id}/junit.xml", response_class=Response, responses={200: {"content": {"application/xml": {}}}})
def read_junit(run: ReadableRun, session: SessionDep) -> Response:
    """The report as JUnit XML (one test case per rule and check), for CI test views."""
    report = crud.get_report(session, run=run)
    return Response(_renderer("render_junit")(_report_object(report)), media_type="application/xml")


@router.get("/{run_id}/summary.md", response_class=PlainTextResponse,
            responses={200: {"content": {"text/markdown": {}}}})
def read_markdown(run: ReadableRun, session: SessionDep, request: Request, settings: SettingsDep) -> Response:
    """The report as Markdown, ready for a GitHub job summary; check ids link to this server's
    ``/checks/<id>`` pages when it serves them."""
    report = crud.get_report(session, run=run)
    has_pages = getattr(request.app.state, "serves_pages", False)  # set by gradguard.web.site.mount
    markdown = _renderer("render_markdown")(_report_object(report),
                                            server_url=base_url(request, settings) if has_pages else None)
    return PlainTextResponse(markdown, media_type="text/markdown")
