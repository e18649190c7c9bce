"""Numeric check GG206: a NaN or Inf tangent where the primal has a finite derivative.

The derivative is established, not assumed: finite differences along the element give its value, and its
one-sided derivatives must agree. Where they differ (a cone point: a 2-norm at 0, the standard deviation
of a constant row) the primal has no derivative, and a non-finite tangent there is a warning that suggests
a subgradient, never an error. So is a point where the primal is smooth along the element but has no
derivative as a whole (the middle of three tied values; eigenvectors at a repeated eigenvalue): its
directional derivatives through the point differ from side to side or are not linear in the direction
(:func:`gradguard.checker.kinks.kinked_near`).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from gradguard.checker import compare, kinks
from gradguard.checker.case import Case, is_finite_tree
from gradguard.checker.checks._kinks import NoDerivative, beyond_float64, no_derivative_along
from gradguard.checker.checks._vjp import (
    NONFINITE_CANDIDATES,
    _contracted,
    as_rule_sees,
    convention,
    element_derivative,
    element_index,
    first_adjoint,
    named_place,
    numeric_tangents,
    only_argument,
    unit_vector,
)
from gradguard.checker.checks.registry import Problem, Skip, check
from gradguard.checker.inputs import show

__all__: list[str] = []


# -- GG206 ----------------------------------------------------------------------------------------
@check(
    "GG206",
    family="numeric",
    title="NaN/Inf tangent where the primal and the true derivative are finite",
    given="""
        def xabs(x):
            return x * np.abs(x)
    """,
    broken="""
        @rrule(xabs, arrays(shape=(3,)))                          # xabs(x) = x * abs(x)
        def xabs_rrule(x):
            return x * np.abs(x), lambda ybar: (2 * x * x / np.abs(x) * ybar,)   # 0/0 at x == 0
    """,
    fixed="""
        @rrule(xabs, arrays(shape=(3,)))
        def xabs_rrule(x):
            return x * np.abs(x), lambda ybar: (2 * np.abs(x) * ybar,)
    """,
)
def finite_tangents(case: Case) -> Iterable[Problem]:
    """Where the primal output is finite and has a derivative with finite value, every tangent must be finite.
    ``x / abs(x)``, ``1 / sqrt(x)`` factors or ``inf * 0`` in a pullback give NaN or Inf at points such as 0
    where the function itself is smooth; one NaN then poisons a whole model's gradient. Hypothesis tries the
    simplest input (zeros) first, so such points are found reliably whenever the argument specs allow them.
    The derivative is established along the element, not assumed: the one-sided derivatives of every output
    element must agree (a zero cotangent on an output does not make that output differentiable). At a
    cone point (a 2-norm at 0, the standard deviation of a constant row) the symmetric difference is 0 but the
    one-sided derivatives differ and the function has no derivative; a non-finite tangent there is reported
    as a warning only, suggesting a subgradient (a value between the one-sided derivatives). So is one at a
    vertical tangent (``cbrt`` or ``x**(1/3)`` at 0), where the one-sided difference quotients agree but grow
    at every step finite differences can take, and no finite derivative exists."""
    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    if not is_finite_tree(case.first_call().output):
        return
    conv = convention(case)
    _, ybar, tangents = first_adjoint(case, conv)
    if not numeric_tangents(case, tangents):
        return
    tried = 0
    kink: Problem | None = None  # a non-finite element where the primal has no derivative (a warning at most)
    for i in case.diff_positions:
        if tangents[i] is None:
            continue
        t = np.asarray(tangents[i])
        bad = np.flatnonzero(~np.isfinite(t))
        for k in bad[:NONFINITE_CANDIDATES - tried]:
            tried += 1
            found = element_derivative(case, ybar, i, int(k))
            if found is None:
                continue
            index = element_index(case.args[i], int(k))
            where, place = compare.where(i, index), named_place(case, i, index)
            value = as_rule_sees(t.reshape(-1)[k].item(), conv)
            sides = no_derivative_along(case, i, int(k))
            if sides is None and beyond_float64(case, i, int(k)) is not None:
                # polygamma(1, x) at 1.8e-113: its derivative (-1.8e339) is no float64, the pullback's own unit
                # tangent is inf, and finite differences resolve nothing there: no derivative established to hold
                # a NaN (0 * inf of a zero cotangent element) to; GG301 says what there is to say about it
                continue
            if sides is None and kinks.kinked_near(_contracted(case, ybar), case.args,
                                                   only_argument(case, i, unit_vector(case.args[i], int(k))), case.tol,
                                                   undetermined=False):
                # smooth along this element, not differentiable at x
                sides = NoDerivative("<ybar, primal(x)>", None, None, through=True)
            if sides is not None:
                if kink is None:
                    kink = _no_derivative_problem(case, where, place, value, sides, bad.size)
                continue
            yield Problem(
                message=(
                    f"the pullback of {case.rule.name} returned {show(value)} in the tangent for {place}, where the "
                    f"primal is finite and has a derivative along this element (its one-sided derivatives agree; "
                    f"finite differences give {show(as_rule_sees(found[0], conv))}); {bad.size} element(s) of this "
                    "tangent are not finite."
                ),
                location=where,
                expected=show(as_rule_sees(found[0], conv)),
                actual=show(value),
                fix=(
                    "Guard the singular point instead of dividing by zero: compute the limit there, e.g. "
                    "np.where(x == 0, 0.0, x / np.where(x == 0, 1.0, np.abs(x))) (the inner where keeps NaN out), "
                    "or use a formula that is finite there."
                ),
            )
            return
        if tried >= NONFINITE_CANDIDATES:
            break
    if kink is not None:
        yield kink


def _no_derivative_problem(case: Case, where: str, place: str, value: Any, sides: NoDerivative, count: int) -> Problem:
    if sides.growing:
        established = f"finite, but {sides.established()}"
        fix = (
            "Programs that meet this point (a cube root or a fractional power at 0) still need a finite gradient "
            "where the output is weighted by zero or masked: guard the point, e.g. "
            "np.where(x == 0, 0.0, g / np.where(x == 0, 1.0, 3 * np.cbrt(x) ** 2)), so that 0 * factor stays 0."
        )
    else:
        where_ = "at this input" if sides.through else "along this element"
        established = f"finite but has no derivative {where_} that finite differences resolve: {sides.established()}"
        fix = (
            "Programs that meet this point (a norm of a zero vector, the spread of a constant row) still need a "
            "finite gradient: return a subgradient there, a value between the one-sided derivatives (0 for a norm "
            "or standard deviation at its cone point), e.g. np.where(n == 0, 0.0, x / np.where(n == 0, 1.0, n))."
        )
    return Problem(
        message=(
            f"the pullback of {case.rule.name} returned {show(value)} in the tangent for {place}, where the primal is "
            f"{established}; {count} element(s) of this tangent are not finite."
        ),
        location=where,
        expected=sides.expected(),
        actual=show(value),
        fix=fix,
        severity="warning",
    )
