"""A rule's memory budget: how much the process's resident memory may grow while one rule is checked.

:class:`MemoryLimit` measures the growth of the process's resident set size (``/proc/self/statm``)
since the rule started, and stops the rule the way its time limit does
(:mod:`gradguard.checker._deadline`):

1. the growth is sampled at every safe point and every few milliseconds by a monitor thread (for a
   rule that grows inside one call); once it is over the budget, the limit is *noted* and the checker
   stops at its next safe point, where no library call is in flight;
2. only a rule that stays inside one call for a grace period more (:data:`GRACE_S`), or grows to twice
   its budget meanwhile, is interrupted by a signal (``SIGUSR2``, delivered to the main thread).

A single allocation that fails (NumPy's ``MemoryError`` says how many bytes it asked for) is over the
budget when what it asked for is more than the budget has left: :func:`note_memory_error` notes that, so
the rule gets the budget's error, not a finding about a ``MemoryError``. A ``MemoryError`` whose size is
unknown, or that asked for less than was left, is memory running out elsewhere (the process's or the
machine's limit), and stays what it was.

The same monitor counts the process's memory maps (``/proc/self/maps``) every :data:`MAPS_EVERY_S`: past
:data:`MAPS_SHARE` of the kernel's limit (``vm.max_map_count``) the rule is stopped the same way, with an error
that says so. A process at that limit can map no more memory whatever its size, and JAX's compiler, the first to
need some, crashes it: a rule whose every call maps memory it never unmaps (an eager JAX call that compiles afresh
each time keeps its code mapped) ended the whole run without a report, with gigabytes still free.

Resident memory is the process's, not the rule's alone: a library that a check imports for the first
time (PyTorch for its column) counts toward the rule being checked, which is why the default budget is
large (:func:`default_limit_mb`). Where ``/proc/self/statm`` does not exist the growth cannot be
measured and only failed allocations are judged. Signals reach the main thread only; elsewhere the limit
is checked at safe points alone.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import threading
import time
from typing import Any, Callable

from gradguard.checker._deadline import noted

__all__ = ["MemoryLimit", "RuleMemoryLimit", "default_limit_mb", "note_memory_error", "resident_bytes", "map_count",
           "max_map_count", "SAMPLE_EVERY_S", "GRACE_S", "MAPS_EVERY_S", "MAPS_SHARE"]

SAMPLE_EVERY_S = 0.005  # the monitor thread's shortest period, taken when the budget is nearly spent
SAMPLE_AT_MOST_S = 0.05  # its longest, taken while the budget has room for GROWTH_RATE for that long
GROWTH_RATE = 4 * 2**30  # bytes per second: faster than one thread's pages can be touched in
GRACE_S = 1.0  # inside one call after the budget is spent, before the signal
MAPS_EVERY_S = 1.0  # the monitor counts the memory maps this often (a count reads all of /proc/self/maps)
MAPS_SHARE = 0.9  # of vm.max_map_count: past it the rule is stopped, before a mapping fails
_SIGNAL = getattr(signal, "SIGUSR2", None)
_MB = 2**20

_local = threading.local()


class RuleMemoryLimit(BaseException):
    """Raised when a rule exceeds its memory budget (BaseException: Hypothesis must not catch it); ``maps``: the
    kernel's limit on the process's memory maps, not the budget, stopped it; ``inherited``: the rule mapped less than
    half of that line itself, so it could not have reached it from a fresh process's start: the rest were there before
    it (mapped by the calls of rules checked before it in the same process), and only a fresh process can say whether
    the rule maps memory it never unmaps."""

    def __init__(self, budget_mb: float, measured: str, *, maps: bool = False, inherited: bool = False) -> None:
        super().__init__(f"exceeded the kernel's limit on memory maps: {measured}" if maps else
                         f"exceeded the {budget_mb:g} MB per-rule memory limit: {measured}")
        self.budget_mb, self.measured, self.maps, self.inherited = budget_mb, measured, maps, inherited


def default_limit_mb() -> int | None:
    """Half the machine's physical memory, in MB: far above what checking a rule takes, below the point where
    a runaway rule makes the machine swap. None where the size of physical memory is unknown."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2 // _MB
    except (ValueError, OSError, AttributeError):
        return None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


# ``/proc/self/statm`` held open by this process (pid, descriptor): it is read at every safe point and every
# few milliseconds by the monitor, and re-reading an open procfs file from offset 0 (``os.pread``) costs a
# fifth of opening it again each time (the open and close were most of a sample). The pid keeps a forked
# child, whose inherited descriptor still names its parent, from reading the parent's memory.
_statm: tuple[int, int] | None = None
_statm_lock = threading.Lock()


def _statm_fd() -> int:
    global _statm
    pid = os.getpid()
    held = _statm
    if held is not None and held[0] == pid:
        return held[1]
    with _statm_lock:
        held = _statm
        if held is None or held[0] != pid:
            if held is not None:
                os.close(held[1])  # the parent's, inherited
            held = _statm = (pid, os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
        return held[1]


def resident_bytes() -> int | None:
    """This process's resident set size, or None where ``/proc/self/statm`` cannot be read."""
    try:
        return int(os.pread(_statm_fd(), 256, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError, AttributeError):  # AttributeError: no os.pread on this platform
        return None


def map_count() -> int | None:
    """How many memory maps this process holds (lines of ``/proc/self/maps``), or None where it cannot be read."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            return maps.read().count(b"\n")
    except OSError:
        return None


def max_map_count() -> int | None:
    """The kernel's limit on one process's memory maps (``vm.max_map_count``), or None where it cannot be read."""
    try:
        with open("/proc/sys/vm/max_map_count", "rb") as limit:
            return int(limit.read())
    except (OSError, ValueError):
        return None


def _mb(n: float) -> str:
    for unit, size in (("TB", 2**40), ("GB", 2**30)):
        if n >= 10 * size:
            return f"{n / size:.1f} {unit}"
    return f"{n / _MB:.1f} MB"


class MemoryLimit:
    """``with MemoryLimit(mb):`` bounds the growth of resident memory inside the block; ``None``/``0``: no limit.

    ``spent`` is the exception the block was (or is to be) stopped with, None while it has room left."""

    def __init__(self, mb: float | None) -> None:
        self.mb = mb or None
        self.budget = int(mb * _MB) if mb else 0
        self.baseline: int | None = None
        self.peak = 0  # the largest growth measured so far
        self._request: tuple[int, int] | None = None  # a failed allocation that spent the budget: its size, the growth then
        self.spent: RuleMemoryLimit | None = None
        self._spent_at = 0.0
        self._stop = threading.Event()
        self._signalled = False
        self._closing = False
        self._main: int | None = None
        self._exits: list[Callable[[], None]] = []
        self._maps: tuple[int, int] | None = None  # (maps when the block began, the kernel's limit)
        self._maps_at = 0.0  # when the monitor counts them next

    # -- measuring ---------------------------------------------------------------------------------
    def growth(self) -> int | None:
        now = resident_bytes()
        return None if now is None or self.baseline is None else now - self.baseline

    def sample(self) -> None:
        """Measure the growth now; note the limit when it is over the budget."""
        if not self.budget:
            return
        grown = self.growth()
        if grown is None:
            return
        self.peak = max(self.peak, grown)
        if self.spent is None and grown > self.budget:
            self._note()
        elif self.spent is not None and self._request is None and not self.spent.maps:
            self._note()  # the message says the largest growth measured until the rule is stopped

    def count_maps(self) -> None:
        """Count the process's memory maps; note the limit when they are past MAPS_SHARE of the kernel's."""
        if self._maps is None or self.spent is not None:
            return
        held = map_count()
        start, limit = self._maps
        if held is not None and held > limit * MAPS_SHARE:
            self._spent_at = time.monotonic()
            self.spent = RuleMemoryLimit(self.mb or 0, (
                f"its process holds {held:,} memory maps ({start:,} when the rule started, {max(held - start, 0):,} "
                f"mapped since), past {MAPS_SHARE:.0%} of the {limit:,} the kernel allows one process (vm.max_map_count)"),
                maps=True, inherited=held - start < limit * MAPS_SHARE / 2)

    def note_request(self, requested: int) -> None:
        """An allocation of ``requested`` bytes failed: over the budget when more than what was left."""
        self.sample()
        grown = max(self.growth() or 0, 0)
        if self.spent is None and self.budget and grown + requested > self.budget:
            self._request = (requested, grown)
            self._note()

    def _note(self) -> None:
        if self._request is not None:
            requested, in_use = self._request
            measured = f"it asked for one allocation of {_mb(requested)} with {_mb(in_use)} of its budget in use"
        else:
            measured = f"its resident memory grew by {_mb(self.peak)} since the rule started"
        if self.spent is None:
            self._spent_at = time.monotonic()
            self.spent = RuleMemoryLimit(self.mb or 0, measured)
        else:  # the same exception, which may be in flight already, says the largest growth measured
            self.spent.measured = measured
            self.spent.args = (f"exceeded the {self.mb:g} MB per-rule memory limit: {measured}",)

    # -- the block ---------------------------------------------------------------------------------
    def __enter__(self) -> "MemoryLimit":
        if not self.budget:
            return self
        self.baseline = resident_bytes()
        stack = _stack()
        stack.append(self)
        self._exits.append(stack.pop)
        guard = noted(self._at_safe_point)
        guard.__enter__()
        self._exits.append(lambda: guard.__exit__(None, None, None))
        if self.baseline is None:  # nothing to sample: failed allocations alone are judged
            return self
        start, limit = map_count(), max_map_count()
        if start is not None and limit is not None:
            self._maps = (start, limit)
            self._maps_at = time.monotonic() + MAPS_EVERY_S
        if _SIGNAL is not None and threading.current_thread() is threading.main_thread():
            self._main = threading.get_ident()
            outer = signal.signal(_SIGNAL, self._on_signal(signal.getsignal(_SIGNAL)))
            self._exits.append(lambda: signal.signal(_SIGNAL, outer))
        monitor = threading.Thread(target=self._monitor, name="gradguard-memory-limit", daemon=True)
        monitor.start()
        self._exits.append(lambda: (self._stop.set(), monitor.join()))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._closing = True  # a signal now is too late: the block is over
        while self._exits:
            self._exits.pop()()

    def release(self) -> None:
        """Give back what the stopped block held: the exception's traceback holds the frames it ran through,
        with their values, and Hypothesis' frames hold the exception in cycles."""
        if self.spent is not None:
            self.spent.__traceback__ = self.spent.__context__ = self.spent.__cause__ = None
        _release()

    def _at_safe_point(self, now: float) -> BaseException | None:
        self.sample()
        return self.spent

    def period(self) -> float:
        """The monitor's next wait: the time the budget left lasts at GROWTH_RATE, within SAMPLE_EVERY_S and
        SAMPLE_AT_MOST_S. Waking every 5 ms cost a few percent of a small rule's check (each wake takes the
        interpreter's lock), where the budget has room for seconds of the fastest growth."""
        left = self.budget - max(self.peak, 0)
        return min(max(left / GROWTH_RATE, SAMPLE_EVERY_S), SAMPLE_AT_MOST_S)

    def _monitor(self) -> None:
        while not self._stop.wait(self.period() if self.spent is None else SAMPLE_EVERY_S):
            self.sample()
            if self._maps is not None and time.monotonic() >= self._maps_at:
                self._maps_at = time.monotonic() + MAPS_EVERY_S
                self.count_maps()
            spent = self.spent
            if spent is None or self._signalled or self._main is None:
                continue
            grown = self.growth() or 0
            if time.monotonic() - self._spent_at >= GRACE_S or grown > 2 * self.budget:
                self._signalled = True  # once: the handler raises, the block ends
                signal.pthread_kill(self._main, _SIGNAL)

    def _on_signal(self, outer: Any) -> Callable[[int, Any], None]:
        def handler(signum: int, frame: Any) -> None:
            if self.spent is not None and self._signalled and not self._closing:
                raise self.spent
            if callable(outer):
                outer(signum, frame)

        return handler


def _stack() -> list[MemoryLimit]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def note_memory_error(exc: BaseException) -> None:
    """A ``MemoryError`` the rule raised: over the budget when the allocation it failed asked for more than
    the budget had left (NumPy's says its size); otherwise nothing is established and nothing is noted."""
    stack = _stack()
    if not stack or not isinstance(exc, MemoryError):
        return
    requested = getattr(exc, "_total_size", None)
    if isinstance(requested, int) and requested > 0:
        stack[-1].note_request(requested)
    else:
        stack[-1].sample()


def _release() -> None:
    """Collect what is garbage now, and return freed heap pages to the system."""
    gc.collect()
    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc's; elsewhere freed pages go back as the allocator decides
    except (OSError, AttributeError):
        return
    trim(0)
