"""Forward-mode checks for `jax.custom_jvp` rules (GG207, GG208).

A custom_jvp's rule is its jvp: ``jax.jvp`` runs it as written, and reverse mode (``jax.grad``) runs the
transpose JAX derives from it. The reverse-mode checks (GG201, GG202, GG204, GG601, GG602) judge that
transpose through the rule's pullback (see `gradguard.engines.jax_engine.rrule_from_custom_jvp`); these
two judge the jvp itself, which the transpose can hide: JAX transposes only the part of the jvp that is
linear in the tangent, so a constant added to the output tangent changes forward mode and vanishes in
reverse mode.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Iterable

import numpy as np

from gradguard.checker import compare, tolerances
from gradguard.checker.case import Case, is_finite_tree
from gradguard.checker.checks._jax import first_line, jax_ready
from gradguard.checker.checks._vjp import _contracted, _primal, derivative_range, one_sided
from gradguard.checker.checks.registry import CHECKS, Problem, Skip, check
from gradguard.checker.checks.second_order import fd_directional
from gradguard.checker.inputs import apart, show, show_apart
from gradguard.checker.kinks import between_sides, element_sides, jumps_around, unresolved, vertical_tangent
from gradguard.checker.trees import abs_inner, inner, leaves
from gradguard.engines import fd

__all__ = ["jvp_forward_fd", "jvp_linear"]

_GIVEN = """
    @jax.custom_jvp
    def softplus(x):
        return jnp.logaddexp(0.0, x)
"""


def _jvp(case: Case, u: tuple[Any, ...], args: tuple[Any, ...] | None = None) -> tuple[Any, Any]:
    """``(y, jvp along u)`` for a custom_jvp rule at ``args`` (fresh copies of the input by default); Skip for
    other rules, Skip with JAX's reason if it raises."""
    from gradguard.checker.jax_rules import CUSTOM_JVP
    from gradguard.engines.jax_engine import jvp_of

    if not case.rule.extra.get(CUSTOM_JVP):
        raise Skip("the rule is a jax.custom_vjp, which has no jvp (JAX's forward mode refuses a custom_vjp)")
    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    jax_ready(case)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return jvp_of(case.rule.jax_fn, case.fresh() if args is None else args, u, nondiff=tuple(case.rule.nondiff))
    except Exception as exc:  # noqa: BLE001 - the jvp raised: reported as the rule's error by the other checks
        raise Skip(f"jax.jvp of {case.rule.name} raised: {first_line(exc)}") from None


@check(
    "GG207",
    family="numeric",
    title="jvp disagrees with forward finite differences (custom_jvp)",
    kinds=("jax",),
    forward_only=True,
    given=_GIVEN,
    broken="""
        @softplus.defjvp
        def softplus_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return softplus(x), t * jnp.exp(-jnp.abs(x))    # not the derivative of softplus

        softplus_rule = jax_rule(softplus, arrays(shape=(4,)))
    """,
    fixed="""
        @softplus.defjvp
        def softplus_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return softplus(x), t * jax.nn.sigmoid(x)

        softplus_rule = jax_rule(softplus, arrays(shape=(4,)))
    """,
)
def jvp_forward_fd(case: Case) -> Iterable[Problem]:
    """``jax.jvp`` of a ``custom_jvp`` runs its jvp rule as written: forward mode, Hessian-vector products
    and ``jax.jacfwd`` use it directly. For a random direction ``u`` and covector ``w``, the check compares
    ``<w, jvp(x; u)>`` with finite differences ``d/dt <w, f(x + t u)>`` of the primal (the function under
    the ``custom_jvp``). Where they disagree at a kink of the primal (``jax.nn.relu`` at 0), a jvp whose
    value lies between the one-sided derivatives of ``<w, f(x + t u)>`` at some step, down to the input's
    own scale, or whose every output element lies between that element's one-sided derivatives along ``u``,
    is a valid (sub)gradient and no finding; so is a jvp whose own answers around ``x`` jump between the
    pieces of kinks nearer than any step (as GG201 judges a pullback), and any jvp where an output element's
    one-sided quotients grow at every step (:func:`_steep_near`: a vertical tangent at ``x`` or nearer than
    any step, where finite differences establish no derivative). Reverse mode is judged by GG201 on JAX's
    transpose of the same rule."""
    u = case.direction("direction")
    y, ty = _jvp(case, u)
    if not is_finite_tree(ty):
        return
    w = case.cotangent_like(y, "covector")
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d = fd.directional(lambda *a: case.rule.primal(*a), case.fresh(), u, w, complex_step=False)
    except (ValueError, ArithmeticError, TypeError):
        raise Skip("finite differences of the primal failed at this input") from None
    if not (np.all(np.isfinite(d.value)) and math.isfinite(d.error)):
        raise Skip("finite differences of the primal are not finite at this input")
    got = inner(w, ty)
    scale = abs_inner(w, ty)  # an empty output slot (JAX's None) has no terms
    if tolerances.close(got, float(d.value), case.tol, scale=scale, fd_error=d.error):
        return
    # A disagreement is judged only once finer tables bear it out (as GG201's): a first table's steps can reach
    # past the primal's own scale. JAX's expi in float32 at x = 0.0117 beside 1: steps from 0.17 cross its
    # logarithmic singularity at 0 (11.2 +- 6.3), where the confirming tables give 94.4926 +- 0.036 and the jvp
    # is 94.4922; the exemptions below then read one-sided slopes at steps near 0.0117 as a kink.
    finer = fd_directional(lambda *a: case.rule.primal(*a), case.fresh(), u, w, confirm=True, first=d)
    if finer is not None:
        if tolerances.close(got, float(finer.value), case.tol, scale=scale, fd_error=finer.error):
            return
        if finer.error < d.error:
            d = finer
    if _within_steps(case, u, w, got, scale) or _at_kink(case, u, w, ty) or _steep_near(case, u):
        return
    if _near_kinks(case, u, w, got, d, scale):
        return
    sides = one_sided(case, w, u)
    if (sides is not None and not tolerances.close(sides[0], sides[1], case.tol, scale=scale)
            and not between_sides((min(sides), max(sides)), got, case.tol, scale) and _kink_stays(case, w, u, sides)):
        # A kink at x (a tie of isotonic regression's blocks, a max's tie): d/dt has no value there, and the
        # central difference above only averages the sides; what was established is the two sides.
        left, right = sides
        yield Problem(
            message=(
                f"the jvp of {case.rule.name} disagrees with finite differences: along a random direction u, "
                f"<w, jvp(x; u)> = {show(got)}, outside the one-sided derivatives of <w, {case.rule.name}(x + t u)> "
                f"at t = 0, {show(left)} (from below) and {show(right)} (from above) by finite differences of the "
                "primal, which has a kink there: no (sub)gradient gives this value."
            ),
            expected=f"a value between {show(min(left, right))} and {show(max(left, right))}",
            actual=show(got),
            fix=("Return, as the tangent output of the jvp rule, the derivative of the primal applied to the input "
                 "tangents (at a kink, a one-sided derivative or a value between them)."),
        )
        return
    fd_text, got_text = show_apart(float(d.value), got)
    yield Problem(
        message=(
            f"the jvp of {case.rule.name} disagrees with finite differences: along a random direction u, "
            f"<w, jvp(x; u)> = {got_text}, but d/dt <w, {case.rule.name}(x + t u)> = {fd_text} by "
            f"finite differences of the primal, "
            f"{apart(float(d.value), got, tolerances.allowed(got, float(d.value), case.tol, scale=scale, fd_error=d.error))}."
        ),
        expected=fd_text,
        actual=got_text,
        fix=("Return, as the tangent output of the jvp rule, the derivative of the primal applied to the input "
             "tangents (the chain rule through every input that moves)."
             + tolerances.approximation_hint(float(d.value), got, case.tol)),
    )


KINK_STAYS = 0.5  # _kink_stays: the share of its gap a kink's one-sided derivatives keep at a tenfold finer step


def _kink_stays(case: Case, w: Any, u: tuple[Any, ...], sides: tuple[float, float]) -> bool:
    """Whether the gap between the one-sided derivatives ``sides`` keeps at least KINK_STAYS of itself at a tenfold
    finer step, as a kink's does; a smooth function's shrinks a hundredfold there (second-order one-sided
    differences), and one sharply bent within the step (JAX's expi in float32 at x = 0.0117: 44.37 and 89.70 from
    below and above at the step 4.9e-3, where its derivative is 94.49) is no kink to report."""
    finer = one_sided(case, w, u, finer=0.1)
    if finer is None:
        return True  # no finer probe: the coarse sides stand as before
    return abs(finer[1] - finer[0]) >= KINK_STAYS * abs(sides[1] - sides[0])


def _within_steps(case: Case, u: tuple[Any, ...], w: Any, got: float, scale: float) -> bool:
    """Whether ``<w, jvp(x; u)>`` lies between the one-sided derivatives of ``<w, f(x + t u)>`` at some step from
    ``eps**(1/3)`` down (:func:`kinks.derivative_range`, as GG201 holds a pullback): at a kink of the primal any
    value between them is a (sub)gradient's, and where the primal is smooth at ``x`` but a kink lies within the
    central differences' steps the finer steps agree with the jvp. jax-fem's phase-field split of a strain whose
    smallest eigenvalue is 9e-5 has a kink 1e-4 along ``u``: the central differences gave 1408.18 and the steps
    from 6e-6 down 1504.39 to 1504.30, around the jvp's 1504.297. A wrong jvp at a smooth point stays outside:
    the range is as narrow as the rounding there."""
    return between_sides(derivative_range(case, w, u, case.tol, scale), got, case.tol, scale)


def _near_kinks(case: Case, u: tuple[Any, ...], w: Any, got: float, d: Any, scale: float) -> bool:
    """Whether kinks of the primal pass closer to ``x`` than any usable step and the jvp's value is one a (Clarke)
    subgradient could give there (:func:`kinks.jumps_around`, GG201's test for a pullback): the jvp's own answers
    around ``x`` jump between pieces, and the primal's one-sided derivatives show a kink near ``x``. At a strain of
    0 every eigenvalue of jax-fem's phase-field split sits on its kink: the jvp takes the positive side for all
    (JAX's derivative of ``|x|`` at 0 is 1), the derivative of the split on positive definite strains, a limit of
    derivatives at points beside 0, while along ``u`` the one-sided derivatives mix the sides by the signs of
    ``u``'s eigenvalues and bound no element of it."""

    def answer(args: tuple[Any, ...] | None = None) -> float:
        moved = case.fresh() if args is None else args
        try:
            _, ty = _jvp(case, u, moved)
        except Skip:
            return math.nan
        return inner(w, ty)

    return jumps_around(answer, case.args, u, g=_contracted(case, w), step=float(d.step), value=got,
                        fd_value=float(d.value), fd_error=float(d.error), scale=scale, tol=case.tol)


def _at_kink(case: Case, u: tuple[Any, ...], w: Any, ty: Any) -> bool:
    """Whether every element of the jvp's output tangent lies between the one-sided derivatives of that output
    element along ``u`` (``f_k(x + t u)``, at steps from ``eps**(1/3)`` down), as GG201 holds a pullback's
    elements at a kink. Where the primal has a kink at ``x`` they differ and any value between is one a
    (sub)gradient gives: ``jax.nn.relu``'s own jvp gives 0 at 0, where central finite differences average the
    two sides. Where a kink lies within the finite differences' steps but not at ``x`` (relu at -6e-5) they
    agree with each other, and the jvp is judged against them. An element outside them (2 at relu's kink, or
    any wrong value where the primal is smooth) is still reported; so is every jvp whose output the sides
    cannot be taken of (complex, or the primal leaves its domain beside ``x``). Where the slopes of
    ``<w, f(x + t u)>`` grow at every step float64 can take (`kinks.unresolved`: a jump, or a pole nearer than
    any step, as log|det| of a nearly singular matrix), no derivative is established and the jvp is not judged."""
    if unresolved(_contracted(case, w), case.args, u):
        return True  # a jump or a pole nearer to x than any step float64 can take: no derivative to compare with
    sides = element_sides(_primal(case), case.fresh(), u, case.tol)
    got = leaves(ty)
    if sides is None or len(sides) != len(got):
        return False
    tol = case.tol
    for side, t in zip(sides, got):
        if t is None:
            continue
        t = np.asarray(t)
        if side is None or t.dtype.kind not in "fiub":
            return False
        lo, hi = side
        t = t.astype(np.float64)
        slack = tol.atol + tol.rtol * np.maximum(np.maximum(np.abs(lo), np.abs(hi)), np.abs(t))
        if not np.all((lo - slack <= t) & (t <= hi + slack)):
            return False
    return True


def _steep_near(case: Case, u: tuple[Any, ...]) -> bool:
    """Whether some output element of the primal has one-sided quotients along ``u`` that grow without settling
    at every step from ``eps**(1/3)`` down to 1e-9 of it (:func:`kinks.vertical_tangent`): a vertical tangent
    at ``x`` or nearer to it than any of those steps. ``sqrt(max(x, 0))`` at x = 6.4e-16 is differentiable (its
    derivative 2e7), yet every step crosses the kink at 0 and the vertical tangent there, so the steps'
    one-sided slopes (0.77 and 1052) bound nothing and no finite difference establishes the derivative. Kinks
    a hair away that leave the slopes bounded (isotonic regression's blocks 1e-38 apart) are no excuse: every
    valid subgradient there still lies between the slopes the steps see."""
    return vertical_tangent(_primal(case), case.fresh(), u)


@check(
    "GG208",
    family="numeric",
    title="jvp is not linear in the tangent (custom_jvp)",
    kinds=("jax",),
    forward_only=True,
    given=_GIVEN,
    broken="""
        @softplus.defjvp
        def softplus_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return softplus(x), t * jax.nn.sigmoid(x) + 1e-3   # an offset: forward mode only, grad drops it

        softplus_rule = jax_rule(softplus, arrays(shape=(4,)))
    """,
    fixed="""
        @softplus.defjvp
        def softplus_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return softplus(x), t * jax.nn.sigmoid(x)

        softplus_rule = jax_rule(softplus, arrays(shape=(4,)))
    """,
)
def jvp_linear(case: Case) -> Iterable[Problem]:
    """A jvp must be linear in the input tangents: ``jvp(x; a u1 + b u2) = a jvp(x; u1) + b jvp(x; u2)``.
    JAX transposes only the linear part of a jvp for reverse mode, so an offset or a tangent squared can
    pass every reverse-mode check and still be wrong in forward mode (``jax.jvp``, ``jacfwd``, Hessians).
    The check draws two directions and two scalars; it needs no finite differences."""
    u1 = case.direction("direction")
    u2 = case.direction("second direction")
    a = case.draw_float("scale a", -2.0, 2.0)
    b = case.draw_float("scale b", -2.0, 2.0)
    mixed = tuple(None if x is None else a * np.asarray(x) + b * np.asarray(y) for x, y in zip(u1, u2))
    _, t1 = _jvp(case, u1)
    _, t2 = _jvp(case, u2)
    _, tm = _jvp(case, mixed)
    if not (is_finite_tree(t1) and is_finite_tree(t2) and is_finite_tree(tm)):
        return
    for k, (g1, g2, gm) in enumerate(zip(leaves(t1), leaves(t2), leaves(tm))):
        if g1 is None or g2 is None or gm is None:
            continue  # an empty output slot (JAX's None): no tangent there
        want = a * np.asarray(g1) + b * np.asarray(g2)
        err = np.abs(np.asarray(gm) - want)
        bound = case.tol.atol + case.tol.rtol * (np.abs(a * np.asarray(g1)) + np.abs(b * np.asarray(g2)) + np.abs(gm))
        if np.all(err <= bound):
            continue
        idx = compare.worst_index(err - bound)  # the element furthest outside its bound
        where = compare.where(f"output {k}" if len(leaves(t1)) > 1 else "the output tangent", idx)
        got, exp = np.asarray(gm)[idx], want[idx]
        yield Problem(
            message=(
                f"the jvp of {case.rule.name} is not linear in the tangent: jvp(x; a u1 + b u2) should equal "
                f"a jvp(x; u1) + b jvp(x; u2) (a = {show(a)}, b = {show(b)}), but {where} is {show(float(got))} "
                f"instead of {show(float(exp))}."
            ),
            location=where,
            expected=show(float(exp)),
            actual=show(float(got)),
            fix=("Compute the tangent output only from products of the input tangents with values of the primal "
                 "(no constant offset, no tangent times tangent): JAX transposes the linear part alone, so reverse "
                 "mode hides what forward mode gets wrong."),
        )
        return


for _id in ("GG207", "GG208"):
    CHECKS[_id].extra["needs_jax"] = True
