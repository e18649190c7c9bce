"""``gradguard serve --demo``: a public ``demo`` project with one run per module in ``examples/``."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from gradguard.service import crud
from gradguard.service.db import session_scope
from gradguard.service.errors import NotFound
from gradguard.service.models import Project
from gradguard.service.schemas import ProjectCreate, RunOptions

__all__ = ["find_examples", "seed_demo", "DEMO_SLUG"]

DEMO_SLUG = "demo"


def find_examples(start: Path | None = None) -> Path | None:
    """``examples/`` in the current folder, or in the source checkout this package runs from."""
    for root in (start or Path.cwd(), Path(__file__).resolve().parents[1]):
        candidate = root / "examples"
        if candidate.is_dir() and any(candidate.glob("*.py")):
            return candidate
    return None


def seed_demo(factory: sessionmaker[Session], examples: Path) -> tuple[str | None, list[tuple[int, str]]]:
    """Create the demo project if missing and queue one run per example module.

    Returns the project's token (None if the project already existed) and ``[(run_id, device)]``.
    """
    token = None
    with session_scope(factory) as session:
        try:
            project: Project = crud.get_project(session, slug=DEMO_SLUG)
        except NotFound:
            project, token = crud.create_project(session, data=ProjectCreate(slug=DEMO_SLUG, name="gradguard demo"))
        runs = []
        for module in sorted(examples.glob("*.py")):
            if module.name.startswith("_"):
                continue
            options = RunOptions(branch=f"examples/{module.stem}", commit="demo")
            run = crud.create_run(session, project=project, options=options, files={module.name: module.read_bytes()})
            runs.append((run.id, run.device))
    return token, runs
