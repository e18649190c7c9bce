"""Operational routes at the root: ``/healthz`` (alive), ``/readyz`` (can serve), ``/metrics``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from gradguard.service.dbhealth import identify, problem
from gradguard.service.heartbeat import readiness
from gradguard.service.metrics import render

__all__ = ["router"]

router = APIRouter(tags=["operations"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process answers. No dependencies are checked (use /readyz)."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "database missing, read-only, replaced or unreachable, queue "
                                                        "unreachable, or a worker below the minimum sandbox level"}})
def readyz(request: Request) -> JSONResponse:
    """The database the service started with is there and writable, the queue is reachable, and every live
    worker's sandbox level is at or above the minimum."""
    state = request.app.state
    body: dict[str, Any] = {}
    ready = True
    url = state.settings.database_url
    if state.database_identity is None:  # the database was not reachable at start: the first one seen
        try:
            state.database_identity = identify(url, state.sessionmaker)
        except Exception:  # noqa: BLE001 - problem() below says what is wrong
            pass
    trouble = problem(url, state.sessionmaker, state.database_identity)
    if trouble:
        ready = False
    body["database"] = trouble or "ok"
    queue_ok, body["queue"] = state.executor.health()
    ready = ready and queue_ok
    try:  # the workers' own levels, as they recorded them (the API process runs no sandbox)
        sandbox_ok, body["sandbox"] = readiness(state.sessionmaker, state.settings)
        ready = ready and sandbox_ok
    except Exception as exc:
        ready, body["sandbox"] = False, f"unavailable: {type(exc).__name__}: {exc}"
    body["status"] = "ready" if ready else "unready"
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus text format: runs by status, queue depth, check durations."""
    return Response(render(request.app.state.metrics_registry), media_type=CONTENT_TYPE_LATEST)
