"""Build the service's ASGI app: API routes, JSON errors, body limits, executor and metrics.

``create_app(settings)`` is what ``gradguard serve``, the tests and ``gradguard.web.app`` use. In embedded
mode the database is migrated on start-up and an admin token is generated if none is set.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from gradguard.service.api import api_router, ops_router
from gradguard.service.api.submission import BodyLimit
from gradguard.service.config import Settings
from gradguard.service.db import make_sessionmaker
from gradguard.service.errors import document_errors, install_error_handlers
from gradguard.service.executors import make_executor
from gradguard.service.metrics import make_registry
from gradguard.service.dbhealth import identify, prepare
from gradguard.service.logredact import install_access_log_redaction
from gradguard.service.ratelimit import RateLimiter, ReadRateLimit

__all__ = ["create_app"]

log = logging.getLogger("gradguard.service")


def create_app(settings: Settings | None = None, *, start_executor: bool = True) -> FastAPI:
    """The API app. ``start_executor=False`` serves the API only (runs stay queued for other workers)."""
    settings = settings or Settings()
    settings, generated = settings.with_admin_token()
    if generated:
        log.warning("no GRADGUARD_ADMIN_TOKEN set; generated one for this process: %s", generated)
    if settings.sandbox_insecure:
        log.warning("!!! INSECURE: GRADGUARD_SANDBOX_INSECURE=true lets workers check submissions at the 'rlimits' "
                    "level (minimum %s), where they can read this host's files and reach its network and database. "
                    "Every run page shows its level.", settings.sandbox_min_level)
    factory = make_sessionmaker(settings.database_url)
    executor = make_executor(settings, factory, workers=None if start_executor else 0)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        prepare(settings)  # refuses an empty database the service expected to exist
        try:
            app.state.database_identity = identify(settings.database_url, factory)
        except Exception:  # noqa: BLE001 - not reachable yet: /readyz adopts the first one it sees
            log.exception("could not read the database's identity at start")
        executor.start()
        try:
            yield
        finally:
            executor.stop()

    # /docs and /redoc from assets the app serves itself (fastapi-offline), not a CDN: they work offline.
    app = FastAPIOffline(title="gradguard", version="1", lifespan=lifespan,
                         description="Verdicts on custom reverse-mode differentiation rules: submit rule files, "
                                     "read reports. Errors are JSON: {detail: {field, message, fix}}.")
    app.state.settings = settings
    app.state.generated_admin_token = generated
    app.state.sessionmaker = factory
    app.state.database_identity = None
    app.state.executor = executor
    app.state.rate_limiter = RateLimiter(settings.rate_limit_per_minute)
    app.state.metrics_registry = make_registry(factory)
    install_error_handlers(app)
    document_errors(app)
    app.include_router(api_router)
    app.include_router(ops_router)
    app.add_middleware(BodyLimit, max_bundle_bytes=settings.max_bundle_bytes, max_json_bytes=settings.max_unpacked_bytes)
    app.add_middleware(ReadRateLimit, per_minute=settings.read_rate_limit_per_minute)
    install_access_log_redaction()
    return app
