"""Who may read and who may submit: the one access policy of the API, the pages and the badges.

    Credentials        what a request presents: its bearer token, and the tokens the token form
                       kept in cookies (cookies open pages for reading; they never authorize a write)
    can_read           public, or a credential is the project's token or the admin token
    readable_project   the project, or NotFound, the same answer for "missing" and "not yours"
    readable_run       the run of a readable project, or the same NotFound
    writable_project   a readable project whose submit token (or the admin token) is the bearer
    readable_projects  every project the credentials can read

The FastAPI dependencies that wrap these (``ReadableProject``, ``WritableProject``, ``ReadableRun``)
live in :mod:`service.api.deps`; the API and the pages both use them, so no route repeats a check.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from gradguard.service import crud
from gradguard.service.config import Settings
from gradguard.service.errors import Forbidden, NotFound, Unauthorized
from gradguard.service.models import MAX_INT, Project, Run
from gradguard.service.security import token_matches

__all__ = ["Credentials", "is_admin", "can_read", "readable_project", "readable_run", "writable_project",
           "readable_projects", "MAX_ID"]

MAX_ID = MAX_INT  # ids are 32-bit integers in the database; a larger one names nothing


@dataclass(frozen=True)
class Credentials:
    bearer: str | None = None
    cookies: tuple[str, ...] = ()

    @property
    def for_reading(self) -> tuple[str, ...]:
        return tuple(t for t in (self.bearer, *self.cookies) if t)


def is_admin(settings: Settings, token: str | None) -> bool:
    expected = settings.admin_token.get_secret_value() if settings.admin_token else None
    return bool(token and expected) and hmac.compare_digest(token.encode(), expected.encode())  # type: ignore[union-attr]


def _opens(settings: Settings, project: Project, token: str) -> bool:
    return token_matches(token, project.token_hash) or is_admin(settings, token)


def can_read(settings: Settings, project: Project, credentials: Credentials) -> bool:
    return project.public or any(_opens(settings, project, t) for t in credentials.for_reading)


def _no_project(slug: str) -> NotFound:
    return NotFound(f"project: no project named {slug!r} that you can see.", field="project",
                    fix="Check the slug; private projects need 'Authorization: Bearer <project or admin token>'. "
                        "GET /api/v1/projects lists the projects you can see.")


def readable_project(session: Session, *, settings: Settings, credentials: Credentials, slug: str) -> Project:
    """The project named ``slug`` if the credentials may read it; else the one NotFound for both cases."""
    try:
        project = crud.get_project(session, slug=slug)
    except NotFound:
        raise _no_project(slug) from None
    if not can_read(settings, project, credentials):
        raise _no_project(slug)
    return project


def readable_run(session: Session, *, settings: Settings, credentials: Credentials, run_id: int) -> Run:
    """Run ``run_id`` if its project is readable; else the one NotFound for "missing" and "not yours"."""
    run = None
    if 1 <= run_id <= MAX_ID:
        try:
            run = crud.get_run(session, run_id=run_id)
        except NotFound:
            pass
    if run is None or not can_read(settings, run.project, credentials):
        raise NotFound(f"run: no run with id {run_id} that you can see.", field="run",
                       fix="Use the id returned when the run was submitted; runs of private projects need "
                           "'Authorization: Bearer <project or admin token>'.")
    return run


def writable_project(session: Session, *, settings: Settings, credentials: Credentials, slug: str) -> Project:
    """The project named ``slug`` if the bearer token may submit to it. A project the request cannot
    even read answers as missing; one it can read answers 401 or 403, naming no token characters."""
    token = credentials.bearer
    project = readable_project(session, settings=settings, credentials=Credentials(bearer=token), slug=slug)
    if not token:
        raise Unauthorized("authorization: submitting a run needs the project's token.", field="authorization",
                           fix="Send 'Authorization: Bearer <token>' with the token shown when the project was created.")
    if not _opens(settings, project, token):
        raise Forbidden(f"authorization: the token is not project {project.slug!r}'s submit token.",
                        field="authorization", fix="Use the submit token shown when this project was created.")
    return project


def readable_projects(session: Session, *, settings: Settings, credentials: Credentials) -> Sequence[Project]:
    projects = crud.list_projects(session, include_private=bool(credentials.for_reading))
    return [p for p in projects if can_read(settings, p, credentials)]
