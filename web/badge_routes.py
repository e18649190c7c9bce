"""``/badge/{project}.svg`` and ``/badge/{project}.json``: the latest verdict on a branch, for READMEs.

The verdict comes from the ``branch_heads`` cache (one indexed row joined to its run's summary).
Responses carry ``Cache-Control: no-cache, max-age=0`` and an ETag, so GitHub's image proxy
(camo) and browsers revalidate every time and get ``304 Not Modified`` while nothing changed.
An unknown project, a private project without ``?token=``, or a branch with no finished run all
get the grey "unknown" badge with status 200: a README never shows a broken image. ``?token=`` is
compared with the project's read-only token only: a submit or admin token in a badge URL opens
nothing, so a README never hands out write access (access logs redact the query's token anyway).
"""

from __future__ import annotations

import json

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from gradguard.service.access import Credentials, can_read
from gradguard.service.api.deps import CredentialsDep, SessionDep, SettingsDep
from gradguard.web import queries
from gradguard.web.badges import UNKNOWN, BadgeState, badge_state, etag, render_endpoint, render_svg

__all__ = ["router"]

router = APIRouter(prefix="/badge", tags=["badges"])
CACHE = "no-cache, max-age=0, must-revalidate"


def _state(session: SessionDep, settings: SettingsDep, credentials: CredentialsDep, project: str,
           branch: Annotated[str | None, Query(max_length=200)] = None,
           token: Annotated[str | None, Query(max_length=200, description="a private project's read-only token")] = None
           ) -> BadgeState:
    found, status, summary = queries.badge_source(session, slug=project, branch=branch or None)
    if token:
        credentials = Credentials(bearer=credentials.bearer, cookies=credentials.cookies, url=token)
    if found is None or not can_read(settings, found, credentials):
        return UNKNOWN
    return badge_state(status, summary)


def _send(request: Request, body: str, media_type: str) -> Response:
    tag = etag(body)
    headers = {"Cache-Control": CACHE, "ETag": tag, "Expires": "0", "X-Content-Type-Options": "nosniff",
               "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"}
    if tag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type=media_type, headers=headers)


# HEAD too: link checkers and some README renderers probe images with HEAD before fetching them.
# HEAD is its own route, left out of the OpenAPI schema: one operation id per operation.
@router.get("/{project}.svg", summary="SVG badge of a branch's latest verdict")
@router.head("/{project}.svg", include_in_schema=False)
def badge_svg(request: Request, state: Annotated[BadgeState, Depends(_state)]) -> Response:
    return _send(request, render_svg(state), "image/svg+xml")


@router.get("/{project}.json", summary="shields.io endpoint badge of a branch's latest verdict")
@router.head("/{project}.json", include_in_schema=False)
def badge_json(request: Request, state: Annotated[BadgeState, Depends(_state)]) -> Response:
    body = json.dumps(render_endpoint(state), sort_keys=True)
    return _send(request, body, "application/json")
