"""A rule's time limit: stopped at a safe point when possible, interrupted only as a last resort.

Raising an exception from a signal handler interrupts whatever runs at that moment. In the middle of
JAX's tracing or XLA's bookkeeping that can leave the library's own state half-updated, and a later call
in the same process can then crash it (a segmentation fault, not an exception). So :func:`time_limit`
works in two stages:

1. at its deadline the limit is only *noted*; the checker stops at its next safe point, between two
   checks of one drawn input (:func:`at_safe_point`), where no library call is in flight;
2. only a rule that stays inside one call for a grace period more (a quarter of the limit, at most ten
   seconds: a user's infinite loop, a hung solver) is interrupted by ``SIGALRM``.

The alarm nests: a timer already armed outside (pytest-timeout's signal method, an enclosing
``time_limit``) keeps its deadline and its handler, is re-armed with the time it has left on exit, and
fires inside the block if it comes first. Signals reach the main thread only; elsewhere the limit is
checked at safe points alone (the service's sandbox bounds the whole process).
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

__all__ = ["time_limit", "at_safe_point", "grace_for", "DEFAULT_GRACE_S", "noted"]

# Extra wall time a rule gets inside one call after its deadline before it is interrupted by a signal:
# a quarter of the limit, between half a second and ten seconds.
DEFAULT_GRACE_S = 10.0


def grace_for(seconds: float) -> float:
    return min(DEFAULT_GRACE_S, max(0.5, seconds / 4))

_local = threading.local()


# Each limit in force on this thread, outermost first: a function of the time that returns the exception
# to raise when the limit is spent, else None (the memory limit, gradguard.checker._memory, is one too).
_Limit = Callable[[float], "BaseException | None"]


def _limits() -> list[_Limit]:
    if not hasattr(_local, "limits"):
        _local.limits = []
    return _local.limits


@contextmanager
def noted(limit: _Limit) -> Iterator[None]:
    """Have :func:`at_safe_point` consult ``limit`` inside the block (on this thread)."""
    limits = _limits()
    limits.append(limit)
    try:
        yield
    finally:
        limits.remove(limit)


def at_safe_point() -> None:
    """Raise the first spent limit's exception; a no-op while every limit has room left."""
    now = time.monotonic()
    for limit in list(_limits()):
        spent = limit(now)
        if spent is not None:
            raise spent


@contextmanager
def time_limit(seconds: float | None, exception: type[BaseException], grace_s: float | None = None) -> Iterator[None]:
    """Bound the block to ``seconds`` of wall time; ``None`` or ``0``: no limit.

    Make ``exception`` a BaseException so that neither Hypothesis nor the user's code swallows it. With
    ``grace_s=0`` the signal fires at the deadline itself (for code with no safe points); by default it
    is :func:`grace_for` ``seconds``.
    """
    if not seconds:
        yield
        return
    start = time.monotonic()
    deadline = start + seconds
    with noted(lambda now: exception() if now >= deadline else None):
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
            yield
        else:
            with _alarm(deadline + (grace_for(seconds) if grace_s is None else grace_s), exception):
                yield


@contextmanager
def _alarm(hard_deadline: float, exception: type[BaseException]) -> Iterator[None]:
    outer_handler = signal.getsignal(signal.SIGALRM)
    outer_left, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    now = time.monotonic()
    outer_deadline = now + outer_left if outer_left > 0 else None
    outer_fired = False

    def arm() -> None:
        due = hard_deadline if outer_deadline is None else min(hard_deadline, outer_deadline)
        signal.setitimer(signal.ITIMER_REAL, max(due - time.monotonic(), 1e-4))

    def on_alarm(signum: int, frame: Any) -> None:
        nonlocal outer_fired
        now = time.monotonic()
        if outer_deadline is not None and now >= outer_deadline and not outer_fired:
            outer_fired = True
            if callable(outer_handler):
                outer_handler(signum, frame)  # usually raises (a test's timeout); if it returns, go on
            arm()
            return
        if now >= hard_deadline:
            raise exception()
        arm()  # woken early (a timer's granularity): wait for the rest

    signal.signal(signal.SIGALRM, on_alarm)
    arm()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_deadline is not None and not outer_fired:
            # The outer timer gets the time it had left; one that came due in here fires at once.
            signal.setitimer(signal.ITIMER_REAL, max(outer_deadline - time.monotonic(), 1e-4), outer_interval)
