"""Numeric checks (GG2xx): are the pullback's numbers right?

GG201 is the dot-product test against finite differences of the primal, GG202 linearity in the
cotangent, GG205 the complex conjugation convention. The shared machinery (conventions, finite
differences, the dot-product test, localisation) is in :mod:`gradguard.checker.checks._vjp`, GG201's kink
exemptions behind :func:`gradguard.checker.checks._kinks.kink_excuse`; GG203/GG204 (JAX references) are in
numeric_jax.py, GG206 (non-finite tangents) in numeric_finite.py.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Iterable

import numpy as np
from hypothesis import strategies as st

from gradguard.checker import tolerances
from gradguard.checker.case import Case, is_finite_tree, scale_tree
from gradguard.checker.compare import close_at_leaf_scale, first_mismatch, where
from gradguard.checker.checks._state import argument_labels
from gradguard.checker.checks._kinks import EXCUSES, NO_VERDICT, kink_excuse, ml_float_eps
from gradguard.checker.checks._vjp import (
    CHAINRULES,
    CONVENTION_TEXT,
    NO_FD,
    NO_FD_HERE,
    RULES_BY_CONVENTION,
    WrongTangent,
    adjoint_tangents,
    by_scales,
    convention,
    dot_test,
    finite_difference,
    first_adjoint,
    has_complex,
    localise,
    named_place,
    numeric_tangents,
    other_convention,
    owner,
    tangent_pairs,
)
from gradguard.checker.checks.registry import Problem, Skip, check
from gradguard.checker.inputs import apart, show, show_apart
from gradguard.checker.trees import copy_tree, is_narrow_float, leaf_paths, leaves, tree_map, widened, with_leaves
from gradguard.engines import fd

__all__: list[str] = []  # the checks register themselves; shared helpers live in checker.checks._vjp

@check(
    "GG201",
    family="numeric",
    title="pullback disagrees with finite differences",
    given="""
        def mul(a, b):
            return a * b
    """,
    broken="""
        @rrule(mul, arrays(shape=(2, 3)), arrays(shape=(2, 3)))
        def mul_rrule(a, b):
            return a * b, lambda ybar: (ybar * b, ybar * b)     # b's tangent should be ybar * a
    """,
    fixed="""
        @rrule(mul, arrays(shape=(2, 3)), arrays(shape=(2, 3)))
        def mul_rrule(a, b):
            return a * b, lambda ybar: (ybar * b, ybar * a)
    """,
)
def pullback_matches_fd(case: Case) -> Iterable[Problem]:
    """The pullback must compute the derivative of the primal. For a random cotangent ``ybar`` and a random
    direction ``v``, the dot-product test compares ``d/dt <ybar, primal(x + t v)>`` (finite differences with
    Richardson extrapolation, on the primal itself) with ``<pullback(ybar), v>``; the tolerance is the dtype's
    entry in the tolerance table plus the finite-difference error estimate. A failure is localised to the
    argument and, for arrays up to a few thousand elements, to the first wrong element. Where the primal is
    not differentiable (a kink, like relu at 0), each element's value must lie between its one-sided
    derivatives (relu'(0) = 2 does not; judged for up to 16 differentiable elements), and where entries meet
    at a kink (a max with ties) the tangent taken along a positive direction as a whole must lie between the
    one-sided directional derivatives (every tied entry given the whole cotangent does not; judged for up to 64
    differentiable elements); where kinks sit closer to the input than any usable step (sorting values 1e-34
    apart), where the derivative is not linear in the direction (the median of tied entries, whose kink shows on
    no line through the input), or where finite differences cannot be taken (the edge of a restricted domain),
    the input is not judged. Where the
    steps resolve no derivative, the test is taken again at each of the input's scales (`by_scales`: an element of
    1e-9 beside entries of 1e16), and passes where every scale agrees; a subnormal element that no step resolves
    leaves the input not judged."""
    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    conv = convention(case)
    y, ybar, tangents = first_adjoint(case, conv)
    v = case.direction()
    if not numeric_tangents(case, tangents) or not is_finite_tree([tangents[i] for i in case.diff_positions]):
        return  # GG105 judges non-numeric tangents, GG206 non-finite ones
    # The dot-product test: <ybar, J v> by finite differences of the primal against <pullback(ybar), v>. A shallow
    # table first (half the primal's calls), which settles only a pass its error estimate cannot have bought.
    quick = fd.quick(case.args)
    if quick is not None:
        first = finite_difference(case, ybar, v, table=quick)
        if first is not None and dot_test(first, tangents, v).settles(case.tol):
            return
    lhs = finite_difference(case, ybar, v)  # d/dt <ybar, primal(x + t v)> at t = 0
    if lhs is None:
        raise Skip(NO_FD, here=NO_FD_HERE)
    whole = dot_test(lhs, tangents, v)  # whole.rhs = <pullback(ybar), v>
    tol = case.tol
    if whole.agrees(tol):
        _judged(whole, tol)
        return
    # One table's steps (0.018 down to 6e-4 times v) can reach across what finer steps resolve: cbrt's vertical
    # tangent at 0 beside an entry of 1e-5, hidden among entries of 3e16 (its derivative there is 718, the table
    # said 25.75). A disagreement stands only where tables at finer steps bear it out (`fd.confirmed`).
    finer = finite_difference(case, ybar, v, confirming=lhs)
    if finer is not None and (settled := dot_test(finer, tangents, v)).agrees(tol):
        _judged(settled, tol)
        return
    # Steps that resolve no derivative may be too coarse for the input's small elements: tested again at each of
    # the input's scales (an element of 1.4e-9 beside entries of 1e16 and 9e104: cbrt's derivative 2.7e5 there,
    # where steps of 0.018 down to 2e-9 read 76 to 78000, each give or take most of itself).
    best = finer if finer is not None else lhs
    scaled = by_scales(case, ybar, v, tangents, tol) if not tolerances.resolves(float(best.value), best.error, tol) else None
    if scaled is not None and scaled.agrees:
        return
    # Not differentiable here (a kink): not judged along v, but a kink where entries meet still is, as a whole.
    excused = kink_excuse(case, ybar, v, tangents, whole, conv, tol)
    unresolvable = scaled is not None and scaled.unresolvable  # a subnormal element no step resolves
    if excused is not None:
        if excused.problem is not None:
            yield excused.problem
        elif excused.reason in NO_VERDICT:
            # no derivative to hold the pullback to here: this input is not counted as judged, and a rule judged at
            # no input drawn says so instead of passing (a step whose every drawn input sits on its jump). A subnormal
            # element's reason is the more specific one, whichever exemption spoke first: around it the rule's own
            # answers and the primal's slopes jump too (cbrt's 1/x**(2/3)), and which exemption sees that first
            # depends on the machine's arithmetic at subnormal numbers.
            why = NO_STEP if unresolvable else EXCUSES[excused.reason]
            raise Skip("finite differences established no derivative to judge the pullback by at any input drawn; "
                       f"at the first: {why}", here=f"finite differences established no derivative here: {why}")
        return
    if unresolvable:  # likewise
        raise Skip("finite differences established no derivative to judge the pullback by at any input drawn; at the "
                   f"first: {NO_STEP}", here=f"finite differences established no derivative here: {NO_STEP}")
    if scaled is not None and scaled.total is not None:  # the derivative the input's own scales resolved
        lhs = scaled.total
        whole = dot_test(lhs, tangents, v)
    name = case.rule.name
    fd_text, rule_text = show_apart(float(lhs.value), whole.rhs)
    test = (f"<ybar, J v> = {fd_text} by finite differences, <pullback(ybar), v> = {rule_text}, "
            f"{apart(float(lhs.value), whole.rhs, whole.allowed(tol))}")
    if not case.evidence:  # a shrinking step: the verdict is settled; the hint and localisation are for the kept input
        yield Problem(message=f"the pullback of {name} disagrees with finite differences of the primal: {test}.")
        return
    hint = ""
    if has_complex(case, y):
        other = adjoint_tangents(case, case.pair()[1], ybar, other_convention(conv))
        if dot_test(lhs, other, v).agrees(tol):
            hint = f" The pullback matches {owner(other_convention(conv))} conjugation convention instead: see GG205."
    hint += _ignored_output(case, ybar, v, conv, tol)
    wrong = localise(case, ybar, v, tangents, whole, conv) or [WrongTangent(-1, whole)]
    for w in wrong:
        if w.arg < 0:
            message = f"the pullback of {name} disagrees with finite differences of the primal: {test}."
            location, expected, actual = None, fd_text, rule_text
        elif w.idx is not None:
            place = where(w.arg, w.idx)
            expected, actual = show_apart(w.expected, w.got)
            message = (
                f"the pullback of {name} disagrees with finite differences of the primal: cotangent for "
                f"{named_place(case, w.arg, w.idx)}: expected {expected} (finite differences), got {actual} "
                f"({_test_for(case, w, whole, test)})."
            )
            location = place
        else:
            place = where(w.arg)
            message = (
                f"the pullback of {name} disagrees with finite differences of the primal: the cotangent for "
                f"{named_place(case, w.arg)} "
                f"is wrong: along the drawn direction, <ybar, J v> = {show(float(w.dot.lhs.value))} by finite "
                f"differences, but the pullback gives {show(w.dot.rhs)}."
            )
            location, expected, actual = place, show(float(w.dot.lhs.value)), show(w.dot.rhs)
        yield Problem(
            message=message,
            location=location,
            expected=expected,
            actual=actual,
            fix=(
                f"Re-derive the tangent{f' for {named_place(case, w.arg)}' if w.arg >= 0 else 's'} at this input "
                "(the smallest failing one found): a wrong sign, a missing chain-rule factor, a missing transpose or a wrong sum "
                "over broadcast axes are the usual causes. A gradient that is not the derivative on purpose (a "
                "straight-through estimator, a surrogate or scaled gradient, a Lie group's gradient in its Lie algebra) "
                "fails this check by design, and GG203, GG207 and GG501 with it where they run: leave them out for "
                "this rule with ignore= in its declaration (rrule(..., ignore=[\"GG201\", \"GG203\", \"GG501\"]), "
                "likewise torch_rule and jax_rule), which keeps them for every other rule." + hint
                + tolerances.approximation_hint(*_compared(w, lhs, whole), tol)
            ),
        )


def _ignored_output(case: Case, ybar: Any, v: tuple[Any, ...], conv: str, tol: tolerances.Tolerance) -> str:
    """For a rule with several outputs whose dot-product test failed: where the pullback returns zero tangents for the
    cotangent of one output alone, finite differences show that output moving along ``v``, and with that output's
    cotangent set to 0 the rule agrees with them, a sentence saying so ('' otherwise). maxtext's cross-entropy ignores
    the cotangent of its z-loss, an output its training only logs; the fix spoke of signs and chain-rule factors."""
    parts = leaves(ybar)
    places = [k for k, leaf in enumerate(parts) if leaf is not None]
    if len(places) < 2:
        return ""
    zero = [None if leaf is None else np.zeros_like(leaf) for leaf in parts]

    def only(keep: set[int]) -> Any:
        return with_leaves(ybar, [parts[j] if j in keep else zero[j] for j in range(len(parts))])

    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k in places:
                alone = only({k})
                tangents = adjoint_tangents(case, case.pair()[1], alone, conv)
                if any(t is not None and np.any(np.asarray(t) != 0) for t in tangents):
                    continue
                moved = finite_difference(case, alone, v)
                if moved is None or tolerances.close(float(moved.value), 0.0, tol, fd_error=moved.error):
                    continue
                rest = only(set(places) - {k})
                lhs = finite_difference(case, rest, v)
                if lhs is None or not dot_test(lhs, adjoint_tangents(case, case.pair()[1], rest, conv), v).agrees(tol):
                    continue
                path = leaf_paths(ybar)[k][0]
                return (f" The pullback returns zero tangents for the cotangent of output {path or k} alone, "
                        f"where finite differences give <ybar, J v> = {show(float(moved.value))} for it, and with that "
                        "output's cotangent set to 0 it agrees with finite differences: it ignores that output's "
                        "cotangent. Where the output is differentiated, add its terms to the pullback; an output that "
                        "programs never differentiate (a statistic computed for logging) makes that harmless, "
                        + _declaring(path))
    except Exception:  # noqa: BLE001 - a hint only: the finding stands without it
        return ""
    return ""


def _declaring(path: str) -> str:
    """How to say that an output is never differentiated, for the output at ``path`` (``[1]``, ``['z_loss']``)."""
    top = path[1:-1] if path.startswith("[") and path.endswith("]") and path.count("[") == 1 else ""
    if top.isdigit():
        return f"and declaring it (nondiff_outputs=({top},)) checks the other outputs alone."
    return "and only an output in a tuple of outputs can be declared so (nondiff_outputs=)."


NO_STEP = ("an element of the input is subnormal, so small that no step its float type can take is small beside it, and "
           "at the finest steps that move it well above rounding the primal's slopes do not settle")
UNRESOLVED = ("finite differences of the primal resolved no derivative at any input drawn (their error bound was wider "
              "than a tenth of their value: a jump or a kink within their steps), so the pullback was judged at none")
UNRESOLVED_HERE = ("finite differences of the primal resolved no derivative here (their error bound was wider than a "
                   "tenth of their value: a jump or a kink within their steps)")


def _judged(test: Any, tol: tolerances.Tolerance) -> None:
    """Skip where the dot-product ``test`` agrees only because its finite difference resolves nothing
    (`tolerances.resolves` fails and the two sides are not close without its error bound): a step whose drawn
    inputs all sit on its jump gave 256 +- 256 against any pullback, and GG201 passed having judged none; such an
    input is not counted."""
    value = float(test.lhs.value)
    if not tolerances.resolves(value, test.lhs.error, tol) and not tolerances.close(value, test.rhs, tol, scale=test.scale):
        raise Skip(UNRESOLVED, here=UNRESOLVED_HERE)


def _test_for(case: Case, w: WrongTangent, whole: Any, test: str) -> str:
    """The dot-product test a GG201 message quotes beside ``w``'s element: the whole test where the direction moved
    ``w``'s argument alone, else the test moving that argument alone. JAXtronomy's hyp2f1: the whole test 0.003 apart,
    almost all of it z's, quoted beside t's element, 2.1e-6 off, read as t's gradient 0.003 off."""
    if w.dot is whole:
        return f"dot-product test: {test}"
    lhs, rhs = float(w.dot.lhs.value), w.dot.rhs
    fd_text, rule_text = show_apart(lhs, rhs)
    return (f"dot-product test moving {named_place(case, w.arg)} alone: <ybar, J v> = {fd_text} by finite "
            f"differences, <pullback(ybar), v> = {rule_text}, {apart(lhs, rhs, w.dot.allowed(case.tol))}")


def _compared(w: WrongTangent, lhs: Any, whole: Any) -> tuple[float, float]:
    """The two numbers a GG201 message holds up for ``w``: the element's (where it was localised), the argument's
    dot-product test, or the whole test's. An approximate primal's slope is off by a small fraction in every
    element; a rule that drops a term (maxtext's cross-entropy ignoring the z-loss output's cotangent: half the
    element, though 5e-5 of the whole test) is off by a large fraction of the element it gets wrong."""
    try:
        if w.arg >= 0 and w.idx is not None:
            return float(np.real(w.expected)), float(np.real(w.got))
        if w.arg >= 0:
            return float(w.dot.lhs.value), float(w.dot.rhs)
    except (TypeError, ValueError):  # a complex pair or an opaque value: no sentence
        return math.nan, math.nan
    return float(lhs.value), float(whole.rhs)


# -- GG202 ----------------------------------------------------------------------------------------
def _away_from_0_and_1(a: float) -> float:
    """``a``, or ``a + 2`` where it lies within 0.25 of 0 or of 1 (a scale that tells a linear pullback from
    one that is not must differ from 0 and from 1): a fixed number of choices per draw, where a filter drew
    again after each rejection, so that Hypothesis' mutations (which copy another float's choices here) ran
    past the end of their choices and cut the input's remaining checks short."""
    return a if abs(a) >= 0.25 and abs(a - 1) >= 0.25 else a + 2.0


ALPHAS = st.one_of(
    st.sampled_from([2.0, -1.0, 0.5]),
    st.floats(-4.0, 4.0, allow_nan=False).map(_away_from_0_and_1),
)


# graphcast's reduce_precision rounds its cotangent to bfloat16 in bwd on purpose (a straight-through estimator that
# also quantizes the gradient): the fix says so rather than only naming abs, square and sign.
_ON_PURPOSE = (" A pullback that quantizes its cotangent on purpose (mixed-precision training's straight-through "
               "rounding to bfloat16 or float8) fails this check by design: leave GG202 out for this rule with "
               "ignore=[\"GG202\"] in its declaration.")


def _tangents_for(case: Case, ybar: Any, args: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
    """A snapshot of the pullback's tangents for ``ybar`` from a fresh forward call (reentrancy, and a
    pullback that hands out the same buffer every call, are GG403's business), on ``args`` where given."""
    _, pb = case.pair(args)
    return copy_tree(case.tangents(pb, copy_tree(ybar)))


def _add(a: Any, b: Any) -> Any:
    return tree_map(lambda x, y: None if x is None and y is None else (0 if x is None else x) + (0 if y is None else y), a, b)


def _nonlinear(case: Case, got: tuple[Any, ...], terms: list[tuple[float, tuple[Any, ...]]],
               rounding: list[Any] | None = None, tol: tolerances.Tolerance | None = None) -> Any:
    """The first element where ``got`` is not ``sum(c * t for c, t in terms)`` (the linear combination of earlier
    pullbacks), or None. The combination is formed in float64 and judged at the scale of its terms, not of its
    sum: the cotangent the pullback was handed (``alpha * ybar1 + ybar2`` in the cotangent's dtype) rounds at
    that scale, and where the terms cancel (alpha = -0.99999 and ybar2 = ybar1) the sum is far smaller than the
    rounding that a float32 pullback rightly carries. An element whose right-hand side is not finite says
    nothing about linearity (GG206 judges non-finite tangents). An infinity where the combination lies within
    the tolerance of a value the tangent's dtype cannot hold is that value correctly rounded: DeZero's division at
    x1 = 1e-38 in float32 has the tangent gy / x1 = 2.7e38 for gy = 2.7, and 5.4e38 for twice gy, which float32
    rounds to inf (its largest number is 3.4e38). ``rounding``: per argument, how far the pullbacks' own rounding
    may move the two sides apart (`_narrow_rounding`); a difference within it is no nonlinearity. ``tol``: the
    tolerance, the case's where not given (`_output_rounding` widens it for a bfloat16 output)."""
    tol = case.tol if tol is None else tol
    combos = [(coef, tuple(widened(t) for t in tangents)) for coef, tangents in terms]
    want, size = [], []
    for i in range(len(got)):
        parts = [(coef, tangents[i]) for coef, tangents in combos if tangents[i] is not None]
        want.append(sum(coef * t for coef, t in parts) if parts else None)
        size.append(sum(abs(coef) * np.abs(t) for coef, t in parts) if parts else None)
    for i, a, b in tangent_pairs(case, got, tuple(want)):
        terms = 0.0 if size[i] is None else float(np.max(np.where(np.isfinite(size[i]), size[i], 0.0), initial=0.0))
        close = close_at_leaf_scale(tol, at_least=terms)
        overflows = _overflows_to(a.dtype, tol, terms)
        slack = None if rounding is None else rounding[i]

        def rounded(x: np.ndarray, y: np.ndarray, slack: Any = slack) -> np.ndarray:
            if slack is None:
                return np.zeros(np.shape(x), dtype=bool)
            with np.errstate(all="ignore"):
                return np.abs(widened(x) - y) <= slack

        found = first_mismatch([(i, a, b)], lambda x, y: close(x, y) | ~np.isfinite(y) | overflows(x, y) | rounded(x, y))
        if found is not None:
            return found
    return None


MOVED_MARGIN = 2.0**-20  # _narrow_rounding: this share of the movements' sum on top (float64's rounding of the shadow)


def _narrow_rounding(case: Case, pulls: list[tuple[float, Any, tuple[Any, ...]]]) -> list[Any] | None:
    """Per argument, the sum over ``pulls`` (coefficient, cotangent, the tangents the pullback gave for it) of
    ``|coefficient| * |tangent - the same pullback's tangent in float64|``: how far rounding in the arguments' narrow
    float moved each tangent, measured on a float64 shadow (the rule run again on float64 copies of its float16 and
    float32 arguments, each cotangent widened as it was). Where a tangent is a sum whose terms cancel (a batch
    norm's scale tangent ``sum(gy * xhat)`` for a constant gy, exactly 0), float16 leaves one spacing of the terms,
    0.00195 beside 5.2, which the tangents' own size does not show.

    Where every tangent rounds the same way the movements add up to the whole disagreement, and the shadow's own
    float64 rounding decides which side of their sum it falls: thinc's cold softmax in float16 gave 0, 0 and
    -0.00170612 where the shadow gives -0.00049, 0.00242 and -0.00170, and the disagreement lay 7e-17 beyond the
    sum. MOVED_MARGIN of the sum is added, far below any narrow float's own rounding (2**-10 of a value in float16,
    2**-23 in float32); a pullback nonlinear in float64 too is as far from linear as before. None where there is no
    narrow argument, or the shadow is no account of the rule's rounding: it raises, returns other structures, or
    tangents that are not float64 (a rule that fixes its own precision)."""
    narrow = {i for i, a in enumerate(case.args) if is_narrow_float(a)}
    if not narrow:
        return None
    slack: list[Any] = [None] * case.nargs
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for coef, ybar, tangents in pulls:
                wide = tuple(widened(a) if i in narrow else a for i, a in enumerate(case.fresh()))
                shadow = _tangents_for(case, tree_map(widened, ybar), wide)
                for i in case.diff_positions:
                    t, w = tangents[i], shadow[i]
                    if t is None or w is None:
                        if (t is None) != (w is None):
                            return None
                        continue
                    w = np.asarray(w)
                    if is_narrow_float(w):
                        return None
                    moved = abs(coef) * np.abs(widened(t) - w)
                    t = np.asarray(t)
                    if t.dtype.kind in "fc":
                        # beyond the narrow float's largest number its value is inf, correctly rounded (`_overflows_to`):
                        # a finite tangent there saturated, which is no rounding (a nan_to_num at float32's 3.4e38 where
                        # the shadow says 4.1e38)
                        moved = np.where(np.abs(w) > float(np.finfo(t.dtype).max), 0.0, moved)
                    slack[i] = moved if slack[i] is None else slack[i] + moved
    except Exception:  # noqa: BLE001 - the rule refuses float64 arguments (RuleRaised, Skip): no account
        return None
    return [None if m is None else m * (1 + MOVED_MARGIN) for m in slack]


def _overflows_to(dtype: np.dtype, tol: Any, scale: float) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Where ``got`` is an infinity of ``dtype`` and ``want`` (float64) lies within ``atol + rtol * scale`` of a
    number of that sign too large for ``dtype`` to hold: the infinity is the only value ``dtype`` has there."""
    if dtype.kind not in "fc":
        return lambda got, want: np.zeros(np.shape(got), dtype=bool)
    top = float(np.finfo(dtype).max)
    slack = tol.atol + tol.rtol * scale

    def part(got: np.ndarray, want: np.ndarray) -> np.ndarray:
        return np.isinf(got) & (np.sign(got) == np.sign(want)) & (np.abs(want) + slack > top)

    def overflows(got: np.ndarray, want: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            if dtype.kind != "c":
                return part(got, want)
            # a complex element: each part overflows alike or agrees, and one of them is an infinity
            pairs = [(got.real, want.real), (got.imag, want.imag)]
            alike = [part(g, w) | (np.abs(g - w) <= slack) for g, w in pairs]
            return alike[0] & alike[1] & (np.isinf(got.real) | np.isinf(got.imag))

    return overflows


@check(
    "GG202",
    family="numeric",
    title="pullback is not linear in the cotangent",
    compares_calls=True,
    given="""
        def total(a):
            return a.sum()
    """,
    broken="""
        @rrule(total, arrays(shape=(3,)))
        def total_rrule(a):
            return total(a), lambda ybar: (np.ones(a.shape),)           # right only for ybar == 1
    """,
    fixed="""
        @rrule(total, arrays(shape=(3,)))
        def total_rrule(a):
            return total(a), lambda ybar: (np.full(a.shape, ybar),)
    """,
)
def pullback_linear(case: Case) -> Iterable[Problem]:
    """A pullback is a linear map of the cotangent: ``pullback(alpha * ybar) == alpha * pullback(ybar)`` and
    ``pullback(ybar1 + ybar2) == pullback(ybar1) + pullback(ybar2)``. A pullback returning ``ones(n)`` instead
    of ``full(n, ybar)`` passes every test that uses a unit cotangent (scalar losses, ``gradcheck`` on
    ``sum``) and is wrong in every program where the output is scaled, squared or used twice. This check
    needs no finite differences, so it also covers rules whose primal cannot be differenced. It also asks at a small
    scale, ``pullback(2**-30 * ybar)``, where a shortcut for cotangents close to 0 (``np.allclose(ybar, 0)``) or a
    solve to an absolute tolerance drops the gradient of every small cotangent. An element where
    the right-hand side is not finite (``inf - inf`` of two tangents that overflow: rsqrt's derivative at 6.6e-231
    is -4.7e344) says nothing about linearity: GG206 judges non-finite tangents."""
    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    pulled, base = case.first_tangents()  # the first pullback: pullback(ybar1)
    y, ybar = pulled.call.output, pulled.ybar
    alpha = case.draw(ALPHAS, "alpha")
    ybar2 = case.cotangent_like(y, "second cotangent")
    # One combined test on the passing path (three pullbacks); the failing path says which law broke.
    other = _tangents_for(case, ybar2)
    combined = _tangents_for(case, _add(scale_tree(ybar, alpha), ybar2))
    tol = _output_rounding(case, y)
    bad = _nonlinear(case, combined, [(alpha, base), (1.0, other)], tol=tol)
    if bad is None:
        small = _small_cotangent(case, ybar, base, tol)
        if small is not None:
            yield small
        return
    # Narrow floats: the disagreement may be the pullbacks' own rounding, which a float64 shadow measures
    rounding = _narrow_rounding(case, [(1.0, _add(scale_tree(ybar, alpha), ybar2), combined), (alpha, ybar, base),
                                       (1.0, ybar2, other)])
    if rounding is not None and _nonlinear(case, combined, [(alpha, base), (1.0, other)], rounding, tol=tol) is None:
        return
    a = show(alpha)
    law = f"pullback({a} * ybar1 + ybar2) = {{got}}, but {a} * pullback(ybar1) + pullback(ybar2) = {{want}}"
    fix = ("Make the pullback a linear function of ybar: no constant terms, no nonlinear use of ybar (abs, square, "
           "sign, rounding it to a lower precision). A pullback that solves a system iteratively is linear only to "
           "its solver's tolerance: declare the rule's atol= and rtol= at that tolerance." + _ON_PURPOSE)
    scaled = _nonlinear(case, _tangents_for(case, scale_tree(ybar, alpha)), [(alpha, base)], tol=tol)
    if scaled is not None:
        bad = scaled
        law = f"pullback({a} * ybar) = {{got}}, but {a} * pullback(ybar) = {{want}}"
        fix = (
            "Scale every tangent by the cotangent: np.full(x.shape, ybar) or ybar * dydx, never np.ones(x.shape) "
            "(that is right only when ybar == 1), and no nonlinear use of ybar (abs, square, sign, rounding it to a "
            "lower precision)." + _ON_PURPOSE
        )
    else:
        summed = _nonlinear(case, _tangents_for(case, _add(ybar, ybar2)), [(1.0, base), (1.0, other)], tol=tol)
        if summed is not None:
            bad = summed
            law = "pullback(ybar1 + ybar2) = {got}, but pullback(ybar1) + pullback(ybar2) = {want}"
    i, idx, got, want = bad
    want_text, got_text = show_apart(want, got)
    yield Problem(
        message=(
            f"the pullback of {case.rule.name} is not linear in the cotangent: for {named_place(case, i, idx)}, "
            + law.format(got=got_text, want=want_text)
            + "."
        ),
        location=where(i, idx),
        expected=want_text,
        actual=got_text,
        fix=_subnormal_note(case, ybar, ybar2, alpha, tol) + fix,
    )


SMALL_SCALE = 2.0**-30  # GG202's small cotangent: below np.allclose's 1e-8, exact to scale by (a power of two)
SMALL_TEXT = "2**-30"
# GG202's small cotangent in float64: a relative difference beyond this is an error (an early stop, a partial sum);
# within it, an absolute constant in the pullback (``+ 1e-12``) that unit cotangents hide and no program notices
SMALL_RTOL = 1e-2
UNDERFLOW_MARGIN = 2.0**52  # a value this many times its dtype's smallest normal number is far from underflow


def _small_cotangent(case: Case, ybar: Any, base: tuple[Any, ...], tol: tolerances.Tolerance) -> Problem | None:
    """GG202 at a small scale: ``pullback(2**-30 * ybar)`` against ``2**-30 * pullback(ybar)`` (one more pullback).
    diffcp's adjoint returns zeros whenever ``np.allclose(dz, 0)`` (absolute tolerance 1e-8), so a cotangent of 1e-9
    (a loss term with a small weight, a deep network's gradients) gets no gradient at all, while every cotangent
    GG202 draws (1/4 to 4 in size) passes. A power of two scales every product and sum of a linear pullback exactly,
    so only underflow can move the two sides apart:

    * all tangents exactly zero where ``2**-30 * pullback(ybar)`` has an element at least 2**52 times its dtype's
      smallest normal number (no rounding makes that 0: a shortcut, or a cast of the cotangent to float16), in
      float32 and float64;
    * in float64, the tangents rescaled by 2**30 against ``pullback(ybar)``, more than 1% apart (nothing in a
      pullback's arithmetic comes near float64's underflow at that scale; an absolute constant of 1e-12 added to
      the tangents is as far from linear, but moves them by 0.04% there, and no program notices it).

    Cotangents of a narrow float (float16, bfloat16), where 2**-30 underflows, are not probed, nor inputs holding a
    number so small that 2**-30 times it nears the underflow (`_near_underflow`); nor is a rule whose
    declared ``atol`` holds the whole of ``2**-30 * pullback(ybar)`` (a pullback that solves a system to an absolute
    tolerance is linear only to it)."""
    if not all(_wide_float(leaf) for leaf in leaves(ybar) if leaf is not None) or _near_underflow(case.args):
        return None
    judged = {i: widened(base[i]) for i in case.diff_positions
              if base[i] is not None and np.result_type(base[i]).kind in "fc" and np.size(base[i])}
    if not judged:
        return None
    largest = {i: float(np.max(np.abs(t), initial=0.0)) for i, t in judged.items()}
    if not all(math.isfinite(v) for v in largest.values()) or max(largest.values()) == 0.0:
        return None
    if case.rule.atol is not None and max(largest.values()) * SMALL_SCALE <= case.rule.atol:
        return None
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = _tangents_for(case, scale_tree(ybar, SMALL_SCALE))
    except Exception:  # noqa: BLE001 - a pullback that raises at a small cotangent: GG103's and GG301's to report
        return None
    law = f"pullback({SMALL_TEXT} * ybar) = {{got}}, but {SMALL_TEXT} * pullback(ybar) = {{want}}"
    safe = {i: largest[i] * SMALL_SCALE >= np.finfo(np.result_type(base[i])).tiny * UNDERFLOW_MARGIN for i in judged}
    zero = all(got[i] is not None and not np.any(np.asarray(got[i]) != 0) for i in judged)
    if zero and any(safe.values()):
        i = max((k for k in judged if safe[k]), key=lambda k: largest[k])
        idx = np.unravel_index(int(np.argmax(np.abs(judged[i]))), np.shape(judged[i])) if np.ndim(judged[i]) else ()
        want = complex(judged[i][idx]) * SMALL_SCALE if np.iscomplexobj(judged[i]) else float(judged[i][idx]) * SMALL_SCALE
        how = "returns all-zero tangents for it"
        got_value: Any = 0.0
    else:
        if any(np.result_type(base[i]) != np.float64 and np.result_type(base[i]) != np.complex128 for i in judged):
            return None
        # elements whose value at that scale lies near the underflow are no evidence: they keep their own value
        rescaled = tuple(None if t is None or i not in judged else np.where(
            np.abs(judged[i]) * SMALL_SCALE >= np.finfo(np.float64).tiny * UNDERFLOW_MARGIN,
            widened(t) / SMALL_SCALE, judged[i]) for i, t in enumerate(got))
        material = tolerances.Tolerance(rtol=max(tol.rtol, SMALL_RTOL), atol=tol.atol)
        bad = _nonlinear(case, rescaled, [(1.0, base)], tol=material)
        if bad is None:
            return None
        i, idx, got_value, want = bad
        got_value, want = got_value * SMALL_SCALE, want * SMALL_SCALE
        how = "is not the same linear map at that scale"
    want_text, got_text = show_apart(want, got_value)
    return Problem(
        message=(f"the pullback of {case.rule.name} is not linear in the cotangent at a small scale: it {how}; for "
                 f"{named_place(case, i, idx)}, " + law.format(got=got_text, want=want_text) + "."),
        location=where(i, idx),
        expected=want_text,
        actual=got_text,
        fix=("A pullback is linear at every scale: a shortcut that returns zeros when the cotangent is close to 0 "
             "(np.allclose(ybar, 0), a tolerance on its norm) or a solve to an absolute tolerance drops the gradient "
             "of every small cotangent (a loss term with a small weight, a deep network's gradients). Test for "
             "exact zeros (not np.any(ybar)) instead, and make a solver's tolerance relative to the right-hand side; "
             "rounding it to a lower precision (float16) underflows the same way. A pullback that is linear only to "
             "a known absolute tolerance declares it: atol= on the rule." + _ON_PURPOSE),
    )


def _near_underflow(args: tuple[Any, ...]) -> bool:
    """Whether an argument holds a nonzero float so small that 2**-30 times it lies near its dtype's underflow: a
    product of the small cotangent with it loses digits or rounds to 0 (autograd's hypot pullback, ``g * y / ans``,
    gave 0 for 2**-30 at y = 1e-310, where ``g * y`` underflows and ``y / ans`` is 1), which says nothing about
    the pullback's formula."""
    for leaf in leaves(args):
        if leaf is None or isinstance(leaf, bool):
            continue
        try:
            arr = np.asarray(leaf)
        except Exception:  # noqa: BLE001 - an object no array holds: no float to look at
            continue
        if arr.dtype.kind not in "fc" or not arr.size:
            continue
        parts = [arr.real, arr.imag] if arr.dtype.kind == "c" else [arr]
        floor = np.finfo(arr.dtype).tiny * UNDERFLOW_MARGIN / SMALL_SCALE
        with np.errstate(all="ignore"):
            if any(np.any((p != 0) & (np.abs(p) < floor)) for p in parts):
                return True
    return False


def _wide_float(value: Any) -> bool:
    """A float32, float64 or complex cotangent (a Python float too): one that holds 2**-30 times itself exactly."""
    if isinstance(value, (float, complex)) and not isinstance(value, bool):
        return True
    try:
        dtype = np.result_type(value)
    except TypeError:
        return False
    return dtype in (np.float32, np.float64, np.complex64, np.complex128)


def _output_rounding(case: Case, y: Any) -> tolerances.Tolerance:
    """The case's tolerance, widened to four units of rounding of the narrowest bfloat16 or float8 output: JAX hands
    such an output's bwd its cotangent in the output's dtype, so ``alpha * ybar1 + ybar2`` reaches the pullback
    rounded to 8 bits or fewer (praxis' einsum with a bfloat16 output dtype: pullback(ybar1 + ybar2) = 8.0 where the
    sum of the two pullbacks is 8.0234375)."""
    eps = ml_float_eps(y)
    if eps is None:
        return case.tol
    return tolerances.Tolerance(rtol=max(case.tol.rtol, 4 * eps), atol=case.tol.atol)


def _subnormal_note(case: Case, ybar: Any, ybar2: Any, alpha: float, tol: tolerances.Tolerance) -> str:
    """For GG202's fix where a differentiated argument holds subnormal numbers: a product through one keeps few
    digits or rounds to 0 (kaolin's cumulative-product backward, ``prod * g / x`` at x = 4.9e-324: 0 for g = 0.5, 0.5
    times its value for g = 1), so the arithmetic, not the formula, may be what is not linear there. Said as what
    the input holds; '' where no argument holds one, or where the pullback is as far from linear on a copy of the
    input with those numbers set to 0 (torchao's int8 backward, which rounds its cotangent, at an input holding
    2.6e-42: the note sent its reader the wrong way)."""
    flushed, labels = list(case.fresh()), []
    for i in case.diff_positions:
        a = flushed[i]
        if isinstance(a, np.ndarray) and a.dtype.kind in "fc" and a.size:
            tiny = np.finfo(a.dtype).tiny
            with np.errstate(all="ignore"):
                parts = [a.real, a.imag] if a.dtype.kind == "c" else [a]
                if any(np.any((p != 0) & (np.abs(p) < tiny)) for p in parts):
                    labels.append((argument_labels(case)[i], tiny))
                    for p in parts:
                        p[(p != 0) & (np.abs(p) < tiny)] = 0
    if not labels:
        return ""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            terms = [(alpha, _tangents_for(case, ybar, copy_tree(tuple(flushed)))),
                     (1.0, _tangents_for(case, ybar2, copy_tree(tuple(flushed))))]
            combined = _tangents_for(case, _add(scale_tree(ybar, alpha), ybar2), copy_tree(tuple(flushed)))
            if _nonlinear(case, combined, terms, tol=tol) is not None:
                return ""  # as far from linear without them: not their arithmetic
    except Exception:  # noqa: BLE001 - the rule refuses the copy: what the input holds is still worth saying
        pass
    label, tiny = labels[0]
    return (f"{label[:1].upper()}{label[1:]} holds subnormal numbers (nonzero, below {tiny:.3g} in size), where "
            "products and quotients through them keep few digits or round to 0: the pullback's arithmetic there, not "
            "its formula, may be what is not linear (a pullback that divides by the input is one); a formula that does "
            "not divide by such values stays linear. ")


# -- GG205 ----------------------------------------------------------------------------------------
@check(
    "GG205",
    family="numeric",
    title="complex inputs: wrong conjugation convention",
    compares_calls=True,
    given="""
        def cmul(z, c):
            return c * z
    """,
    broken="""
        @rrule(cmul, arrays(shape=(3,), dtype="complex128"), constant(2 + 1j))
        def cmul_rrule(z, c):
            return c * z, lambda ybar: (c * ybar, None)          # JAX's convention in a NumPy rrule
    """,
    fixed="""
        @rrule(cmul, arrays(shape=(3,), dtype="complex128"), constant(2 + 1j))
        def cmul_rrule(z, c):
            return c * z, lambda ybar: (np.conj(c) * ybar, None)  # ChainRules: the adjoint
    """,
)
def conjugation_convention(case: Case) -> Iterable[Problem]:
    """With complex arguments or outputs a pullback must follow its framework's convention. NumPy rrules use
    ChainRules' (the adjoint for the real inner product ``<a, b> = Re(sum(conj(a) * b))``: a holomorphic ``f``
    gives ``conj(f'(z)) * ybar``); ``jax.custom_vjp`` rules use JAX's (``f'(z) * ybar``). Mixing them up is the
    most common complex-gradient bug: the dot-product test fails, and it passes when the pullback is read in
    the other convention (``conj(pullback(conj(ybar)))``). This check says so, which GG201 alone cannot."""
    if not case.diff_positions or not has_complex(case, case.first_call().output):
        raise Skip("the rule has no complex argument or output")
    conv = convention(case)
    y, ybar, tangents = first_adjoint(case, conv)
    v = case.direction()
    if not numeric_tangents(case, tangents) or not is_finite_tree([tangents[i] for i in case.diff_positions]):
        return
    lhs = finite_difference(case, ybar, v)
    if lhs is None:
        raise Skip(NO_FD, here=NO_FD_HERE)
    tol = case.tol
    mine = dot_test(lhs, tangents, v)
    if mine.agrees(tol):
        return
    other = other_convention(conv)
    theirs = dot_test(lhs, adjoint_tangents(case, case.pair()[1], ybar, other), v)
    if not theirs.agrees(tol):
        return  # wrong in both conventions: GG201's finding
    yield Problem(
        message=(
            f"the pullback of {case.rule.name} follows {owner(other)} conjugation convention, but {_bound_by(case, conv)} "
            f"must follow {CONVENTION_TEXT[conv]}: <ybar, J v> = {show(float(lhs.value))} by finite differences, "
            f"the pullback gives {show(mine.rhs)}, and read in {owner(other)} convention it gives {show(theirs.rhs)}, "
            "which matches: a conjugate is missing or extra."
        ),
        expected=show(float(lhs.value)),
        actual=show(mine.rhs),
        fix=(
            "Return np.conj(dfdz) * ybar for a holomorphic f (and 2 * z * ybar for |z|**2), i.e. the adjoint."
            if conv == CHAINRULES
            else "Return dfdz * ybar for a holomorphic f, without conj (JAX transposes; it does not take adjoints)."
        ) + (
            " If the rule is written for an engine that uses JAX's convention (JAX, HIPS/autograd), declare "
            "rrule(..., complex_convention=\"jax\") instead."
            if case.rule.kind == "numpy" and conv == CHAINRULES else ""
        ),
    )


def _bound_by(case: Case, conv: str) -> str:
    """Who must follow ``conv``: the rule kind's default, or this rule by its declaration."""
    if case.rule.kind != "jax" and case.rule.complex_convention is not None:
        return f"{case.rule.name} declares complex_convention={case.rule.complex_convention!r} and"
    return RULES_BY_CONVENTION[conv]
