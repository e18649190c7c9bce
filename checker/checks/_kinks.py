"""Kinks where several entries meet (a max with ties, equal arguments of ``maximum``): the tangent judged
along a direction as a whole, not only element by element.

At a kink each element's tangent may lie anywhere between that element's one-sided derivatives; that is
the whole truth where the kinks are separable (relu, abs and clip act on each element alone). Where they
are coupled it is not: at a max with ties, moving any one tied entry up raises the max at the full rate,
so a pullback that gives *every* tied entry the whole cotangent passes element by element, while along a
direction that moves them together its tangent sums to ``k`` times the rate the max can have. The
judgement here:

* takes the cotangent ``|ybar|`` and a dense positive direction ``u`` (fixed by a seed), so that a max
  (a min) of several entries is convex (concave) under the cotangent and every valid (sub)gradient ``g``
  has ``<g, u>`` between the one-sided directional derivatives of ``<|ybar|, primal(x + t u)>``;
* asks finite differences for the one-sided derivatives along ``u`` and along each element: where the
  former are the elements' sums (a separable kink), the element-by-element judgement stands and nothing
  more is said;
* judges only kinks that look convex (or concave) from every probe: each element bends the same way as the
  whole, the one-sided derivative along ``u`` is sublinear against the elements', and no random pair of
  points around ``x`` contradicts the bend at its midpoint (a sort of tied entries under unsorted weights
  bends up along each element, yet is neither); anything else gets no verdict from here.

A pullback whose ``<pullback(|ybar|), u>`` lies outside the one-sided derivatives along ``u`` is then no
derivative of the primal at this input: :class:`KinkViolation` carries the numbers for the message.

:func:`no_derivative_along` says where the primal has no derivative along one element (a cone point: a
2-norm at 0, the standard deviation of a constant row), for the checks that hold a non-finite tangent
there to a warning (GG206, GG301).

:func:`kink_excuse` is every exemption GG201 makes, behind one call: where its dot-product test fails at a
point where the primal is not differentiable, it says why the input is not judged (and returns the finding
of a coupled kink, which still stands).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradguard.checker import kinks, tolerances
from gradguard.checker.case import Case, ReplayDraws
from gradguard.checker.compare import first_index, where
from gradguard.checker.checks._vjp import _contracted, _primal, adjoint_tangents, has_complex, one_sided, only_argument, unit_vector
from gradguard.checker.checks._vjp import (DotTest, at_kink, at_own_scale, dot_test, element_derivative, element_sides, finite_difference,
                                              near_kinks)
from gradguard.checker.kinks import STAIR_SLACK, growing, shifted, staircase, unresolved, unresolved_at, unresolved_element
from gradguard.checker.checks.registry import Problem
from gradguard.checker.inputs import show
from gradguard.checker.trees import inner, is_narrow_float, leaves, tree_map, widened

__all__ = ["KinkViolation", "COUPLED_UP_TO", "ELEMENTWISE_UP_TO", "KinkExcuse", "coupled_kink", "kink_excuse", "kink_problem",
           "no_derivative_along", "beyond_float64", "beyond_narrow_float", "float64_copies", "NoDerivative"]

# Differentiable elements up to which a kink is judged along a direction as a whole. It runs only where an excuse was
# found, at five primal calls per element and 96 for the bend: at 16, a from-scratch CNN's 2x2 max pool over a
# (4, 4, 2) image, which gives every tied maximum the whole cotangent, passed GG201 at every seed.
COUPLED_UP_TO = 64
PAIRS = 32  # random pairs of points around x whose midpoints test the bend (convex or concave)


@dataclass
class KinkViolation:
    """``<pullback(|ybar|), u>`` outside the one-sided derivatives ``left`` (t < 0) and ``right`` (t > 0)."""

    left: float
    right: float
    got: float
    direction: tuple[Any, ...] = ()  # u, one entry per differentiable argument (the message shows it)


def _positive_cotangent(ybar: Any) -> Any:
    return tree_map(lambda c: None if c is None else (np.abs(c) if isinstance(c, np.ndarray) else abs(c)), ybar)


def _positive_direction(case: Case) -> tuple[Any, ...]:
    rng = np.random.default_rng(1)
    out: list[Any] = []
    for i, a in enumerate(case.args):
        if i not in case.diff_positions:
            out.append(None)
            continue
        u = rng.uniform(0.5, 2.0, size=np.shape(a))
        out.append(np.asarray(u, dtype=np.asarray(a).dtype) if isinstance(a, np.ndarray) else float(u))
    return tuple(out)


def coupled_kink(case: Case, ybar: Any, conv: str, tol: tolerances.Tolerance) -> KinkViolation | None:
    """A :class:`KinkViolation` where the rule's tangent, taken along a positive direction as a whole, lies
    outside the one-sided directional derivatives at a coupled kink of the primal; None otherwise (no kink,
    a separable kink, a kink of mixed bend, complex values, too many elements, finite differences that
    fail, or one-sided slopes that grow at every step, :func:`kinks.unresolved`: a pole beside x is no kink)."""
    positions = list(case.diff_positions)
    y = case.first_call().output
    if has_complex(case, y) or sum(int(np.size(case.args[i])) for i in positions) > COUPLED_UP_TO:
        return None
    cot = _positive_cotangent(ybar)
    u = _positive_direction(case)
    along = one_sided(case, cot, u)
    if along is None:
        return None
    if unresolved(_contracted(case, cot), case.args, u):
        return None  # a pole or a jump nearer than any step (1/x at -1e-15): its one-sided "derivatives" are no kink's
    left, right = along
    lefts, rights, weights = [], [], []
    for i in positions:
        for k in range(int(np.size(case.args[i]))):
            sides = one_sided(case, cot, only_argument(case, i, unit_vector(case.args[i], k)))
            if sides is None:
                return None
            lefts.append(sides[0])
            rights.append(sides[1])
            weights.append(float(np.asarray(u[i]).reshape(-1)[k]))
    w = np.asarray(weights)
    lo_k, hi_k = np.asarray(lefts), np.asarray(rights)
    scale = float(np.sum(w * (np.abs(lo_k) + np.abs(hi_k))))
    slack = tol.atol + tol.rtol * max(scale, abs(left), abs(right))
    if abs(float(w @ hi_k) - right) <= slack and abs(float(w @ lo_k) - left) <= slack:
        return None  # separable: each element's own one-sided derivatives are the whole story
    # Convex near x (a max): every element bends up, and the one-sided derivative along u is sublinear
    # (at most the elements' right-hand sum, at least their left-hand sum); concave (a min): the reverse.
    # A sort of tied entries under unsorted weights bends up along each element but is neither.
    sum_right, sum_left = float(w @ hi_k), float(w @ lo_k)
    convex = bool(np.all(hi_k >= lo_k - slack)) and sum_left - slack <= left <= right + slack and right <= sum_right + slack
    concave = bool(np.all(hi_k <= lo_k + slack)) and sum_left + slack >= left >= right - slack and right >= sum_right - slack
    if not (convex or concave) or _bend(case, cot, scale) != ("convex" if convex else "concave"):
        return None  # not a bend that bounds every (sub)gradient along u
    tangents = adjoint_tangents(case, case.pair()[1], cot, conv)
    if not all(tangents[i] is None or np.all(np.isfinite(tangents[i])) for i in positions):
        return None
    got = inner(tangents, u)
    lo, hi = min(left, right), max(left, right)
    scale = max(scale, abs(got))
    if lo <= got <= hi or any(tolerances.close(got, s, tol, scale=scale) for s in (lo, hi)):
        return None
    weighted = _weighted(case, cot)
    if any(unresolved_element(weighted, case.args, i, k) is not None
           for i in positions for k in range(int(np.size(case.args[i])))):
        # An element whose derivative the steps do not establish (cbrt at 1.4e-186 beside 3.3e182: its slope is
        # 2.7e123 within 1e-186 of x, and the contraction's rounding hides it at every step): the one-sided
        # "derivatives" along u are the steps', not a kink's, and bound no (sub)gradient.
        return None
    if any(staircase(weighted, case.args, i, k) is not None
           for i in positions for k in range(int(np.size(case.args[i])))):
        # Values that climb in stairs (LML's threshold bisected to 1e-4, two entries near 0 tied): the one-sided
        # "derivatives" along u are single stairs' slopes (0.137 and 0.092 where the derivative is 0.041), no kink's.
        return None
    return KinkViolation(left, right, got, tuple(u[i] for i in positions))


def _bend(case: Case, cot: Any, slope_scale: float) -> str | None:
    """"convex" or "concave" where no random pair of points around ``x`` (at the one-sided probes' distance)
    contradicts it at its midpoint, else None. A max of tied entries passes as convex, a min as concave; a
    sort of ties under unsorted weights fails both.

    Arguments narrower than float64 are probed on float64 copies (their ties stay ties): in float16 the rounding
    slack at the probes' distance (eps ** (1/3), 0.1) swallowed the bend of a sort of four tied zeros under the
    weights [0, 1.9, 0, 1.29], which read as convex and made the pullback's own valid piece a finding."""
    rng = np.random.default_rng(2)
    positions = list(case.diff_positions)
    narrow = {i for i in positions if is_narrow_float(case.args[i])}
    args = tuple(widened(a) if i in narrow else a for i, a in enumerate(case.args))
    if narrow:
        cot = tree_map(widened, cot)
    eps = max(float(np.finfo(np.asarray(args[i]).dtype).eps) for i in positions)
    r = eps ** (1 / 3)
    f = _primal(case)

    def direction() -> tuple[Any, ...]:
        out: list[Any] = [None] * case.nargs
        for i in positions:
            g = rng.standard_normal(np.shape(args[i]))
            out[i] = np.asarray(g, dtype=np.asarray(args[i]).dtype) if isinstance(args[i], np.ndarray) else float(g)
        return tuple(out)

    def value(d: tuple[Any, ...]) -> float:
        return inner(cot, f(*shifted(args, d, r)))

    try:
        with np.errstate(all="ignore"):
            y0 = f(*shifted(args, tuple(None for _ in args), 0.0))
            magnitude = sum(float(np.sum(np.abs(np.asarray(a)) * np.abs(np.asarray(b)))) for a, b in zip(leaves(cot), leaves(y0))
                            if a is not None and b is not None)
            gaps = []
            for _ in range(PAIRS):
                d1, d2 = direction(), direction()
                mid = tuple(None if a is None else (a + b) / 2 for a, b in zip(d1, d2))
                gaps.append(value(mid) - (value(d1) + value(d2)) / 2)
    except Exception:  # noqa: BLE001 - the primal failed around x: no bend established
        return None
    if not all(np.isfinite(gaps)):
        return None
    slack = 64 * eps * (magnitude + r * slope_scale) + 1e-6 * r * slope_scale
    if max(gaps) <= slack:
        return "convex"
    if min(gaps) >= -slack:
        return "concave"
    return None


def kink_problem(case: Case, found: KinkViolation, *, from_reference: bool = False) -> Problem:
    """The finding for a tangent outside the one-sided directional derivatives at a coupled kink. ``from_reference``:
    GG203's, where the rule differs from JAX's derivative only at kinks of the primal (whose every subgradient is
    valid element by element): the message says so before the evidence, which is finite differences', not JAX's."""
    lo, hi = sorted((found.left, found.right))
    u = found.direction[0] if len(found.direction) == 1 else found.direction
    evidence = "disagrees with finite differences of the primal at a kink that couples "
    lead = (f"the pullback of {case.rule.name} differs from the JAX reference gradient only at kinks of the primal, "
            "where any value between an element's one-sided derivatives is valid; judged there as a whole, it "
            f"{evidence}"
            if from_reference else f"the pullback of {case.rule.name} {evidence}")
    return Problem(
        message=(
            lead +
            f"entries (along u its one-sided derivatives are not the sums of each entry's own): with the cotangent "
            f"|ybar| and the positive direction u = {show(u)}, the one-sided derivatives of "
            f"<|ybar|, primal(x + t u)> at t = 0 are "
            f"{show(found.left)} (t < 0) and {show(found.right)} (t > 0) by finite differences, but "
            f"<pullback(|ybar|), u> = {show(found.got)} lies outside them. Each tangent element alone lies within "
            "its own one-sided derivatives; taken together along u they do not."
        ),
        expected=f"between {show(lo)} and {show(hi)}",
        actual=show(found.got),
        fix=(
            "Where several entries meet at a kink (tied entries of a max or min, equal arguments of maximum), "
            "share the cotangent among them (e.g. divide by the number of ties) or give it to one of them, "
            "instead of giving each the whole cotangent; where none tie at this input, re-derive the tangent here."
        ),
    )


@dataclass(frozen=True)
class NoDerivative:
    """Where :func:`no_derivative_along` found that the primal has no derivative along an element: at output
    element ``output``, one-sided derivatives ``left`` (from below) and ``right`` (from above) that differ (a
    cone point), or one-sided difference quotients that grow without settling at every step finite differences
    can take (``growing``: (step, quotient) pairs; a vertical tangent, ``cbrt`` at 0, or a logarithmic one,
    ``x * log(x)`` at 0). ``side`` is "above" or "below" where the primal is finite on that side of the point
    only (the edge of its domain: ``x * log(x)`` is NaN below 0), else None (both sides, sharing a sign)."""

    output: str
    left: float | None
    right: float | None
    growing: tuple[tuple[float, float], ...] = ()
    side: str | None = None
    unit: str | None = None  # the pullback's tangent for a unit cotangent, where no step resolves a derivative
    slopes: str = ""  # why no step resolves one
    steps: tuple[float, ...] = ()  # the steps at which a cone point's one-sided derivatives were taken
    in_float64: bool = False  # established on float64 copies of narrower float arguments
    beyond: str = ""  # a derivative finite differences on float64 copies established, beyond the narrow float's range
    through: bool = False  # established along directions through the point, not along the element (`kinked_through`)

    def established(self) -> str:
        """What finite differences established, for a finding's message."""
        if self.through:
            return (f"along directions through it, the one-sided derivatives of {self.output} differ, or its directional "
                    "derivative is not linear in the direction, by finite differences")
        if self.beyond:
            return (f"the derivative of {self.output} along this element, {self.beyond}, and the pullback's own tangent "
                    f"there for a unit cotangent is {self.unit}")
        copies = " on float64 copies of the arguments" if self.in_float64 else ""
        if self.unit is not None:
            return (f"finite differences{copies} establish no derivative of {self.output} along this element "
                    f"({self.slopes}), and the pullback's own tangent there for a unit cotangent is {self.unit}")
        if self.growing:
            quotients = ", ".join(f"{show(q)} at step {h:.1g}" for h, q in self.growing)
            if self.side is None:
                which = f"the one-sided difference quotients of {self.output} along this element"
            else:
                other = "below" if self.side == "above" else "above"
                which = (f"the difference quotients of {self.output} from {self.side} along this element (the primal "
                         f"is not finite {other} this point)")
            return (f"{which} grow at every step finite differences can take ({quotients}), so they establish no "
                    "finite derivative there")
        at = f" at steps {' and '.join(f'{h:.1g}' for h in self.steps)}" if self.steps else " by finite differences"
        return (f"the one-sided derivatives of {self.output} are {show(self.left)} (from below) and {show(self.right)} "
                f"(from above){at}{copies}")

    def expected(self) -> str:
        """What a valid tangent there is, for a finding's expected value."""
        if self.growing:
            return "a finite value"
        if self.left is None or self.right is None:
            return "a finite subgradient"
        return f"a finite subgradient between {show(min(self.left, self.right))} and {show(max(self.left, self.right))}"


SETTLED = 0.01  # how far (relatively) a cone point's one-sided derivatives may move at a 1000-fold finer step


def float64_copies(case: Case) -> Case | None:
    """``case`` again on float64 (complex128) copies of its differentiable arguments narrower than that, where the
    primal computes at that width on them (no float output narrower than float64: a primal that fixes its own
    precision learns nothing from the copies); None where no argument is narrow, or the primal refuses the copies.
    The probes that tell a kink, a cone point or a singularity from a smooth function step a hair from ``x``, and in
    float16 those points round back onto ``x`` or its ties; the copies keep the input's ties and kinks where they
    were."""
    narrow = {i for i in case.diff_positions if is_narrow_float(case.args[i])}
    if not narrow:
        return None
    wide = Case(case.rule, tuple(widened(a) if i in narrow else a for i, a in enumerate(case.fresh())), ReplayDraws([]))
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = _primal(wide)(*wide.fresh())
    except Exception:  # noqa: BLE001 - the primal refuses float64 arguments: nothing to learn from them
        return None
    if any(y is not None and is_narrow_float(np.asarray(y)) for y in leaves(out)):
        return None
    return wide


def no_derivative_along(case: Case, i: int, k: int) -> NoDerivative | None:
    """:func:`_no_derivative_along`, and for a narrower float argument where it finds none, the same on float64
    copies of the narrow arguments (a cone point at a zero row stays one): float16's steps may not hold the cone at
    all (MyGrad's 3-norm of a zero row, whose |t|**3 underflows below t = 0.004, read flat at the 32-fold finer step,
    and GG301 called the NaN a float64 run warns about an error). Only where the primal on the copies computes in
    float64; the finding then says where its sides were taken."""
    found = _no_derivative_along(case, i, k)
    if found is not None or not is_narrow_float(case.args[i]):
        return found
    shadow = float64_copies(case)
    if shadow is None:
        return None
    wide = _no_derivative_along(shadow, i, k)
    return None if wide is None else dataclasses.replace(wide, in_float64=True)


def kinked_through(case: Case, i: int, k: int) -> NoDerivative | None:
    """A :class:`NoDerivative` (``through``) where the primal is smooth along element ``k`` of argument ``i`` or no
    step resolves it there, yet has no derivative at x: along directions through x that move that argument only, the
    one-sided derivatives of ``<c, primal>`` differ or its directional derivative is not linear in the direction
    (:func:`kinks.kinked_near`, only where finite differences show it; ``c`` a cotangent from a fixed seed). GG206's
    last test, for GG301: the eigenvectors of a matrix at a repeated eigenvalue (JAX's eig at a = 0), the middle of
    three tied entries. Only where central differences along the element resolve a value (beside a pole, 1/x at
    1e-100, they do not, and its one-sided slopes differ at every step), and only for float64 arguments: a narrower
    float's rounding at these probes' steps reads as kinks."""
    if is_narrow_float(case.args[i]):
        return None
    cotangent = case.fixed_cotangent(case.pair()[0])
    along = element_derivative(case, cotangent, i, k)
    if along is None or not tolerances.resolves(abs(along[0]), along[1], case.tol):
        return None
    if kinks.kinked_near(_contracted(case, cotangent), case.args, only_argument(case, i, unit_vector(case.args[i], k)),
                         case.tol, undetermined=False):
        return NoDerivative("<c, primal(x)> (c a cotangent from a fixed seed)", None, None, through=True)
    return None


def _no_derivative_along(case: Case, i: int, k: int) -> NoDerivative | None:
    """A :class:`NoDerivative` for an output element whose one-sided derivatives along element ``k`` of argument
    ``i`` differ and keep their values at a 1000-fold finer step (SETTLED; the real direction, then the
    imaginary one for complex arguments), or whose one-sided
    difference quotients grow without settling at every step from ``eps**(1/3)`` down to 1e-9 of it (each far
    above its rounding, from both sides with one sign, or from the one side where the primal is finite at the
    edge of its domain: ``cbrt`` and ``x**(1/3)`` at 0 grow 100-fold per step, ``x * log(x)`` at 0 by log(1000)
    per step, a smooth function's settle), so the primal has no derivative along that element; None where every
    output element's agree and settle (or they cannot be taken: then finite differences alone stand)."""
    arg = case.args[i]
    f = _primal(case)
    eps = float(np.finfo(np.asarray(arg).dtype).eps)
    h = eps ** (1 / 3)
    tol = case.tol
    # A narrower float may not hold the finer step's values at all (float16's x * x underflows at x = 9.9e-5, and a
    # norm's cone reads flat there): its sides are also compared at a 32-fold finer step.
    fines = (h / 1000.0,) + ((h / 32.0,) if eps > float(np.finfo(np.float64).eps) else ())
    for scale in ((1.0, 1j) if np.iscomplexobj(arg) else (1.0,)):
        d = only_argument(case, i, unit_vector(arg, k, scale))
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                at = {j: [np.asarray(v) for v in leaves(f(*shifted(case.args, d, j * h)))] for j in (-2, -1, 0, 1, 2)}
        except Exception:  # noqa: BLE001 - the primal left its domain beside x: no verdict from here
            continue
        several = len(at[0]) > 1
        coarse = []  # per output: its values at the steps h, and its one-sided derivatives (left, right) there
        for n in range(len(at[0])):
            g = {j: np.asarray(at[j][n], dtype=np.complex128) for j in at}
            coarse.append((g, (3 * g[0] - 4 * g[-1] + g[-2]) / (2 * h), (-3 * g[0] + 4 * g[1] - g[2]) / (2 * h)))
        for fine in fines:
            try:
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    finer = {j: [np.asarray(v) for v in leaves(f(*shifted(case.args, d, j * fine)))] for j in (-2, -1, 1, 2)}
            except Exception:  # noqa: BLE001 - the primal left its domain beside x: no verdict from here
                continue
            for n, (g, left, right) in enumerate(coarse):
                gf = {0: g[0], **{j: np.asarray(finer[j][n], dtype=np.complex128) for j in finer}}
                right_fine = (-3 * gf[0] + 4 * gf[1] - gf[2]) / (2 * fine)
                left_fine = (3 * gf[0] - 4 * gf[-1] + gf[-2]) / (2 * fine)
                for part in (np.real, np.imag):
                    lo, hi, lo_fine, hi_fine = part(left), part(right), part(left_fine), part(right_fine)
                    with np.errstate(all="ignore"):
                        base = tol.atol + tol.rtol * np.maximum(np.abs(lo), np.abs(hi))
                        jump = np.isfinite(lo) & np.isfinite(hi) & (np.abs(lo - hi) > base + 16 * eps * np.abs(g[0]) / h)
                        # A cone point's sides keep their values at a finer step; steps that straddle a pole
                        # beside x (1/x at 1e-200) give "sides" that change with the step and establish nothing.
                        slack = base + 16 * eps * np.abs(g[0]) / fine
                        jump &= (np.abs(lo_fine - lo) <= SETTLED * np.abs(lo) + slack) & \
                            (np.abs(hi_fine - hi) <= SETTLED * np.abs(hi) + slack)
                    idx = first_index(jump)
                    if idx is not None:
                        name = where("output " + str(n) if several else "the output", idx)
                        return NoDerivative(name, float(np.asarray(lo)[idx]), float(np.asarray(hi)[idx]), steps=(h, fine))
        # (float64 only: a narrower float's ladder ends within a few spacings of x, and no_derivative_along asks
        # float64 copies of it instead)
        cone = None if eps > float(np.finfo(np.float64).eps) else _cone_above_rounding(f, case.args, d, coarse, h, eps, tol)
        if cone is not None:
            n, idx, lo, hi, fine = cone
            return NoDerivative(where("output " + str(n) if several else "the output", idx), lo, hi, steps=(h, fine))
        found = growing(f, case.args, d, at[0], h, eps)
        if found is not None:
            n, idx, quotients, side = found
            return NoDerivative(where("output " + str(n) if several else "the output", idx), None, None, quotients, side)
    return None


LADDER = (10.0, 100.0, 1000.0)  # _cone_above_rounding: the finer steps, h / each


def _cone_above_rounding(f: Any, args: tuple[Any, ...], d: tuple[Any, ...], coarse: list[tuple[Any, Any, Any]], h: float,
                         eps: float, tol: tolerances.Tolerance) -> tuple[int, tuple[int, ...], float, float, float] | None:
    """``(output, index, left, right, step)`` for a cone point whose sides keep their values at the 10-fold finer step
    and only shrink, keeping their signs, at the 100- and 1000-fold finer ones, or at those of them above a step whose
    values are no line (None otherwise): the sides of a primal that reaches its cone by cancellation, where the finer
    steps see its rounding.

    A Kullback-Leibler spread, sqrt(sum(x - log x) - n) at x = 1 (or sqrt(trace - logdet - n) at the identity), computes
    1 + t - log(1 + t) - 1, whose rounding (about 1e-16) is its whole value below t = 1e-8: its sides are +-0.7071 at
    steps 6e-6 and 6e-7, +-0.696 at 6e-8 and 0 at 6e-9, so the 1000-fold finer step alone saw no cone (the matrices'
    sides are 0.31 at 6e-8 by second-order quotients and 0.35 by first-order ones: no line). A pole beside x
    (1/x at 1e-100) changes its sides tenfold at every step and grows them: never a cone here. What finite differences
    cannot tell from this is a flat piece narrower than 6e-7 around x at the bottom of a cone: both are taken as the
    cone, and a non-finite tangent there is a warning rather than an error."""
    rungs = []
    for ratio in LADDER:
        step = h / ratio
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = {j: [np.asarray(v) for v in leaves(f(*shifted(args, d, j * step)))] for j in (-2, -1, 1, 2)}
        except Exception:  # noqa: BLE001 - the primal left its domain beside x: no verdict from here
            return None
        rungs.append((step, values))
    for n, (g, left, right) in enumerate(coarse):
        for part in (np.real, np.imag):
            lo, hi = part(left), part(right)
            with np.errstate(all="ignore"):
                base = tol.atol + tol.rtol * np.maximum(np.abs(lo), np.abs(hi))
                cone = np.isfinite(lo) & np.isfinite(hi) & (np.abs(lo - hi) > base + 16 * eps * np.abs(g[0]) / h)
                for r, (step, values) in enumerate(rungs):
                    gs = {0: g[0], **{j: np.asarray(values[j][n], dtype=np.complex128) for j in values}}
                    right_s = part((-3 * gs[0] + 4 * gs[1] - gs[2]) / (2 * step))
                    left_s = part((3 * gs[0] - 4 * gs[-1] + gs[-2]) / (2 * step))
                    slack = base + 16 * eps * np.abs(g[0]) / step
                    if r == 0:  # the sides keep their values
                        cone &= (np.abs(left_s - lo) <= SETTLED * np.abs(lo) + slack) & \
                            (np.abs(right_s - hi) <= SETTLED * np.abs(hi) + slack)
                        judged = np.ones_like(cone)
                        continue
                    # ... then shrink, if anything, with their signs, down to a step whose values are no line (its
                    # first- and second-order quotients differ by more than SETTLED: rounding), which ends the ladder
                    right_1, left_1 = part((gs[1] - gs[0]) / step), part((gs[0] - gs[-1]) / step)
                    judged &= (np.abs(right_1 - right_s) <= SETTLED * np.maximum(np.abs(right_1), np.abs(right_s))) & \
                        (np.abs(left_1 - left_s) <= SETTLED * np.maximum(np.abs(left_1), np.abs(left_s)))
                    cone &= ~judged | ((np.abs(left_s) <= (1 + SETTLED) * np.abs(lo) + slack) & (left_s * lo >= 0) &
                                       (np.abs(right_s) <= (1 + SETTLED) * np.abs(hi) + slack) & (right_s * hi >= 0))
            idx = first_index(cone)
            if idx is not None:
                return n, idx, float(np.asarray(lo)[idx]), float(np.asarray(hi)[idx]), h / LADDER[0]
    return None


def _non_finite_unit_tangent(case: Case, i: int, k: int) -> tuple[Any, Any] | None:
    """``(element k of the pullback's tangent for argument i, the output)`` for a cotangent of ones, where every output
    is a real float array and that element is not finite; None otherwise (the pullback raising included: other
    checks report that)."""
    y, pb = case.pair()
    if any(np.asarray(leaf).dtype.kind not in "f" for leaf in leaves(y)):
        return None
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tangent = case.tangents(pb, tree_map(lambda leaf: np.ones_like(np.asarray(leaf)), y))[i]
    except Exception:  # noqa: BLE001 - the pullback raised for a unit cotangent: other checks report it
        return None
    if tangent is None:
        return None
    value = np.asarray(tangent).reshape(-1)[k]
    return None if np.isfinite(value) else (value, y)


def beyond_float64(case: Case, i: int, k: int) -> NoDerivative | None:
    """A :class:`NoDerivative` where the derivative along element ``k`` of argument ``i`` is beyond what float64
    holds or resolves: the pullback's own tangent there for a unit cotangent is not finite (digamma at 2.5e-175:
    trigamma is 1.6e349; fmod at a divisor of 5e-324, where x / d overflows) and finite differences establish none
    at some output element (:func:`kinks.unresolved_at`, :func:`kinks.unresolved_element`); None otherwise."""
    unit = _non_finite_unit_tangent(case, i, k)
    if unit is None:
        return None
    value = unit[0]
    f = _primal(case)
    found = unresolved_at(f, case.args, only_argument(case, i, unit_vector(case.args[i], k))) or \
        unresolved_element(f, case.args, i, k)
    in_float64 = False
    if found is None and is_narrow_float(case.args[i]) and (shadow := float64_copies(case)) is not None:
        # float16's steps may not reach the singularity's growth (TensorFlow's atan2 at (0, -0), whose slopes grow at
        # every step float64 can take): the same probes on float64 copies, where the primal computes in float64
        found = unresolved_at(f, shadow.args, only_argument(shadow, i, unit_vector(shadow.args[i], k))) or \
            unresolved_element(f, shadow.args, i, k)
        in_float64 = found is not None
    if found is None:
        return None
    output, slopes = found
    return NoDerivative(output, None, None, unit=show(value.item()), slopes=slopes, in_float64=in_float64)


def beyond_narrow_float(case: Case, i: int, k: int) -> NoDerivative | None:
    """A :class:`NoDerivative` where argument ``i`` is a narrower float than float64, the pullback's own tangent at
    element ``k`` for a unit cotangent is not finite, and finite differences of the sum of the outputs along that
    element, on float64 copies of the narrow arguments, establish a derivative beyond the narrow float's largest
    number: no tangent in that float can hold it (TensorFlow's rsqrt at x = 1e-6 in float16: -5e8, where float16
    ends at 65504), as :func:`beyond_float64` finds where float64 cannot. None otherwise (a primal that computes in
    its narrow float on the copies too, or a derivative the narrow float holds: the pullback's overflow is then its
    own)."""
    arg = case.args[i]
    if not is_narrow_float(arg) or np.iscomplexobj(arg):
        return None
    unit = _non_finite_unit_tangent(case, i, k)
    if unit is None:
        return None
    value_at_x, y = unit
    shadow = float64_copies(case)
    if shadow is None:
        return None
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ones = tree_map(lambda leaf: np.ones_like(np.asarray(leaf), dtype=np.float64), y)
            found = element_derivative(shadow, ones, i, k, own_scale=True)
            size = abs(float(np.asarray(shadow.args[i]).reshape(-1)[k]))
            if found is None and size > 0.0:
                # the default steps leave the domain beside a small element (rsqrt at 1e-6): at its own scale
                measured = at_own_scale(shadow, ones, only_argument(shadow, i, unit_vector(shadow.args[i], k)), size)
                found = None if measured is None else (float(measured[0].value), measured[0].error)
    except Exception:  # noqa: BLE001 - the rule or primal refuses float64 arguments: nothing established
        return None
    if found is None:
        return None
    value, error = found
    top = float(np.finfo(np.asarray(arg).dtype).max)
    if not (math.isfinite(float(value)) and abs(float(value)) - error > top):
        return None
    dtype = np.asarray(arg).dtype.name
    return NoDerivative("the sum of the outputs", None, None, unit=show(value_at_x.item()),
                        beyond=(f"{show(float(value))} by finite differences on float64 copies of the arguments, is "
                                f"beyond {dtype}'s largest number ({top:g})"))


# -- GG201's exemptions, behind one call ----------------------------------------------------------
@dataclass
class KinkExcuse:
    """Why a failed dot-product test is not a finding: ``reason`` is one of :data:`EXCUSES`; ``problem`` is
    the finding that still stands where entries meet at the kink (:func:`coupled_kink`), else None."""

    reason: str
    problem: Problem | None = None


EXCUSES = {
    "between sides": "the rule's value lies between the one-sided derivatives along v (a kink within the step)",
    "not generic": "the test passes along a generic direction, or the primal is not differentiable there and "
    "every element lies between its own one-sided derivatives",
    "near kinks": "kinks pass closer to x than any usable step, and the rule's answers jump between pieces",
    "not linear": "the derivative along the sum of two directions is not the sum of the derivatives along each, so "
    "finite differences establish no derivative here (as at the median of tied entries, which has directional "
    "derivatives only, or where a narrower float's rounding makes the primal's values stepped)",
    "unresolved": "the primal's one-sided slopes grow, or never settle, as the step shrinks, at every step float64 can "
    "take: a jump or a singularity nearer to x than any step, or jumps denser than every step, where finite differences "
    "establish no derivative",
    "stairs": "the primal's values climb in stairs (rounded inside it far beyond its output's rounding), and the "
    "disagreement lies within what those stairs make of finite differences at their step",
    "element kinks": "the primal has a kink along every element where the rule's answer differs from another "
    "engine's (ties of a max that couple entries), so neither is the derivative there (GG203 defers to GG201)",
    "rounded output": "the rule's output is bfloat16 or float8, rounded to 8 bits or fewer, and finite differences "
    "of it establish no derivative at its arguments' tolerance (JAX's reference, GG203, still judges a JAX rule)",
    "float64": "the primal computes in its arguments' narrower float (float32), and the same primal run on float64 "
    "copies of them computes in float64 and agrees with the pullback: what finite differences at the narrower "
    "precision saw is its rounding (flat or stepped values), not the derivative",
}
# The excuses that establish no derivative at the input (the others find the rule's answer a valid one there: between
# one-sided derivatives, right along a generic direction, or the float64 primal's derivative): GG201 counts such an
# input as not judged.
NO_VERDICT = frozenset({"near kinks", "not linear", "unresolved", "stairs", "rounded output"})


def rounded_output(case: Case) -> bool:
    """Whether the rule's output holds a bfloat16 or float8 array (ml_dtypes' floats, NumPy kind "V"): its values are
    rounded to 8 bits or fewer, so the one-sided slopes the kink probes take at fine steps read those stairs, and any
    answer lay "between the sides" (GG201 and GG203 passed a bwd with a factor 3 where 2 is right), while finite
    differences at float32's tolerance call a right one wrong: no verdict from them."""
    try:
        output = case.first_call().output
    except Exception:  # noqa: BLE001 - the forward raised: the other checks say so
        return False
    return ml_float_eps(output) is not None


def ml_float_eps(tree: Any) -> float | None:
    """The machine epsilon of the widest-spaced bfloat16 or float8 array among ``tree``'s leaves (ml_dtypes' floats,
    NumPy kind "V"), or None where no leaf is one."""
    from gradguard.engines.values import is_ml_float

    eps = []
    for leaf in leaves(tree):
        if isinstance(leaf, (np.ndarray, np.generic)) and is_ml_float(leaf.dtype):
            import ml_dtypes

            eps.append(float(ml_dtypes.finfo(leaf.dtype).eps))
    return max(eps) if eps else None


def kink_excuse(case: Case, ybar: Any, v: tuple[Any, ...], tangents: tuple[Any, ...], whole: DotTest, conv: str,
                tol: tolerances.Tolerance) -> KinkExcuse | None:
    """Where the dot-product test ``whole`` failed along ``v``: a :class:`KinkExcuse` when the primal is not
    differentiable there and the rule's answer is one a (sub)gradient could give, None when the failure is
    a finding. Tried in order, cheapest first: the one-sided derivatives along ``v`` (:func:`_vjp.at_kink`),
    a second, generic direction (:func:`_fails_generically`), kinks nearer than any step
    (:func:`_vjp.near_kinks`), a derivative that is not linear in the direction (:func:`_not_linear`), slopes
    that grow at every step float64 can take (:func:`kinks.unresolved`: a jump or a pole nearer than any), or an
    output element the cotangent weighs whose derivative the steps do not establish (:func:`_unresolved_element`:
    jumps finer than every step). An
    excused input is still judged along a positive direction as a whole where entries meet at the kink
    (:func:`coupled_kink`): its finding is the excuse's ``problem``."""
    if rounded_output(case):
        return KinkExcuse("rounded output")  # its one-sided slopes read the output's rounding, not kinks
    generic = _Generic(case, ybar)
    if at_kink(case, ybar, v, whole, tol):
        reason = "between sides"
    elif not _fails_generically(case, ybar, tangents, generic, tol):
        reason = "not generic"
    elif near_kinks(case, ybar, v, whole, conv, tol):
        reason = "near kinks"
    elif _not_linear(case, ybar, v, whole, generic, tol):
        reason = "not linear"
    elif unresolved(_contracted(case, ybar), case.args, v) or _unresolved_element(case, ybar, v):
        reason = "unresolved"
    elif _within_stairs(case, ybar, v, whole, tol):
        reason = "stairs"
    elif _agrees_in_float64(case, ybar, v, whole, tol):
        reason = "float64"
    else:
        return _excused_in_float64(case, ybar, v, tangents, conv, tol)
    coupled = coupled_kink(case, ybar, conv, tol)
    return KinkExcuse(reason, None if coupled is None else kink_problem(case, coupled))


def _excused_in_float64(case: Case, ybar: Any, v: tuple[Any, ...], tangents: tuple[Any, ...], conv: str,
                        tol: tolerances.Tolerance) -> KinkExcuse | None:
    """The kink exemptions asked again on float64 copies of the arguments narrower than float64 (the input's
    ties stay ties, its kinks where they were): the probes that tell a kink from a smooth function step a hair
    from ``x`` (``eps ** (1/3)`` over 4 and 16, then 1000-fold finer), and in float16 those points round back
    onto ``x`` or onto the ties. A sort of three tied zeros beside 3.1, whose pullback rightly gave the middle
    tie the middle weight (-1.9), was a finding in float16 and is excused in float64 as kinks nearer than any
    step.

    Two questions, both on the copies, both answered yes for an excuse: whether the rule itself, run there, fails
    and is excused at float64's own tolerance (a kink float64 shows, not one the narrow tolerance lets its finer
    steps imagine: a smooth float32 loss whose float64 primal rounds at 2e-9 of itself spreads one-sided quotients
    at float32's tolerance, and a derivative 10% off lay between them); and whether the rule's own narrow tangents
    are excused there at the narrow float's tolerance (its excuse, the coupled kink's finding included, is the
    answer). Only where the primal on the copies computes in float64 (as for :func:`_agrees_in_float64`)."""
    narrow = {i for i in case.diff_positions if is_narrow_float(case.args[i])}
    if not narrow or has_complex(case, ybar) or any(np.iscomplexobj(case.args[i]) for i in narrow):
        return None
    shadow = float64_copies(case)
    if shadow is None:
        return None
    wide_v = tuple(widened(d) if i in narrow else d for i, d in enumerate(v))
    wide_ybar = tree_map(widened, ybar)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lhs = finite_difference(shadow, wide_ybar, wide_v)
            if lhs is None:
                return None
            own = adjoint_tangents(shadow, shadow.pair()[1], wide_ybar, conv)
            itself = dot_test(lhs, own, wide_v)
            if itself.agrees(shadow.tol) or kink_excuse(shadow, wide_ybar, wide_v, own, itself, conv, shadow.tol) is None:
                return None  # float64 shows no kink here that excuses the rule
            wide_t = tuple(widened(t) if i in narrow else t for i, t in enumerate(tangents))
            whole = dot_test(lhs, wide_t, wide_v)
            if whole.agrees(tol):
                return None  # not a kink's disagreement: _agrees_in_float64 judged the smooth case
            return kink_excuse(shadow, wide_ybar, wide_v, wide_t, whole, conv, tol)
    except Exception:  # noqa: BLE001 - the rule or primal refuses float64 arguments: no excuse from here
        return None


def _unresolved_element(case: Case, ybar: Any, v: tuple[Any, ...]) -> bool:
    """Whether some real output element that ``ybar`` weighs has no derivative along ``v`` that finite
    differences establish, judged element by element (in ``<ybar, primal>`` the rounding of the other elements'
    values can hide it): its slopes along ``v`` grow or overflow (:func:`kinks.unresolved_at`), or, for up to
    ELEMENTWISE_UP_TO real input elements, its slopes along one element that ``v`` moves scatter at the finest
    steps (:func:`kinks.unresolved_element`: ``fmod(x, d)`` at d = 2e-256, whose pieces are narrower than the spacing
    of floats at d, beside elements of size 1)."""
    if has_complex(case, ybar):
        return False
    weighted = _weighted(case, ybar)
    if unresolved_at(weighted, case.args, v) is not None:
        return True
    positions = [i for i in case.diff_positions if v[i] is not None]
    if not _few_real_elements(case, positions):
        return False
    return any(unresolved_element(weighted, case.args, i, int(k)) is not None
               for i in positions for k in np.flatnonzero(np.asarray(v[i]).reshape(-1)))


def _weighted(case: Case, ybar: Any) -> Any:
    """The primal with each real output element weighed by its cotangent element, kept apart (not summed as in
    ``<ybar, primal>``), so that one element's probe is not hidden by the rounding of the others' values."""
    f = _primal(case)

    def weighted(*args: Any) -> Any:
        return tree_map(lambda w, y: None if w is None or y is None else np.asarray(w) * np.asarray(y), ybar, f(*args))

    return weighted


def _within_stairs(case: Case, ybar: Any, v: tuple[Any, ...], whole: DotTest, tol: tolerances.Tolerance) -> bool:
    """Whether the dot-product test's disagreement lies within what stairs in the primal's values can make of
    finite differences at their step: for up to ELEMENTWISE_UP_TO real input elements, each element ``v`` moves is
    probed alone for an output element (weighted by ``ybar``) whose values climb in stairs
    (:func:`kinks.staircase`: rounded inside the primal, as ``-log(1 - sigmoid(x))`` at x = 32), and each such
    element's blur (:meth:`kinks.Staircase.blur`) adds to the finite differences' error. A wrong rule where the
    stairs are far finer than the step is still a finding."""
    if has_complex(case, ybar):
        return False
    positions = [i for i in case.diff_positions if v[i] is not None]
    if not _few_real_elements(case, positions):
        return False
    only = tuple(v[i] if i in positions else None for i in range(case.nargs))
    blur = kinks.stairs_blur(_weighted(case, ybar), case.args, only, float(whole.lhs.step), up_to=ELEMENTWISE_UP_TO)
    return blur > 0 and tolerances.close(float(whole.lhs.value), whole.rhs, tol, scale=whole.scale,
                                         fd_error=whole.lhs.error + STAIR_SLACK * blur)


def _agrees_in_float64(case: Case, ybar: Any, v: tuple[Any, ...], whole: DotTest, tol: tolerances.Tolerance) -> bool:
    """Whether the disagreement is the primal's own narrow-float rounding: some differentiable argument is a
    float32 (or float16) array, the primal run on float64 copies of such arguments computes in float64 (every float
    output float64: a primal that fixes its own precision with astype gets no such excuse), and finite differences of
    that float64 primal agree with the pullback's ``<pullback(ybar), v>`` at the rule's tolerance. Float32's
    ``-log(1 - sigmoid(x) + 1e-7)`` at x = 16 is one stair of width 1 beside a plateau: flat at every step
    float32 resolves there, while the function's slope, and the exact derivative a pullback returns, is 0.53."""
    from gradguard.engines import fd

    narrow = {i for i in case.diff_positions if is_narrow_float(case.args[i])}
    if not narrow or has_complex(case, ybar) or any(np.iscomplexobj(case.args[i]) for i in narrow):
        return False
    args = tuple(widened(a) if i in narrow else a for i, a in enumerate(case.fresh()))
    along = tuple(widened(d) if i in narrow else d for i, d in enumerate(v))
    primal = _primal(case)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = primal(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args])
            if any(y is not None and np.asarray(y).dtype.kind == "f" and np.asarray(y).dtype != np.float64
                   for y in leaves(out)):
                return False
            # one table at the default steps: finer ones see the rounding inside the float64 primal too (its
            # 1 - sigmoid(x) near 1 at x = 19 rounds at 2e-8 of itself, 6e-4 of the slope at steps of 2e-5)
            d = fd.directional(primal, args, along, tree_map(widened, ybar), complex_step=False)
    except Exception:  # noqa: BLE001 - the primal refuses float64 arguments, or its domain's edge: no excuse
        return False
    if not (np.isfinite(d.value) and np.isfinite(d.error)):
        return False
    return tolerances.close(float(np.real(d.value)), whole.rhs, tol, scale=whole.scale, fd_error=d.error)


class _Generic:
    """A dense direction ``u`` fixed by a seed (standard normal; complex where the argument is; None for the
    arguments that are not differentiable), and ``d/dt <ybar, primal(x + t u)>`` by finite differences (None
    where they cannot be taken): made on first use, shared by the exemptions that read them."""

    def __init__(self, case: Case, ybar: Any) -> None:
        self.case, self.ybar = case, ybar

    @functools.cached_property
    def u(self) -> tuple[Any, ...]:
        rng = np.random.default_rng(0)
        u = []
        for i, a in enumerate(self.case.args):
            if i not in self.case.diff_positions:
                u.append(None)
                continue
            g = rng.standard_normal(np.shape(a))
            if np.iscomplexobj(a):
                g = g + 1j * rng.standard_normal(np.shape(a))
            u.append(np.asarray(g, dtype=np.asarray(a).dtype) if isinstance(a, np.ndarray) else g.item())
        return tuple(u)

    @functools.cached_property
    def derivative(self) -> Any:
        return finite_difference(self.case, self.ybar, self.u)


def _not_linear(case: Case, ybar: Any, v: tuple[Any, ...], whole: DotTest, generic: _Generic,
                tol: tolerances.Tolerance) -> bool:
    """Whether the derivative of ``<ybar, primal>`` at x is not linear in the direction: along ``v + u`` (``u``
    the generic direction) it differs from the sum of the derivatives along ``v`` and along ``u``.

    Some kinks show on no line through x. The median of three tied entries moves along a direction d at the
    rate median(d) on both sides of x (median(-d) = -median(d)), so every one-sided test sees a smooth
    function, yet median(d) is no linear function of d: the primal has no derivative there, and a pullback
    that gives the cotangent to one tied entry (a sort that keeps ties in a stable order) answers with a
    valid subgradient that no single direction's finite difference matches. A differentiable primal's
    derivative is linear, so a wrong pullback of one is still a finding.

    Two probes: ``v + u`` (any size; it shows the kink where ``v`` and ``u`` fall in different linear pieces
    of the derivative), then, for up to ELEMENTWISE_UP_TO real elements, the derivatives along ``v`` and along
    ``u`` against the sums of their elements times the derivatives along each element (the median's are all 0
    at a tie; ``v`` alone may move the tie's middle entry not at all).
    Where a probe's finite differences cannot be taken, it gives no evidence and the finding stands."""
    d_v = float(whole.lhs.value)
    along_u = generic.derivative
    along_both = finite_difference(case, ybar, tuple(None if a is None else a + b for a, b in zip(v, generic.u)))
    if along_u is not None and along_both is not None:
        d_u, d_both = float(along_u.value), float(along_both.value)
        if not tolerances.close(d_both, d_v + d_u, tol, scale=abs(d_v) + abs(d_u),
                                fd_error=whole.lhs.error + along_u.error + along_both.error):
            return True
    positions = [i for i in case.diff_positions if v[i] is not None]
    if not _few_real_elements(case, positions):
        return False
    probes = [(v, d_v, whole.lhs.error)]
    if along_u is not None:  # the same test along u: at x = [1, 1, 1, 0, 2] and v = [0, 3.4, -2, ...] the median
        probes.append((generic.u, float(along_u.value), along_u.error))  # moves at median(v[:3]) = 0 = sum too
    parts: dict[tuple[int, int], tuple[float, float] | None] = {}
    for direction, d, d_error in probes:
        summed, error, scale = 0.0, d_error, abs(d)
        for i in positions:
            if direction[i] is None:
                continue
            weights = np.asarray(direction[i], dtype=float).reshape(-1)
            for k in np.flatnonzero(weights):
                if (i, int(k)) not in parts:
                    parts[i, int(k)] = element_derivative(case, ybar, i, int(k))
                found = parts[i, int(k)]
                if found is None:
                    return False
                part = float(weights[k]) * float(found[0])
                summed, error, scale = summed + part, error + abs(float(weights[k])) * found[1], scale + abs(part)
        if not tolerances.close(summed, d, tol, scale=scale, fd_error=error):
            return True
    return False


def _fails_generically(case: Case, ybar: Any, tangents: tuple[Any, ...], generic: _Generic,
                       tol: tolerances.Tolerance) -> bool:
    """Does the dot-product test also fail along a generic (dense, seeded) direction, at a point where the
    primal is differentiable?

    Shrinking favours simple directions and inputs at kinks. With several kinks at once (relu at x = 0)
    each element's subgradient is a free choice, and along a simple direction the kinks can even cancel
    (<ybar, relu(t v)> = t for ybar = v = [1, -1]). Along a generic direction the one-sided derivatives
    then differ: the primal is not differentiable there and no finite difference can judge the rule. A
    wrong pullback of a differentiable primal still fails along a generic direction."""
    u, lhs = generic.u, generic.derivative
    if lhs is None:
        return True  # no second opinion: keep the first
    dot = dot_test(lhs, tangents, u)
    sides = one_sided(case, ybar, u)
    if sides is not None and not tolerances.close(sides[0], sides[1], tol, scale=dot.scale):
        # Not differentiable here: each element's subgradient is a free choice between its own one-sided
        # derivatives, which the one-sided derivatives along u cannot bound. Judge element by element where
        # that is affordable (relu'(0) = 2 is outside [0, 1]); beyond that, no verdict.
        return _outside_elementwise_subgradients(case, ybar, tangents, tol)
    return not dot.agrees(tol)


ELEMENTWISE_UP_TO = 16  # differentiable elements up to which a kink is judged element by element


def _few_real_elements(case: Case, positions: list[int]) -> bool:
    """Whether the arguments at ``positions`` are real and have ELEMENTWISE_UP_TO elements or fewer in all: where
    probing each element alone is affordable."""
    return not any(np.iscomplexobj(case.args[i]) for i in positions) and \
        sum(np.size(case.args[i]) for i in positions) <= ELEMENTWISE_UP_TO


def _outside_elementwise_subgradients(case: Case, ybar: Any, tangents: tuple[Any, ...], tol: tolerances.Tolerance) -> bool:
    """Whether some element's tangent lies outside the one-sided derivatives of ``<ybar, primal>`` along that
    element (or differs from the derivative where the primal is smooth along it)."""
    positions = [i for i in case.diff_positions if tangents[i] is not None]
    if not _few_real_elements(case, positions):
        return False
    for i in positions:
        got = np.asarray(tangents[i], dtype=float).reshape(-1)
        for k in range(got.size):
            value = float(got[k])
            sides = element_sides(case, ybar, i, k, value, abs(value), tol)
            if sides is not None and not sides.admits(value):
                return True
    return False
