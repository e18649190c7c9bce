"""What the pages need from a request: a database session, the service settings, and access checks.

Private projects are readable with their submit token, entered once on the token form and then
kept in an HttpOnly cookie (one per project; the token itself says which project it opens), or
passed as ``?token=`` (badges, scripts) or a bearer header. The admin token opens every project.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker

from gradguard.service.config import Settings, get_settings
from gradguard.service.db import make_sessionmaker
from gradguard.service.models import Project
from gradguard.service.security import token_matches

__all__ = ["SessionDep", "get_session", "settings_of", "can_read", "token_opens", "is_admin", "token_cookie",
           "COOKIE_PREFIX", "ADMIN_COOKIE"]

COOKIE_PREFIX = "gg_token_"
ADMIN_COOKIE = "gg_admin"


def settings_of(request: Request) -> Settings:
    settings = getattr(request.app.state, "settings", None)
    if settings is None:
        settings = request.app.state.settings = get_settings()
    return settings


def _factory(request: Request) -> sessionmaker[Session]:
    state = request.app.state
    for name in ("sessionmaker", "session_factory", "factory", "sessions"):
        factory = getattr(state, name, None)
        if isinstance(factory, sessionmaker):
            return factory
    factory = make_sessionmaker(settings_of(request).database_url)
    state.web_sessionmaker = factory
    return factory


def get_session(request: Request) -> Iterator[Session]:
    factory = getattr(request.app.state, "web_sessionmaker", None) or _factory(request)
    with factory() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def token_cookie(slug: str) -> str:
    return COOKIE_PREFIX + slug


def can_read(request: Request, project: Project, token: str | None = None) -> bool:
    """Whether this request may see ``project``: public, or a matching project or admin token."""
    if project.public:
        return True
    candidates = [token, request.cookies.get(token_cookie(project.slug)), request.cookies.get(ADMIN_COOKIE)]
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        candidates.append(auth[7:].strip())
    return any(token_opens(request, project, candidate) for candidate in candidates if candidate)


def token_opens(request: Request, project: Project, token: str) -> bool:
    """Whether ``token`` is ``project``'s submit token or the admin token."""
    return token_matches(token, project.token_hash) or is_admin(request, token)


def is_admin(request: Request, token: str) -> bool:
    admin = settings_of(request).admin_token
    return admin is not None and hmac.compare_digest(token.encode(), admin.get_secret_value().encode())
