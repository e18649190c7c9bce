"""FastAPI dependencies shared by the API and the pages: settings, a session, credentials, the access
policy (:mod:`service.access`) as ``ReadableProject``/``WritableProject``/``ReadableRun``, rate limits.

The app keeps its session factory as ``app.state.sessionmaker`` and its settings as
``app.state.settings`` (set by :func:`service.app.create_app`); nothing else is looked up.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from gradguard.service import access
from gradguard.service.access import Credentials, is_admin
from gradguard.service.config import Settings
from gradguard.service.errors import Forbidden, RateLimited, Unauthorized
from gradguard.service.executors import Executor
from gradguard.service.models import Project, Run
from gradguard.service.ratelimit import RateLimiter
from gradguard.service.security import hash_token

__all__ = ["SettingsDep", "SessionDep", "TokenDep", "ExecutorDep", "CredentialsDep", "ReadableProject",
           "WritableProject", "ReadableRun", "require_admin", "rate_limit", "base_url", "sessionmaker_of",
           "COOKIE_PREFIX", "ADMIN_COOKIE", "token_cookie"]

COOKIE_PREFIX = "gg_token_"  # the token form keeps a project's token in gg_token_<slug>
ADMIN_COOKIE = "gg_admin"

_bearer = HTTPBearer(auto_error=False, description="An admin token, or a project's submit token.")


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def sessionmaker_of(request: Request) -> sessionmaker[Session]:
    return request.app.state.sessionmaker


async def _session(request: Request) -> AsyncIterator[Session]:
    # An async generator, so opening and closing the session costs no thread hop; the routes that
    # use it are sync and run in the thread pool. Routes commit what they write themselves.
    session = sessionmaker_of(request)()
    try:
        yield session
    finally:
        session.close()


def _token(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> str | None:
    return credentials.credentials if credentials else None


def _credentials(request: Request, token: Annotated[str | None, Depends(_token)]) -> Credentials:
    cookies = tuple(v for k, v in request.cookies.items() if (k.startswith(COOKIE_PREFIX) or k == ADMIN_COOKIE) and v)
    return Credentials(bearer=token, cookies=cookies)


def _executor(request: Request) -> Executor:
    return request.app.state.executor


SettingsDep = Annotated[Settings, Depends(_settings)]
SessionDep = Annotated[Session, Depends(_session)]
TokenDep = Annotated[str | None, Depends(_token)]
ExecutorDep = Annotated[Executor, Depends(_executor)]
CredentialsDep = Annotated[Credentials, Depends(_credentials)]
ProjectSlug = Annotated[str, Path(max_length=200, description="the project's slug")]
RunId = Annotated[int, Path(description="the run's id, as returned when it was submitted")]


def token_cookie(slug: str) -> str:
    return COOKIE_PREFIX + slug


def _readable_project(project: ProjectSlug, session: SessionDep, settings: SettingsDep,
                      credentials: CredentialsDep) -> Project:
    return access.readable_project(session, settings=settings, credentials=credentials, slug=project)


async def _writable_project(project: ProjectSlug, session: SessionDep, settings: SettingsDep,
                            token: TokenDep) -> Project:
    return await run_in_threadpool(access.writable_project, session, settings=settings,
                                   credentials=Credentials(bearer=token), slug=project)


def _readable_run(run_id: RunId, session: SessionDep, settings: SettingsDep, credentials: CredentialsDep) -> Run:
    return access.readable_run(session, settings=settings, credentials=credentials, run_id=run_id)


ReadableProject = Annotated[Project, Depends(_readable_project)]
WritableProject = Annotated[Project, Depends(_writable_project)]
ReadableRun = Annotated[Run, Depends(_readable_run)]


def require_admin(settings: SettingsDep, token: TokenDep) -> None:
    if not token:
        raise Unauthorized("authorization: this needs the admin token.", field="authorization",
                           fix="Send 'Authorization: Bearer <GRADGUARD_ADMIN_TOKEN>'.")
    if not is_admin(settings, token):
        raise Forbidden("authorization: the token is not the admin token.", field="authorization",
                        fix="Use the value of GRADGUARD_ADMIN_TOKEN (printed by `gradguard serve` when generated).")


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
