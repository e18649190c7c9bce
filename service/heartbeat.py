"""Workers record the sandbox level they actually have; ``/readyz`` reads it.

    hb = start_worker(settings, factory, executor="local", devices=("cpu",))
    if hb.accepting: ...claim runs...       # False: below GRADGUARD_SANDBOX_MIN_LEVEL, claims nothing
    hb.stop()                               # a clean exit removes the worker's row

Each worker process detects its level once (by starting a real sandbox), logs it (loudly when it
is ``rlimits`` or below the floor), and keeps one ``workers`` row up to date every
``GRADGUARD_WORKER_HEARTBEAT_S``. :func:`readiness` takes the rows seen within three periods: the
service is not ready while any of them is below the configured minimum.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from gradguard.service.config import Settings
from gradguard.service.models import WorkerRow, utcnow

__all__ = ["Heartbeat", "start_worker", "readiness", "LIVE_PERIODS"]

log = logging.getLogger("gradguard.worker")
LIVE_PERIODS = 3  # a worker not seen for this many heartbeat periods is presumed gone
_FORGET_AFTER = timedelta(days=1)  # rows of workers that died without a clean exit


class Heartbeat(threading.Thread):
    """One worker process's row in ``workers``, renewed every ``period_s`` until :meth:`stop`."""

    def __init__(self, factory: sessionmaker[Session], *, worker: str, executor: str, devices: tuple[str, ...],
                 level: str, min_level: str, period_s: float) -> None:
        super().__init__(name="gradguard-heartbeat", daemon=True)
        self.factory, self.worker, self.period_s = factory, worker, period_s
        self.executor, self.devices, self.level, self.min_level = executor, list(devices), level, min_level
        self.started_at = utcnow()
        self.stopped = threading.Event()

    @property
    def accepting(self) -> bool:
        from gradguard.service.sandbox import meets

        return meets(self.level, self.min_level)

    def beat(self) -> None:
        with self.factory() as session:
            session.merge(WorkerRow(id=self.worker, executor=self.executor, devices=self.devices,
                                    sandbox_level=self.level, min_level=self.min_level,
                                    started_at=self.started_at, last_seen=utcnow()))
            session.commit()

    def run(self) -> None:
        while not self.stopped.wait(self.period_s):
            try:
                self.beat()
            except Exception:  # a missed beat only makes /readyz forget this worker for a while
                log.exception("could not record the heartbeat of worker %s", self.worker)

    def stop(self) -> None:
        """Stop beating and remove this worker's row."""
        self.stopped.set()
        try:
            with self.factory() as session:
                session.execute(delete(WorkerRow).where(WorkerRow.id == self.worker))
                session.commit()
        except Exception:
            log.exception("could not remove the heartbeat of worker %s", self.worker)


def start_worker(settings: Settings, factory: sessionmaker[Session], *, worker: str, executor: str,
                 devices: tuple[str, ...]) -> Heartbeat:
    """Detect this process's sandbox level, say it in the log, record it, and keep it recorded."""
    from gradguard.service.sandbox import refusal, sandbox_level

    level = sandbox_level()
    hb = Heartbeat(factory, worker=worker, executor=executor, devices=devices, level=level,
                   min_level=settings.sandbox_min_level, period_s=settings.worker_heartbeat_s)
    refused = refusal(level, settings.sandbox_min_level)
    if refused:
        log.error("!!! worker %s checks NOTHING: %s", worker, refused)
    elif level == "rlimits":
        log.warning("!!! INSECURE SANDBOX: worker %s runs submissions at the 'rlimits' level "
                    "(GRADGUARD_SANDBOX_INSECURE=true): they can read this host's files and reach its network "
                    "and database. Use it for trusted code only.", worker)
    else:
        log.info("worker %s: sandbox level %s (minimum %s)", worker, level, settings.sandbox_min_level)
    try:
        with factory() as session:
            session.execute(delete(WorkerRow).where(WorkerRow.last_seen < utcnow() - _FORGET_AFTER))
            session.commit()
        hb.beat()
    except Exception:
        log.exception("could not record the heartbeat of worker %s", worker)
    hb.start()
    return hb


def readiness(factory: sessionmaker[Session], settings: Settings) -> tuple[bool, dict[str, Any]]:
    """(ok, detail) for ``/readyz``: every live worker's level; not ok when one is below the minimum."""
    from gradguard.service.sandbox import meets

    cutoff = utcnow() - timedelta(seconds=LIVE_PERIODS * settings.worker_heartbeat_s)
    with factory() as session:
        rows = session.scalars(select(WorkerRow).where(WorkerRow.last_seen >= cutoff).order_by(WorkerRow.id)).all()
    workers = [{"worker": r.id, "executor": r.executor, "devices": r.devices, "level": r.sandbox_level,
                "ok": meets(r.sandbox_level, settings.sandbox_min_level)} for r in rows]
    detail: dict[str, Any] = {"minimum": settings.sandbox_min_level, "insecure": settings.sandbox_insecure,
                              "workers": workers}
    below = [w["worker"] for w in workers if not w["ok"]]
    if below:
        detail["problem"] = (f"worker(s) {', '.join(below)} below the minimum sandbox level "
                             f"'{settings.sandbox_min_level}': they refuse every run")
    return not below, detail
