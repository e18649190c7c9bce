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

from dataclasses import dataclass

import numpy as np

__all__ = ["Tolerance", "TABLE", "for_dtype", "close", "resolves", "SAFETY", "RESOLUTION"]

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
    scale = max(scale, abs(a), abs(b))
    return abs(a - b) <= tol.atol + tol.rtol * scale + SAFETY * fd_error


def resolves(value: float, fd_error: float, tol: Tolerance) -> bool:
    """Whether a finite-difference ``value`` with error estimate ``fd_error`` is sharp enough to call a
    derivative right: its error bound is within RESOLUTION of its size (or the absolute tolerance)."""
    return SAFETY * fd_error <= RESOLUTION * abs(value) + tol.atol
