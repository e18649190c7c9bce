"""What the state checks (GG4xx) share: where a value changed between two snapshots, the pullback's
result as one tangent per argument, and the names of arguments in messages.

A change is found by :func:`gradguard.checker.compare.first_mismatch`: exactly (NaN equal to NaN; any
change is a write) for the mutation checks, within the per-dtype tolerance for the repeat-call checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gradguard.checker import tolerances
from gradguard.checker.case import Case
from gradguard.checker.checks.registry import Skip
from gradguard.checker.compare import at, close_elementwise, exact, first_mismatch
from gradguard.checker.inputs import arg_names, show
from gradguard.checker.trees import copy_tree, describe, leaves, same_structure

__all__ = ["Change", "argument_labels", "argument_name", "first_change", "fresh_tangents", "tangent_change", "tangent_tuple"]


@dataclass
class Change:
    """Where two trees first differ: ``where`` is '' or ' at [i, j]' (or a leaf path), then both values."""

    where: str
    before: str
    after: str


def first_change(before: Any, after: Any, tol: tolerances.Tolerance | None = None) -> Change | None:
    """The first leaf element where ``after`` differs from ``before``; exact (NaN == NaN) when ``tol`` is None."""
    if not same_structure(before, after):
        return Change("", describe(before), describe(after))
    agree = exact if tol is None else close_elementwise(tol)
    pairs = list(zip(leaves(before), leaves(after)))
    for k, (b, a) in enumerate(pairs):
        leaf = f" (leaf {k})" if len(pairs) > 1 else ""
        if b is None or a is None:
            if (b is None) != (a is None):
                return Change(leaf, show(b), show(a))
            continue
        b_arr, a_arr = _as_array(b), _as_array(a)
        if b_arr is None or a_arr is None:  # an opaque value (no array form): treated as unchanged, as below
            continue
        if b_arr.shape != a_arr.shape:
            return Change(f"{leaf} (shape)", str(b_arr.shape), str(a_arr.shape))
        if b_arr.dtype.kind not in "biufc" or a_arr.dtype.kind not in "biufc":
            try:
                same = bool(np.all(b_arr == a_arr))
            except Exception:  # noqa: BLE001 - an object without a usable ==: treat as unchanged
                same = True
            if not same:
                return Change(leaf, show(b), show(a))
            continue
        # NumPy scalars, as the messages have always shown them: show() gives them 6 significant digits (a float:
        # its repr if short).
        found = first_mismatch([(k, a_arr, b_arr)], agree, as_python=False)
        if found is not None:
            return Change(f"{leaf}{at(found.index)}", show(found.want), show(found.got))
    return None


def _as_array(value: Any) -> np.ndarray | None:
    """``value`` as a NumPy array: a sparse matrix or tensor (a rule's constant: SciPy's, PyTorch's) by its dense
    values; None where it has no array form."""
    dense = getattr(value, "toarray", None) or getattr(value, "to_dense", None)
    if dense is not None and not isinstance(value, np.ndarray):
        try:
            return np.asarray(dense())
        except Exception:  # noqa: BLE001 - not what its name promised: an opaque value
            return None
    try:
        return np.asarray(value)
    except Exception:  # noqa: BLE001 - refuses __array__: an opaque value
        return None


def argument_labels(case: Case) -> list[str]:
    return [f"argument {i} ({n})" for i, n in enumerate(arg_names(case.rule.primal, case.nargs))]


def argument_name(case: Case, i: int) -> str:
    return arg_names(case.rule.primal, case.nargs)[i]


def tangent_tuple(case: Case, t: Any) -> tuple[Any, ...]:
    """The pullback's result as a tuple, one entry per argument; a malformed one is GG103's finding."""
    if not isinstance(t, (tuple, list)) or len(t) != case.nargs:
        raise Skip("the pullback does not return one tangent per argument (see GG103)")
    return tuple(t)


def fresh_tangents(case: Case, pb: Any, ybar: Any) -> tuple[Any, ...]:
    """Call the pullback on a private copy of ``ybar`` (GG303 covers pullbacks that mutate it); snapshot the result."""
    return copy_tree(tangent_tuple(case, case.pullback(pb, copy_tree(ybar))))


def tangent_change(
    case: Case, first: tuple[Any, ...], second: tuple[Any, ...], *, exact: bool = False
) -> tuple[int, Change] | None:
    """The first argument whose tangent differs between two pullback results (per-dtype tolerance unless exact)."""
    tol = None if exact else case.tol
    for j in range(case.nargs):
        change = first_change(first[j], second[j], tol)
        if change is not None:
            return j, change
    return None
