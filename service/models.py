"""Database tables (SQLAlchemy 2.0 typed models). Schema changes go through Alembic (``service/migrations``).

    projects ──< runs ──< run_files        the submitted bundle, so any worker anywhere can run it
                     ├──< rule_results      one row per rule: verdict, duration (queryable)
                     ├──< findings          one row per finding: check_id, severity (queryable)
                     └──  reports           the full ``gradguard.report/1`` JSON
    branch_heads                            cached latest finished run per (project, branch): badges read it
    workers                                 one heartbeat row per worker process: its sandbox level (/readyz)
    database_identity                       one random id, written when the schema was created (/readyz)
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = [
    "Base",
    "Project",
    "Run",
    "RunFile",
    "RuleResultRow",
    "FindingRow",
    "ReportRow",
    "BranchHead",
    "WorkerRow",
    "DatabaseIdentity",
    "RUN_STATUSES",
    "FINAL_STATUSES",
    "utcnow",
    "MAX_INT",
]

RUN_STATUSES = ("queued", "running", "passed", "failed", "error")
FINAL_STATUSES = ("passed", "failed", "error")
MAX_INT = 2**31 - 1  # Integer columns (ids, seeds, pull request numbers) are 32-bit signed in PostgreSQL


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: DateTime(timezone=True), dict[str, Any]: JSON, list[str]: JSON}


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    public: Mapped[bool] = mapped_column(Boolean, default=True)
    default_branch: Mapped[str] = mapped_column(String(200), default="main")
    token_hash: Mapped[str] = mapped_column(String(64), index=True)  # sha256 hex of the submit token
    token_prefix: Mapped[str] = mapped_column(String(12))  # first characters, to tell tokens apart (never served)
    read_token_hash: Mapped[str | None] = mapped_column(String(64), index=True)  # sha256 hex of the read-only token
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_project_branch_id", "project_id", "branch", "id"),
        Index("ix_runs_status_device", "status", "device"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    commit_sha: Mapped[str | None] = mapped_column(String(64))
    branch: Mapped[str] = mapped_column(String(200), default="main")
    pull_request: Mapped[int | None] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(8), default="cpu")
    status: Mapped[str] = mapped_column(String(16), default="queued")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(200))  # "host:pid" of the process holding the run
    lease_until: Mapped[datetime | None] = mapped_column()
    sandbox_level: Mapped[str | None] = mapped_column(String(32))
    select_checks: Mapped[list[str] | None] = mapped_column()
    ignore_checks: Mapped[list[str] | None] = mapped_column()
    seed: Mapped[int] = mapped_column(Integer, default=0)
    max_examples: Mapped[int | None] = mapped_column(Integer)
    rule_timeout_s: Mapped[float | None] = mapped_column(Float)  # None: the server's GRADGUARD_RULE_TIMEOUT_S
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()
    duration_s: Mapped[float | None] = mapped_column(Float)  # time spent in the sandbox, last attempt
    error: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[dict[str, Any] | None] = mapped_column()
    # sha256 of the bundle's files, the run's options and the checker (service.reuse): a finished run with
    # the same hash in the same project is reused instead of checked again; reused_from names it.
    content_hash: Mapped[str | None] = mapped_column(String(64), index=True)
    reused_from: Mapped[int | None] = mapped_column(Integer)

    project: Mapped[Project] = relationship(lazy="joined")


class RunFile(Base):
    __tablename__ = "run_files"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    path: Mapped[str] = mapped_column(String(400), primary_key=True)
    content: Mapped[bytes] = mapped_column(LargeBinary)


class RuleResultRow(Base):
    __tablename__ = "rule_results"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(400), index=True)
    module: Mapped[str | None] = mapped_column(String(400))
    source_file: Mapped[str | None] = mapped_column(String(400))
    verdict: Mapped[str] = mapped_column(String(8), index=True)
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    findings: Mapped[int] = mapped_column(Integer, default=0)


class FindingRow(Base):
    __tablename__ = "findings"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    rule: Mapped[str] = mapped_column(String(400))
    check_id: Mapped[str] = mapped_column(String(16), index=True)
    severity: Mapped[str] = mapped_column(String(16))
    title: Mapped[str | None] = mapped_column(String(400))
    message: Mapped[str] = mapped_column(Text)
    location: Mapped[str | None] = mapped_column(String(400))


class ReportRow(Base):
    __tablename__ = "reports"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    report: Mapped[dict[str, Any]] = mapped_column()


class BranchHead(Base):
    __tablename__ = "branch_heads"

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    branch: Mapped[str] = mapped_column(String(200), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16))
    commit_sha: Mapped[str | None] = mapped_column(String(64))
    finished_at: Mapped[datetime | None] = mapped_column()


class WorkerRow(Base):
    """A worker process's heartbeat: the sandbox level it actually has, renewed while it lives."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)  # "host:pid", as on the runs it holds
    executor: Mapped[str] = mapped_column(String(16))
    devices: Mapped[list[str]] = mapped_column()
    sandbox_level: Mapped[str] = mapped_column(String(32))  # what its probe found: bubblewrap | namespaces | rlimits
    min_level: Mapped[str] = mapped_column(String(32))  # the floor it was configured with
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class DatabaseIdentity(Base):
    """One row, written by the migration that created it: tells this database from any other."""

    __tablename__ = "database_identity"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
