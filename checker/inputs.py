"""How inputs are shown to people and written into reproducers.

``show`` is for reading (short, rounded, elided); ``literal`` is exact Python
source that rebuilds the value bit for bit (floats print with ``repr``, which
round-trips).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import numpy as np

__all__ = ["show", "show_apart", "apart", "literal", "format_call", "arg_names"]


def show(value: Any, *, precision: int = 6, threshold: int = 12) -> str:
    if isinstance(value, np.ndarray):
        with np.printoptions(precision=precision, threshold=threshold, edgeitems=3, suppress=False):
            text = repr(value)
        return " ".join(text.split())
    if isinstance(value, tuple):
        inner = ", ".join(show(v, precision=precision, threshold=threshold) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(show(v, precision=precision, threshold=threshold) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {show(v, precision=precision, threshold=threshold)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        text = repr(value)
        return text if len(text) <= precision + 6 else f"{value:.{precision}g}"
    return repr(value)


def show_apart(a: Any, b: Any, *, precision: int = 6) -> tuple[str, str]:
    """``show(a)`` and ``show(b)``, with more significant digits (up to 17) where two different numbers would
    otherwise read alike: a finding that says "expected -0.138254, got -0.138254" (or "1.0" beside a rounded
    "1") shows no disagreement."""
    texts = show(a, precision=precision), show(b, precision=precision)
    scalar = (float, complex, np.floating, np.complexfloating)
    if isinstance(a, scalar) and isinstance(b, scalar) and a != b and _read_alike(*texts):
        a, b = (v.item() if isinstance(v, np.generic) else v for v in (a, b))  # repr(np.float64(x)): "np.float64(x)"
        while _read_alike(*texts) and precision < 17:
            precision += 2
            texts = show(a, precision=precision), show(b, precision=precision)
    return texts


def apart(a: float, b: float, allowed: float) -> str:
    """How far apart two compared values are and how far the tolerance lets them be ("3.0 apart where the tolerance
    allows 9e-06"): two values shown to the digits that tell them apart can still read as a rounding quibble."""
    return f"{show(abs(a - b), precision=2)} apart where the tolerance allows {show(allowed, precision=2)}"


def _read_alike(first: str, second: str) -> bool:
    """Whether two shown numbers are the same number ("1.0" and "1"; texts that are no numbers: equal texts)."""
    try:
        return complex(first) == complex(second)
    except ValueError:
        return first == second


def literal(value: Any) -> str:
    """Exact source for ``value`` (arrays, scalars, None, tuples/lists/dicts of them)."""
    if isinstance(value, np.ndarray):
        if value.size > 10_000:
            # Too large to inline: rebuild from the bytes, still exact.
            return f"np.frombuffer(bytes.fromhex({value.tobytes().hex()!r}), dtype=np.{value.dtype}).reshape({value.shape!r}).copy()"
        return f"np.array({value.tolist()!r}, dtype=np.{value.dtype})"
    if isinstance(value, np.generic):
        return f"np.{value.dtype}({value.item()!r})"
    if isinstance(value, tuple):
        items = ", ".join(literal(v) for v in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float) and not np.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def has_literal(value: Any) -> bool:
    """Whether `literal` writes ``value`` as source that rebuilds it exactly, type included (a NamedTuple comes back
    a tuple, a callable or a module as no source at all)."""
    return value is None or type(value) in (bool, int, float, complex, str, np.ndarray) or isinstance(value, np.generic)


def arg_names(fn: Callable[..., Any], n: int) -> list[str]:
    try:
        params = _positional(fn)
    except TypeError:  # an unhashable callable: read its signature each time
        params = _positional.__wrapped__(fn)
    return [params[i] if i < len(params) else f"arg{i}" for i in range(n)]


@functools.lru_cache(maxsize=256)  # the checks name arguments on every drawn input
def _positional(fn: Callable[..., Any]) -> tuple[str, ...]:
    try:
        return tuple(p.name for p in inspect.signature(fn).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    except (TypeError, ValueError):
        return ()


# A counterexample's arrays (the failing input, the draws) are shown whole up to this many elements: a (2, 8) input
# shown as [[0., 0., 0., ..., 0., 0., 0.], ...] hid the entries the finding was about (the reproducer has them all).
# Messages quote values with show()'s default, shorter threshold.
COUNTEREXAMPLE_THRESHOLD = 100


def format_call(fn: Callable[..., Any], args: tuple[Any, ...], name: str | None = None) -> str:
    """``addone_(a=array([0., 0.]))``: the failing input as people read it."""
    names = arg_names(fn, len(args))
    shown = ", ".join(f"{k}={show(v, threshold=COUNTEREXAMPLE_THRESHOLD)}" for k, v in zip(names, args))
    return f"{name or getattr(fn, '__name__', 'f')}({shown})"
