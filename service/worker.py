"""Execute one run: claim it, unpack its files into a private folder, run the checker in the
sandbox, store the outcome. Both executors (local pool, Celery) call :func:`execute_claimed`.
"""

from __future__ import annotations

import logging
import math
import threading
import time

from sqlalchemy.exc import InterfaceError, InternalError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from gradguard.service import crud, lifecycle, scratch
from gradguard.service.bundles import materialize
from gradguard.service.config import Settings
from gradguard.service.models import Run
from gradguard.service.sandbox import Limits, run_check

__all__ = ["execute_claimed", "limits_from_settings", "rule_timeout_of", "clean_scratch"]

log = logging.getLogger("gradguard.worker")


def rule_timeout_of(run: Run, settings: Settings) -> float:
    """The run's own per-rule time limit when it is a usable one (below the wall limit), else the server's."""
    asked = run.rule_timeout_s
    if isinstance(asked, (int, float)) and math.isfinite(asked) and 0 < asked < settings.run_wall_s:
        return float(asked)
    return settings.default_rule_timeout_s


def limits_from_settings(settings: Settings) -> Limits:
    return Limits(wall_s=settings.run_wall_s, cpu_s=settings.run_cpu_s, memory_mb=settings.run_memory_mb)


class _Heartbeat(threading.Thread):
    """Renew the run's lease while the sandbox works, so nobody takes it over as stale."""

    def __init__(self, factory: sessionmaker[Session], run_id: int, worker: str, lease_s: float) -> None:
        super().__init__(name=f"lease-{run_id}", daemon=True)
        self.factory, self.run_id, self.worker, self.lease_s = factory, run_id, worker, lease_s
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.lease_s / 4):
            try:
                with self.factory() as session:
                    lifecycle.renew_lease(session, run_id=self.run_id, worker=self.worker, lease_s=self.lease_s)
            except Exception:  # a missed heartbeat only shortens the lease
                log.exception("could not renew the lease of run %s", self.run_id)


def execute_claimed(factory: sessionmaker[Session], run: Run, *, worker: str, settings: Settings) -> str | None:
    """Run the checker on a run this worker has claimed; returns the final status (None if it lost the run)."""
    with factory() as session:
        files = crud.load_files(session, run_id=run.id)
    heartbeat = _Heartbeat(factory, run.id, worker, settings.lease_s)
    heartbeat.start()
    started = time.monotonic()
    try:
        clean_scratch()  # what a killed worker left: copies of submitted files
        with scratch.folder("gradguard-run-", f"{run.id}-") as tmp:
            bundle = materialize(files, tmp)
            outcome = run_check(bundle, select=run.select_checks, ignore=run.ignore_checks, seed=run.seed,
                                max_examples=run.max_examples or settings.default_max_examples, device=run.device,
                                rule_timeout_s=rule_timeout_of(run, settings),
                                rule_memory_mb=settings.default_rule_memory_mb,
                                limits=limits_from_settings(settings), min_level=settings.sandbox_min_level)
    except Exception as exc:  # the service's own failure, not the rule's: record it, never leave it running
        log.exception("run %s failed outside the sandbox", run.id)
        heartbeat.stopped.set()
        with factory() as session:
            lifecycle.fail_run(session, run_id=run.id, worker=worker,
                               reason=f"internal error while running the sandbox: {type(exc).__name__}: {exc}")
        return "error"
    finally:
        heartbeat.stopped.set()
    def finish() -> str | None:
        with factory() as session:
            return lifecycle.finish_run(session, run_id=run.id, worker=worker, ok=outcome.ok, report=outcome.report,
                                        level=outcome.level, reason=outcome.reason, duration_s=outcome.duration_s)

    try:
        status = _stored(factory, finish, run.id, patience_s=settings.lease_s / 2)
    except Exception as exc:  # e.g. a report the database refuses: end the run, keep the worker
        log.exception("could not store the outcome of run %s", run.id)

        def fail() -> bool:
            with factory() as session:
                return lifecycle.fail_run(session, run_id=run.id, worker=worker, reason=(
                    f"internal error while storing the report: {type(exc).__name__}: {exc}")[:2000])

        try:
            _stored(factory, fail, run.id, patience_s=settings.lease_s / 4)
        except Exception:  # the database takes no write at all: its lease lapses and another worker retries
            log.exception("could not record that run %s failed; it is retried when its lease lapses", run.id)
        return "error"
    log.info("run %s: %s in %.2f s (sandbox %s)%s", run.id, status, time.monotonic() - started, outcome.level,
             f": {outcome.reason}" if outcome.reason else "")
    return status


_RETRY_FIRST_S = 0.25
# what a database that is down, failing over or read-only raises (PostgreSQL's "read-only transaction"
# is an InternalError; SQLite's "readonly database" an OperationalError)
_UNAVAILABLE = (OperationalError, InterfaceError, InternalError)


def _stored(factory: sessionmaker[Session], write, run_id: int, *, patience_s: float):  # type: ignore[no-untyped-def]
    """``write()``, retried on a database error with fresh connections (a failed-over or re-opened database
    is reached by new ones, not by the pooled ones) for up to ``patience_s``; then the last error is raised.
    Only the database's unavailability is retried (lost connection, read-only); a report it refuses for
    its content fails at once."""
    deadline = time.monotonic() + patience_s
    delay = _RETRY_FIRST_S
    while True:
        try:
            return write()
        except _UNAVAILABLE:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("run %s: the database took no write; retrying in %.2f s with new connections", run_id, delay,
                        exc_info=True)
            engine = factory.kw.get("bind")
            if engine is not None:
                engine.dispose()
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def clean_scratch() -> None:
    """At a worker's start, before each run and at its exit: remove the copies of submitted files that
    dead workers left in the temp folder (a run's unpacked bundle, a sandbox's stage)."""
    try:
        removed = scratch.remove_orphans()
    except OSError:
        log.exception("could not remove the temporary folders of dead workers")
        return
    if removed:
        log.warning("removed temporary folders left by dead workers: %s", ", ".join(removed))

