"""Errors the service answers with, and the handlers that turn them into JSON.

    ServiceError (status, field, message, fix)     base: every error a client can cause
    ├── NotFound          404
    ├── Unauthorized      401 (missing or wrong token)
    ├── Forbidden         403
    ├── Conflict          409
    ├── Invalid           422 (a field or the bundle is wrong)
    ├── TooLarge          413 (bundle size)
    ├── RateLimited       429 (with Retry-After)
    └── Unavailable       503

Also answered as JSON: a database that cannot be reached (503 with Retry-After) and any
unexpected error (500); FastAPI's validation errors (422) get the same shape.

Every error body has one shape, also for FastAPI's own validation errors::

    {"detail": {"field": "bundle", "message": "...what is wrong...", "fix": "...what to do..."}}
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

__all__ = [
    "ServiceError",
    "NotFound",
    "Unauthorized",
    "Forbidden",
    "Conflict",
    "Invalid",
    "TooLarge",
    "RateLimited",
    "Unavailable",
    "error_body",
    "install_error_handlers",
    "document_errors",
    "ERROR_SCHEMA",
    "service_error_response",
    "validation_error_response",
]


class ServiceError(Exception):
    """An error a client can fix; ``field`` names what was wrong, ``fix`` says what to do."""

    status = 400

    def __init__(self, message: str, *, field: str | None = None, fix: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.fix = fix
        self.headers = headers


class NotFound(ServiceError):
    status = 404


class Unauthorized(ServiceError):
    status = 401


class Forbidden(ServiceError):
    status = 403


class Conflict(ServiceError):
    status = 409


class Invalid(ServiceError):
    status = 422


class TooLarge(ServiceError):
    status = 413


class RateLimited(ServiceError):
    status = 429


class Unavailable(ServiceError):
    status = 503


def error_body(message: str, field: str | None = None, fix: str | None = None) -> dict[str, Any]:
    return {"detail": {"field": field, "message": message, "fix": fix}}


async def service_error_response(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    headers = dict(exc.headers or {})
    if exc.status == 401:
        headers.setdefault("WWW-Authenticate", "Bearer")
    return JSONResponse(error_body(exc.message, exc.field, exc.fix), status_code=exc.status, headers=headers)


async def validation_error_response(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header")]
    field = ".".join(loc) or None
    message = f"{field or 'request'}: {first.get('msg')}"
    if "input" in first and not isinstance(first["input"], (dict, list)):
        message += f" (got {first['input']!r})"
    body = error_body(message, field, "Correct this field; the API schema is at /docs.")
    body["detail"]["errors"] = [
        {"field": ".".join(str(p) for p in e.get("loc", ())), "message": e.get("msg")} for e in exc.errors()
    ]
    return JSONResponse(body, status_code=422)


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    fix = "See /docs for the routes and methods." if exc.status_code in (404, 405) else None
    return JSONResponse(error_body(str(exc.detail), None, fix), status_code=exc.status_code,
                        headers=getattr(exc, "headers", None))


async def _internal_error(_request: Request, exc: Exception) -> JSONResponse:
    logging.getLogger("gradguard.service").error("unhandled error", exc_info=exc)
    return JSONResponse(error_body(f"internal error ({type(exc).__name__}); nothing was changed by this request "
                                   "unless its answer said so.", None,
                                   "Retry; if it persists, check the server log and GET /readyz."), status_code=500)


async def _database_down(_request: Request, exc: Exception) -> JSONResponse:
    logging.getLogger("gradguard.service").error("database unavailable: %s", exc)
    return JSONResponse(error_body(f"database: unavailable ({type(exc).__name__}).", "database",
                                   "Retry in a moment; GET /readyz shows when the database answers again."),
                        status_code=503, headers={"Retry-After": "5"})


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error with the one JSON shape above."""
    app.add_exception_handler(Exception, _internal_error)
    app.add_exception_handler(OperationalError, _database_down)
    app.add_exception_handler(InterfaceError, _database_down)
    app.add_exception_handler(ServiceError, service_error_response)
    app.add_exception_handler(RequestValidationError, validation_error_response)
    app.add_exception_handler(StarletteHTTPException, _http_error)


ERROR_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["detail"], "title": "Error",
    "properties": {"detail": {
        "type": "object", "required": ["message"],
        "properties": {
            "field": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "the input at fault"},
            "message": {"type": "string", "description": "what is wrong"},
            "fix": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "how to fix it"},
            "errors": {"type": "array", "description": "every invalid field (422 only)", "items": {
                "type": "object", "properties": {"field": {"type": "string"}, "message": {"type": "string"}}}},
        },
    }},
}
_ERRORS = {
    "401": "no token where one is needed", "403": "a token that may not do this", "404": "missing, or not yours",
    "409": "already exists", "413": "body too large", "422": "invalid input", "429": "rate limited",
    "503": "database or queue unavailable",
}


def document_errors(app: FastAPI) -> None:
    """Make the OpenAPI schema tell the truth about errors: every error answer has the one shape above
    (FastAPI's default 422 schema is not what this API sends)."""
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        spec.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
        for path, operations in spec.get("paths", {}).items():
            for method, operation in operations.items():
                codes = ["422", "429", "503"] + (["404"] if "{" in path else [])
                if method in ("post", "put", "patch", "delete"):
                    codes += ["401", "403", "409", "413"]
                responses = operation.setdefault("responses", {})
                for code in codes:
                    entry = responses.setdefault(code, {"description": _ERRORS[code]})
                    entry["content"] = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        for unused in ("HTTPValidationError", "ValidationError"):
            spec["components"]["schemas"].pop(unused, None)
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
