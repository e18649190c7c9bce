"""Where two values first differ, and how a place is named in a message.

Every check that compares (a tangent with its reference, a buffer before and after a call, the outputs of
two calls) asks the same two questions: which element is the first that disagrees, and how to name it.

* :func:`first_mismatch` (and :func:`mismatches`, every one in order) walks pairs ``(key, got, want)`` of
  arrays and returns the first element where an agreement predicate says no, as a :class:`Mismatch`
  ``(key, index, got, want)``; ``key`` is whatever the caller names a pair by (an argument position, a
  leaf number, a leaf path).
* :func:`where` is the one formatter of a place: ``where(1, (2, 0)) == "argument 1 at [2, 0]"``,
  ``where("output", ())  == "output"``; :func:`at` is its suffix alone (``" at [2, 0]"`` or ``""``).

What counts as agreement is the check's own judgement and differs on purpose, so it is a named predicate
here, not a flag inside the search:

* :func:`exact`: equal, NaN equal to NaN (a write into a buffer is any change: GG303, GG401, GG402);
* :func:`close_elementwise`: :func:`exact`, or within the tolerance at the larger of the two elements
  (repeat calls: GG403, GG404, GG406);
* :func:`close_to_reference`: within the tolerance at the reference element, equal, or both NaN (the
  forward against the primal: GG102);
* :func:`close_at_leaf_scale`: within the tolerance at the largest magnitude in the whole leaf, so that
  cancellation inside a pullback is not mistaken for a wrong value (GG202, GG203, GG302, GG6xx). Two
  readings of non-finite elements exist today and both are kept: ``nonfinite="agree"`` (GG202, GG203's
  first test, GG302: the scale of the finite elements; equal values, or two non-finite ones, agree) and
  ``nonfinite="nan"`` (GG203's kink candidates, GG601/GG602: the same scale; equal values and two NaNs
  agree, no other pair with a non-finite value does).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, NamedTuple

import numpy as np

from gradguard.checker.tolerances import Tolerance
from gradguard.checker.trees import REAL_KINDS

__all__ = [
    "Agree",
    "Mismatch",
    "at",
    "close_at_leaf_scale",
    "close_elementwise",
    "close_to_reference",
    "exact",
    "first_index",
    "first_mismatch",
    "mismatches",
    "where",
    "worst_index",
]

Agree = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (got, want) -> True where the elements agree


class Mismatch(NamedTuple):
    """The first disagreeing element: which pair (``key``), where in it (``index``; ``()`` for a scalar),
    and its two values (Python scalars, or NumPy scalars with ``as_python=False``)."""

    key: Any
    index: tuple[int, ...]
    got: Any
    want: Any


# -- the search -----------------------------------------------------------------------------------
def first_index(bad: Any) -> tuple[int, ...] | None:
    """The index of the first True element of ``bad`` in C order, ``()`` for a true 0-d array, else None."""
    bad = np.asarray(bad, dtype=bool)
    if not np.any(bad):
        return None
    return tuple(int(j) for j in np.argwhere(bad)[0])


def worst_index(excess: Any) -> tuple[int, ...]:
    """The index of the largest element of ``excess`` (an error minus its bound), ``()`` for a scalar."""
    if not np.ndim(excess):
        return ()
    return tuple(int(j) for j in np.unravel_index(int(np.argmax(excess)), np.shape(excess)))


def mismatches(pairs: Iterable[tuple[Any, Any, Any]], agree: Agree, *, as_python: bool = True) -> Iterator[Mismatch]:
    """Every element where ``agree(got, want)`` is False, pair after pair, each pair in C order.

    ``pairs`` is consumed lazily, so a pair after the first mismatch is never prepared when only the first
    is asked for. ``got`` and ``want`` of a pair are arrays of one shape (broadcast them first)."""
    for key, got, want in pairs:
        a, b = np.asarray(got), np.asarray(want)
        with np.errstate(all="ignore"):
            bad = ~np.asarray(agree(a, b), dtype=bool)
        if not bad.any():  # the common case: no index to list (argwhere would build an empty one)
            continue
        for idx in np.argwhere(bad):
            index = tuple(int(j) for j in idx)
            x, y = a[index], b[index]
            yield Mismatch(key, index, x.item() if as_python else x, y.item() if as_python else y)


def first_mismatch(pairs: Iterable[tuple[Any, Any, Any]], agree: Agree, *, as_python: bool = True) -> Mismatch | None:
    """The first element where ``agree(got, want)`` is False (see :func:`mismatches`), or None."""
    return next(mismatches(pairs, agree, as_python=as_python), None)


# -- what agrees ----------------------------------------------------------------------------------
def exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Equal, NaN equal to NaN (for float and complex arrays)."""
    with np.errstate(invalid="ignore", over="ignore"):
        same = np.asarray(b == a)
        if b.dtype.kind in "fc" or a.dtype.kind in "fc":
            same = same | (np.isnan(b) & np.isnan(a))
    return same


def close_elementwise(tol: Tolerance) -> Agree:
    """:func:`exact`, or ``|a - b| <= atol + rtol * max(|a|, |b|)`` element by element."""

    def agree(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        same = exact(a, b)
        if b.dtype.kind in "fc" or a.dtype.kind in "fc":
            with np.errstate(invalid="ignore", over="ignore"):
                scale = np.maximum(np.abs(b), np.abs(a))
                same = same | (np.abs(b - a) <= tol.atol + tol.rtol * scale)
        return same

    return agree


def close_to_reference(tol: Tolerance) -> Agree:
    """``|got - want| <= atol + rtol * |want|`` element by element (in complex arithmetic), equal values, or
    two NaNs; ``want`` is the reference."""

    def agree(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):  # inf - inf: equal infinities agree, as NaN against NaN does
            if a.dtype.kind in REAL_KINDS and b.dtype.kind in REAL_KINDS:
                # |x + 0j| is |x| exactly, so real arrays need no complex copies (two of each 1e6-element output)
                diff = np.abs(a.astype(np.float64, copy=False) - b.astype(np.float64, copy=False))
            else:
                diff = np.abs(a.astype(np.complex128) - b.astype(np.complex128))
            bound = tol.atol + tol.rtol * np.abs(b)
            return (diff <= bound) | (a == b) | (np.isnan(a) & np.isnan(b))

    return agree


def _finite_max(x: np.ndarray) -> float:
    finite = np.abs(x[np.isfinite(x)])
    return float(np.max(finite, initial=0.0))


def close_at_leaf_scale(tol: Tolerance, *, nonfinite: str = "agree", at_least: float = 0.0) -> Agree:
    """``|a - b| <= atol + rtol * scale``, where ``scale`` is the largest magnitude in either whole array (or
    ``at_least``, where the values compared are the sum of terms that large: their rounding is at that scale).

    ``nonfinite="agree"``: the scale of the finite elements (one NaN elsewhere must not make every bound
    NaN); equal values agree, and two non-finite values agree (inf against inf, NaN against NaN, inf
    against NaN: neither is a number to compare). ``nonfinite="nan"``: the same scale; equal values agree
    (an infinity and the same infinity), two NaNs agree, and no other pair with a non-finite value does."""
    if nonfinite not in ("agree", "nan"):
        raise ValueError(f"nonfinite must be 'agree' or 'nan', not {nonfinite!r}")

    def agree(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            if nonfinite == "agree":
                scale = max(_finite_max(a), _finite_max(b), at_least)
                return (a == b) | (np.abs(a - b) <= tol.atol + tol.rtol * scale) | (~np.isfinite(a) & ~np.isfinite(b))
            scale = max(_finite_max(a), _finite_max(b), at_least)
            return (a == b) | (np.abs(a - b) <= tol.atol + tol.rtol * scale) | (np.isnan(a) & np.isnan(b))

    return agree


# -- naming the place -----------------------------------------------------------------------------
def at(index: Iterable[int] | None) -> str:
    """``" at [2, 0]"`` for an element of an array; ``""`` for a whole value (None or ``()``)."""
    index = tuple(index) if index is not None else ()
    return f" at {[int(j) for j in index]}" if index else ""


def where(what: int | str, index: Iterable[int] | None = None) -> str:
    """The place of an element in a message: ``what`` is an argument position (``"argument 1"``) or the
    name of the value (``"output"``, ``"the cotangent"``), followed by :func:`at` of ``index``."""
    name = f"argument {what}" if isinstance(what, (int, np.integer)) and not isinstance(what, bool) else str(what)
    return name + at(index)
