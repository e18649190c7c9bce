"""Mount the web layer onto the service's app: pages, badges, static files, security headers.

Every HTML page is served with a content security policy that allows only this site's own
scripts, styles and images (no inline script, no CDN, no web fonts), and is not framed. The API's
interactive docs (``/docs``, ``/redoc``) load their assets from this app too (fastapi-offline, see
``gradguard.service.app``) but keep their inline start-up script, so they are outside the policy.
"""

from __future__ import annotations

import json
import time
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gradguard.service.errors import NotFound, ServiceError, service_error_response, validation_error_response
from gradguard.web import badge_routes, routes
from gradguard.web.templating import STATIC_DIR

__all__ = ["mount", "SecurityHeaders", "SameOrigin", "CSP"]

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_EXEMPT = ("/docs", "/redoc", "/openapi.json")


class SecurityHeaders:
    """Add the CSP and companion headers to HTML responses outside the API docs, and a
    ``Server-Timing: app;dur=<ms>`` header (time from the request to the response's start)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(_EXEMPT):
            await self.app(scope, receive, send)
            return

        started = time.perf_counter()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                headers.append((b"server-timing", f"app;dur={(time.perf_counter() - started) * 1000:.1f}".encode()))
                names = {k.lower() for k, _ in headers}
                ctype = dict((k.lower(), v) for k, v in headers).get(b"content-type", b"")
                if ctype.startswith(b"text/html") and b"content-security-policy" not in names:
                    headers.append((b"content-security-policy", CSP.encode()))
                    headers.append((b"x-frame-options", b"DENY"))
                if b"x-content-type-options" not in names:
                    headers.append((b"x-content-type-options", b"nosniff"))
                if b"referrer-policy" not in names:
                    headers.append((b"referrer-policy", b"same-origin"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class SameOrigin:
    """CSRF protection: a request that changes something must come from this site's own pages.

    Browsers send ``Origin`` (or at least ``Referer``) with every form POST, so for the pages a POST
    whose ``Origin`` (else ``Referer``) names another host, or that names none, is refused with 403.
    The API (``/api/``) is called by programs that send no ``Origin`` and authorize with a bearer token,
    which a cross-site form cannot set; there only a foreign ``Origin`` is refused. The host is this
    request's ``Host`` or that of ``GRADGUARD_PUBLIC_URL``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _UNSAFE:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or ()}
        claimed = headers.get("origin") or headers.get("referer")
        ours = {headers.get("host", "").lower()}
        settings = getattr(getattr(scope.get("app"), "state", None), "settings", None)
        if settings is not None and settings.public_url:
            ours.add(urlsplit(settings.public_url).netloc.lower())
        if claimed is None and scope["path"].startswith("/api/"):
            await self.app(scope, receive, send)
            return
        try:
            host = urlsplit(claimed).netloc.lower() if claimed else ""
        except ValueError:
            host = ""
        if host and host in ours:
            await self.app(scope, receive, send)
            return
        body = json.dumps({"detail": {
            "field": "origin",
            "message": "origin: a request that changes something must come from this site's own pages; this one "
                       + (f"came from another site ({host[:100] or 'an opaque origin'})." if claimed else
                          "named no Origin or Referer."),
            "fix": "Use the form on this site's own page; programs call the API under /api/ with "
                   "'Authorization: Bearer <token>'."}}).encode()
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _CachedStatic(StaticFiles):
    """Static files are addressed by content hash (``?v=``), so they may be cached for a year."""

    async def get_response(self, path: str, scope: Scope):  # type: ignore[no-untyped-def]
        response = await super().get_response(path, scope)
        if response.status_code == 200:
            response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        return response


_JSON_PATHS = ("/api/", "/badge/", "/healthz", "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json")


def _what(request: Request, field: str | None) -> str:
    params = request.path_params
    if "run_id" in params:
        return f"run #{params['run_id']}"
    if "project" in params:
        return f"project {params['project']!r}"
    return field or "page"


async def _page_errors(request: Request, exc: Exception) -> Response:
    """Pages answer the access policy's NotFound (and a malformed id) with the 404 page that offers the
    token form; the API keeps its JSON errors."""
    if request.url.path.startswith(_JSON_PATHS) or request.url.path.endswith("/status"):
        if isinstance(exc, RequestValidationError):
            return await validation_error_response(request, exc)
        return await service_error_response(request, exc)
    if isinstance(exc, (NotFound, RequestValidationError)):
        return routes.hidden_page(request, _what(request, getattr(exc, "field", None)))
    return await service_error_response(request, exc)


def mount(app: FastAPI) -> FastAPI:
    """Add the pages, badges and static files to ``app`` (the service API) and return it."""
    app.include_router(badge_routes.router)
    app.include_router(routes.router)
    app.add_exception_handler(ServiceError, _page_errors)
    app.add_exception_handler(RequestValidationError, _page_errors)
    app.mount("/static", _CachedStatic(directory=STATIC_DIR), name="static")
    app.add_middleware(SameOrigin)
    app.add_middleware(SecurityHeaders)
    app.state.serves_pages = True  # the API's Markdown links check ids to the /checks pages
    return app
