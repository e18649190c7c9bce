"""The Celery executor: Redis broker, one queue per device (``cpu``, ``gpu``), workers anywhere.

A message carries only the run id; the worker reads the files from the database. Late
acknowledgement plus ``reject_on_worker_lost`` put the message back when the worker process
dies mid-run; the redelivered task claims the run again, which counts an attempt, and a run whose
attempts are used up ends ``error`` instead of being run again (:mod:`gradguard.service.lifecycle`).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from celery import Celery
from celery.signals import worker_ready, worker_shutdown
from sqlalchemy import select
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from gradguard.service import lifecycle
from gradguard.service.config import Settings
from gradguard.service.db import make_sessionmaker, session_scope
from gradguard.service.models import Run, utcnow

__all__ = ["CeleryExecutor", "make_celery", "TASK_NAME"]

log = logging.getLogger("gradguard.executor.celery")
TASK_NAME = "gradguard.execute_run"


def make_celery(settings: Settings) -> Celery:
    """A Celery app for ``settings`` with the run task registered."""
    app = Celery("gradguard", broker=settings.broker_url, set_as_current=False)
    visibility = int(2 * (settings.run_wall_s + settings.lease_s))
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        task_default_queue=settings.queue_name("cpu"),
        task_create_missing_queues=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": visibility},
        task_serializer="json",
        accept_content=["json"],
    )

    # A database outage must not drop the message (a failed task is acknowledged): retry until it is back.
    @app.task(name=TASK_NAME, bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None,
              autoretry_for=(OperationalError, InterfaceError), retry_backoff=True, retry_backoff_max=60)
    def execute_run(task, run_id: int) -> str | None:  # type: ignore[no-untyped-def]
        from gradguard.service.sandbox import refusal, sandbox_level
        from gradguard.service.worker import execute_claimed

        if refusal(sandbox_level(), settings.sandbox_min_level):  # below the floor: leave it to a worker that may
            raise task.retry(countdown=min(60.0, settings.lease_s))
        factory = make_sessionmaker(settings.database_url)
        me = lifecycle.worker_id()
        with factory() as session:
            run = lifecycle.claim_run(session, run_id=run_id, worker=me, max_retries=settings.max_retries,
                                      lease_s=settings.lease_s)
        if run is not None:
            return execute_claimed(factory, run, worker=me, settings=settings)
        with factory() as session:
            current = session.get(Run, run_id)
            if current is not None and current.status == "running" and current.lease_until is not None:
                # Held by a worker we cannot see (another machine): look again once its lease could expire.
                raise task.retry(countdown=min(60.0, settings.lease_s))
        return None

    app.gradguard_settings = settings  # type: ignore[attr-defined]
    return app


def _redispatch_stale(app: Celery, settings: Settings, factory: sessionmaker[Session], *,
                      orphans: bool = False) -> list[int]:
    """Requeue runs whose worker died and send them again; with ``orphans``, also resend runs queued
    for longer than a lease (their message may have been lost with a broker). Extra messages are
    harmless: a claim of a run that is not claimable does nothing."""
    with session_scope(factory) as session:
        requeued = lifecycle.requeue_stale(session)
        query = select(Run.id, Run.device).where(Run.id.in_(requeued))
        if orphans:
            cutoff = utcnow() - timedelta(seconds=settings.lease_s)
            query = select(Run.id, Run.device).where(
                Run.id.in_(requeued) | ((Run.status == "queued") & (Run.created_at < cutoff)))
        runs = session.execute(query).all()
    for run_id, device in runs:
        app.send_task(TASK_NAME, args=[run_id], queue=settings.queue_name(device))
    if runs:
        log.warning("sent again runs left running by a dead process or queued without a worker: %s",
                    [run_id for run_id, _ in runs])
    return [run_id for run_id, _ in runs]


_HEARTBEAT: list = []  # the worker's heartbeat (main process), stopped at shutdown


@worker_ready.connect
def _requeue_on_worker_start(sender=None, **_kwargs) -> None:  # type: ignore[no-untyped-def]
    app = getattr(sender, "app", None)
    settings = getattr(app, "gradguard_settings", None)
    if settings is not None:
        from gradguard.service.heartbeat import start_worker
        from gradguard.service.worker import clean_scratch

        clean_scratch()

        factory = make_sessionmaker(settings.database_url)
        queues = set(getattr(getattr(app.amqp, "queues", None), "consume_from", None) or ())
        devices = tuple(d for d in ("cpu", "gpu") if settings.queue_name(d) in queues)
        _HEARTBEAT.append(start_worker(settings, factory, worker=lifecycle.worker_id(), executor="celery",
                                       devices=devices))
        _redispatch_stale(app, settings, factory)


@worker_shutdown.connect
def _forget_on_worker_stop(**_kwargs) -> None:  # type: ignore[no-untyped-def]
    while _HEARTBEAT:
        _HEARTBEAT.pop().stop()
        from gradguard.service.worker import clean_scratch

        clean_scratch()  # the pool's processes are gone by now: whatever they left is removed


class CeleryExecutor:
    name = "celery"

    def __init__(self, settings: Settings, factory: sessionmaker[Session]) -> None:
        self.settings, self.factory = settings, factory
        self.app = make_celery(settings)

    def accepts(self, device: str) -> bool:
        return True  # GPU workers may join at any time; the run waits in the gpu queue

    def start(self) -> None:
        try:
            _redispatch_stale(self.app, self.settings, self.factory, orphans=True)
        except Exception:
            log.exception("could not requeue stale runs at start-up (broker down?)")

    def stop(self) -> None:
        self.app.close()

    def submit(self, run_id: int, device: str) -> None:
        self.app.send_task(TASK_NAME, args=[run_id], queue=self.settings.queue_name(device))

    def queue_lengths(self) -> dict[str, int]:
        with self.app.connection_for_read() as conn:
            client = conn.default_channel.client
            return {d: int(client.llen(self.settings.queue_name(d))) for d in ("cpu", "gpu")}

    def health(self) -> tuple[bool, dict[str, object]]:
        detail: dict[str, object] = {"executor": "celery", "queues": [self.settings.queue_name(d) for d in ("cpu", "gpu")]}
        started = time.monotonic()
        try:
            with self.app.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
            detail["broker"] = "ok"
            detail["broker_messages"] = self.queue_lengths()
        except Exception as exc:
            detail["broker"] = f"unreachable: {type(exc).__name__}: {exc}"
            return False, detail
        detail["broker_latency_ms"] = round(1000 * (time.monotonic() - started), 1)
        return True, detail
