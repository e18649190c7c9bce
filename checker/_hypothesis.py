"""Hypothesis, kept deterministic: what every search of the checker runs inside.

Hypothesis (6.1xx) seeds part of its generation with constants found in the source of the local modules
in ``sys.modules``; a rule's inputs for a seed would then depend on which other modules happen to be
loaded (other rule files in the same run, the caller's code, other test modules). Both of the checker's
searches (the runner's and the contexts' input draw) run inside :func:`own_constants_only`, and carry no
example-database key (:func:`keyless`: they keep no database). :func:`first_draw` is the one draw a rule's
declaration reads, the same on every call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

_Test = TypeVar("_Test", bound=Callable[..., object])

__all__ = ["first_draw", "keyless", "own_constants_only", "shrink_deadline"]


@contextmanager
def own_constants_only() -> Iterator[None]:
    """Keep Hypothesis from mixing literals harvested from every loaded local module into its draws.

    Hypothesis (6.1xx) seeds part of its generation with constants found in the source of the local
    modules in ``sys.modules``; a rule's verdict for a seed would then depend on which other modules
    happen to be loaded (other rule files in the same run, the caller's code). There is no public switch,
    so the internal hook is replaced for the duration of a search, and left alone (a no-op) on a
    Hypothesis whose internals differ.
    """
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - another Hypothesis layout
        yield
        return
    if not (hasattr(providers, "_get_local_constants") and hasattr(providers, "Constants")
            and hasattr(getattr(providers, "CONSTANTS_CACHE", None), "cache")):
        yield  # pragma: no cover - another Hypothesis layout
        return
    original, empty = providers._get_local_constants, providers.Constants()
    providers._get_local_constants = lambda: empty
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = original
        providers.CONSTANTS_CACHE.cache.clear()


@contextmanager
def shrink_deadline(seconds: float | None) -> Iterator[None]:
    """Stop Hypothesis' shrinker ``seconds`` after it starts (None: Hypothesis' own limit, five minutes).

    Hypothesis checks a shrinking deadline after every test call and, when it passes, stops and replays
    the smallest failing example found so far: exactly the budget the checker wants, but its length is
    a module constant with no public setting. It is set for the duration of one search, and left alone
    (the searches' own step and time checks still apply) on a Hypothesis whose internals differ.
    """
    try:
        from hypothesis.internal.conjecture import engine
    except ImportError:  # pragma: no cover - another Hypothesis layout
        yield
        return
    if seconds is None or not isinstance(getattr(engine, "MAX_SHRINKING_SECONDS", None), (int, float)):
        yield
        return
    original = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = max(seconds, 0.0)
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = original


def keyless(test: _Test) -> _Test:
    """``test`` (a function under ``given``), marked as having no example-database key.

    Hypothesis names a search's saved examples by a digest of its test function's source, computed on every
    run (``inspect.getsource``, re-tokenising and hashing it: about 2 ms, once per search, and a rule's check
    runs dozens of searches). The checker's searches run with ``database=None``, so the key is never used;
    the attribute Hypothesis reads first is set to None instead (on a Hypothesis that reads another one,
    this does nothing).
    """
    test._hypothesis_internal_database_key = None  # type: ignore[attr-defined]
    return test


def first_draw(strategy: Any) -> Any:
    """The first value a search seeded with 0 draws from ``strategy``: the same on every call, in about a
    millisecond. ``strategy.example()`` is random on every call and generates a batch of values for one
    (about 10 ms); what a rule's declaration reads from a draw (the structure of its pytree arguments) is
    the same in every draw, so the cheapest deterministic one serves. Raises what the strategy raises, and
    Hypothesis' ``Unsatisfiable`` where it can draw nothing."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings

    drawn: list[Any] = []

    @settings(max_examples=1, database=None, deadline=None, phases=(Phase.generate,),
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, print_blob=False)
    @seed(0)
    @given(strategy)
    def keep(value: Any) -> None:
        if not drawn:
            drawn.append(value)

    with own_constants_only():
        keyless(keep)()
    return drawn[0]
