"""Reads and writes behind the API routes. Every function takes the session and keyword arguments
only, and raises :mod:`gradguard.service.errors` types that the API turns into JSON.

Run state changes made by workers (claim, lease, finish, requeue) live in :mod:`gradguard.service.lifecycle`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gradguard.service.errors import Conflict, Invalid, NotFound
from gradguard.service.models import MAX_INT, BranchHead, Project, ReportRow, Run, RunFile
from gradguard.service.reports import stored_report
from gradguard.service.schemas import ProjectCreate, RunOptions
from gradguard.service.security import hash_token, new_read_token as _fresh_read_token, new_token

__all__ = [
    "create_project",
    "get_project",
    "find_project_by_token",
    "new_read_token",
    "list_projects",
    "create_run",
    "get_run",
    "get_report",
    "load_files",
    "list_runs",
    "list_branch_heads",
    "get_branch_head",
    "count_runs",
    "encode_cursor",
    "decode_cursor",
]


def create_project(session: Session, *, data: ProjectCreate) -> tuple[Project, str]:
    """Create a project; return it and its submit token (the only time the token exists in clear)."""
    token = new_token()
    project = Project(slug=data.slug, name=data.name or data.slug, public=data.public,
                      default_branch=data.default_branch, token_hash=hash_token(token), token_prefix=token[:12])
    session.add(project)
    try:
        session.flush()
    except IntegrityError as exc:
        session.rollback()
        raise Conflict(f"slug: a project named {data.slug!r} already exists.", field="slug",
                       fix="Choose another slug, or submit to the existing project with its token.") from exc
    return project, token


def get_project(session: Session, *, slug: str) -> Project:
    project = session.scalar(select(Project).where(Project.slug == slug))
    if project is None:
        raise NotFound(f"project: no project named {slug!r}.", field="project",
                       fix="Check the slug; GET /api/v1/projects lists the projects you can see.")
    return project


def find_project_by_token(session: Session, *, token: str) -> Project | None:
    """The project whose submit or read-only token is ``token`` (looked up by its hash), or None."""
    digest = hash_token(token)
    return session.scalar(select(Project).where((Project.token_hash == digest) | (Project.read_token_hash == digest)))


def new_read_token(session: Session, *, project: Project) -> str:
    """Give ``project`` a fresh read-only token, replacing any earlier one; return it (the only time it
    exists in clear)."""
    token = _fresh_read_token()
    project.read_token_hash = hash_token(token)
    session.flush()
    return token


def list_projects(session: Session, *, include_private: bool) -> Sequence[Project]:
    query = select(Project).order_by(Project.slug)
    if not include_private:
        query = query.where(Project.public.is_(True))
    return session.scalars(query).all()


def create_run(session: Session, *, project: Project, options: RunOptions, files: Mapping[str, bytes],
               content_hash: str | None = None) -> Run:
    """Queue a run of ``files`` with ``options``; the files are stored with it. With ``content_hash``
    (:func:`gradguard.service.reuse.bundle_key`), a finished run of the same bundle and settings is reused:
    the run ends at once with its outcome and ``reused_from`` set (:func:`gradguard.service.reuse.reuse_verdict`)."""
    run = Run(project_id=project.id, commit_sha=options.commit, branch=options.branch,
              pull_request=options.pull_request, device=options.device, status="queued", attempts=0,
              select_checks=options.select, ignore_checks=options.ignore, seed=options.seed,
              max_examples=options.max_examples, content_hash=content_hash,
              rule_timeout_s=options.rule_timeout_s)
    session.add(run)
    session.flush()
    session.add_all(RunFile(run_id=run.id, path=path, content=data) for path, data in files.items())
    session.flush()
    if content_hash is not None:
        from gradguard.service.reuse import reuse_verdict

        reuse_verdict(session, run=run)
    return run


def get_run(session: Session, *, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound(f"run: no run with id {run_id}.", field="run",
                       fix="Use the id returned when the run was submitted.")
    return run


def get_report(session: Session, *, run: Run) -> dict[str, Any]:
    """The run's report, checked again against the schema (:func:`service.reports.stored_report`)."""
    row = session.get(ReportRow, run.id)
    if row is None:
        raise NotFound(f"report: run {run.id} has no report (status {run.status!r}).", field="run",
                       fix="Wait until the run is passed or failed; GET /api/v1/runs/{id} shows its status"
                       + (f" and the error: {run.error}" if run.error else "."))
    report, problem = stored_report(row.report)
    if report is None:
        raise NotFound(f"report: run {run.id} has no readable report: {problem}.", field="run",
                       fix="Submit the run again; GET /api/v1/runs/{id} shows its status.")
    return report


def load_files(session: Session, *, run_id: int) -> dict[str, bytes]:
    rows = session.scalars(select(RunFile).where(RunFile.run_id == run_id)).all()
    return {row.path: bytes(row.content) for row in rows}


def encode_cursor(run_id: int) -> str:
    return base64.urlsafe_b64encode(f"r{run_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The run id in a cursor from :func:`encode_cursor`; anything else (not base64, not ``r<digits>``, an
    id no run can have: 0, negative, past 32 bits) is :class:`Invalid`."""
    try:
        raw = base64.urlsafe_b64decode(cursor[:64] + "=" * (-len(cursor[:64]) % 4)).decode("ascii")
        digits = raw[1:]
        if len(cursor) > 64 or not raw.startswith("r") or not (digits.isascii() and digits.isdigit()):
            raise ValueError(raw)
        run_id = int(digits)
        if not 1 <= run_id <= MAX_INT:
            raise ValueError(run_id)
        return run_id
    except (ValueError, UnicodeError) as exc:
        raise Invalid(f"cursor: {cursor!r} is not a cursor this API issued.", field="cursor",
                      fix="Pass the next_cursor value of the previous page unchanged.") from exc


def list_runs(session: Session, *, project: Project, branch: str | None, limit: int,
              cursor: str | None) -> tuple[Sequence[Run], str | None]:
    """Runs of ``project``, newest first, ``limit`` per page; returns the page and the next cursor."""
    query = select(Run).where(Run.project_id == project.id)
    if branch is not None:
        query = query.where(Run.branch == branch)
    if cursor:
        query = query.where(Run.id < decode_cursor(cursor))
    runs = session.scalars(query.order_by(Run.id.desc()).limit(limit + 1)).all()
    next_cursor = encode_cursor(runs[limit - 1].id) if len(runs) > limit else None
    return runs[:limit], next_cursor


def list_branch_heads(session: Session, *, project: Project) -> Sequence[BranchHead]:
    query = select(BranchHead).where(BranchHead.project_id == project.id).order_by(BranchHead.branch)
    return session.scalars(query).all()


def get_branch_head(session: Session, *, project: Project, branch: str | None) -> BranchHead:
    """The latest finished run's verdict on ``branch`` (the project's default branch when None)."""
    branch = branch or project.default_branch
    head = session.get(BranchHead, (project.id, branch))
    if head is None:
        raise NotFound(f"branch: project {project.slug!r} has no finished run on branch {branch!r}.", field="branch",
                       fix="Submit a run for this branch, or pick one from GET .../branches.")
    return head


def count_runs(session: Session) -> dict[tuple[str, str], int]:
    """``{(status, device): count}`` over all runs (metrics and queue depth)."""
    rows = session.execute(select(Run.status, Run.device, func.count()).group_by(Run.status, Run.device)).all()
    return {(status, device): n for status, device, n in rows}
