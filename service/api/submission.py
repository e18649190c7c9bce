"""Read a run submission: JSON ``{files: {path: text}, ...options}`` or multipart with a ``bundle``
archive and the same options as form fields. Also the ASGI guard that stops oversized bodies
before they are read.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gradguard.service.bundles import BundleLimits, files_from_json, read_bundle
from gradguard.service.config import Settings
from gradguard.service.errors import Invalid, ServiceError, TooLarge, error_body
from gradguard.service.schemas import RunOptions, RunSubmit

__all__ = ["read_submission", "BodyLimit", "SUBMISSION_OPENAPI"]

OVERHEAD = 256 * 1024  # multipart headers and form fields around the bundle, JSON quoting
LIST_FIELDS = ("select", "ignore")

SUBMISSION_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": RunSubmit.model_json_schema(ref_template="#/components/schemas/{model}")},
            "multipart/form-data": {"schema": {
                "type": "object", "required": ["bundle"],
                "properties": {
                    "bundle": {"type": "string", "format": "binary", "description": "a .tar.gz, .tar or .zip"},
                    **{name: {"type": "string", "description": "as in the JSON form; select/ignore comma-separated"}
                       for name in RunOptions.model_fields},
                },
            }},
        },
    }
}


def _within_limits(options: RunOptions, settings: Settings) -> RunOptions:
    if options.rule_timeout_s is not None and options.rule_timeout_s >= settings.run_wall_s:
        raise Invalid(f"rule_timeout_s: {options.rule_timeout_s:g} s is not below this server's run wall limit "
                      f"({settings.run_wall_s:g} s), so one hanging rule would end the run before the others get "
                      "their verdicts.", field="rule_timeout_s",
                      fix=f"Ask for less than {settings.run_wall_s:g} s per rule, or leave it out for the server's "
                          f"default ({settings.default_rule_timeout_s:g} s).")
    return options


async def read_submission(request: Request, settings: Settings) -> tuple[RunOptions, dict[str, bytes]]:
    """Parse and validate the body of ``POST /projects/{project}/runs``."""
    limits = BundleLimits.from_settings(settings)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        try:
            payload = json.loads(await request.body())
        except ValueError as exc:
            raise Invalid(f"body: not valid JSON ({exc}).", field="body", fix="Send a JSON object.") from exc
        except RecursionError:
            raise Invalid("body: the JSON nests deeper than Python can read.", field="body",
                          fix='Send a flat object: {"files": {"path": "text"}, ...options}.') from None
        try:
            submission = RunSubmit.model_validate(payload)
        except ValidationError as exc:
            raise RequestValidationError(exc.errors()) from exc
        files = await run_in_threadpool(files_from_json, submission.files, limits)
        return _within_limits(RunOptions.model_validate(submission.model_dump(exclude={"files"})), settings), files
    if content_type == "multipart/form-data":
        form = await request.form(max_files=1, max_fields=len(RunOptions.model_fields) + 4)
        bundle = form.get("bundle")
        if not isinstance(bundle, UploadFile):
            raise Invalid("bundle: the multipart form has no file field named 'bundle'.", field="bundle",
                          fix="Upload the archive as -F bundle=@rules.tar.gz.")
        raw: dict[str, Any] = {}
        for key, value in form.multi_items():
            if key == "bundle":
                continue
            if not isinstance(value, str):
                raise Invalid(f"{key}: expected a text field, got a file.", field=key, fix="Send options as text fields.")
            if key in LIST_FIELDS:
                raw.setdefault(key, []).extend(v.strip() for v in value.split(",") if v.strip())
            else:
                raw[key] = value or None
        try:
            options = RunOptions.model_validate({k: v for k, v in raw.items() if v is not None})
        except ValidationError as exc:
            raise RequestValidationError(exc.errors()) from exc
        _within_limits(options, settings)
        try:
            return options, await run_in_threadpool(read_bundle, bundle.file, limits)
        finally:
            await bundle.close()
    raise ServiceError(f"content-type: {content_type or 'none'} is not accepted here.", field="content-type",
                       fix="Send application/json {\"files\": {...}} or multipart/form-data with a 'bundle' file.")


class BodyLimit:
    """Refuse request bodies over the limit: at once from ``Content-Length``, or as soon as a
    streamed (chunked) body crosses it, so a 200 MB upload is never read into the server.
    """

    def __init__(self, app: ASGIApp, *, max_bundle_bytes: int, max_json_bytes: int) -> None:
        self.app, self.max_bundle_bytes, self.max_json_bytes = app, max_bundle_bytes, max_json_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        multipart = headers.get(b"content-type", b"").lower().startswith(b"multipart/")
        limit = (self.max_bundle_bytes if multipart else self.max_json_bytes) + OVERHEAD
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(send, int(declared), limit)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    message_text, extra = self._message(seen, limit)
                    raise TooLarge(message_text, **extra)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except TooLarge:
            if not started:
                await self._refuse(send, seen, limit)
            else:
                raise

    @staticmethod
    def _message(size: int, limit: int) -> tuple[str, dict[str, str]]:
        return (f"body: {size} bytes or more; the limit is {limit}.",
                {"field": "bundle", "fix": "Submit only the rule modules, or raise GRADGUARD_MAX_BUNDLE_BYTES "
                                           "(archives) / GRADGUARD_MAX_UNPACKED_BYTES (JSON) on the server."})

    async def _refuse(self, send: Send, size: int, limit: int) -> None:
        message, extra = self._message(size, limit)
        body = json.dumps(error_body(message, extra["field"], extra["fix"])).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
