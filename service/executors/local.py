"""The local executor: a pool of worker processes next to the API (``gradguard serve``).

Each worker process loops: claim the oldest queued run for its devices from the database, run it
in the sandbox, store the outcome. A submission wakes them through a shared event; otherwise they
poll every ``GRADGUARD_POLL_INTERVAL_S``. A supervisor thread in the parent replaces dead workers
and requeues the run a dead worker held (attempts count; see :mod:`gradguard.service.lifecycle`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event

from sqlalchemy.orm import Session, sessionmaker

from gradguard.service import lifecycle
from gradguard.service.config import Settings
from gradguard.service.db import make_sessionmaker, session_scope

__all__ = ["LocalExecutor", "worker_loop"]

log = logging.getLogger("gradguard.executor.local")
_CTX = multiprocessing.get_context("spawn")


def worker_loop(settings: Settings, wake: Event, stop: Event, parent_pid: int) -> None:
    """Body of one pool process: claim, execute, repeat until ``stop`` (or the parent dies)."""
    from gradguard.service.heartbeat import start_worker  # imported here: the sandbox is only needed in workers
    from gradguard.service.worker import clean_scratch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s[%(process)d] %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    factory = make_sessionmaker(settings.database_url)
    me = lifecycle.worker_id()
    clean_scratch()
    hb = start_worker(settings, factory, worker=me, executor="local", devices=settings.local_devices)
    try:
        _claim_and_run(settings, factory, me, hb, wake, stop, parent_pid)
    finally:
        hb.stop()
        clean_scratch()


def _claim_and_run(settings: Settings, factory: sessionmaker[Session], me: str, hb, wake: Event, stop: Event,
                   parent_pid: int) -> None:  # type: ignore[no-untyped-def]
    from gradguard.service.worker import execute_claimed

    while not stop.is_set() and os.getppid() == parent_pid:
        if not hb.accepting:  # below the sandbox floor: claim nothing; /readyz says why
            stop.wait(settings.poll_interval_s)
            continue
        try:
            with factory() as session:
                run = lifecycle.claim_next(session, devices=settings.local_devices, worker=me,
                                           max_retries=settings.max_retries, lease_s=settings.lease_s)
        except Exception:
            log.exception("could not claim a run; retrying")
            run = None
            time.sleep(settings.poll_interval_s)
        if run is None:
            wake.wait(settings.poll_interval_s)
            wake.clear()
            continue
        try:
            execute_claimed(factory, run, worker=me, settings=settings)
        except Exception:  # e.g. the database went away: the run's lease lapses and it is requeued
            log.exception("run %s could not be executed; its lease will lapse and it will be requeued", run.id)
            time.sleep(settings.poll_interval_s)


class LocalExecutor:
    name = "local"

    def __init__(self, settings: Settings, factory: sessionmaker[Session], *, workers: int) -> None:
        self.settings, self.factory, self.size = settings, factory, workers
        self.wake: Event = _CTX.Event()
        self.stopping: Event = _CTX.Event()
        self.procs: list[BaseProcess] = []
        self._supervisor: threading.Thread | None = None
        self._lock = threading.Lock()
        self._started: dict[int, float] = {}
        self.grace_s = 10.0  # how long stop() lets a running run finish

    def accepts(self, device: str) -> bool:
        return device in self.settings.local_devices

    def start(self) -> None:
        try:
            with session_scope(self.factory) as session:
                requeued = lifecycle.requeue_stale(session)
            if requeued:
                log.warning("requeued runs left running by a dead process: %s", requeued)
        except Exception:  # the API still starts; /readyz reports the database, the supervisor retries
            log.exception("could not requeue stale runs at start-up (database unreachable?)")
        if self.size <= 0:
            return
        with self._lock:
            self.procs = [self._spawn() for _ in range(self.size)]
        self._quick_deaths = 0
        self._respawn_after = 0.0
        self._supervisor = threading.Thread(target=self._supervise, name="gradguard-pool", daemon=True)
        self._supervisor.start()

    def _spawn(self) -> BaseProcess:
        proc = _CTX.Process(target=worker_loop, args=(self.settings, self.wake, self.stopping, os.getpid()),
                            name="gradguard-worker", daemon=True)
        proc.start()
        self._started[proc.pid] = time.monotonic()  # type: ignore[index]
        return proc

    def _supervise(self) -> None:
        last_sweep = time.monotonic()
        while not self.stopping.wait(1.0):
            with self._lock:
                dead = [p for p in self.procs if not p.is_alive()]
                if dead and time.monotonic() >= self._respawn_after:
                    for proc in dead:
                        lived = time.monotonic() - self._started.pop(proc.pid, 0.0)  # type: ignore[arg-type]
                        # A worker that dies right after starting (bad configuration, broken install)
                        # is restarted with a growing delay instead of in a tight loop.
                        self._quick_deaths = self._quick_deaths + 1 if lived < 5 else 0
                        log.warning("worker %s exited with %s after %.1f s; starting a new one", proc.pid,
                                    proc.exitcode, lived)
                        self.procs[self.procs.index(proc)] = self._spawn()
                    from gradguard.service.worker import clean_scratch

                    clean_scratch()  # the dead worker's copy of the submitted files
                    if self._quick_deaths:
                        self._respawn_after = time.monotonic() + min(60.0, 2.0 ** self._quick_deaths)
            if dead or time.monotonic() - last_sweep > self.settings.lease_s / 4:
                last_sweep = time.monotonic()
                try:
                    with session_scope(self.factory) as session:
                        if lifecycle.requeue_stale(session):
                            self.wake.set()
                except Exception:
                    log.exception("could not requeue stale runs")

    def submit(self, run_id: int, device: str) -> None:
        self.wake.set()

    def stop(self) -> None:
        """Let running runs finish for ``grace_s``; stop the rest and put their runs back, attempt refunded."""
        self.stopping.set()
        self.wake.set()
        deadline = time.monotonic() + self.grace_s
        with self._lock:
            for proc in self.procs:
                proc.join(max(0.0, deadline - time.monotonic()))
            stopped = []
            for proc in self.procs:
                if proc.is_alive():
                    proc.kill()
                    proc.join(2)
                    stopped.append(f"{socket.gethostname()}:{proc.pid}")
            self.procs = []
        if stopped:
            try:
                with session_scope(self.factory) as session:
                    released = lifecycle.release_runs(session, workers=stopped)
                log.warning("shutting down: runs %s go back to the queue", released)
            except Exception:
                log.exception("could not release the runs of stopped workers; they are requeued at next start")
        if self._supervisor is not None:
            self._supervisor.join(2)

    def pids(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self.procs if p.pid is not None and p.is_alive()]

    def health(self) -> tuple[bool, dict[str, object]]:
        alive = len(self.pids())
        detail: dict[str, object] = {"executor": "local", "workers": self.size, "alive": alive,
                                     "devices": list(self.settings.local_devices)}
        return (alive > 0 or self.size == 0), detail
