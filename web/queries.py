"""Read-only queries the pages need beyond :mod:`gradguard.service.crud`, written against the service's models.

Each is one indexed query, bounded by a limit, so a page costs the same for a project with ten runs
or ten thousand: runs by ``(project_id, branch, id)``, rule results by ``name`` then run, the
``branch_heads`` cache for the latest verdict per branch (what badges read too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from gradguard.service.models import FINAL_STATUSES, BranchHead, Project, RuleResultRow, Run
from gradguard.service.reports import stored_summary

__all__ = [
    "BranchRow",
    "Point",
    "RuleRun",
    "projects_with_heads",
    "branch_rows",
    "history",
    "rule_history",
    "badge_source",
    "run_counts",
]


@dataclass(frozen=True)
class BranchRow:
    branch: str
    status: str
    run_id: int
    commit: str | None
    finished_at: datetime | None
    summary: dict[str, Any] | None


@dataclass(frozen=True)
class Point:
    """One finished run on the history chart."""

    run_id: int
    commit: str | None
    when: datetime | None
    status: str
    rules: int
    passed: int


@dataclass(frozen=True)
class RuleRun:
    run_id: int
    commit: str | None
    branch: str
    when: datetime | None
    verdict: str
    findings: int
    duration_s: float


def projects_with_heads(session: Session, *, projects: Sequence[Project]) -> dict[int, BranchRow]:
    """The latest verdict on each project's default branch, ``{project_id: BranchRow}`` (one query)."""
    if not projects:
        return {}
    query = (
        select(BranchHead, Run.summary)
        .join(Project, Project.id == BranchHead.project_id)
        .join(Run, Run.id == BranchHead.run_id)
        .where(BranchHead.project_id.in_([p.id for p in projects]), BranchHead.branch == Project.default_branch)
    )
    return {head.project_id: _branch_row(head, summary) for head, summary in session.execute(query)}


def run_counts(session: Session, *, projects: Sequence[Project]) -> dict[int, int]:
    if not projects:
        return {}
    query = select(Run.project_id, func.count()).where(Run.project_id.in_([p.id for p in projects])).group_by(Run.project_id)
    return {project_id: count for project_id, count in session.execute(query)}


def branch_rows(session: Session, *, project: Project, limit: int = 50) -> list[BranchRow]:
    """Latest finished run per branch, default branch first, then the most recently finished."""
    query = (
        select(BranchHead, Run.summary)
        .join(Run, Run.id == BranchHead.run_id)
        .where(BranchHead.project_id == project.id)
        .order_by(BranchHead.run_id.desc())
        .limit(limit)
    )
    rows = [_branch_row(head, summary) for head, summary in session.execute(query)]
    rows.sort(key=lambda r: r.branch != project.default_branch)
    return rows


def history(session: Session, *, project: Project, branch: str, limit: int = 120) -> list[Point]:
    """The last ``limit`` finished runs on ``branch``, oldest first: rules passing over time."""
    query = (
        select(Run.id, Run.commit_sha, Run.finished_at, Run.status, Run.summary)
        .where(Run.project_id == project.id, Run.branch == branch, Run.status.in_(FINAL_STATUSES))
        .order_by(Run.id.desc())
        .limit(limit)
    )
    points = []
    for run_id, commit, when, status, summary in session.execute(query):
        summary = stored_summary(summary) or {}
        points.append(Point(run_id, commit, when, status, int(summary.get("rules") or 0), int(summary.get("passed") or 0)))
    points.reverse()
    return points


def rule_history(session: Session, *, project: Project, rule: str, branch: str | None = None,
                 limit: int = 200) -> list[RuleRun]:
    """The verdicts of the rule named ``rule`` over the project's runs, newest first."""
    query = (
        select(RuleResultRow.run_id, Run.commit_sha, Run.branch, Run.finished_at, RuleResultRow.verdict,
               RuleResultRow.findings, RuleResultRow.duration_s)
        .join(Run, and_(Run.id == RuleResultRow.run_id, Run.project_id == project.id))
        .where(RuleResultRow.name == rule)
        .order_by(RuleResultRow.run_id.desc())
        .limit(limit)
    )
    if branch:
        query = query.where(Run.branch == branch)
    return [RuleRun(*row) for row in session.execute(query)]


def badge_source(session: Session, *, slug: str, branch: str | None) -> tuple[Project | None, str | None, dict[str, Any] | None]:
    """``(project, status, summary)`` of the cached latest finished run on ``branch`` (default branch if None)."""
    project = session.scalar(select(Project).where(Project.slug == slug))
    if project is None:
        return None, None, None
    row = session.execute(
        select(BranchHead.status, Run.summary)
        .join(Run, Run.id == BranchHead.run_id)
        .where(BranchHead.project_id == project.id, BranchHead.branch == (branch or project.default_branch))
    ).first()
    if row is None:
        return project, None, None
    return project, row[0], stored_summary(row[1])


def _branch_row(head: BranchHead, summary: dict[str, Any] | None) -> BranchRow:
    return BranchRow(head.branch, head.status, head.run_id, head.commit_sha, head.finished_at, stored_summary(summary))
