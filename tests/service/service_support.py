"""Constants and helpers the service tests share (imported by name: `from service_support import ...`).

They live here rather than in conftest.py because `from conftest import` finds whichever conftest
module was loaded first, which depends on the order the test paths were given in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

ADMIN = "test-admin-token-0123456789abcdef"
# How long a test waits for one answer from a live server: httpx's 5 s default is less than a first request can
# take while the rest of the suite keeps every core busy.
LIVE_TIMEOUT_S = 60.0

SMALL_RULES = '''\
import numpy as np
from gradguard.checker import arrays, rrule


def double(x):
    return 2.0 * x


@rrule(double, arrays(shape=(3,)))
def double_rrule(x):
    def pullback(ybar):
        return (None,) if ybar is None else (2.0 * ybar,)
    return double(x), pullback


def triple(x):
    return 3.0 * x


@rrule(triple, arrays(shape=(3,)))
def triple_rrule(x):  # the `ones` bug: ignores the cotangent
    return triple(x), lambda ybar: (np.full(x.shape, 3.0),)
'''

SLEEPY_RULES = '''\
import time
time.sleep(600)
'''


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class LiveServer:
    """Serve an ASGI app with uvicorn on a free loopback port in a background thread."""

    def __init__(self, app: Any, log_level: str = "warning") -> None:
        import threading

        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level=log_level,
                                                    lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        wait_for(lambda: self.server.started, 30, "uvicorn to start", interval=0.05)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


# Three rules, the second stuck by whatever ``{stuck}`` is (HANGS: forever): the per-rule limit and the
# streamed results are judged on the first and the last.
STUCK_RULES = '''\
import time
import numpy as np
from gradguard.checker import arrays, rrule


def double(x):
    return 2.0 * x


@rrule(double, arrays(shape=(3,)))
def a_double_rrule(x):
    return double(x), lambda ybar: (None,) if ybar is None else (2.0 * ybar,)


@rrule(double, arrays(shape=(3,)))
def b_stuck_rrule(x):
    {stuck}
    return double(x), lambda ybar: (None,) if ybar is None else (2.0 * ybar,)


@rrule(double, arrays(shape=(3,)))
def c_after_rrule(x):
    return double(x), lambda ybar: (None,) if ybar is None else (2.0 * ybar,)
'''
HANGS = "time.sleep(3600)"


def verdicts(report: dict) -> dict[str, tuple[str, str | None]]:
    return {r["name"]: (r["verdict"], (r["error"] or {}).get("message")) for r in report["rules"]}
