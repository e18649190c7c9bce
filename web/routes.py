"""The pages: projects, a project, a run (with its live status), a rule's history, the check catalogue.

Routes are thin: access comes from the service's one policy (``ReadableProject``, ``ReadableRun``),
data from :mod:`gradguard.service.crud` and :mod:`gradguard.web.queries`, shape from
:mod:`gradguard.web.view`. A private project without a valid token looks exactly like a missing one:
the policy answers NotFound for both and :func:`hidden_page` renders it as a 404 page that offers the
token form, so no name leaks; the token is kept in a cookie once entered. Nothing answers a stack trace.
"""

from __future__ import annotations

import difflib
import re
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from gradguard.checker.checks import FAMILIES, CheckInfo, catalogue
from gradguard.service import access, crud
from gradguard.service.api.deps import (ADMIN_COOKIE, CredentialsDep, ReadableProject, ReadableRun, SessionDep,
                                        SettingsDep, token_cookie)
from gradguard.service.errors import Invalid, NotFound
from gradguard.service.models import FINAL_STATUSES, Project
from gradguard.service.reports import stored_summary
from gradguard.service.security import READ_TOKEN_PREFIX
from gradguard.web import queries
from gradguard.web.chart import history_svg
from gradguard.web.templating import templates
from gradguard.web.view import rule_views

__all__ = ["router", "hidden_page"]

router = APIRouter(include_in_schema=False)
RUNS_PER_PAGE = 50
COOKIE_MAX_AGE = 30 * 24 * 3600


def _page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def _not_found(request: Request, message: str, suggestions: list[dict[str, str]] | None = None) -> HTMLResponse:
    return _page(request, "error.html", 404, heading="Not found", message=message, suggestions=suggestions or [])


def hidden_page(request: Request, what: str) -> HTMLResponse:
    """The answer for something missing or private: 404, with the token form."""
    return _page(request, "token.html", 404, what=what, next=_safe_next(request.url.path), error=None)


def _project_url(project: Project) -> str:
    return f"/p/{project.slug}"


# -- projects --------------------------------------------------------------------------------------

@router.get("/", response_class=HTMLResponse)
def projects_page(request: Request, session: SessionDep, settings: SettingsDep,
                  credentials: CredentialsDep) -> HTMLResponse:
    projects = access.readable_projects(session, settings=settings, credentials=credentials)
    heads = queries.projects_with_heads(session, projects=projects)
    counts = queries.run_counts(session, projects=projects)
    rows = [{"project": p, "url": _project_url(p), "head": heads.get(p.id), "runs": counts.get(p.id, 0)}
            for p in projects]
    return _page(request, "projects.html", rows=rows)


@router.get("/p/{project}", response_class=HTMLResponse)
def project_page(request: Request, session: SessionDep, project: ReadableProject, branch: str | None = None,
                 cursor: str | None = None) -> HTMLResponse:
    try:
        crud.decode_cursor(cursor) if cursor else None
    except Invalid:
        cursor = None  # a stale or hand-edited cursor: show the newest runs
    runs, next_cursor = crud.list_runs(session, project=project, branch=branch or None, limit=RUNS_PER_PAGE,
                                       cursor=cursor or None)
    branches = queries.branch_rows(session, project=project)
    shown = branch or project.default_branch
    names = sorted({b.branch for b in branches} | {shown}, key=lambda n: (n != project.default_branch, n))
    total = queries.run_counts(session, projects=[project]).get(project.id, 0)
    base = _project_url(project)
    keep = {"branch": branch} if branch else {}
    server = str(request.base_url).rstrip("/")
    badge_path = f"/badge/{project.slug}.svg?{urlencode({'branch': project.default_branch})}"
    return _page(
        request, "project.html",
        project=project, project_url=base, branches=branches, branch=shown, branch_names=names,
        filter_branch=branch, runs=runs, cursor=cursor, next_cursor=next_cursor, total_runs=total,
        next_query=urlencode({**keep, "cursor": next_cursor or ""}), first_query=urlencode(keep),
        chart=history_svg(queries.history(session, project=project, branch=shown), branch=shown),
        badge_path=badge_path,
        badge_markdown=f"[![gradguard]({server}{badge_path})]({server}{base})",
        endpoint_url=f"{server}/badge/{project.slug}.json?{urlencode({'branch': project.default_branch})}",
        shields_url="https://img.shields.io/endpoint?" + urlencode(
            {"url": f"{server}/badge/{project.slug}.json?{urlencode({'branch': project.default_branch})}"}),
    )


@router.get("/token", response_class=HTMLResponse)
def token_form(request: Request, next: str = "/") -> HTMLResponse:
    return _page(request, "token.html", what=None, next=_safe_next(next), error=None)


@router.post("/token", response_model=None)
def token_submit(request: Request, session: SessionDep, settings: SettingsDep, token: str = Form(""),
                 next: str = Form("/")) -> Response:
    """Keep a project's read-only token (or the admin token) in a cookie; the token itself names the
    project. A submit token is refused: a browser never holds write access."""
    token, target = token.strip(), _safe_next(next)
    kind, project = access.classify_token(session, settings=settings, token=token)
    if kind == "read" and project is not None:
        name = token_cookie(project.slug)
    elif kind == "submit":
        return _page(request, "token.html", 403, what=None, next=target,
                     error="That is a submit token; pages take the project's read-only token (it starts with "
                           f"'{READ_TOKEN_PREFIX}'), so a browser never holds write access. "
                           "POST /api/v1/projects/<project>/read-token with the submit token makes a new one.")
    elif kind == "admin":
        name = ADMIN_COOKIE
    else:
        return _page(request, "token.html", 403, what=None, next=target,
                     error="That token opens no project here. Use the project's read-only token.")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(name, token, max_age=COOKIE_MAX_AGE, httponly=True, samesite="lax",
                        secure=request.url.scheme == "https", path="/")
    return response


def _safe_next(target: str) -> str:
    """Only same-site paths: never an open redirect."""
    if target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


# -- runs ------------------------------------------------------------------------------------------

@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, session: SessionDep, run: ReadableRun) -> HTMLResponse:
    final = run.status in FINAL_STATUSES
    report, rules, problem = None, [], None
    if final:
        try:
            report = crud.get_report(session, run=run)
        except NotFound as exc:
            problem = exc.message
    if report:
        files = crud.load_files(session, run_id=run.id)
        rules = rule_views(report, files, rule_url=f"{_project_url(run.project)}/rules/{{name}}")
    response = _page(request, "run.html", run=run, project=run.project, project_url=_project_url(run.project),
                     final=final, report=report, rules=rules, families=FAMILIES, problem=problem)
    if not final:
        response.headers["Cache-Control"] = "no-store"
    return response


@router.get("/runs/{run_id}/status")
def run_status(run: ReadableRun) -> JSONResponse:
    """What the run page polls while the run is queued or running."""
    body = {"id": run.id, "status": run.status, "final": run.status in FINAL_STATUSES,
            "summary": stored_summary(run.summary)}
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


# -- rules -----------------------------------------------------------------------------------------

@router.get("/p/{project}/rules/{rule:path}", response_class=HTMLResponse)
def rule_page(request: Request, session: SessionDep, project: ReadableProject, rule: str,
              branch: str | None = None) -> HTMLResponse:
    runs = queries.rule_history(session, project=project, rule=rule, branch=branch or None)
    counts = {"pass": 0, "fail": 0, "error": 0}
    for r in runs:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    since = None
    for r in runs:  # newest first: the oldest run of the current failing streak
        if r.verdict == "pass":
            break
        since = r
    branch_names = sorted({b.branch for b in queries.branch_rows(session, project=project)})
    return _page(request, "rule.html", project=project, project_url=_project_url(project), rule=rule, runs=runs,
                 counts=counts, since=since if runs and runs[0].verdict != "pass" else None, branch=branch or "",
                 branch_names=branch_names)


# -- check catalogue -------------------------------------------------------------------------------

_PARAGRAPH = re.compile(r"\n\s*\n")


@router.get("/checks", response_class=HTMLResponse)
def checks_page(request: Request) -> HTMLResponse:
    checks = catalogue()
    families = [(fam, [c for c in checks if c.family == fam]) for fam in FAMILIES]
    return _page(request, "checks.html", families=[(f, items) for f, items in families if items])


@router.get("/checks/{check_id}", response_class=HTMLResponse)
def check_page(request: Request, check_id: str) -> HTMLResponse:
    checks = catalogue()
    ids = [c.id for c in checks]
    wanted = check_id.upper()
    if wanted != check_id and wanted in ids:
        return RedirectResponse(f"/checks/{wanted}", status_code=301)  # type: ignore[return-value]
    if wanted not in ids:
        close = difflib.get_close_matches(wanted, ids, n=3)
        return _not_found(request, f"{check_id!r} is not a check id.",
                          [{"href": f"/checks/{c}", "text": c} for c in close])
    i = ids.index(wanted)
    info: CheckInfo = checks[i]
    paragraphs = [" ".join(p.split()) for p in _PARAGRAPH.split(info.explanation) if p.strip()]
    return _page(request, "check.html", c=info, paragraphs=paragraphs,
                 prev=checks[i - 1] if i > 0 else None, next=checks[i + 1] if i + 1 < len(checks) else None)


def rule_href(slug: str, name: str) -> str:
    return f"/p/{slug}/rules/{quote(name, safe='')}"
