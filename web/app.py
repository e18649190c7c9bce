"""The ASGI app ``gradguard serve`` runs: the service API, onto which the web layer mounts pages."""

from __future__ import annotations

from fastapi import FastAPI

from gradguard.service.app import create_app as create_service_app
from gradguard.service.config import Settings

__all__ = ["create_app"]


def create_app(settings: Settings | None = None, *, start_executor: bool = True) -> FastAPI:
    """The service API app (``/api/v1``, ``/docs``, ``/healthz``, ``/readyz``, ``/metrics``) with the web
    layer mounted on it: pages, badges and static files (:func:`gradguard.web.site.mount`)."""
    from gradguard.web.site import mount

    return mount(create_service_app(settings, start_executor=start_executor))
