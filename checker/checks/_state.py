"""What the state checks (GG4xx) share: where a value changed between two snapshots, the pullback's
result as one tangent per argument, and the names of arguments in messages.

A change is found by :func:`gradguard.checker.compare.first_mismatch`: exactly (NaN equal to NaN; any
change is a write) for the mutation checks, within the per-dtype tolerance for the repeat-call checks.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from gradguard.checker import tolerances
from gradguard.checker.case import Case, RuleRaised
from gradguard.checker.checks.registry import Skip
from gradguard.checker.compare import at, close_elementwise, exact, first_mismatch
from gradguard.checker.inputs import arg_names, show, show_apart
from gradguard.checker.trees import copy_tree, describe, leaves, same_structure

__all__ = ["Change", "argument_labels", "argument_name", "first_change", "fresh_tangents", "tangent_change", "tangent_tuple",
           "irreproducibility_scope", "irreproducibility_seen", "note_irreproducible", "pulled_twice_differs",
           "two_forwards_differ", "unreproducible", "without_verdict"]


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
            return Change(f"{leaf}{at(found.index)}", *show_apart(found.want, found.got))
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


def unreproducible(case: Case) -> str:
    """Why the rule's pullback does not reproduce its own result at this input, or '' where it does.

    Two more forward calls on fresh copies of the input, the first one's pullback called twice, all with one
    fixed cotangent (`Case.fixed_cotangent`: nothing drawn, so the case's counterexample and replay stay as the
    check left them): the three results must agree (per-dtype tolerance). A pullback that draws random numbers
    (a sampled gradient estimator), accumulates into a buffer or reads the clock fails this; then a check that
    compares separate calls (two cotangents, two inputs, before and after an in-place change) sees that
    difference whatever it probes, and its diagnosis would be a guess. GG403 and GG406 report the
    irreproducibility itself. Where a call raises, nothing is established: ''."""
    try:
        y, pb = case.pair()
        ybar = case.fixed_cotangent(y)
        again = fresh_tangents(case, pb, ybar)
        third = fresh_tangents(case, pb, ybar)
        _, other = case.pair()
        elsewhere = fresh_tangents(case, other, ybar)
    except (RuleRaised, Skip):
        return ""
    names = argument_labels(case)
    found = tangent_change(case, again, third)
    if found is not None:
        return pulled_twice_differs(names[found[0]], found[1])
    found = tangent_change(case, again, elsewhere)
    if found is not None:
        return two_forwards_differ(names[found[0]], found[1])
    return ""


# What showed, during the check of the rule now running, that its pullback does not reproduce its own result:
# one input that shows it is enough for the whole rule, since an input where two random draws happened to agree
# proves nothing. GG403 and GG406 note what they find; so do the checks that ask `unreproducible` themselves.
# Scoped to one rule's check by `irreproducibility_scope` (a verdict never depends on an earlier rule).
_IRREPRODUCIBLE: ContextVar[list[str] | None] = ContextVar("gradguard_irreproducible", default=None)
# Likewise what showed that the rule's primal does not reproduce its own value (GG102 asks): a function drawn at random,
# whose value under AD and when run, two separate runs, may differ by that alone (GG503). A forward that draws at
# random beside a deterministic primal is no such thing: it is the forward that is not the primal.
_PRIMAL_IRREPRODUCIBLE: ContextVar[list[str] | None] = ContextVar("gradguard_primal_irreproducible", default=None)


@contextmanager
def irreproducibility_scope() -> Iterator[None]:
    token = _IRREPRODUCIBLE.set([])
    primal = _PRIMAL_IRREPRODUCIBLE.set([])
    try:
        yield
    finally:
        _PRIMAL_IRREPRODUCIBLE.reset(primal)
        _IRREPRODUCIBLE.reset(token)


def _note(var: ContextVar[list[str] | None], why: str) -> None:
    """Keep ``why`` in the current rule's record ``var`` where it holds no reason yet (the first is kept)."""
    record = var.get()
    if record is not None and not record:
        record.append(why)


def _seen(var: ContextVar[list[str] | None]) -> str:
    """The first reason in the current rule's record ``var``, or ''."""
    record = var.get()
    return record[0] if record else ""


def note_primal_irreproducible(why: str) -> None:
    """Record that the rule's primal does not reproduce its own value (the first reason is kept)."""
    _note(_PRIMAL_IRREPRODUCIBLE, why)


def primal_irreproducibility_seen() -> str:
    """The first reason noted by :func:`note_primal_irreproducible` during the current rule's check, or ''."""
    return _seen(_PRIMAL_IRREPRODUCIBLE)


def pulled_twice_differs(label: str, change: Change) -> str:
    """What shows that a pullback called twice with the same cotangent does not reproduce its result (GG403)."""
    return (f"calling its pullback twice with the same cotangent gave the tangent for {label}{change.where} as "
            f"{change.before}, then {change.after} (GG403)")


def two_forwards_differ(label: str, change: Change) -> str:
    """What shows that the pullbacks of two forward calls on one input differ for one cotangent (GG406)."""
    return (f"the pullbacks of two forward calls on identical copies of the input gave the tangent for {label}"
            f"{change.where} as {change.before}, then {change.after} for the same cotangent (GG406)")


def without_verdict(why: str) -> str:
    """Why a check that compares separate calls gives no verdict on a rule whose pullback ``why`` shows to be
    irreproducible (the reason it is listed as skipped)."""
    return (f"it compares separate calls of the rule, whose pullback does not reproduce its own result ({why}): "
            "any difference it saw could be that alone")


def note_irreproducible(why: str) -> None:
    """Record that the rule being checked does not reproduce its pullback's result (the first reason is kept)."""
    _note(_IRREPRODUCIBLE, why)


def irreproducibility_seen() -> str:
    """The first reason noted during the current rule's check, or ''."""
    return _seen(_IRREPRODUCIBLE)
