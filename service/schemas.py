"""Request and response bodies of the API (pydantic). Field names are the public contract."""

from __future__ import annotations

import math

import re
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_serializer, field_validator

from gradguard.service.models import MAX_INT, RUN_STATUSES
from gradguard.service.reports import Summary, stored_summary

__all__ = [
    "ProjectCreate",
    "ProjectOut",
    "ProjectCreated",
    "ReadToken",
    "ProjectList",
    "RunOptions",
    "RunSubmit",
    "RunOut",
    "RunAccepted",
    "RunPage",
    "BranchVerdict",
    "BranchList",
    "CHECK_ID",
    "RunUrls",
    "run_urls",
    "run_out",
]

SLUG = r"^[a-z0-9][a-z0-9-]{0,62}$"
CHECK_ID = re.compile(r"^GG\d{1,3}$")
PRINTABLE = r"^[^\x00-\x1f\x7f]+$"  # no control characters (PostgreSQL text cannot hold NUL)
Device = Literal["cpu", "gpu"]


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    @field_serializer("*", when_used="json", check_fields=False)
    def _utc(self, value: Any) -> Any:
        # SQLite hands back naive datetimes; everything is stored in UTC.
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value


class ProjectCreate(BaseModel):
    slug: str = Field(pattern=SLUG, description="URL name: lowercase letters, digits and '-'")
    name: str | None = Field(None, max_length=200, pattern=PRINTABLE)
    public: bool = True
    default_branch: str = Field("main", min_length=1, max_length=200, pattern=PRINTABLE)


class ProjectOut(_Out):
    slug: str
    name: str
    public: bool
    default_branch: str
    created_at: datetime


class ProjectCreated(ProjectOut):
    token: str = Field(description="The submit token. Shown only in this answer; store it as a CI secret.")
    read_token: str = Field(description="A read-only token for a private project's pages, badges and API reads "
                                        "(never a submission). Shown only in this answer.")


class ReadToken(BaseModel):
    read_token: str = Field(description="The project's new read-only token; the previous one no longer opens "
                                        "anything. Shown only in this answer.")


class ProjectList(BaseModel):
    items: list[ProjectOut]


class RunOptions(BaseModel):
    """What to record and how to check, shared by the JSON and multipart forms of a submission."""

    model_config = ConfigDict(extra="forbid")

    commit: str | None = Field(None, max_length=64, pattern=r"^[0-9A-Za-z._-]*$")
    branch: str = Field("main", min_length=1, max_length=200, pattern=PRINTABLE)
    pull_request: int | None = Field(None, ge=1, le=MAX_INT)
    device: Device = "cpu"
    select: list[str] | None = None
    ignore: list[str] | None = None
    seed: int = Field(0, ge=0, le=MAX_INT)  # stored in a 32-bit signed column
    max_examples: int | None = Field(None, ge=1, le=10_000)
    rule_timeout_s: float | None = Field(None, gt=0, le=86_400, allow_inf_nan=False,
                                         description="seconds each rule may take; below the run's wall limit "
                                                     "(default: the server's GRADGUARD_RULE_TIMEOUT_S)")

    @field_validator("select", "ignore")
    @classmethod
    def _check_ids(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        bad = [v for v in value if not CHECK_ID.match(v) and not re.fullmatch(r"GG\d{1,2}", v)]
        if bad:
            raise ValueError(f"{bad!r} are not check ids; use ids like 'GG201' or family prefixes like 'GG2'")
        return value


class RunSubmit(RunOptions):
    files: dict[str, str] = Field(description="path -> file text; the rule modules to check")


class RunUrls(BaseModel):
    self: str
    report: str
    junit: str
    markdown: str


class RunOut(_Out):
    id: int
    project: str
    status: Literal["queued", "running", "passed", "failed", "error"]
    commit: str | None
    branch: str
    pull_request: int | None
    device: str
    attempts: int
    sandbox_level: str | None
    select: list[str] | None
    ignore: list[str] | None
    seed: int
    rule_timeout_s: float | None = None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None
    error: str | None
    summary: Summary | None
    reused_from: int | None = Field(None, description="the run whose verdict this run reused: same bundle and "
                                    "settings, not checked again")
    urls: RunUrls


class RunAccepted(BaseModel):
    id: int
    status: str
    urls: RunUrls


class RunPage(BaseModel):
    items: list[RunOut]
    next_cursor: str | None = Field(None, description="pass as ?cursor= to get the next (older) page")


class BranchVerdict(_Out):
    branch: str
    status: str
    run_id: int
    commit: str | None = Field(validation_alias=AliasChoices("commit_sha", "commit"))
    finished_at: datetime | None


class BranchList(BaseModel):
    items: list[BranchVerdict]


def run_urls(run_id: int, base: str) -> RunUrls:
    root = f"{base}/api/v1/runs/{run_id}"
    return RunUrls(self=root, report=f"{root}/report", junit=f"{root}/junit.xml", markdown=f"{root}/summary.md")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def run_out(run: Any, base: str) -> RunOut:
    """The API view of a :class:`gradguard.service.models.Run`."""
    status = run.status if run.status in RUN_STATUSES else "error"
    return RunOut(id=run.id, project=run.project.slug, status=status, commit=run.commit_sha, branch=run.branch,
                  pull_request=run.pull_request, device=run.device, attempts=run.attempts,
                  sandbox_level=run.sandbox_level, select=run.select_checks, ignore=run.ignore_checks, seed=run.seed,
                  rule_timeout_s=run.rule_timeout_s if _finite(run.rule_timeout_s) else None,
                  created_at=run.created_at, started_at=run.started_at, finished_at=run.finished_at,
                  duration_s=run.duration_s, error=run.error, summary=stored_summary(run.summary),
                  reused_from=getattr(run, "reused_from", None), urls=run_urls(run.id, base))
