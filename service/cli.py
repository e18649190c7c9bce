"""Service commands, plugged into ``gradguard`` through the ``gradguard.commands`` entry points:

    gradguard worker --queue cpu|gpu --concurrency N     a Celery worker for one device queue
    gradguard migrate                                     apply database migrations

Also runnable as ``python -m gradguard.service.cli worker ...``.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import uuid

import click
from pydantic import ValidationError

from gradguard.service.config import Settings

__all__ = ["worker", "migrate", "main", "load_settings"]


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, or a usage error (exit 2) naming the variable to fix."""
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise click.UsageError(f"invalid GRADGUARD_* configuration:\n{exc}") from exc


@click.command("worker")
@click.option("--queue", "device", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True,
              help="Which device queue to serve. A gpu run is only ever picked by a gpu worker.")
@click.option("--concurrency", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Runs at once (worker processes).")
@click.option("--loglevel", default="INFO", show_default=True)
def worker(device: str, concurrency: int, loglevel: str) -> None:
    """Run a Celery worker that executes queued runs in the sandbox (GRADGUARD_EXECUTOR=celery)."""
    from gradguard.service.executors.celery import make_celery

    settings = load_settings()
    logging.basicConfig(level=loglevel.upper(), format="%(asctime)s %(name)s[%(process)d] %(message)s")
    app = make_celery(settings)
    queue = settings.queue_name(device)
    name = f"{device}-{os.getpid()}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    click.echo(f"gradguard worker: queue {queue!r}, concurrency {concurrency}, broker {_safe(settings.broker_url)}")
    app.worker_main(["worker", "--queues", queue, "--concurrency", str(concurrency), "--loglevel", loglevel,
                     "--hostname", name, "--pool", "prefork", "--without-gossip", "--without-mingle"])


@click.command("migrate")
@click.option("--database-url", default=None, help="Defaults to GRADGUARD_DATABASE_URL.")
@click.option("--revision", default="head", show_default=True)
def migrate(database_url: str | None, revision: str) -> None:
    """Bring the database schema up to date (idempotent; run before starting API and workers)."""
    from gradguard.service.migrate import upgrade

    settings = load_settings(database_url=database_url)
    upgrade(settings.database_url, revision)
    click.echo(f"database {_safe(settings.database_url)} is at revision {revision}")


def _safe(url: str) -> str:
    """``url`` without its password, for printing."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1]


main = click.Group("gradguard-service", commands=[worker, migrate], help="Service commands.")

if __name__ == "__main__":
    sys.exit(main())
