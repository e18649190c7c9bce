"""FastAPI dependencies: settings, a database session per request, tokens, rate limit."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from gradguard.service.config import Settings
from gradguard.service.errors import Forbidden, NotFound, RateLimited, Unauthorized
from gradguard.service.executors import Executor
from gradguard.service.models import Project
from gradguard.service.ratelimit import RateLimiter
from gradguard.service.security import hash_token, token_matches

__all__ = ["SettingsDep", "SessionDep", "TokenDep", "ExecutorDep", "require_admin", "can_read", "check_can_read",
           "check_can_submit", "rate_limit", "base_url"]

_bearer = HTTPBearer(auto_error=False, description="An admin token, or a project's submit token.")


def _settings(request: Request) -> Settings:
    return request.app.state.settings


async def _session(request: Request) -> AsyncIterator[Session]:
    # An async generator, so opening and closing the session costs no thread hop; the routes that
    # use it are sync and run in the thread pool. Routes commit what they write themselves.
    session = request.app.state.sessionmaker()
    try:
        yield session
    finally:
        session.close()


def _token(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> str | None:
    return credentials.credentials if credentials else None


def _executor(request: Request) -> Executor:
    return request.app.state.executor


SettingsDep = Annotated[Settings, Depends(_settings)]
SessionDep = Annotated[Session, Depends(_session)]
TokenDep = Annotated[str | None, Depends(_token)]
ExecutorDep = Annotated[Executor, Depends(_executor)]


def is_admin(settings: Settings, token: str | None) -> bool:
    expected = settings.admin_token.get_secret_value() if settings.admin_token else None
    return bool(token and expected) and hmac.compare_digest(token.encode(), expected.encode())  # type: ignore[union-attr]


def require_admin(settings: SettingsDep, token: TokenDep) -> None:
    if not token:
        raise Unauthorized("authorization: this needs the admin token.", field="authorization",
                           fix="Send 'Authorization: Bearer <GRADGUARD_ADMIN_TOKEN>'.")
    if not is_admin(settings, token):
        raise Forbidden("authorization: the token is not the admin token.", field="authorization",
                        fix="Use the value of GRADGUARD_ADMIN_TOKEN (printed by `gradguard serve` when generated).")


def can_read(settings: Settings, project: Project, token: str | None) -> bool:
    return project.public or is_admin(settings, token) or token_matches(token, project.token_hash)


def check_can_read(settings: Settings, project: Project, token: str | None) -> None:
    """Private projects look absent to readers without a token (no existence leak)."""
    if not can_read(settings, project, token):
        raise NotFound(f"project: no project named {project.slug!r} that this token can see.", field="project",
                       fix="Private projects need 'Authorization: Bearer <project or admin token>'.")


def check_can_submit(settings: Settings, project: Project, token: str | None) -> None:
    if not token:
        raise Unauthorized("authorization: submitting a run needs the project's token.", field="authorization",
                           fix="Send 'Authorization: Bearer <token>' with the token shown when the project was created.")
    if not (token_matches(token, project.token_hash) or is_admin(settings, token)):
        raise Forbidden(f"authorization: the token is not project {project.slug!r}'s token.", field="authorization",
                        fix="Use the token shown when this project was created (its first characters are "
                            f"{project.token_prefix!r}).")


def rate_limit(request: Request, token: str | None) -> None:
    limiter: RateLimiter = request.app.state.rate_limiter
    key = hash_token(token) if token else f"ip:{request.client.host if request.client else '?'}"
    wait = limiter.hit(key)
    if wait is not None:
        raise RateLimited(f"rate: more than {limiter.per_minute} submissions per minute with this token.",
                          field="authorization", fix=f"Retry after {wait} s (GRADGUARD_RATE_LIMIT_PER_MINUTE).",
                          headers={"Retry-After": str(wait)})


def base_url(request: Request, settings: Settings) -> str:
    return (settings.public_url or str(request.base_url)).rstrip("/")
