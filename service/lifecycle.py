"""Run state machine, as workers drive it. The database is the source of truth; queues only dispatch.

    queued ──claim──> running ──finish──> passed | failed | error
      ^                 │
      └──requeue────────┘   the worker holding it died (same host, pid gone) or its lease expired

Every claim counts an attempt. A run whose attempts are used up (1 + ``max_retries``) is not run
again: it ends ``error`` with the reason, so a rule that kills its worker cannot loop forever.
Each state change is one conditional ``UPDATE ... WHERE status = <seen>``: two workers can race
for a run and exactly one wins, on SQLite and PostgreSQL alike. Reads are committed before writes
so SQLite's write lock is taken by the ``UPDATE`` itself and waits on the busy timeout.
"""

from __future__ import annotations

import math
import os
import socket
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gradguard.service.models import BranchHead, FindingRow, ReportRow, RuleResultRow, Run, utcnow
from gradguard.service.reports import InvalidReport, Report, as_json, run_status, validate_report, verdicts

__all__ = [
    "worker_id",
    "owner_is_gone",
    "claim_run",
    "claim_next",
    "renew_lease",
    "finish_run",
    "fail_run",
    "requeue_stale",
    "release_runs",
    "update_branch_head",
    "VERDICT_STATUS",
]

VERDICT_STATUS = {"pass": "passed", "fail": "failed", "error": "error"}


def worker_id() -> str:
    """``host:pid`` of this process, recorded on the runs it holds."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _aware(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=timezone.utc) if value is not None and value.tzinfo is None else value


def owner_is_gone(worker: str | None, lease_until: datetime | None, now: datetime | None = None) -> bool:
    """Whether the process holding a run is dead: its lease expired, or it ran here and its pid is gone."""
    now = now or utcnow()
    lease = _aware(lease_until)
    if worker is None or lease is None or lease < now:
        return True
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _take(session: Session, run: Run, *, worker: str, max_retries: int, lease_s: float) -> Run | None:
    seen_status, seen_attempts = run.status, run.attempts
    session.commit()  # end the read transaction before writing (SQLite)
    now = utcnow()
    guard = (Run.id == run.id, Run.status == seen_status, Run.attempts == seen_attempts)
    if seen_attempts >= 1 + max_retries:
        reason = (f"the run stopped its worker {seen_attempts} time(s) (worker killed, out of memory or crashed "
                  f"mid-run); gave up after {max_retries} retries (GRADGUARD_MAX_RETRIES)")
        result = session.execute(update(Run).where(*guard).values(status="error", error=reason, finished_at=now,
                                                                  worker=None, lease_until=None))
        session.commit()
        if result.rowcount == 1:
            _update_branch_head(session, session.get(Run, run.id, populate_existing=True))  # type: ignore[arg-type]
        return None
    result = session.execute(update(Run).where(*guard).values(
        status="running", worker=worker, attempts=seen_attempts + 1, started_at=now,
        lease_until=now + timedelta(seconds=lease_s), error=None))
    session.commit()
    if result.rowcount != 1:
        return None
    session.refresh(run)
    return run


def claim_run(session: Session, *, run_id: int, worker: str, max_retries: int, lease_s: float) -> Run | None:
    """Take run ``run_id`` (queued, or running under a dead worker); None if it is not ours to run."""
    run = session.get(Run, run_id, populate_existing=True)
    if run is None or run.status not in ("queued", "running"):
        session.commit()
        return None
    if run.status == "running" and not owner_is_gone(run.worker, run.lease_until):
        session.commit()
        return None
    return _take(session, run, worker=worker, max_retries=max_retries, lease_s=lease_s)


def claim_next(session: Session, *, devices: tuple[str, ...], worker: str, max_retries: int,
               lease_s: float) -> Run | None:
    """Take the oldest queued run for one of ``devices``; None when there is none."""
    for _ in range(8):
        candidates = session.scalars(select(Run).where(Run.status == "queued", Run.device.in_(devices))
                                     .order_by(Run.id).limit(4).execution_options(populate_existing=True)).all()
        if not candidates:
            session.commit()
            return None
        for run in candidates:
            if run.status != "queued":
                continue
            taken = _take(session, run, worker=worker, max_retries=max_retries, lease_s=lease_s)
            if taken is not None:
                return taken
    return None


def renew_lease(session: Session, *, run_id: int, worker: str, lease_s: float) -> bool:
    """Extend the lease of a run this worker holds; False if it no longer holds it."""
    result = session.execute(update(Run).where(Run.id == run_id, Run.worker == worker, Run.status == "running")
                             .values(lease_until=utcnow() + timedelta(seconds=lease_s)))
    session.commit()
    return result.rowcount == 1


def fail_run(session: Session, *, run_id: int, worker: str | None, reason: str) -> bool:
    """End a run as ``error`` with ``reason`` (only if ``worker`` still holds it, when given)."""
    guard = [Run.id == run_id, Run.status.in_(("queued", "running"))]
    if worker is not None:
        guard.append(Run.worker == worker)
    result = session.execute(update(Run).where(*guard).values(
        status="error", error=reason, finished_at=utcnow(), worker=None, lease_until=None))
    session.commit()
    if result.rowcount == 1:
        _update_branch_head(session, session.get(Run, run_id, populate_existing=True))  # type: ignore[arg-type]
    return result.rowcount == 1


def finish_run(session: Session, *, run_id: int, worker: str, ok: bool, report: dict[str, Any] | None,
               level: str | None, reason: str | None, duration_s: float) -> str | None:
    """Store a sandbox outcome; returns the final status, or None if ``worker`` lost the run meanwhile.

    The report is untrusted (:mod:`service.reports`): it is validated, its rule verdicts and summary are
    recomputed from its findings, and the run's status comes from those, never from the report's own
    ``summary.verdict``. An invalid report is not stored; the run ends ``error`` saying why.
    """
    checked: Report | None = None
    if report is not None:
        try:
            checked = verdicts(validate_report(report))
        except InvalidReport as exc:
            ok, reason = False, f"the sandbox sent an invalid report ({exc})" + (f"; also: {reason}" if reason else "")
    if ok and checked is not None:
        status, error = run_status(checked)
    else:
        status, error = "error", reason or "the sandbox ended without a report"
    stored = None
    if checked is not None:
        checked.environment["sandbox"] = level
        stored = _json_safe(as_json(checked))
    summary = stored["summary"] if stored is not None and ok else None
    error = error[:4000] if error else error
    result = session.execute(update(Run).where(Run.id == run_id, Run.worker == worker, Run.status == "running")
                             .values(status=status, error=error, summary=summary, sandbox_level=level,
                                     duration_s=round(duration_s, 4), finished_at=utcnow(), lease_until=None))
    if result.rowcount != 1:
        session.rollback()
        return None
    if stored is not None:
        session.merge(ReportRow(run_id=run_id, report=stored))
        for rule in stored["rules"]:
            session.add(RuleResultRow(run_id=run_id, name=rule["name"], module=rule["module"],
                                      source_file=rule["source_file"], verdict=rule["verdict"],
                                      duration_s=rule["duration_s"], findings=len(rule["findings"])))
            session.add_all(FindingRow(run_id=run_id, rule=rule["name"], check_id=f["check_id"],
                                       severity=f["severity"], title=f["title"][:400], message=f["message"],
                                       location=(f["location"] or "")[:400] or None)
                            for f in rule["findings"])
    session.commit()
    _update_branch_head(session, session.get(Run, run_id, populate_existing=True))  # type: ignore[arg-type]
    return status


def _json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities as strings (PostgreSQL's JSON, like strict JSON, has no such
    numbers) and NUL characters replaced (PostgreSQL text cannot hold them)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def update_branch_head(session: Session, run: Run) -> None:
    """Point the (project, branch) cache at ``run`` unless a newer run already finished there (a run that
    ends without a worker, such as one reusing an identical bundle's verdict, calls this after its commit)."""
    _update_branch_head(session, run)


def _update_branch_head(session: Session, run: Run) -> None:
    """Point the (project, branch) cache at ``run`` unless a newer run already finished there."""
    for _ in range(3):
        try:
            head = session.get(BranchHead, (run.project_id, run.branch), with_for_update=True)
            if head is None:
                session.add(BranchHead(project_id=run.project_id, branch=run.branch, run_id=run.id, status=run.status,
                                       commit_sha=run.commit_sha, finished_at=run.finished_at))
            elif head.run_id <= run.id:
                head.run_id, head.status, head.commit_sha, head.finished_at = (
                    run.id, run.status, run.commit_sha, run.finished_at)
            session.commit()
            return
        except IntegrityError:  # two workers created the same head at once: read it again
            session.rollback()


def requeue_stale(session: Session) -> list[int]:
    """Put back to ``queued`` every ``running`` run whose worker is gone; return their ids.

    Attempts are not reset: the next claim counts, and ends the run as ``error`` when they are used up.
    """
    stale = [(r.id, r.attempts) for r in session.scalars(select(Run).where(Run.status == "running")).all()
             if owner_is_gone(r.worker, r.lease_until)]
    session.commit()
    requeued = []
    for run_id, attempts in stale:
        result = session.execute(update(Run).where(Run.id == run_id, Run.status == "running", Run.attempts == attempts)
                                 .values(status="queued", worker=None, lease_until=None))
        session.commit()
        if result.rowcount == 1:
            requeued.append(run_id)
    return requeued


def release_runs(session: Session, *, workers: list[str]) -> list[int]:
    """Put back to ``queued`` the runs that ``workers`` held when the service stopped them on purpose
    (a shutdown is not the run's fault, so its attempt is given back); return their ids."""
    held = session.scalars(select(Run.id).where(Run.status == "running", Run.worker.in_(workers))).all()
    session.commit()
    if held:
        session.execute(update(Run).where(Run.id.in_(held), Run.status == "running", Run.worker.in_(workers))
                        .values(status="queued", worker=None, lease_until=None, attempts=Run.attempts - 1))
        session.commit()
    return list(held)
