"""Execute one run: claim it, unpack its files into a private folder, run the checker in the
sandbox, store the outcome. Both executors (local pool, Celery) call :func:`execute_claimed`.
"""

from __future__ import annotations

import logging
import math
import threading
import time

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
    try:
        with factory() as session:
            status = lifecycle.finish_run(session, run_id=run.id, worker=worker, ok=outcome.ok, report=outcome.report,
                                          level=outcome.level, reason=outcome.reason, duration_s=outcome.duration_s)
    except Exception as exc:  # e.g. a report the database refuses: end the run, keep the worker
        log.exception("could not store the outcome of run %s", run.id)
        with factory() as session:
            lifecycle.fail_run(session, run_id=run.id, worker=worker,
                               reason=f"internal error while storing the report: {type(exc).__name__}: {exc}"[:2000])
        return "error"
    log.info("run %s: %s in %.2f s (sandbox %s)%s", run.id, status, time.monotonic() - started, outcome.level,
             f": {outcome.reason}" if outcome.reason else "")
    return status


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

