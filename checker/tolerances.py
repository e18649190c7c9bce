"""The one per-dtype tolerance table, and the comparison every numeric check uses.

Two numbers are close when::

    |a - b| <= atol + rtol * scale + SAFETY * fd_error

where ``scale`` is the magnitude of the quantities being compared (for a
dot-product test, the sum of the absolute values of its terms) and
``fd_error`` is the finite-difference error estimate. Rules may override rtol
and atol (``rrule(..., rtol=, atol=)``); nothing else in the checker holds a
tolerance literal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Tolerance", "TABLE", "for_dtype", "close", "allowed", "settles", "approximation_hint", "resolves", "SAFETY",
           "RESOLUTION"]

SAFETY = 10.0  # how many finite-difference error estimates a comparison forgives
# A finite-difference value whose error bound (SAFETY estimates) exceeds this share of its size cannot tell a
# right derivative from one that far off: a comparison that passes only thanks to it is no verdict.
RESOLUTION = 0.1


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


TABLE: dict[np.dtype, Tolerance] = {
    np.dtype("float64"): Tolerance(rtol=1e-6, atol=1e-9),
    np.dtype("complex128"): Tolerance(rtol=1e-6, atol=1e-9),
    np.dtype("float32"): Tolerance(rtol=2e-3, atol=1e-5),
    np.dtype("complex64"): Tolerance(rtol=2e-3, atol=1e-5),
    np.dtype("float16"): Tolerance(rtol=5e-2, atol=1e-3),
}


def for_dtype(dtype: np.dtype | str | None, *, rtol: float | None = None, atol: float | None = None) -> Tolerance:
    """The table's entry for ``dtype`` (float64's for Python scalars), with a rule's overrides applied."""
    base = TABLE.get(np.dtype(dtype) if dtype is not None else np.dtype("float64"), TABLE[np.dtype("float64")])
    return Tolerance(rtol=base.rtol if rtol is None else rtol, atol=base.atol if atol is None else atol)


def close(a: float, b: float, tol: Tolerance, *, scale: float = 0.0, fd_error: float = 0.0) -> bool:
    if not (np.isfinite(a) and np.isfinite(b)):
        return bool(a == b)
    return abs(a - b) <= allowed(a, b, tol, scale=scale, fd_error=fd_error)


def allowed(a: float, b: float, tol: Tolerance, *, scale: float = 0.0, fd_error: float = 0.0) -> float:
    """How far apart :func:`close` lets ``a`` and ``b`` be: the dtype's absolute and relative tolerance (relative to
    the larger of ``scale``, ``|a|`` and ``|b|``) and SAFETY finite-difference error estimates."""
    return tol.atol + tol.rtol * max(scale, abs(a), abs(b)) + SAFETY * fd_error


def settles(a: float, b: float, tol: Tolerance, *, scale: float = 0.0, fd_error: float = 0.0) -> bool:
    """Whether ``a`` (finite differences with error estimate ``fd_error``) and ``b`` are :func:`close` without the
    finite-difference error's share of the allowance outgrowing the tolerance's own: a pass that a shallow (cheaper)
    table may settle on its own. A deeper table's value lies within the shallow one's error of it, so where this
    holds, only a derivative off by one to three times the tolerance could have failed the deeper table. A table whose
    estimate is larger (a function whose higher derivatives are large at its steps) settles nothing, and the caller
    takes the deeper one."""
    return close(a, b, tol, scale=scale, fd_error=fd_error) and SAFETY * fd_error <= allowed(a, b, tol, scale=scale)


def resolves(value: float, fd_error: float, tol: Tolerance) -> bool:
    """Whether a finite-difference ``value`` with error estimate ``fd_error`` is sharp enough to call a
    derivative right: its error bound is within RESOLUTION of its size (or the absolute tolerance)."""
    return SAFETY * fd_error <= RESOLUTION * abs(value) + tol.atol


NEAR_AGREEMENT = 1e-3  # approximation_hint: sides this close (relative) may differ by the primal's own accuracy


def approximation_hint(fd_value: float, rule_value: float, tol: Tolerance) -> str:
    """A sentence for a fix where finite differences of the primal and the rule's derivative agree to within
    NEAR_AGREEMENT but not within ``tol``; '' elsewhere. A primal that approximates its function (a special
    function's series or continued fraction, accurate to 1e-8 or so) has an error that changes with the input, so
    its own derivative, which finite differences measure, differs from the exact one a rule returns by about as
    much: TensorFlow Probability's Owen's T, whose exact derivative 0.0721222 (by mpmath) is 1.2e-5 below the
    slope of its primal. What was established is only the relative difference; the sentence says so, and that the
    same small difference is what a rule that drops a small term gives (t5x's cross-entropy drops its z-loss output's
    cotangent, weighted by 1e-4: 8e-5 relative), so the hint is no reason on its own to loosen the tolerance."""
    scale = max(abs(fd_value), abs(rule_value))
    if not (math.isfinite(fd_value) and math.isfinite(rule_value)) or scale == 0:
        return ""
    relative = abs(fd_value - rule_value) / scale
    if not tol.rtol < relative <= NEAR_AGREEMENT:
        return ""
    suggested = 10.0 ** math.ceil(math.log10(2 * relative))
    return (f" The two sides agree to {relative:.1e} relative: if the primal only approximates its function (a "
            "special function's series, accurate to about that), the rule's exact derivative may be right and the "
            f"primal's own slope off by that much; then declare the rule's accuracy (rtol={suggested:g}). If the "
            "primal is exact, the difference is the rule's own: a small term left out (a regulariser's, an auxiliary "
            "output's cotangent scaled by a small weight), which a looser tolerance would hide.")
