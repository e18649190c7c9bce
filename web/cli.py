"""``gradguard serve``: API, pages and the local executor in one process, on SQLite by default."""

from __future__ import annotations

import logging

import click

__all__ = ["serve"]


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--demo", is_flag=True, help="Create a public 'demo' project and check the modules in examples/.")
@click.option("--workers", type=click.IntRange(0, 64), default=None,
              help="Local executor processes [default: GRADGUARD_LOCAL_WORKERS, 2].")
def serve(host: str, port: int, demo: bool, workers: int | None) -> None:
    """Serve the API (and pages) with the local executor; migrates the database first."""
    import uvicorn

    from gradguard.service.cli import load_settings
    from gradguard.service.db import make_sessionmaker
    from gradguard.service.dbhealth import EmptyDatabase, prepare
    from gradguard.web.app import create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = load_settings(local_workers=workers)
    settings, generated = settings.with_admin_token()
    try:
        prepare(settings)
    except EmptyDatabase as exc:
        raise click.UsageError(str(exc)) from exc
    base = f"http://{host}:{port}"
    click.echo(f"gradguard: database {settings.database_url.split('@')[-1]}, executor {settings.executor}")
    if generated:
        click.echo(f"admin token (generated for this process; set GRADGUARD_ADMIN_TOKEN to keep one): {generated}")
    if demo:
        _seed(settings, make_sessionmaker(settings.database_url), base)
    click.echo(f"dashboard: {base}/   API docs: {base}/docs   health: {base}/readyz")
    uvicorn.run(create_app(settings), host=host, port=port, log_level="info")


def _seed(settings, factory, base: str) -> None:  # type: ignore[no-untyped-def]
    from gradguard.service.demo import DEMO_SLUG, find_examples, seed_demo

    examples = find_examples()
    if examples is None:
        raise click.UsageError("--demo needs an examples/ folder with rule modules (run from a source checkout).")
    token, runs, skipped = seed_demo(factory, examples)
    if settings.executor == "celery":
        from gradguard.service.executors.celery import CeleryExecutor

        executor = CeleryExecutor(settings, factory)
        for run_id, device in runs:
            executor.submit(run_id, device)
    if token:
        click.echo(f"demo project token (shown once): {token}")
    for name, packages in skipped.items():
        click.echo(f"demo: {name} left out: it imports {', '.join(packages)}, not installed here "
                   "(install it and restart to see that module checked too)")
    click.echo(f"demo: {len(runs)} runs of {examples} queued; verdicts appear within a minute at")
    click.echo(f"  {base}/p/{DEMO_SLUG}   (API: {base}/api/v1/projects/{DEMO_SLUG}/branches)")
    for run_id, _ in runs:
        click.echo(f"  {base}/runs/{run_id}   (API: {base}/api/v1/runs/{run_id})")
