"""Request rate limits: a sliding one-minute window kept in this process's memory, per token for
submissions (:class:`RateLimiter`, used by the submit route) and per client for reads
(:class:`ReadRateLimit`, a middleware over every GET and HEAD but health probes and static files,
per client address).

With several API processes each enforces its own window; put a shared limiter in the proxy in
front of them if that matters (see docs/service.md).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["RateLimiter", "ReadRateLimit"]


class RateLimiter:
    """At most ``per_minute`` hits per key in any 60 s window; ``per_minute == 0`` disables it."""

    def __init__(self, per_minute: int, window_s: float = 60.0) -> None:
        self.per_minute, self.window_s = per_minute, window_s
        self._hits: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def hit(self, key: str, now: float | None = None) -> int | None:
        """Record a hit; return None if allowed, else the seconds to wait (for ``Retry-After``)."""
        if self.per_minute <= 0:
            return None
        now = time.monotonic() if now is None else now
        with self._lock:
            hits = self._hits.setdefault(key, deque())
            while hits and hits[0] <= now - self.window_s:
                hits.popleft()
            if len(hits) >= self.per_minute:
                return max(1, math.ceil(hits[0] + self.window_s - now))
            hits.append(now)
            if len(self._hits) > 10_000:  # forget idle keys
                for k in [k for k, v in self._hits.items() if not v]:
                    del self._hits[k]
            return None


_UNLIMITED = ("/healthz", "/readyz", "/metrics", "/static/")


class ReadRateLimit:
    """ASGI middleware: at most ``limiter.per_minute`` reads (GET, HEAD) a minute per client address
    (not per token: a client could make up a new token for each request). Health probes, metrics and
    static files are not counted. Over the limit: 429 with ``Retry-After``, in the API's error shape."""

    def __init__(self, app: ASGIApp, *, per_minute: int) -> None:
        self.app, self.limiter = app, RateLimiter(per_minute)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] not in ("GET", "HEAD") or self.limiter.per_minute <= 0
                or scope["path"].startswith(_UNLIMITED)):
            await self.app(scope, receive, send)
            return
        wait = self.limiter.hit(_client_key(scope))
        if wait is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps({"detail": {
            "field": "rate",
            "message": f"rate: more than {self.limiter.per_minute} reads per minute from this client.",
            "fix": f"Retry after {wait} s; poll less often (GRADGUARD_READ_RATE_LIMIT_PER_MINUTE)."}}).encode()
        await send({"type": "http.response.start", "status": 429,
                    "headers": [(b"content-type", b"application/json"), (b"retry-after", str(wait).encode()),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def _client_key(scope: Scope) -> str:
    client = scope.get("client")
    return f"ip:{client[0] if client else '?'}"
