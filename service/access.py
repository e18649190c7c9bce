"""Who may read and who may submit: the one access policy of the API, the pages and the badges.

    Credentials        what a request presents: its bearer token, the tokens the token form kept in
                       cookies (cookies open pages for reading; they never authorize a write), and a
                       badge URL's ``?token=`` (only ever a read-only token)
    can_read           public, or a credential is the project's submit or read-only token or the admin
                       token; a URL token counts only as a read-only token, so a badge URL in a README
                       never carries write (or admin) access
    readable_project   the project, or NotFound, the same answer for "missing" and "not yours"
    readable_run       the run of a readable project, or the same NotFound
    writable_project   a readable project whose submit token (or the admin token) is the bearer
    readable_projects  every project the credentials can read
    classify_token     what a presented token is: a project's read-only or submit token, the admin token

The FastAPI dependencies that wrap these (``ReadableProject``, ``WritableProject``, ``ReadableRun``)
live in :mod:`service.api.deps`; the API and the pages both use them, so no route repeats a check.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.orm import Session

from gradguard.service import crud
from gradguard.service.config import Settings
from gradguard.service.errors import Forbidden, NotFound, Unauthorized
from gradguard.service.models import MAX_INT, Project, Run
from gradguard.service.security import token_matches

__all__ = ["Credentials", "is_admin", "can_read", "readable_project", "readable_run", "writable_project",
           "readable_projects", "classify_token", "MAX_ID"]

MAX_ID = MAX_INT  # ids are 32-bit integers in the database; a larger one names nothing


@dataclass(frozen=True)
class Credentials:
    bearer: str | None = None
    cookies: tuple[str, ...] = ()
    url: str | None = None  # a badge's ?token=: compared with the read-only token only

    @property
    def for_reading(self) -> tuple[str, ...]:
        return tuple(t for t in (self.bearer, *self.cookies) if t)


def is_admin(settings: Settings, token: str | None) -> bool:
    expected = settings.admin_token.get_secret_value() if settings.admin_token else None
    return bool(token and expected) and hmac.compare_digest(token.encode(), expected.encode())  # type: ignore[union-attr]


def _opens(settings: Settings, project: Project, token: str) -> bool:
    return token_matches(token, project.token_hash) or is_admin(settings, token)


def _reads(settings: Settings, project: Project, token: str) -> bool:
    return token_matches(token, project.read_token_hash) or _opens(settings, project, token)


def can_read(settings: Settings, project: Project, credentials: Credentials) -> bool:
    return (project.public or any(_reads(settings, project, t) for t in credentials.for_reading)
            or token_matches(credentials.url, project.read_token_hash))


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
        if token_matches(token, project.read_token_hash):
            raise Forbidden(f"authorization: the token is project {project.slug!r}'s read-only token, which "
                            "cannot submit.", field="authorization",
                            fix="Submit with the project's submit token (the 'token' shown when it was created).")
        raise Forbidden(f"authorization: the token is not project {project.slug!r}'s submit token.",
                        field="authorization", fix="Use the submit token shown when this project was created.")
    return project


def readable_projects(session: Session, *, settings: Settings, credentials: Credentials) -> Sequence[Project]:
    projects = crud.list_projects(session, include_private=bool(credentials.for_reading or credentials.url))
    return [p for p in projects if can_read(settings, p, credentials)]


def classify_token(session: Session, *, settings: Settings, token: str
                   ) -> tuple[Literal["read", "submit", "admin", "unknown"], Project | None]:
    """Which kind of token ``token`` is, and the project it belongs to (None for admin and unknown)."""
    project = crud.find_project_by_token(session, token=token) if token else None
    if project is not None:
        return ("read" if token_matches(token, project.read_token_hash) else "submit"), project
    return ("admin" if is_admin(settings, token) else "unknown"), None
