"""``gradguard serve --demo``: a public ``demo`` project: two runs on its default branch (the correct rules,
then every example) and one run per module in ``examples/`` on its own branch."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from gradguard.service import crud
from gradguard.service.db import session_scope
from gradguard.service.errors import NotFound
from gradguard.service.models import Project
from gradguard.service.schemas import ProjectCreate, RunOptions

__all__ = ["find_examples", "missing_packages", "seed_demo", "DEMO_SLUG"]

DEMO_SLUG = "demo"


def find_examples(start: Path | None = None) -> Path | None:
    """``examples/`` in the current folder, or in the source checkout this package runs from."""
    for root in (start or Path.cwd(), Path(__file__).resolve().parents[1]):
        candidate = root / "examples"
        if candidate.is_dir() and any(candidate.glob("*.py")):
            return candidate
    return None


def missing_packages(module: Path) -> list[str]:
    """The top-level packages ``module`` imports at its top level that this environment cannot import.

    The demo leaves such a module out (``examples/torch_rules.py`` where PyTorch is not installed) rather than queue
    a run that can only end in an import error; a module of the examples folder itself is not a package to find.
    """
    names: set[str] = set()
    for node in ast.parse(module.read_bytes(), filename=str(module)).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    local = {path.stem for path in module.parent.glob("*.py")}
    return sorted(name for name in names - local if importlib.util.find_spec(name) is None)


def seed_demo(factory: sessionmaker[Session],
              examples: Path) -> tuple[str | None, list[tuple[int, str]], dict[str, list[str]]]:
    """Create the demo project if missing and queue one run per example module whose imports are installed.

    Returns the project's token (None if the project already existed), ``[(run_id, device)]`` and the modules
    left out, each with the packages it needs.
    """
    token = None
    with session_scope(factory) as session:
        try:
            project: Project = crud.get_project(session, slug=DEMO_SLUG)
        except NotFound:
            project, token = crud.create_project(session, data=ProjectCreate(slug=DEMO_SLUG, name="gradguard demo"))
        runs = []
        modules, skipped = [], {}
        for module in sorted(examples.glob("*.py")):
            if module.name.startswith("_"):
                continue
            if missing := missing_packages(module):
                skipped[module.name] = missing
            else:
                modules.append(module)
        # The default branch first, so the project page, its badge and its history show verdicts at first
        # sight: a passing commit (the correct rules), then one with every example (the seeded bugs).
        correct = [m for m in modules if m.stem.startswith("correct")] or modules[:1]
        for commit, chosen in (("demo-1", correct), ("demo-2", modules)):
            options = RunOptions(branch=project.default_branch, commit=commit)
            run = crud.create_run(session, project=project, options=options,
                                  files={m.name: m.read_bytes() for m in chosen})
            runs.append((run.id, run.device))
        for module in modules:
            options = RunOptions(branch=f"examples/{module.stem}", commit="demo")
            run = crud.create_run(session, project=project, options=options, files={module.name: module.read_bytes()})
            runs.append((run.id, run.device))
    return token, runs, skipped
