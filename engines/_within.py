"""`within_gradient(x)`: is `x` being differentiated right now?

Each engine registers a predicate that recognises its own traced values (the
tape's tracked arrays, JAX's JVP tracers). Engines register lazily, so asking
the question never imports JAX.
"""

from __future__ import annotations

from typing import Any, Callable

_PREDICATES: list[Callable[[Any], bool]] = []


def register_within_gradient(predicate: Callable[[Any], bool]) -> None:
    """Add an engine's test for "this value is being differentiated"."""
    if predicate not in _PREDICATES:
        _PREDICATES.append(predicate)


def within_gradient(x: Any) -> bool:
    """True while ``x`` is being differentiated by the tape or by JAX, False otherwise.

    Code that branches on this computes something different when
    differentiated than when run: gradguard checks such rules against the
    primal (GG102) and across engines (GG503).
    """
    return any(predicate(x) for predicate in _PREDICATES)
