"""Per-token request rate limit: a sliding one-minute window kept in this process's memory.

With several API processes each enforces its own window; put a shared limiter in the proxy in
front of them if that matters (see docs/service.md).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque

__all__ = ["RateLimiter"]


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
