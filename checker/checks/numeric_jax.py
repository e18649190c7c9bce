"""Numeric checks that need JAX (GG203, GG204).

GG203 compares the pullback with an independent reference: `jax.vjp` of the
primal's own code (the function underneath a ``custom_vjp``; for a NumPy
rule, its primal when JAX traces it, if need be with its ``numpy`` calls
run as ``jax.numpy``, and only where that is shown to be the primal's own
function around the input: :mod:`gradguard.checker.checks._reference`). GG204 checks second order for JAX-native rules: JAX
differentiates the user's ``fwd`` and ``bwd`` to get Hessian-vector
products, so a ``bwd`` that is right to first order can still give wrong
second derivatives (a ``stop_gradient`` on a residual, a residual from a
wrong inner derivative). The check compares JAX's derivative of the pullback
with finite differences of the pullback (batched on a GPU and for large
inputs, see :mod:`gradguard.checker.checks._jax`).
"""

from __future__ import annotations

import math
import warnings
from itertools import chain, islice
from typing import Any, Callable, Iterable

import numpy as np

from gradguard.checker import tolerances
from gradguard.checker.case import Case, ReplayDraws, is_finite_tree
from gradguard.checker.compare import close_at_leaf_scale, first_mismatch, mismatches, where
from gradguard.checker.checks._jax import (
    batched_directional,
    first_line,
    jax_ready,
    second_order_compiled,
    use_batched_fd,
)
from gradguard.checker.checks._kinks import (KinkExcuse, coupled_kink, float64_copies, kink_excuse, kink_problem,
                                             rounded_output)
from gradguard.checker.checks._reference import REFERENCE, TRANSLATED, _random_directions, _vjp_of, jax_tangents, same_around
from gradguard.checker.checks._vjp import (
    _primal,
    adjoint_tangents,
    as_rule_sees,
    convention,
    dot_test,
    element_sides,
    first_adjoint,
    finite_difference,
    has_complex,
    named_place,
    other_convention,
    tangent_pairs,
)
from gradguard.checker.checks.registry import CHECKS, Problem, Skip, check
from gradguard.checker.checks.second_order import (_moved, _unit_step, discontinuous_at_x, fd_directional, kinked,
                                                   kinked_where_not_finite, numpy_second_order, pullback_at, pullback_in_stairs,
                                                   across_primal_stairs)
from gradguard.checker.inputs import apart, show, show_apart
from gradguard.checker.kinks import contracted, defined_side, derivative_range, finer_steps_admit, unit_vector
from gradguard.checker.trees import copy_tree, inner, is_narrow_float, leaves, tree_map, widened
from gradguard.engines import fd

__all__: list[str] = []  # GG203's reference (jax_tangents) lives in checker.checks._reference

_NO_SECOND_ORDER = "gg204_unavailable"  # RuleSpec.extra key: why JAX cannot differentiate the pullback (asked once)
_REVERSE_ONLY = "gg204_reverse_only"  # ... and why its forward mode cannot (GG204 then takes reverse over reverse)


def _conj(tree: Any) -> Any:
    return tree_map(lambda x: np.conj(x) if x is not None and np.iscomplexobj(x) else x, tree)


def _reference_adjoint(case: Case, ybar: Any) -> tuple[Any, ...]:
    """The reference as an adjoint for the real inner product: ``conj(vjp(conj(ybar)))`` (JAX transposes)."""
    ref = _conj(jax_tangents(case, _conj(copy_tree(ybar))))
    return tuple(r if i in case.diff_positions else None for i, r in enumerate(ref))


def _difference_direction(case: Case, got: tuple[Any, ...], want: tuple[Any, ...]) -> tuple[Any, ...]:
    """``got - want`` per argument (None elsewhere), scaled to a largest element of 1: the direction along which
    the two differ the most. Unscaled, a difference of 2e-5 moves the primal so little that finite differences
    along it fall under the absolute tolerance and cannot tell the rule from the reference."""
    out = []
    for i in range(case.nargs):
        if i not in case.diff_positions:
            out.append(None)
            continue
        arg = np.asarray(case.args[i])
        a = np.zeros(arg.shape) if got[i] is None else np.asarray(got[i])
        b = np.zeros(arg.shape) if want[i] is None else np.asarray(want[i])
        d = np.broadcast_to(a - b, arg.shape)
        d = d if np.iscomplexobj(arg) else np.real(d)
        d = np.asarray(d, dtype=arg.dtype)
        out.append(d)
    largest = max((float(np.max(np.abs(d), initial=0.0)) for d in out if d is not None), default=0.0)
    if largest > 0 and np.isfinite(largest):
        out = [None if d is None else np.asarray(d / largest, dtype=d.dtype) for d in out]
    return tuple(None if d is None else (d if isinstance(case.args[i], np.ndarray) else d.item()) for i, d in enumerate(out))


@check(
    "GG203",
    family="numeric",
    title="pullback disagrees with the JAX reference gradient",
    given="""
        @jax.custom_vjp
        def softplus(x):
            return jnp.logaddexp(0.0, x)
    """,
    broken="""
        softplus.defvjp(lambda x: (softplus(x), x), lambda x, g: (g * jax.nn.sigmoid(-x),))   # sign slip
        softplus_rule = jax_rule(softplus, arrays(shape=(4,)))
    """,
    fixed="""
        softplus.defvjp(lambda x: (softplus(x), x), lambda x, g: (g * jax.nn.sigmoid(x),))
        softplus_rule = jax_rule(softplus, arrays(shape=(4,)))
    """,
)
def pullback_matches_jax(case: Case) -> Iterable[Problem]:
    """The pullback must agree with an independent reference: ``jax.vjp`` of the primal's own ``jax.numpy``
    code, for the same random cotangent, element by element (the dtype's tolerance). For a ``jax.custom_vjp``
    the reference is JAX's derivative of the function underneath the decorator, which is what the rule
    replaces; for a NumPy rule it is used when JAX can trace the primal (if need be with its NumPy calls run as
    ``jax.numpy``) and only where that is shown to be the same function around the input: its values agree
    with the primal's at the input and at nearby points along random directions and along the direction in
    which the two gradients differ (``jnp.linalg.eigvalsh`` symmetrises its argument where
    ``np.linalg.eigvalsh`` reads one triangle: equal at a symmetric input, different around it). Otherwise the
    input is skipped with the reason. Unlike finite differences the reference has no truncation error, so it
    also judges rules whose primal cannot be differenced well; but it never overrules them: where finite
    differences of the primal contradict the reference (the custom rule exists because JAX's own derivative of
    the primal is unstable there, or JAX differentiates the code to something else, like 0 through a floor),
    no finding is made, and GG201 judges the rule against the primal. Where entries meet at a kink (a max with
    ties), the tangent is also judged along a direction as a whole, as in GG201."""
    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    conv = convention(case)
    y, ybar, mine = first_adjoint(case, conv)
    if not is_finite_tree([mine[i] for i in case.diff_positions]):
        return  # GG206 judges non-finite tangents
    ref = _reference_adjoint(case, ybar)
    if not is_finite_tree([ref[i] for i in case.diff_positions]):
        # no reference to judge by: said, not counted as judged (s2fft's mwss sampling, whose jnp.where JAX
        # differentiates through an untaken branch to NaN at every input, listed GG203 as run)
        raise Skip("JAX's derivative of the primal is not finite at any input drawn (a jnp.where or a mask whose untaken "
                   "branch JAX differentiates to inf or NaN is the usual cause), so there is no reference to judge by; "
                   "GG201 judges the rule against finite differences",
                   here="JAX's derivative of the primal is not finite here, so there is no reference to judge by")
    bad = first_mismatch(tangent_pairs(case, mine, ref), close_at_leaf_scale(case.tol))
    if bad is None:
        return
    if has_complex(case, y) and first_mismatch(tangent_pairs(case, adjoint_tangents(case, case.pair()[1], ybar, other_convention(conv)), ref),
                                               close_at_leaf_scale(case.tol)) is None:
        return  # right in the other conjugation convention: GG205's finding
    v = _difference_direction(case, mine, ref)
    at_kink = _KinkMemo(case, ybar)  # each differing element's kink probe, run once for both uses below
    sides = ""
    in_float64 = False  # the reference was taken again on float64 copies of narrow-float arguments
    at_edge = False  # no difference along v stays in the primal's domain: each element is judged from its side
    if _moves(v):
        verdict, how = _along(case, ybar, mine, ref, v)
        if verdict == "refuted":
            # The difference may reach across a kink of the primal at some element (leaky relu at 0, which
            # Hypothesis draws often): then along the differing elements away from kinks alone.
            off = _off_kinks(case, mine, ref, v, at_kink)
            if off is not None:
                verdict, how = _along(case, ybar, mine, ref, off)
                v = off
        if verdict == "refuted":
            # Finite differences of the user's own primal contradict the reference (JAX's derivative of the
            # primal is unstable here, which is why custom rules exist; lsqfitgp's Matern kernel at s = 2.6e-42,
            # whose sqrt(s) JAX differentiates through): the secondary oracle never overrules them. GG201
            # judges the rule against them.
            return
        if verdict in ("both", "confirmed") and (wide_ref := _float64_reference(case, ybar)) is not None:
            # Finite differences cannot tell the two apart, and the reference rounds in the arguments' narrow float
            # too (JAX's float16 sigmoid derivative at x = -5.9 is 0, (1 + e^5.9)**2 = 1.3e5 overflowing float16;
            # it is 0.0027): JAX's derivative of the primal on float64 copies of them judges the rule instead
            if verdict == "both" and first_mismatch(tangent_pairs(case, mine, wide_ref), close_at_leaf_scale(case.tol)) is None:
                return
            if _refuted_in_float64(case, ybar, mine, wide_ref, v):
                # Finite differences of the primal on the float64 copies contradict JAX there, where the narrow
                # float's could not or agreed with it within their wider error: chainer's softplus, written
                # fmax(bx, 0) + log1p(exp(-fabs(bx))), which JAX differentiates to -0.5 at x = 0 in float64 too (its
                # derivative is 0.5); MyGrad's overlapping max pool at an all-zero float16 input, where the rule and
                # JAX pick different subgradients among the ties and float16's central differences across the kink
                # (0.099 steps) fell within their error of JAX's. The reference never overrules them.
                return
            if verdict == "both":
                ref, in_float64 = wide_ref, True
        at_edge = verdict == "no differences"
        if verdict == "confirmed":  # what was established: along the rule's tangent minus JAX's, not element by element
            sides = f" {how} along the difference of the two agree with JAX."
    pending = (m for m in _mismatches(case, mine, ref) if not at_kink(*m))
    bad = next(pending, None)
    if bad is not None and sides and not at_edge:
        bad, sides = _blamed(case, ybar, mine, ref, v, bad, sides, at_kink)
    if bad is not None and at_edge:
        # Two elements on the edge of the domain whose differences have opposite signs: no direction of both
        # stays inside it. Each differing element is judged along its own unit vector, from its defined side.
        judged = ((m, _judged_at_edge(case, ybar, *m)) for m in chain([bad], pending))
        bad, verdict = next(((m, j) for m, j in judged if j != "reference refuted"), (None, None))
        if bad is None:
            return  # one-sided differences contradict JAX at every differing element
        if verdict == "reference confirmed":
            sides = f" {ONE_SIDED} along this element agree with JAX."
    if bad is None:
        # Every difference sits at a kink (relu at 0), where any value between the one-sided derivatives is
        # valid element by element; where entries meet at the kink (a max with ties) the tangent is also
        # judged along a direction as a whole, as GG201 judges it.
        coupled = coupled_kink(case, ybar, conv, case.tol)
        if coupled is not None:
            yield kink_problem(case, coupled, from_reference=True)
        return
    if _moves(v) and not at_edge and (excused := _kink_along(case, ybar, v, mine, ref, conv)) is not None:
        # Not differentiable at x along the difference (ties of a max that couple entries across windows), and the
        # rule's answer is one a subgradient could give there, as GG201 judges it: JAX's is another.
        if excused.problem is not None:
            yield excused.problem
        return
    if not sides and _reference_isolated(case, ybar, bad):
        # JAX differentiates a branch the primal's code takes at x alone (jaxoplanet's s0s1s2 on the line b + r = 1,
        # the where(b + r == 1, ...) case whose formula JAX differentiates in r alone), and finite differences, which
        # cannot tell the two apart here, confirm nothing: the reference all around x is the rule's value at x.
        raise Skip(_ISOLATED_WHY, here=_ISOLATED_WHY)
    if case.rule.kind != "jax" and _moves(v):
        same_around(case, case.rule.extra[REFERENCE], mine, (v,))  # along the direction the two differ most
    i, idx, got, want = bad
    place = where(i, idx)
    got, want = as_rule_sees(got, conv), as_rule_sees(want, conv)
    if case.rule.kind == "jax":
        from gradguard.checker.jax_rules import custom_kind

        reference = f"jax.vjp of the function underneath the {custom_kind(case.rule)}"
    elif getattr(case.rule.extra.get(REFERENCE), TRANSLATED, False):
        reference = "jax.vjp of the primal, its NumPy calls run as jax.numpy"
    else:
        reference = "jax.vjp of the primal"
    if in_float64:
        reference += ", on float64 copies of its narrower float arguments"
    want_text, got_text = show_apart(want, got)
    yield Problem(
        message=(
            f"the pullback of {case.rule.name} disagrees with the JAX reference gradient ({reference}): "
            f"cotangent for {named_place(case, i, idx)}: expected {want_text} (JAX), got {got_text}.{sides}"
        ),
        location=place,
        expected=want_text,
        actual=got_text,
        fix=(
            f"Re-derive the tangent for {named_place(case, i)}: the primal's own jax.numpy code differentiates to the "
            "expected value at this input. If the rule is meant to differ from it (a deliberately different "
            "derivative), leave GG203 out for this rule with ignore=[\"GG203\"] in its declaration."
            + _approximation_hint(want, got, case.tol)
        ),
    )


_ISOLATED_WHY = (
    "JAX's derivative of the primal at this input is not the one it has all around it: its code takes a branch here "
    "alone (a jnp.where on an equality), whose formula JAX differentiates, and at nearby points on every side the "
    "reference is the pullback's value here; finite differences of the primal did not tell the two apart, so there "
    "is no reference to judge by (GG201 judges the rule against the primal)"
)
ISOLATION_POWERS = (1 / 2, 2 / 3)  # steps eps**p of the largest moving argument (at least 1): 1.5e-8, 3.7e-11 in float64
ISOLATION_SHARE = 0.1  # the reference at each nearby point is within this share of the gap from the rule's value at x


def _reference_isolated(case: Case, ybar: Any, bad: tuple[Any, ...]) -> bool:
    """Whether JAX's reference at ``x`` is an isolated value of the element ``bad`` (argument, index, the rule's
    adjoint there, JAX's): at ``x +- t u``, for two seeded random directions ``u`` and steps ``t`` of eps**(1/2) and
    eps**(2/3) of the largest moving argument (at least 1; the narrowest float's eps among them), the reference is
    always far nearer the rule's value at ``x`` than JAX's value at ``x`` is (within ``ISOLATION_SHARE`` of their
    gap). Then the primal's code is another function at ``x`` alone (a branch taken on an equality): jaxoplanet's
    s0s1s2 at b + r = 1 exactly, where JAX gives 0.0615 for the b-tangent, 0.0912 at 1e-9 away on either side (the
    rule's 0.0912503, which the central differences approach only as sqrt(h), and the reference too: 0.0755 at 1e-5
    away, for another cotangent). A rule wrong around ``x`` too differs from the reference there as well, and is
    reported; a kink's sides differ from each other, and cannot both be near the rule's value."""
    chosen = case.rule.extra.get(REFERENCE)
    i, idx, got, want = bad
    if chosen is None or np.iscomplexobj(got) or np.iscomplexobj(want):
        return False
    got, want = float(np.real(got)), float(np.real(want))
    gap = abs(got - want)
    if not (gap > 0 and math.isfinite(gap)):
        return False
    args = case.fresh()
    eps = max((float(np.finfo(np.asarray(args[j]).dtype).eps) for j in case.diff_positions
               if np.asarray(args[j]).dtype.kind in "fc"), default=float(np.finfo(np.float64).eps))
    cotangent = _conj(copy_tree(ybar))
    for u in islice(_random_directions(case), 2):
        u = tuple(d if j in case.diff_positions else None for j, d in enumerate(u))
        base = _unit_step(args, u)
        for power in ISOLATION_POWERS:
            step = base * eps ** power
            for t in (step, -step):
                near = Case(case.rule, _moved(args, u, t), ReplayDraws([]))
                try:
                    ref = _conj(_vjp_of(near, chosen, copy_tree(cotangent)))
                    value = float(np.real(np.asarray(ref[i])[idx] if np.ndim(ref[i]) else ref[i]))
                except Exception:  # noqa: BLE001 - JAX or the primal refuses the nearby point: nothing established
                    return False
                if not (math.isfinite(value) and abs(value - got) <= ISOLATION_SHARE * gap):
                    return False
    return True


def _approximation_hint(want: Any, got: Any, tol: Any) -> str:
    """GG201's sentence for two real values that agree to within a primal's own accuracy: JAX differentiates the
    primal's code, a series or a quadrature as written, so its derivative carries the approximation's error too."""
    if np.iscomplexobj(want) or np.iscomplexobj(got) or np.ndim(want) or np.ndim(got):
        return ""  # a complex value, or not one value: no sentence
    return tolerances.approximation_hint(float(want), float(got), tol)


ONE_SIDED = "One-sided finite differences of the primal, from the side where it is defined,"  # GG203 names its evidence
KINK_CANDIDATES = 16  # GG203 tries this many differing elements for kinks before reporting the first


def _blamed(case: Case, ybar: Any, mine: tuple[Any, ...], ref: tuple[Any, ...], v: tuple[Any, ...],
            bad: tuple[Any, ...], sides: str, at_kink: Any) -> tuple[tuple[Any, ...], str]:
    """The mismatch to report where the rule and JAX differ in several arguments and finite differences confirmed
    JAX along the difference of all of them: one in the first argument whose own part of the difference they
    confirm, said as such. A probe's type-3 NUFFT, whose function calls another custom_vjp with a wrong cotangent
    for its points, drew "cotangent for argument 0 (x): expected 1.2e-14 (JAX)" where JAX was the one wrong in x,
    and the confirmation came from the strengths' part of the difference, where the rule is wrong."""
    firsts: dict[int, tuple[Any, ...]] = {}
    for m in _mismatches(case, mine, ref):
        if not at_kink(*m):
            firsts.setdefault(m[0], m)
    if len(firsts) < 2:
        return bad, sides
    for i, m in firsts.items():
        part = tuple(d if j == i or d is None else np.zeros_like(d) for j, d in enumerate(v))
        if not _moves(part):
            continue
        verdict, how = _along(case, ybar, mine, ref, part)
        if verdict == "confirmed":
            return m, f" {how} along the difference of the two in the tangent for {named_place(case, i)} agree with JAX."
    return bad, sides


def _moves(v: tuple[Any, ...]) -> bool:
    return any(d is not None and np.any(np.asarray(d) != 0) for d in v)


def _along(case: Case, ybar: Any, mine: tuple[Any, ...], ref: tuple[Any, ...], v: tuple[Any, ...]) -> tuple[str, str]:
    """What finite differences of ``<ybar, primal>`` along ``v`` say of the rule's tangents (``mine``) and JAX's
    (``ref``), and how they were taken: "refuted" (they contradict JAX), "confirmed" (they agree with JAX and not
    with the rule), "both" (they agree with both), or "no differences" (none stay in the primal's domain)."""
    lhs = finite_difference(case, ybar, v)
    measured = None if lhs is None else (float(lhs.value), lhs.error, "Finite differences of the primal")
    if measured is None and (edge := defined_side(contracted(_primal(case), ybar), case.args, v)) is not None:
        # x on the edge of the primal's domain (central steps leave it): the side where it is defined
        measured = (*edge, ONE_SIDED)
    if measured is None:
        return "no differences", ""
    value, error, how = measured
    tol = case.tol
    scale_mine = sum(float(np.sum(np.abs(np.asarray(a)) * np.abs(np.asarray(b)))) for a, b in zip(mine, v) if a is not None and b is not None)
    scale_ref = sum(float(np.sum(np.abs(np.asarray(a)) * np.abs(np.asarray(b)))) for a, b in zip(ref, v) if a is not None and b is not None)
    if not tolerances.close(value, inner(ref, v), tol, scale=scale_ref, fd_error=error):
        return "refuted", how
    if not tolerances.close(value, inner(mine, v), tol, scale=scale_mine, fd_error=error):
        return "confirmed", how
    return "both", how


def _float64_reference(case: Case, ybar: Any) -> tuple[Any, ...] | None:
    """JAX's reference (as an adjoint, like `_reference_adjoint`) taken again on float64 (complex128) copies of the
    differentiable arguments that are a narrower float and of the cotangent; None where no argument is narrow, no
    reference was chosen, JAX cannot take it there or it is not finite."""
    narrow = {i for i in case.diff_positions if is_narrow_float(case.args[i])}
    chosen = case.rule.extra.get(REFERENCE)
    if not narrow or chosen is None:
        return None
    wide = Case(case.rule, tuple(widened(a) if i in narrow else a for i, a in enumerate(case.fresh())), ReplayDraws([]))
    try:
        ref = _conj(_vjp_of(wide, chosen, tree_map(widened, _conj(copy_tree(ybar)))))
    except Exception:  # noqa: BLE001 - JAX refuses it at float64 (or the primal does): no second reference
        return None
    ref = tuple(r if i in case.diff_positions else None for i, r in enumerate(ref))
    return ref if is_finite_tree([ref[i] for i in case.diff_positions]) else None


def _kink_along(case: Case, ybar: Any, v: tuple[Any, ...], mine: tuple[Any, ...], ref: tuple[Any, ...], conv: str) -> Any:
    """Where finite differences of the primal along ``v`` (the difference of the rule's tangents ``mine`` and JAX's
    ``ref``) disagree with the rule: a :class:`KinkExcuse` where the primal has no derivative at ``x`` for JAX's to
    be, else None. First GG201's kink exemptions (`kink_excuse`) along ``v``: the rule's answer is one a (Clarke)
    subgradient could give there (JAXtronomy's hyp2f1 at f = 0 exactly, whose ones branch is flat along z while
    every direction that moves f sees the series, slope 1/3). Then, for real arguments, a kink along every element
    the two differ at: MyGrad's overlapping max pool at 0 and -0 tied across two windows gives an entry the cotangent
    of one window and not the other, a piece no move of that entry alone reaches and not between the one-sided
    derivatives along the difference either (the primal is neither convex nor concave there); JAX shares each
    window's cotangent among its ties, and central differences along the difference read the average of the sides,
    JAX's value ("expected 0.13224 (JAX), got -2.59476", in float64). GG201 judges the rule there, coupled kinks
    included (the excuse's ``problem``); a difference at an element where the primal is smooth stays a finding."""
    if rounded_output(case):
        return None  # finite differences of a bfloat16 output establish no kink: JAX's reference stands
    narrow = {j for j in case.diff_positions if is_narrow_float(case.args[j])}
    lhs = finite_difference(case, ybar, v)
    if lhs is None:
        return None
    whole = dot_test(lhs, mine, v)
    if whole.agrees(case.tol) and not narrow:
        return None
    # (a narrow float's differences may agree with both, and its reference was taken again in float64: the kinks
    # below are asked then too)
    excused = None if whole.agrees(case.tol) else kink_excuse(case, ybar, v, mine, whole, conv, case.tol)
    if excused is not None or has_complex(case, ybar):
        return excused
    # Coupled ties: the rule's piece need not lie between the one-sided derivatives along the difference, nor along
    # its own element (the primal is neither convex nor concave there), yet no derivative exists at x for JAX's to
    # be. Where every element the two differ at has a kink along itself (its one-sided derivatives differ), GG201
    # judges the rule against the primal, coupled kinks included; a difference at an element where the primal is
    # smooth stays GG203's finding.
    differing = list(islice(mismatches(tangent_pairs(case, mine, ref), close_at_leaf_scale(case.tol, nonfinite="nan")),
                            KINK_CANDIDATES + 1))
    if not differing or len(differing) > KINK_CANDIDATES:
        return None
    wide = None  # float64 copies of narrow arguments: float16's steps (0.1, then finer) may round back onto a tie
    for i, idx, got, want in differing:
        k = int(np.ravel_multi_index(idx, np.shape(case.args[i]))) if np.ndim(case.args[i]) else 0
        value = float(np.real(got))
        scale = max(abs(value), abs(float(np.real(want))))
        sides = element_sides(case, ybar, i, k, value, scale, case.tol)
        if (sides is None or not sides.kink) and i in narrow:
            wide = float64_copies(case) if wide is None else wide
            sides = None if wide is None else element_sides(wide, tree_map(widened, ybar), i, k, value, scale, wide.tol)
        if sides is None or not sides.kink:
            return None
    coupled = coupled_kink(case, ybar, conv, case.tol)
    return KinkExcuse("element kinks", None if coupled is None else kink_problem(case, coupled, from_reference=True))


def _refuted_in_float64(case: Case, ybar: Any, mine: tuple[Any, ...], wide_ref: tuple[Any, ...], v: tuple[Any, ...]) -> bool:
    """Whether finite differences of the primal on float64 copies of the narrow-float arguments, along ``v``,
    contradict JAX's float64 reference ``wide_ref`` (`_along`'s "refuted", at float64's tolerance). False where the
    primal on the copies does not compute in float64 (a primal that fixes its own precision differences no
    better there) or the differences cannot be taken."""
    narrow = {i for i in case.diff_positions if is_narrow_float(case.args[i])}
    wide = float64_copies(case)
    if wide is None:
        return False
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wide_mine = tuple(widened(t) if i in narrow else t for i, t in enumerate(mine))
            wide_v = tuple(widened(d) if i in narrow else d for i, d in enumerate(v))
            return _along(wide, tree_map(widened, ybar), wide_mine, wide_ref, wide_v)[0] == "refuted"
    except Exception:  # noqa: BLE001 - the primal refuses float64 arguments: nothing established
        return False


def _off_kinks(case: Case, mine: tuple[Any, ...], ref: tuple[Any, ...], v: tuple[Any, ...],
               at_kink: Callable[..., bool]) -> tuple[Any, ...] | None:
    """``v`` with the differing elements at a kink of the primal (``at_kink``: `_at_kink_element`) set to 0, where
    some are and some other element still moves; else None."""
    kinked = [(i, idx) for i, idx, got, want in _mismatches(case, mine, ref) if at_kink(i, idx, got, want)]
    if not kinked:
        return None
    out = list(v)
    for i, idx in kinked:
        if isinstance(out[i], np.ndarray):
            out[i] = out[i].copy() if out[i] is v[i] else out[i]
            out[i][idx] = 0
        elif out[i] is not None:
            out[i] = 0.0 * out[i]
    return tuple(out) if _moves(tuple(out)) else None


def _mismatches(case: Case, got: tuple[Any, ...], want: tuple[Any, ...]) -> Iterable[tuple[int, tuple[int, ...], Any, Any]]:
    """Every element outside the tolerance, up to ``KINK_CANDIDATES``: at the scale of every element of the
    argument's finite elements, where equal values and two NaNs agree and no other non-finite pair does
    (``nonfinite="nan"``; the first test above reads every non-finite pair as agreeing)."""
    return islice(mismatches(tangent_pairs(case, got, want), close_at_leaf_scale(case.tol, nonfinite="nan")), KINK_CANDIDATES)


def _judged_at_edge(case: Case, ybar: Any, i: int, idx: tuple[int, ...], got: Any, want: Any) -> str | None:
    """What one-sided finite differences of ``<ybar, primal>`` along element ``idx`` of argument ``i``, from the
    side where the primal is defined (`kinks.defined_side`), say of the pullback's ``got`` and JAX's ``want``
    (adjoint form): "reference refuted" where they contradict JAX, "reference confirmed" where they agree with
    JAX and not with the rule, None where they are not available (both sides defined, complex) or settle
    nothing."""
    arg = case.args[i]
    if np.iscomplexobj(arg) or np.iscomplexobj(got) or np.iscomplexobj(want):
        return None
    k = int(np.ravel_multi_index(idx, np.shape(arg))) if np.ndim(arg) else 0
    unit = tuple(unit_vector(arg, k) if j == i else None for j in range(case.nargs))
    edge = defined_side(contracted(_primal(case), ybar), case.args, unit)
    if edge is None:
        return None
    value, error = edge
    got, want = float(np.real(got)), float(np.real(want))
    if not tolerances.close(value, want, case.tol, scale=abs(want), fd_error=error):
        return "reference refuted"
    if not tolerances.close(value, got, case.tol, scale=abs(got), fd_error=error):
        return "reference confirmed"
    return None


class _KinkMemo:
    """`_at_kink_element` for one input's differing elements, each probed once: the retry away from kinks and the
    element-by-element judgement ask about the same elements."""

    def __init__(self, case: Case, ybar: Any) -> None:
        self.case, self.ybar = case, ybar
        self.known: dict[tuple[int, tuple[int, ...]], bool] = {}

    def __call__(self, i: int, idx: tuple[int, ...], got: Any, want: Any) -> bool:
        key = (i, tuple(idx))
        if key not in self.known:
            self.known[key] = _at_kink_element(self.case, self.ybar, i, idx, got, want)
        return self.known[key]


def _at_kink_element(case: Case, ybar: Any, i: int, idx: tuple[int, ...], got: Any, want: Any) -> bool:
    """True where the primal has a kink along element ``idx`` of argument ``i`` and ``got`` (adjoint form)
    lies between the one-sided derivatives of ``<ybar, primal>`` there."""
    arg = case.args[i]
    k = int(np.ravel_multi_index(idx, np.shape(arg))) if np.ndim(arg) else 0
    value = float(np.real(got))
    sides = element_sides(case, ybar, i, k, value, max(abs(value), abs(float(np.real(want)))), case.tol)
    # Smooth along this element (no kink), there is nothing to excuse the difference.
    return sides is not None and sides.kink and sides.admits(value)


# -- GG204 ------------------------------------------------------------------------------------------
def _pullback_fd(case: Case, ybar: Any, u: tuple[Any, ...], w: tuple[Any, ...]) -> fd.Derivative | None:
    """``d/dt <w, pullback at (x + t u)(ybar)>`` by finite differences; None where they cannot be taken."""
    if use_batched_fd(sum(int(np.size(case.args[i])) for i in case.diff_positions)):
        covector = [w[i] for i in case.diff_positions]
        try:
            return batched_directional(case.rule.jax_fn, case.fresh(), u, covector, cotangent=ybar, mode="pullback")
        except Exception:  # noqa: BLE001 - a probe failed or did not trace: the sequential path decides
            pass
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d = fd.directional(pullback_at(case, ybar), case.fresh(), u, w, complex_step=False)
    except (ValueError, ArithmeticError, TypeError):
        return None
    if not (np.all(np.isfinite(d.value)) and math.isfinite(d.error)):
        return None
    return d


def _pullback_unresolved(case: Case, ybar: Any, u: tuple[Any, ...], w: tuple[Any, ...], rhs: float, scale: float) -> bool:
    """Whether finite differences of ``<w, pullback at (x + t u)(ybar)>`` establish no value JAX's ``rhs``
    contradicts: its one-sided derivatives at finer steps (down to where rounding allows) hold ``rhs`` between
    them (a pole of the pullback near ``x``, as log|det| has beside a singular matrix, makes the first
    table's steps too coarse), or its slopes grow at every step float64 can take
    (:func:`gradguard.checker.kinks.unresolved`: the pullback jumps at ``x``, a pseudo-inverse where the rank
    drops, or has a pole nearer than any step), or some element of the pullback or of the rule's output jumps at
    ``x`` alone (:func:`discontinuous_at_x`: LAPACK's signs of singular vectors that flip at ``x`` and nowhere around it),
    or the pullback has a kink at ``x`` along ``u`` (:func:`kinked`, as the NumPy second order and GG705 ask): jax-md's
    safe_acos one float64 step inside its clip at -1 + 1e-7, where along u the pullback runs on as acos' on one side
    (JAX's 1.71248e10, mpmath's too) and is the clamp's constant on the other, and central differences gave 77770.1."""
    pulled = pullback_at(case, ybar)
    return (finer_steps_admit(contracted(pulled, w), case.args, u, rhs, case.tol, scale)
            or discontinuous_at_x(case, pulled, u) or kinked(pulled, case.fresh(), u, w))


@check(
    "GG204",
    family="numeric",
    title="second order wrong (grad of the pullback)",
    compares_calls=True,
    kinds=("jax", "numpy"),
    given="""
        @jax.custom_vjp
        def softplus(x):
            return jnp.logaddexp(0.0, x)
    """,
    broken="""
        def softplus_fwd(x):
            return softplus(x), jax.nn.sigmoid(jax.lax.stop_gradient(x))   # residual cut off from x

        softplus.defvjp(softplus_fwd, lambda s, g: (g * s,))     # first order right, Hessian zero

        softplus_rule = jax_rule(softplus, arrays(shape=(4,)))
    """,
    fixed="""
        def softplus_fwd(x):
            return softplus(x), jax.nn.sigmoid(x)

        softplus.defvjp(softplus_fwd, lambda s, g: (g * s,))

        softplus_rule = jax_rule(softplus, arrays(shape=(4,)))
    """,
)
def second_order(case: Case) -> Iterable[Problem]:
    """JAX gets second derivatives of a ``custom_vjp`` (``jax.hessian``, grad of grad, Hessian-vector products)
    by differentiating the user's ``fwd`` and ``bwd`` themselves. A ``bwd`` that is right to first order can
    still give wrong second derivatives: a residual wrapped in ``stop_gradient``, rounded, cast to an integer
    or computed on the host (NumPy, callbacks) is a constant to JAX. For a random cotangent ``ybar``, direction
    ``u`` and covector ``w``, the check compares JAX's ``d/dt <w, pullback at (x + t u)(ybar)>`` (jvp of vjp)
    with finite differences of the pullback itself; where JAX's is not finite (NaN) and finite differences establish a
    derivative the pullback has there, that is reported too (as a warning where the pullback kinks or jumps at ``x``
    along an element whose derivative is NaN). NumPy rules get the same test from the tape, which runs
    their rrule and pullback on traced arrays (checks/second_order.py), also in the cotangent. Where JAX's forward mode
cannot enter the rule (``fwd`` calls the custom_vjp function itself) the derivative is taken by reverse over reverse,
as grad of grad takes it; a rule neither mode can differentiate is skipped with JAX's reasons: it fails loudly, not
silently."""
    if case.rule.kind == "numpy":  # the tape differentiates NumPy rules: checks/second_order.py
        yield from numpy_second_order(case)
        return
    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    if _NO_SECOND_ORDER in case.rule.run_state:
        raise Skip(case.rule.run_state[_NO_SECOND_ORDER])
    jax_ready(case)
    y, pb = case.pair()
    ybar = case.cotangent_like(y)
    if not is_finite_tree([case.tangents(pb, copy_tree(ybar))[i] for i in case.diff_positions]):
        return  # GG206 judges non-finite tangents
    u = case.direction("direction")
    w = case.direction("covector")
    jax_d, forward, reverse = _jax_second_order(case, ybar, u)
    if forward is not None:
        case.rule.run_state[_REVERSE_ONLY] = forward
    if jax_d is None:
        reason = (
            f"JAX cannot differentiate the pullback of {case.rule.name}, so it has no second order to judge "
            f"(forward mode over it raises {case.rule.run_state[_REVERSE_ONLY]}; reverse mode raises {reverse})"
        )
        case.rule.run_state[_NO_SECOND_ORDER] = reason
        raise Skip(reason)
    if not is_finite_tree([jax_d[i] for i in case.diff_positions]):
        problem = _not_finite_second_order(case, ybar, u, w, jax_d)
        if problem is not None:
            yield problem
        return
    lhs = _pullback_fd(case, ybar, u, w)
    if lhs is None:
        raise Skip("finite differences of the pullback failed at every input drawn (it raised or was not finite near them)",
                   here="finite differences of the pullback failed here (it raised or was not finite near the input)")
    tol = case.tol
    rhs = inner(w, jax_d)
    scale = sum(float(np.sum(np.abs(np.asarray(a)) * np.abs(np.asarray(b)))) for a, b in zip(leaves(w), leaves(jax_d)) if a is not None and b is not None)
    if tolerances.close(float(lhs.value), rhs, tol, scale=scale, fd_error=lhs.error):
        return
    if _pullback_unresolved(case, ybar, u, w, rhs, scale):
        return  # finite differences at finer steps agree, or the pullback jumps or has a pole nearer than any step
    if math.isfinite(rhs) and (pullback_in_stairs(pullback_at(case, ybar), case.fresh(), u, w, lhs, rhs, tol, scale)
                               or across_primal_stairs(case, pullback_at(case, ybar), u, w, rhs, tol, scale)):
        return  # the pullback reads a forward solved to a tolerance: finite differences read one stair's slope
    if _right_in_float64(case, ybar, u, w):
        return  # the narrow float's rounding: the same rule on float64 copies has the second order JAX gives
    location = None
    fd_text, jax_text = show_apart(float(lhs.value), rhs)
    expected, actual = fd_text, jax_text
    what = (f": along a random direction u, d/dt <w, pullback at (x + t u)(ybar)> = {fd_text} by finite differences of "
            f"the pullback, but JAX's derivative of the pullback ({_route(case)}) gives {jax_text}, "
            f"{apart(float(lhs.value), rhs, tolerances.allowed(float(lhs.value), rhs, tol, scale=scale, fd_error=lhs.error))}.")
    if len(case.diff_positions) > 1:
        for i in case.diff_positions:
            wi = tuple(w[j] if j == i else None for j in range(case.nargs))
            part = _pullback_fd(case, ybar, u, wi)
            ri = inner(wi, jax_d)
            si = float(np.sum(np.abs(np.asarray(w[i])) * np.abs(np.asarray(jax_d[i]))))
            if part is not None and not tolerances.close(float(part.value), ri, tol, scale=si, fd_error=part.error):
                location = f"argument {i}"
                label = named_place(case, i)
                part_text, ri_text = expected, actual = show_apart(float(part.value), ri)
                # the numbers of that tangent alone: the whole sum pairs every argument's tangent with w
                what = (f" in the tangent for {label}: along a random direction u (every argument moving), "
                        f"d/dt <w_{i}, pullback at (x + t u)(ybar) for {label}> = {part_text} by finite differences "
                        f"of the pullback, but JAX's derivative of the pullback ({_route(case)}) "
                        f"gives {ri_text}, {apart(float(part.value), ri, tolerances.allowed(float(part.value), ri, tol, scale=si, fd_error=part.error))} "
                        f"(over every argument's tangent: {fd_text} against {jax_text}).")
                break
    yield Problem(
        message=f"the second order of {case.rule.name} is wrong{what}",
        location=location,
        expected=expected,
        actual=actual,
        fix=_second_order_fix(case),
    )


def _jax_second_order(case: Case, ybar: Any, u: tuple[Any, ...]) -> tuple[Any, str | None, str | None]:
    """JAX's derivative of the pullback along ``u`` at the case's input, and why each mode refused: ``(derivative or
    None, forward mode's refusal, reverse mode's refusal)``. Forward over reverse, compiled and else eager, unless the
    rule is known to refuse forward mode (``_REVERSE_ONLY``); then reverse over reverse, compiled and else eager.
    jaxls's differentiable solves: fwd calls the custom_vjp itself, which JAX's forward mode refuses (eagerly and under
    jit) while grad of grad goes through and is right."""
    from gradguard.engines import jax_engine

    nondiff = tuple(i for i in range(case.nargs) if i not in case.diff_positions)
    jax_d, forward = None, None
    if _REVERSE_ONLY not in case.rule.run_state:
        try:
            jax_d = second_order_compiled(case, ybar, u)
        except Exception:  # noqa: BLE001 - not jittable (GG601's business): JAX's eager trace decides
            jax_d = None
        if jax_d is None:
            try:
                jax_d = jax_engine.second_order_vjp(case.rule.jax_fn, case.fresh(), ybar, u, nondiff=nondiff)
            except Exception as exc:  # noqa: BLE001 - forward mode refused: reverse over reverse may still enter
                forward = first_line(exc)
    if jax_d is not None:
        return jax_d, None, None
    try:
        try:
            return second_order_compiled(case, ybar, u, reverse=True), forward, None
        except Exception:  # noqa: BLE001 - not jittable: JAX's eager trace decides
            return (jax_engine.second_order_vjp_reverse(case.rule.jax_fn, case.fresh(), ybar, u, nondiff=nondiff),
                    forward, None)
    except Exception as exc:  # noqa: BLE001 - JAX refuses loudly (no silent wrong number)
        return None, forward, first_line(exc)


def _right_in_float64(case: Case, ybar: Any, u: tuple[Any, ...], w: tuple[Any, ...]) -> bool:
    """For a rule on a narrower float: whether, on float64 copies of those arguments (of the cotangent and the
    directions too), finite differences of the pullback agree with JAX's derivative of it, or establish nothing it
    contradicts. Then a float32 disagreement is the float's rounding, not the rule's: jax-fluids' THINC interface
    centre at a volume fraction of 1e-4 takes exp(2e-7) - 1, whose float32 rounding makes the pullback a staircase
    (finite differences 439 where float64's and JAX's agree on -3.3e11). False where no argument is narrow, the
    primal does not compute in float64 on the copies, or JAX or the differences fail there."""
    wide = float64_copies(case)
    if wide is None:
        return False
    narrow = {i for i in case.diff_positions if is_narrow_float(case.args[i])}
    wide_u = tuple(widened(d) if i in narrow else d for i, d in enumerate(u))
    wide_w = tuple(widened(d) if i in narrow else d for i, d in enumerate(w))
    wide_ybar = tree_map(widened, copy_tree(ybar))
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jax_d = _jax_second_order(wide, wide_ybar, wide_u)[0]  # as the check took it at the input
            if jax_d is None or not is_finite_tree([jax_d[i] for i in wide.diff_positions]):
                return False
            lhs = _pullback_fd(wide, wide_ybar, wide_u, wide_w)
            if lhs is None:
                return False
            rhs = inner(wide_w, jax_d)
            scale = sum(float(np.sum(np.abs(np.asarray(a)) * np.abs(np.asarray(b))))
                        for a, b in zip(leaves(wide_w), leaves(jax_d)) if a is not None and b is not None)
            return (tolerances.close(float(lhs.value), rhs, wide.tol, scale=scale, fd_error=lhs.error)
                    or _pullback_unresolved(wide, wide_ybar, wide_u, wide_w, rhs, scale))
    except Exception:  # noqa: BLE001 - the rule refuses the float64 copies: nothing established
        return False


def _is_custom_jvp(case: Case) -> bool:
    from gradguard.checker.jax_rules import CUSTOM_JVP

    return bool(case.rule.extra.get(CUSTOM_JVP))


def _route(case: Case) -> str:
    """How JAX differentiates the rule's pullback: through fwd and bwd (custom_vjp), or through the jvp rule; in
    reverse over reverse where its forward mode raises on the rule."""
    if _REVERSE_ONLY in case.rule.run_state:
        return "reverse over reverse, through fwd and bwd: JAX's forward mode raises on this rule"
    return ("jvp of vjp, through the jvp rule, which JAX differentiates again" if _is_custom_jvp(case)
            else "jvp of vjp, through fwd and bwd")


def _second_order_fix(case: Case) -> str:
    if _is_custom_jvp(case):
        return ("JAX differentiates the jvp rule again to get second derivatives: keep its tangent a differentiable "
                "function of the primals with the right slope in every branch (no stop_gradient, rounding, integer "
                "casts or host NumPy on what it computes from them; a jnp.where whose branch has another slope than "
                "the function there gives that slope); if a piece must be opaque, give it its own custom_jvp.")
    return ("JAX differentiates fwd and bwd to get second derivatives: keep the residuals differentiable functions "
            "of the inputs (no stop_gradient, rounding, integer casts or host NumPy on them) and compute bwd with "
            "jax.numpy; if a residual must be opaque, give the function that computes it its own custom_vjp.")


def _not_finite_fix(case: Case) -> str:
    return _NOT_FINITE_FIX.format(what="the jvp rule again" if _is_custom_jvp(case) else "fwd and bwd",
                                  where="it" if _is_custom_jvp(case) else "them")


_NOT_FINITE_FIX = (
    "JAX differentiates {what} to get second derivatives, and one operation in {where} has no finite derivative at "
    "this input though the pullback it computes has one: a square root, division or logarithm at 0 inside jnp.where "
    "(whose branch not taken still passes its NaN on to the derivative), or an eigendecomposition with repeated "
    "eigenvalues. Keep the branch not taken finite (the double-where trick), or give that piece a custom_jvp with its "
    "finite limit."
)


def _not_finite_second_order(case: Case, ybar: Any, u: tuple[Any, ...], w: tuple[Any, ...],
                             jax_d: tuple[Any, ...]) -> Problem | None:
    """GG204 where JAX's derivative of the pullback along ``u`` is not finite: an error only where the pullback has a
    derivative there that finite differences establish (a confirmed table, and one-sided slopes at every finer step
    that agree with it: no kink, jump or pole at ``x``). PennyLane's fidelity of two density matrices at I and I:
    its bwd calls eigh, whose derivative JAX computes as NaN where eigenvalues repeat, while the pullback it returns
    moves smoothly (central differences 2.99999975 and 2.9999999975 at steps 1e-3 and 1e-4). Where the pullback has no
    derivative at ``x`` (a norm's gradient at 0) there is nothing the NaN is wrong about, and no verdict."""
    pulled = pullback_at(case, ybar)
    lhs = fd_directional(pulled, case.fresh(), u, w, confirm=True)
    if lhs is None:
        return None
    value = float(lhs.value)
    tol = case.tol
    scale = abs(value)
    if not tolerances.resolves(value, lhs.error, tol):
        return None  # the table's error bound is too wide to call a derivative established
    g = contracted(pulled, w)
    sides = derivative_range(g, case.args, u, tol, scale)
    if sides is None or not all(tolerances.close(s, value, tol, scale=scale) for s in sides):
        return None  # finer steps do not bear a single slope out: a kink, a jump or a pole at x
    if kinked(pulled, case.fresh(), u, w) or discontinuous_at_x(case, pulled, u):
        return None
    where_not_finite = [i for i in case.diff_positions if not is_finite_tree([jax_d[i]])]
    location = f"argument {where_not_finite[0]}" if len(case.diff_positions) > 1 and len(where_not_finite) == 1 else None
    part = f" in the tangent for {named_place(case, where_not_finite[0])}" if location else ""
    rhs = inner(w, jax_d)
    if _jumps_where_not_finite(case, ybar, u, w, jax_d):
        # x |x| / 2 with its pullback's |x| taken as sqrt(x**2), at x = 0 where u does not move: along u the pullback
        # is smooth, but JAX multiplies the element's 0/0 derivative by u's 0 and the whole product is NaN. The rule
        # has no second derivative at that element to be right or wrong about (GG705 judges PyTorch's alike).
        return Problem(
            message=(f"JAX's derivative of the pullback of {case.rule.name} gives {show(rhs)} at an input where the "
                     "pullback has no derivative that finite differences resolve (with every output and every entry "
                     "weighted by 1, the pullback at x + t u, or at x moved along an element where JAX's derivative is "
                     "not finite, jumps or kinks at t = 0 at the steps they take): along a random direction u, d/dt "
                     f"<w, pullback at (x + t u)(ybar)> = {show(value)} by finite differences of the pullback, along "
                     "which it shows no jump, but JAX's derivative of the "
                     f"pullback ({_route(case)}), taken through the entries without a derivative, is not finite."),
            location=location,
            expected=show(value),
            actual=show(rhs),
            fix=_not_finite_fix(case),
            severity="warning",
        )
    return Problem(
        message=(f"the second order of {case.rule.name} is not finite{part}: along a random direction u, d/dt <w, "
                 f"pullback at (x + t u)(ybar)> = {show(value)} by finite differences of the pullback (the one-sided "
                 f"slopes at every finer step agree: the pullback is smooth here), but JAX's derivative of the pullback "
                 f"({_route(case)}) gives {show(rhs)}, so a program that differentiates this gradient "
                 "(a Hessian-vector product, jax.hessian) gets it too."),
        location=location,
        expected=show(value),
        actual=show(rhs),
        fix=_not_finite_fix(case),
    )


def _jumps_where_not_finite(case: Case, ybar: Any, u: tuple[Any, ...], w: tuple[Any, ...],
                            jax_d: tuple[Any, ...]) -> bool:
    """Whether the pullback for a cotangent of ones, read with a covector of ones, kinks or jumps at x along ``u`` or
    along an input element where JAX's derivative of the pullback is not finite (:func:`kinked_where_not_finite`)."""
    ones = tree_map(lambda y: None if y is None else np.ones_like(np.asarray(y)), ybar)
    every = tree_map(lambda c: None if c is None else np.ones_like(np.asarray(c)), w)
    not_finite = []
    for i in case.diff_positions:
        d = np.asarray(jax_d[i])
        if d.shape == np.shape(case.args[i]) and d.dtype.kind in "fc":
            not_finite += [(i, int(k)) for k in np.flatnonzero(~np.isfinite(d))]
    return kinked_where_not_finite(pullback_at(case, ones), case.fresh(), u, every, not_finite)


# The runner loads JAX (on the requested device) before timing a rule's checks when one of these is selected.
for _id in ("GG203", "GG204"):
    CHECKS[_id].extra["needs_jax"] = True
