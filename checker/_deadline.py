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

3. a rule still inside that call ``stuck_after`` the start (a compiled ``lax.while_loop`` that never ends:
   a signal's Python handler runs only between bytecodes, never inside XLA's loop) cannot be stopped in its
   process at all. A watchdog thread then calls the block's ``stuck`` handler, which reports the rule and
   ends the process (:func:`gradguard.checker.per_rule.check_rule`: a worker process dies alone, and its
   parent reports the rule as over its time limit; a run in one process stops, saying which rules were
   checked), rather than leave the run hanging for good.

The time counted is the checker's own: wall time less the time the process's threads waited, ready to run,
for a CPU that other work held (Linux's per-thread ``run_delay``, read from ``/proc/self/task/*/schedstat``,
summed over the threads; plain wall time where the kernel does not say). Every thread counts, not only the
checker's: while a JAX rule runs, the checker's thread sleeps until XLA's threads have compiled and computed,
and it is theirs that wait for a CPU (a correct JAX rule, 16.3 s of wall time beside a busy process on one CPU:
its checker's thread waited 4.9 s, its 14 threads 11.5 s in all). On a machine loaded by other processes (a CI
runner's parallel jobs) the same rule at the same seed then gets the same verdict instead of a timeout. Waits of
threads that ran at the same time may add up to more than the time they overlapped; whatever the waits, the
limit is spent by ``WALL_FACTOR`` times its wall time at the latest, so a rule that starves its own checker
(threads of its own that hold every CPU) is still stopped.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

__all__ = ["time_limit", "at_safe_point", "grace_for", "stuck_after", "DEFAULT_GRACE_S", "noted", "STUCK_EXIT"]

# Extra wall time a rule gets inside one call after its deadline before it is interrupted by a signal:
# a quarter of the limit, between half a second and ten seconds.
DEFAULT_GRACE_S = 10.0
WALL_FACTOR = 3.0  # a limit of s seconds is spent after s * WALL_FACTOR seconds of wall time, however loaded the CPU
_TASKS = "/proc/self/task"


def _run_delays() -> dict[int, float]:
    """Seconds each thread of this process has spent runnable but waiting for a CPU, by thread id (empty where the
    kernel does not say)."""
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return {}
    delays: dict[int, float] = {}
    for tid in tids:
        try:
            with open(f"{_TASKS}/{tid}/schedstat", "rb") as f:
                delays[int(tid)] = int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return delays


def _waited_since(before: dict[int, float]) -> float:
    """The process's threads' waits for a CPU since ``before`` (`_run_delays`), summed: a thread started since counts
    from 0, a thread that ended since no longer counts (its waits are lost, so the block is charged for them)."""
    return sum(max(0.0, now - before.get(tid, 0.0)) for tid, now in _run_delays().items())


class _Budget:
    """How much of a time limit the block has spent: its wall time less its threads' waits for a CPU, and at least
    its wall time over WALL_FACTOR (module docstring)."""

    def __init__(self) -> None:
        self.start, self.before = time.monotonic(), _run_delays()

    def spent(self, now: float) -> float:
        wall = now - self.start
        return max(wall - _waited_since(self.before), wall / WALL_FACTOR)

    def over(self, now: float, limit: float) -> bool:
        """Whether ``limit`` seconds are spent. Never before ``limit`` seconds of wall time have passed (the waits
        only subtract), so the kernel's figures, a file per thread read at every safe point of every check, are read
        only then."""
        return now - self.start >= limit and self.spent(now) >= limit


def grace_for(seconds: float) -> float:
    return min(DEFAULT_GRACE_S, max(0.5, seconds / 4))


STUCK_EXIT = 6  # the exit status of a process stopped because a rule never returned from native code
STUCK_MARGIN_S = 5.0  # stage 3 comes this long (or twice the grace) after the signal was due at the latest


def stuck_after(seconds: float, grace_s: float) -> float:
    """Wall seconds after which a block limited to ``seconds`` (with ``grace_s`` inside one call) is stuck: the
    signal was due by WALL_FACTOR times its hard limit at the latest, and did not get the block out."""
    return WALL_FACTOR * (seconds + grace_s) + max(STUCK_MARGIN_S, 2 * grace_s)

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
def time_limit(seconds: float | None, exception: type[BaseException], grace_s: float | None = None,
               stuck: Callable[[float], None] | None = None) -> Iterator[None]:
    """Bound the block to ``seconds`` of the checker's own time (module docstring); ``None`` or ``0``: no limit.

    Make ``exception`` a BaseException so that neither Hypothesis nor the user's code swallows it. With
    ``grace_s=0`` the signal fires at the deadline itself (for code with no safe points); by default it
    is :func:`grace_for` ``seconds``. ``stuck(wall seconds)``, called from a watchdog thread where the signal
    has not got the block out :func:`stuck_after` its start, is the last resort (it should end the process).
    """
    if not seconds:
        yield
        return
    budget = _Budget()
    grace = grace_for(seconds) if grace_s is None else grace_s
    with noted(lambda now: exception() if budget.over(now, seconds) else None):
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
            yield
        else:
            with _alarm(budget, seconds + grace, exception), _watchdog(stuck_after(seconds, grace), stuck):
                yield


@contextmanager
def _watchdog(after_s: float, stuck: Callable[[float], None] | None) -> Iterator[None]:
    """Call ``stuck(wall seconds)`` from another thread if the block is still running ``after_s`` from now."""
    if stuck is None:
        yield
        return
    left = threading.Event()
    start = time.monotonic()

    def watch() -> None:
        if not left.wait(after_s):
            stuck(time.monotonic() - start)

    threading.Thread(target=watch, name="gradguard-time-limit-watchdog", daemon=True).start()
    try:
        yield
    finally:
        left.set()


@contextmanager
def _alarm(budget: _Budget, hard_limit: float, exception: type[BaseException]) -> Iterator[None]:
    """Raise ``exception`` by SIGALRM once ``budget`` has spent ``hard_limit`` seconds."""
    outer_handler = signal.getsignal(signal.SIGALRM)
    outer_left, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    now = time.monotonic()
    outer_deadline = now + outer_left if outer_left > 0 else None
    outer_fired = False

    def arm() -> None:
        now = time.monotonic()
        # The budget is spent no faster than the wall clock runs: it cannot be due before this.
        due = now + max(hard_limit - budget.spent(now), 0.0)
        due = due if outer_deadline is None else min(due, outer_deadline)
        signal.setitimer(signal.ITIMER_REAL, max(due - now, 1e-4))

    def on_alarm(signum: int, frame: Any) -> None:
        nonlocal outer_fired
        now = time.monotonic()
        if outer_deadline is not None and now >= outer_deadline and not outer_fired:
            outer_fired = True
            if callable(outer_handler):
                outer_handler(signum, frame)  # usually raises (a test's timeout); if it returns, go on
            arm()
            return
        if budget.over(now, hard_limit):
            raise exception()
        arm()  # woken early (a timer's granularity, or waits for a CPU that do not count): wait for the rest

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
