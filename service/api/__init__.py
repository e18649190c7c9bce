"""The REST API: ``/api/v1`` (projects, runs) and the operational routes at the root."""

from __future__ import annotations

from fastapi import APIRouter

from gradguard.service.api import health, projects, runs

__all__ = ["api_router", "ops_router", "API_PREFIX"]

API_PREFIX = "/api/v1"

api_router = APIRouter(prefix=API_PREFIX)
api_router.include_router(projects.router)
api_router.include_router(runs.router)

ops_router = health.router
