"""Executors decide *where* queued runs execute; the database decides *what* state they are in.

    local    a pool of worker processes inside ``gradguard serve`` (default; nothing else to run)
    celery   Celery over Redis: queues ``cpu`` and ``gpu``, ``gradguard worker`` on any machine

Both implement :class:`Executor`; :func:`make_executor` picks one from ``GRADGUARD_EXECUTOR``.
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from gradguard.service.config import Settings

__all__ = ["Executor", "make_executor"]


class Executor(Protocol):
    name: str

    def start(self) -> None:
        """Requeue runs left ``running`` by dead processes, then begin dispatching."""

    def stop(self) -> None: ...

    def submit(self, run_id: int, device: str) -> None:
        """Dispatch a run that is committed as ``queued``."""

    def accepts(self, device: str) -> bool:
        """Whether a run for ``device`` can ever be picked up by this deployment."""

    def health(self) -> tuple[bool, dict[str, object]]:
        """(ready, details) for ``/readyz``."""


def make_executor(settings: Settings, factory: sessionmaker[Session], *, workers: int | None = None) -> Executor:
    """The executor ``settings.executor`` names; ``workers`` overrides the local pool size."""
    if settings.executor == "celery":
        from gradguard.service.executors.celery import CeleryExecutor

        return CeleryExecutor(settings, factory)
    from gradguard.service.executors.local import LocalExecutor

    return LocalExecutor(settings, factory, workers=settings.local_workers if workers is None else workers)
