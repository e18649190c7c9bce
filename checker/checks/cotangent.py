"""Cotangent checks (GG3xx): the cotangents engines really pass, not only random ones.

An output that the program does not use still gets its pullback called in
some engines: with a zero cotangent (JAX, PyTorch, the tape when zeros are
instantiated) or with ``None`` (Zygote's ``nothing``, ChainRules' ``NoTangent``,
the tape's ``none`` policy). Which of the two a rule must handle is its declared
``unused_cotangent`` convention (:data:`gradguard.checker.specs.UNUSED_COTANGENTS`). And a cotangent buffer may be shared by several
pullbacks (fan-out), so a pullback must treat it as read-only.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from gradguard.checker.case import Case, RuleRaised, is_finite_tree, zeros_like_tree
from gradguard.checker.compare import close_at_leaf_scale, exact, first_index, first_mismatch, where
from gradguard.checker.checks._kinks import (NoDerivative, beyond_float64, beyond_narrow_float, kinked_through,
                                             no_derivative_along)
from gradguard.checker.checks._vjp import NONFINITE_CANDIDATES, element_index, named_place, tangent_pairs
from gradguard.checker.checks.registry import Problem, Skip, check
from gradguard.checker.inputs import show
from gradguard.checker.specs import unused_cotangent_of
from gradguard.checker.trees import children, copy_tree, describe, is_leaf, leaves, rebuild, tree_map
from gradguard.engines.errors import clause
from gradguard.engines.values import is_ml_float

__all__: list[str] = []


def _first_nonzero(case: Case, tangents: Any, positions: Iterable[int]) -> tuple[int, tuple[int, ...], Any] | None:
    """``(argument, index, value)`` of the first tangent element that is not zero (None counts as zero)."""
    atol = case.tol.atol
    for i in positions:
        t = tangents[i]
        if t is None:
            continue
        arr = np.asarray(t)
        if arr.dtype.kind not in "biufc" and not is_ml_float(arr.dtype):  # (bfloat16's kind is "V")
            return i, (), t
        with np.errstate(all="ignore"):
            idx = first_index(~(np.abs(arr) <= atol))
        if idx is not None:
            return i, idx, arr[idx].item()
    return None


@check(
    "GG301",
    family="cotangent",
    title="zero cotangent does not give zero tangents",
    given="""
        def total(a):
            return a.sum()
    """,
    broken="""
        @rrule(total, arrays(shape=(3,)))
        def total_rrule(a):
            return total(a), lambda ybar: (np.ones(a.shape),)           # 1 even when the output is unused
    """,
    fixed="""
        @rrule(total, arrays(shape=(3,)))
        def total_rrule(a):
            return total(a), lambda ybar: (np.full(a.shape, ybar),)
    """,
)
def zero_cotangent(case: Case) -> Iterable[Problem]:
    """``pullback(zeros_like(y))`` must return zero (or ``None``) tangents. Engines call the pullback of an
    output the program never used with a zero cotangent; a rule that returns ``ones``, adds a constant, or
    computes ``0 * inf = NaN`` there puts a gradient into the program that no use of the output justifies.
    Where every such tangent is NaN or Inf at a point where the primal has no derivative along its element
    (a cone point: a 2-norm at 0, the standard deviation of a constant row, where its one-sided derivatives
    differ; a vertical tangent: ``cbrt`` at 0, where they grow at every step), the finding is a warning, as
    GG206's is there; it stays an error wherever the primal's one-sided derivatives agree and settle, or
    cannot be taken. So it is where the primal's own output is not finite (``slogdet`` of a singular matrix, whose
    log|det| is -inf): no derivative exists there either, but a program that uses only the sign still gets the
    NaN. A finite nonzero tangent for a zero cotangent stays an error everywhere."""
    y, pb = case.pair()
    zero = zeros_like_tree(y)
    tangents = case.tangents(pb, zero)
    bad = _first_nonzero(case, tangents, range(case.nargs))
    if bad is None:
        return
    infinite = _non_finite_output(case, tangents)
    if infinite is not None:
        i, idx, value, output = infinite
        yield _no_derivative_warning(
            case, i, idx, value, f"at a point where the primal's {output}, so it has no derivative there",
            "Keep inf and NaN factors out of the tangent where the cotangent is 0 (e.g. np.where(ybar == 0, 0.0, "
            "...)), so that a program that uses another output, or none, gets 0 from this one.")
        return
    cone, unexcused = _only_at_points_without_derivative(case, tangents)
    if cone is not None:
        i, idx, value, sides = cone
        where_ = "where " if sides.unit is not None else (
            "at a point where the primal has no derivative finite differences resolve: " if sides.through else
            "at a point where the primal has no derivative finite differences resolve along this element: ")
        yield _no_derivative_warning(
            case, i, idx, value, where_ + sides.established(),
            "Keep inf and NaN factors out of the tangent where the cotangent is 0 (guard the point, e.g. "
            "np.where(x == 0, 0.0, g / np.where(x == 0, 1.0, 3 * np.cbrt(x) ** 2)) for a cube root), so that "
            "0 * factor stays 0." if sides.growing or sides.unit is not None else
            "Return a finite subgradient at this point (0 for a norm or standard deviation at its cone point), "
            "e.g. np.where(n == 0, 0.0, x / np.where(n == 0, 1.0, n)), so that 0 * factor stays 0.")
        return
    i, idx, value = unexcused or bad
    yield Problem(
        message=(
            f"the pullback of {case.rule.name} must return zero tangents for a zero cotangent, but the tangent for "
            f"{named_place(case, i, idx)} is {show(value)}."
        ),
        location=where(i, idx),
        expected="0 (or None)",
        actual=show(value),
        fix=(
            "Multiply every tangent by the cotangent (np.full(x.shape, ybar), not np.ones), and keep inf/NaN "
            "factors out of it so 0 * factor stays 0."
        ),
    )


def _no_derivative_warning(case: Case, i: int, idx: tuple[int, ...], value: Any, why: str, fix: str) -> Problem:
    """GG301's warning for a non-finite tangent of a zero cotangent where the primal has no derivative (``why``)."""
    return Problem(
        message=(
            f"the pullback of {case.rule.name} must return zero tangents for a zero cotangent, but the tangent for "
            f"{named_place(case, i, idx)} is {show(value)}, {why}. A program that does not use the output still gets this value "
            "in its gradient."
        ),
        location=where(i, idx),
        expected="0 (or None)",
        actual=show(value),
        fix=fix,
        severity="warning",
    )


def _non_finite_output(case: Case, tangents: Any) -> tuple[int, tuple[int, ...], Any, str] | None:
    """``(argument, index, value, what the output is)`` for the first nonzero tangent element where the primal's
    output is not finite and every nonzero tangent element is NaN or Inf; None otherwise."""
    outputs = leaves(case.first_call().output)
    found = None
    for n, leaf in enumerate(outputs):
        arr = np.asarray(leaf)
        if arr.dtype.kind in "fc":
            idx = first_index(~np.isfinite(arr))
            if idx is not None:
                name = where(f"output {n}" if len(outputs) > 1 else "output", idx)
                found = f"{name} is {show(arr[idx].item())}"
                break
    if found is None:
        return None
    parts = _non_finite_parts(case, tangents)
    if not parts:
        return None
    i, arr, nonzero = parts[0]
    k = first_index(nonzero)
    return i, k, arr[k].item(), found


def _non_finite_parts(case: Case, tangents: Any) -> list[tuple[int, np.ndarray, np.ndarray]] | None:
    """``(argument, tangent, mask of its nonzero elements)`` for each tangent with a nonzero element, where
    every nonzero element is NaN or Inf; None where one is finite, or a tangent is no float array."""
    parts = []
    for i in range(case.nargs):
        if tangents[i] is None:
            continue
        arr = np.asarray(tangents[i])
        if arr.dtype.kind not in "fc":
            return None
        with np.errstate(all="ignore"):
            nonzero = ~(np.abs(arr) <= case.tol.atol)
        if not np.any(nonzero):
            continue
        if np.any(nonzero & np.isfinite(arr)):
            return None
        parts.append((i, arr, nonzero))
    return parts


def _only_at_points_without_derivative(
    case: Case, tangents: Any
) -> tuple[tuple[int, tuple[int, ...], Any, NoDerivative] | None, tuple[int, tuple[int, ...], Any] | None]:
    """``(excused, unexcused)``. ``excused`` is ``(argument, index, value, what was established)`` for the first
    nonzero tangent element, where every nonzero element is NaN or Inf in a differentiable argument and each one
    judged (up to NONFINITE_CANDIDATES, as GG206) lies where the primal has no derivative along it (its one-sided
    derivatives differ, or grow at every step: :func:`no_derivative_along`); else None. ``unexcused`` is
    ``(argument, index, value)`` of the first judged element where the primal has a derivative or it cannot be
    told (the element an error names: mod's tangent in x is NaN at a jump, its tangent in y where the derivative
    is 0), None where none was judged so."""
    parts = _non_finite_parts(case, tangents)
    if parts is None:
        return None, None
    first = None
    tried = 0
    for i, arr, nonzero in parts:
        if i not in case.diff_positions:
            return None, None
        for k in np.flatnonzero(nonzero)[:max(NONFINITE_CANDIDATES - tried, 0)]:
            tried += 1
            sides = (no_derivative_along(case, i, int(k)) or beyond_float64(case, i, int(k))
                     or beyond_narrow_float(case, i, int(k)) or kinked_through(case, i, int(k)))
            idx = element_index(arr, int(k))
            if sides is None:
                return None, (i, idx, arr[idx].item())
            if first is None:
                first = (i, idx, arr[idx].item(), sides)
    return first, None


def _fix_none(case: Case) -> str:
    n = case.nargs
    return (
        "Treat None as a zero cotangent (ChainRules' NoTangent, Zygote's nothing): start the pullback with "
        f"`if ybar is None: return {(None,) * n!r}`."
    )


def _none_variants(case: Case, y: Any) -> list[tuple[str, Any, Any]]:
    """(what, cotangent with None, the same with zeros): the whole output, then each output of a tuple."""
    out: list[tuple[str, Any, Any]] = [("None as the cotangent", None, None)]
    if not is_leaf(y):
        outputs = children(y)
        for j in range(len(outputs)):
            filled = children(case.cotangent_like(y, f"cotangent with output {j} absent"))
            absent = rebuild(y, (None if k == j else filled[k] for k in range(len(outputs))))
            zero = rebuild(y, (zeros_like_tree(outputs[k]) if k == j else filled[k] for k in range(len(outputs))))
            out.append((f"None as the cotangent of output {j}", absent, zero))
    return out


@check(
    "GG302",
    family="cotangent",
    title="absent (None) cotangent is not accepted",
    kinds=("numpy",),
    given="""
        def square(x):
            return x * x
    """,
    broken="""
        @rrule(square, arrays(shape=(3,)), unused_cotangent="none")   # for engines that pass None
        def square_rrule(x):
            return x * x, lambda ybar: (2 * x * ybar,)           # TypeError for ybar=None
    """,
    fixed="""
        @rrule(square, arrays(shape=(3,)), unused_cotangent="none")
        def square_rrule(x):
            def pullback(ybar):
                if ybar is None:                                 # the output was not used
                    return (None,)
                return (2 * x * ybar,)
            return x * x, pullback
    """,
)
def none_cotangent(case: Case) -> Iterable[Problem]:
    """A rule declared with `unused_cotangent="none"` (on the rule, or as the project's default: `gradguard
    check --unused-cotangent none`) is written for engines that call the pullback of an unused output with
    `None` instead of a cotangent (for a tuple output, `None` in the unused positions), as Zygote passes
    `nothing` and ChainRules `NoTangent`. The pullback must accept it and return zero or `None` tangents;
    a pullback that computes `None * x` raises in the middle of someone's backward pass. Under the default
    convention, `"zeros"`, `None` never arrives and the check does not run (it is listed among the skipped
    checks with the reason): JAX and PyTorch materialise zero cotangents and HIPS/autograd never calls the
    pullback of an unused output, so a NumPy rule written for them need not handle `None`. The check applies
    to NumPy rules (`jax_rule` and `torch_rule` declare `"zeros"` by default: JAX and PyTorch never pass
    `None`). The safety matrix follows the
    same convention: its `tape[none]` column runs only for rules declared `"none"`."""
    convention = unused_cotangent_of(case.rule)
    if convention != "none":
        raise Skip(
            f"{case.rule.name} is checked under unused_cotangent={convention!r}: the engines it is written for pass "
            "zeros to an unused output's pullback (GG301 checks those), never None. Declare "
            "unused_cotangent=\"none\" on the rule (or --unused-cotangent none for the project) when it must accept None"
        )
    y = case.first_call().output
    for what, ybar, zero in _none_variants(case, y):
        _, pb = case.pair()
        try:
            got = copy_tree(pb(copy_tree(ybar)))  # a snapshot: the comparison below calls the rule again
        except Exception as exc:  # noqa: BLE001 - the user's pullback failed: that is the finding
            raised = RuleRaised("pullback", case.rule.name, exc)
            yield Problem(
                message=(
                    f"the pullback of {case.rule.name} must accept {what} (an unused output), but it raised "
                    f"{type(exc).__name__}: {clause(exc)}."
                ),
                expected="zero or None tangents",
                actual=raised.summary,
                fix=_fix_none(case),
            )
            return
        if not isinstance(got, (tuple, list)) or len(got) != case.nargs:
            yield Problem(
                message=(
                    f"the pullback of {case.rule.name} must return one tangent per argument ({case.nargs}) for {what}, "
                    f"but returned {describe(got)}."
                ),
                expected=f"tuple of {case.nargs} zero or None tangents",
                actual=describe(got),
                fix=_fix_none(case),
            )
            return
        if ybar is None:
            bad = _first_nonzero(case, got, range(case.nargs))
            if bad is not None:
                i, idx, value = bad
                yield Problem(
                    message=(
                        f"the pullback of {case.rule.name} must return zero or None tangents for {what}, but the "
                        f"tangent for {named_place(case, i, idx)} is {show(value)}."
                    ),
                    location=where(i, idx),
                    expected="0 (or None)",
                    actual=show(value),
                    fix=_fix_none(case),
                )
                return
        else:
            want = case.tangents(case.pair()[1], zero)
            bad = first_mismatch(tangent_pairs(case, tuple(got), want), close_at_leaf_scale(case.tol))
            if bad is not None:
                i, idx, value, expected = bad
                if is_finite_tree(value) and not is_finite_tree(expected):
                    # The None path gives a number where zeros give NaN or Inf: that the two differ is all this
                    # check established, and the non-finite one is the zeros' (0 * inf in the pullback).
                    yield Problem(
                        message=(
                            f"the pullback of {case.rule.name} must give the same tangents for {what} as for zeros "
                            f"there, but the tangent for {named_place(case, i, idx)} is {show(value)} with None and "
                            f"{show(expected)} with zeros."
                        ),
                        location=where(i, idx),
                        expected="the same tangent for None and for zeros",
                        actual=f"{show(value)} with None, {show(expected)} with zeros",
                        fix=(
                            "Keep inf and NaN factors out of the terms a zero cotangent multiplies (guard the "
                            "division, e.g. np.where(d == 0, 0.0, g / np.where(d == 0, 1.0, d))), so that zeros give "
                            "what None gives."
                        ),
                    )
                    return
                yield Problem(
                    message=(
                        f"the pullback of {case.rule.name} must treat {what} as a zero cotangent for that output, "
                        f"but the tangent for {named_place(case, i, idx)} is {show(value)}, not {show(expected)} as with zeros."
                    ),
                    location=where(i, idx),
                    expected=show(expected),
                    actual=show(value),
                    fix="Treat a None entry of the cotangent tuple as zeros for that output.",
                )
                return


@check(
    "GG303",
    family="cotangent",
    title="pullback mutates the cotangent it was given",
    kinds=("numpy", "torch"),
    given="""
        def double(x):
            return 2 * x
    """,
    broken="""
        @rrule(double, arrays(shape=(3,)))
        def double_rrule(x):
            def pullback(ybar):
                ybar *= 2                                        # writes into the caller's buffer
                return (ybar,)
            return 2 * x, pullback
    """,
    fixed="""
        @rrule(double, arrays(shape=(3,)))
        def double_rrule(x):
            return 2 * x, lambda ybar: (2 * ybar,)               # a new array
    """,
)
def cotangent_read_only(case: Case) -> Iterable[Problem]:
    """A pullback must not write into the cotangent it receives. Engines hand the same cotangent buffer to
    every pullback of a fanned-out output and keep accumulating into it; ``ybar *= 2`` inside one pullback
    silently changes the gradient flowing into the others. (Returning ``ybar`` itself as a tangent is fine
    as long as nothing writes into it. JAX arrays are immutable, so this check applies to NumPy rrules.) A scalar
    output's cotangent reaches the pullback as a 0-d array, as engines hand it over, so ``dout *= 1 / T`` in a
    loss's pullback is caught too."""
    y = case.first_call().output
    if not any(isinstance(leaf, np.ndarray) for leaf in leaves(y)):
        yield from _scalar_cotangent(case, y)
        return
    pulled = case.first_pullback()
    written = _first_write(pulled.ybar, pulled.given)
    if written is None:
        return
    k, changed = written
    place = where(f"output {k}" if not is_leaf(y) else "the cotangent", changed.index)
    yield Problem(
        message=(
            f"the pullback of {case.rule.name} modified the cotangent it was given: {place} was "
            f"{show(changed.want)} before the call and {show(changed.got)} after."
        ),
        location=place,
        expected=show(changed.want),
        actual=show(changed.got),
        fix="Treat ybar as read-only: write ybar = ybar * 2 instead of ybar *= 2, or work on ybar.copy().",
    )


def _first_write(before: Any, after: Any) -> tuple[int, Any] | None:
    """``(leaf, mismatch)`` for the first array leaf of the cotangent ``before`` that ``after`` (the copy the pullback
    was given) no longer holds bit for bit; None where the pullback wrote into none."""
    for k, (was, now) in enumerate(zip(leaves(before), leaves(after))):
        if isinstance(was, np.ndarray) and (changed := first_mismatch([(k, now, was)], exact)) is not None:
            return k, changed
    return None


def _number(leaf: Any) -> bool:
    return isinstance(leaf, (float, complex, np.floating, np.complexfloating))


def _scalar_cotangent(case: Case, y: Any) -> Iterable[Problem]:
    """GG303 for an output of scalars (a loss): gradguard draws its cotangent as scalars, which nothing can write
    into, but engines hand it over as 0-d arrays (PyTorch's 0-d tensor, whose ``.numpy()`` a NumPy-wrapped Function
    writes through; HIPS/autograd's arrays), so the pullback gets the same draw once more as 0-d arrays, after a
    fresh forward call, and they must come back as they went. A textbook's ``dout *= 1 / T`` left the cotangent
    at a third of itself, and in ``loss1 + loss2`` under a zero-copy PyTorch wrapper the other loss's input got a
    third of its gradient."""
    if case.rule.kind != "numpy":
        raise Skip("the cotangent is a scalar, which a pullback cannot modify")
    ybar = case.first_pullback().ybar
    if not any(_number(leaf) for leaf in leaves(ybar)):
        raise Skip("the cotangent holds no number a pullback could modify")
    held = tree_map(lambda leaf: np.array(leaf) if _number(leaf) else leaf, ybar)
    given = copy_tree(held)
    _, pb = case.pair()
    try:
        case.pullback(pb, given)
    except RuleRaised:
        raise Skip("the pullback does not take its scalar cotangent as a 0-d array, as engines hand it over") from None
    written = _first_write(held, given)
    if written is None:
        return
    k, changed = written
    place = f"output {k}'s cotangent" if not is_leaf(y) else "the cotangent"
    yield Problem(
        message=(
            f"the pullback of {case.rule.name} modified the cotangent it was given: {place} was "
            f"{show(changed.want)} before the call and {show(changed.got)} after. The output is a scalar, and "
            "engines hand its cotangent over as a 0-d array (PyTorch's 0-d tensor, through .numpy()), which "
            "this pullback writes into."
        ),
        location=place,
        expected=show(changed.want),
        actual=show(changed.got),
        fix="Treat ybar as read-only: write ybar = ybar / T instead of ybar /= T (or *=, +=), or work on a copy.",
    )
