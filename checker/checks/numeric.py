"""Numeric checks (GG2xx): are the pullback's numbers right?

GG201 is the dot-product test against finite differences of the *primal* (the
ground truth; GG102 reports a forward pass that differs from it)::

    d/dt <ybar, primal(x + t v)> at t = 0   ==   <pullback(ybar), v>

for a random cotangent ``ybar`` and direction ``v``, with ``<., .>`` the real
inner product of :func:`checker.trees.inner`. It costs a few dozen primal
evaluations whatever the input size; only when it fails do we spend more,
localising the error to one argument and then, by bisection over the
direction's support, to one element.

Complex numbers have two pullback conventions. NumPy rrules follow ChainRules':
the pullback is the adjoint of the derivative for the real inner product.
``jax.custom_vjp`` rules follow JAX's transpose convention,
``pullback(ybar) = conj(adjoint(conj(ybar)))``. :func:`adjoint_tangents` turns
either into the adjoint, so the comparisons are written once; GG205 asks it for
the convention the rule does *not* claim to see whether that one matches.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np
from hypothesis import strategies as st

from checker import tolerances
from checker.case import Case, is_finite_tree, scale_tree
from checker.checks.registry import Problem, Skip, check
from checker.inputs import show
from checker.trees import copy_tree, inner, leaves, tree_map
from engines import fd

__all__ = ["CHAINRULES", "JAX", "convention", "other_convention", "adjoint_tangents", "finite_difference"]

CHAINRULES, JAX = "ChainRules", "JAX"
LOCALISE_MAX_SIZE = 4096  # arguments up to this size are localised to one element (bisection: about log2(n) FD calls)
NONFINITE_CANDIDATES = 4  # GG206 tries this many non-finite elements before giving up on an input

_NO_FD = (
    "finite differences of the primal failed at every input drawn (it raised or was not finite near them): "
    "the specs may reach outside the function's domain, or its output differs from the rule's (see GG102)"
)
_RULES = {CHAINRULES: "NumPy rrules", JAX: "jax.custom_vjp rules"}
_CONVENTION_TEXT = {
    CHAINRULES: "ChainRules' convention (the pullback is the adjoint for the real inner product: "
    "for a holomorphic f it returns conj(f'(z)) * ybar)",
    JAX: "JAX's convention (pullback(ybar) = conj(adjoint(conj(ybar))): for a holomorphic f it returns f'(z) * ybar)",
}


# -- conventions ----------------------------------------------------------------------------------
def convention(case: Case) -> str:
    """The convention a rule's pullback must follow: JAX's for custom_vjp rules, ChainRules' otherwise."""
    return JAX if case.rule.kind == "jax" else CHAINRULES


def other_convention(name: str) -> str:
    return CHAINRULES if name == JAX else JAX


def _conj(tree: Any) -> Any:
    return tree_map(lambda x: np.conj(x) if x is not None and np.iscomplexobj(x) else x, tree)


def adjoint_tangents(case: Case, pb: Callable[..., Any], ybar: Any, conv: str) -> tuple[Any, ...]:
    """The pullback's answer for ``ybar``, read as the adjoint for :func:`checker.trees.inner`.

    Under ChainRules' convention that is ``pullback(ybar)``; under JAX's it is
    ``conj(pullback(conj(ybar)))``. The pullback gets a copy of ``ybar``.
    """
    if conv == CHAINRULES:
        return case.tangents(pb, copy_tree(ybar))
    return _conj(case.tangents(pb, _conj(copy_tree(ybar))))


def _as_rule_sees(value: Any, conv: str) -> Any:
    """An adjoint-form scalar in the rule's own convention (what its pullback returned or should have)."""
    if conv == JAX and np.iscomplexobj(value):
        value = np.conj(value)
    return value.item() if isinstance(value, (np.ndarray, np.generic)) else value


def _owner(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def numeric_tangents(case: Case, tangents: tuple[Any, ...]) -> bool:
    """True when every differentiable argument's tangent is None or a number array (GG105 reports the rest)."""
    for i in case.diff_positions:
        if tangents[i] is None:
            continue
        try:
            if np.asarray(tangents[i]).dtype.kind not in "biufc":
                return False
        except (TypeError, ValueError):
            return False
    return True


def _has_complex(case: Case, y: Any) -> bool:
    values = [case.args[i] for i in case.diff_positions] + leaves(y)
    return any(x is not None and np.iscomplexobj(x) for x in values)


# -- finite differences of the primal -------------------------------------------------------------
def _numpy(x: Any) -> Any:
    if x is None or isinstance(x, (np.ndarray, np.generic, float, complex, int)):
        return x
    return np.asarray(x) if hasattr(x, "__array__") else x


def _primal(case: Case) -> Callable[..., Any]:
    primal = case.rule.primal
    return lambda *args: tree_map(_numpy, primal(*args))


# Inputs larger than this get a shallower Richardson table (and no complex-step attempt): each level costs
# two evaluations of the primal, and on large inputs the evaluations, not the accuracy, are the limit.
LARGE_INPUT = 2**14
_LARGE_FD = {"levels": 3, "complex_step": False}


def finite_difference(case: Case, cotangent: Any, directions: tuple[Any, ...]) -> fd.Derivative | None:
    """``d/dt <cotangent, primal(x + t v)>`` at 0, or None where the primal fails near ``x`` (its domain's edge)."""
    large = sum(np.size(a) for a in case.args if isinstance(a, np.ndarray)) > LARGE_INPUT
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d = fd.directional(_primal(case), case.fresh(), directions, cotangent, **(_LARGE_FD if large else {}))
    except (ValueError, ArithmeticError):
        return None
    if not (np.all(np.isfinite(d.value)) and math.isfinite(d.error)):
        return None
    return d


def _shifted(args: tuple[Any, ...], directions: tuple[Any, ...], t: float) -> list[Any]:
    out = []
    for a, v in zip(args, directions):
        if v is None:
            out.append(copy_tree(a))
            continue
        arr = np.asarray(a)
        wide = np.complex128 if np.iscomplexobj(arr) else np.float64
        moved = (arr.astype(wide) + t * np.asarray(v).astype(wide)).astype(arr.dtype)
        out.append(moved if isinstance(a, np.ndarray) else (moved[()] if isinstance(a, np.generic) else moved.item()))
    return out


def _one_sided(case: Case, cotangent: Any, directions: tuple[Any, ...]) -> tuple[float, float] | None:
    """Second-order one-sided derivatives (left, right) of ``<cotangent, primal(x + t v)>`` at 0."""
    eps = max(np.finfo(np.asarray(case.args[i]).dtype).eps for i, v in enumerate(directions) if v is not None)
    h = float(eps) ** (1 / 3)
    f = _primal(case)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g = {k: inner(cotangent, f(*_shifted(case.args, directions, k * h))) for k in (-2, -1, 0, 1, 2)}
    except Exception:  # noqa: BLE001 - the primal left its domain: no verdict from this probe
        return None
    if not all(math.isfinite(v) for v in g.values()):
        return None
    right = (-3 * g[0] + 4 * g[1] - g[2]) / (2 * h)
    left = (3 * g[0] - 4 * g[-1] + g[-2]) / (2 * h)
    return left, right


# -- the dot-product test -------------------------------------------------------------------------
def _abs_inner(a: Any, b: Any) -> float:
    pairs = [(x, y) for x, y in zip(leaves(a), leaves(b)) if x is not None and y is not None]
    return math.fsum(float(np.sum(np.abs(np.asarray(x)) * np.abs(np.asarray(y)))) for x, y in pairs)


@dataclass
class _Dot:
    lhs: fd.Derivative  # <ybar, J v> by finite differences
    rhs: float  # <pullback(ybar), v>
    scale: float

    def agrees(self, tol: tolerances.Tolerance) -> bool:
        return tolerances.close(float(self.lhs.value), self.rhs, tol, scale=self.scale, fd_error=self.lhs.error)


def _dot(lhs: fd.Derivative, tangents: Any, directions: Any) -> _Dot:
    return _Dot(lhs, inner(tangents, directions), _abs_inner(tangents, directions))


def _at_kink(case: Case, cotangent: Any, directions: tuple[Any, ...], dot: _Dot, tol: tolerances.Tolerance) -> bool:
    """True where the primal is not differentiable along ``v`` (relu at 0) and the rule's value lies
    between the one-sided derivatives: any such value is a valid (sub)gradient there."""
    sides = _one_sided(case, cotangent, directions)
    if sides is None:
        return False
    lo, hi = sorted(sides)
    return lo <= dot.rhs <= hi or any(tolerances.close(s, dot.rhs, tol, scale=dot.scale) for s in (lo, hi))


def _only(case: Case, i: int, value: Any) -> tuple[Any, ...]:
    return tuple(value if j == i else None for j in range(case.nargs))


def _masked(v: Any, lo: int, hi: int) -> Any:
    arr = np.array(v, copy=True)
    flat = arr.reshape(-1)
    flat[:lo] = 0
    flat[hi:] = 0
    return arr


def _unit(arg: Any, k: int, scale: complex = 1.0) -> Any:
    if not isinstance(arg, np.ndarray):
        return complex(scale) if np.iscomplexobj(arg) or isinstance(scale, complex) else float(scale)
    unit = np.zeros(arg.shape, dtype=arg.dtype)
    unit.reshape(-1)[k] = scale
    return unit


def element_derivative(case: Case, cotangent: Any, i: int, k: int) -> tuple[complex | float, float] | None:
    """Element ``k`` (flat) of the adjoint of argument ``i`` by finite differences: (value, error), or None."""
    arg = case.args[i]
    re = finite_difference(case, cotangent, _only(case, i, _unit(arg, k)))
    if re is None:
        return None
    if not np.iscomplexobj(arg):
        return float(re.value), re.error
    im = finite_difference(case, cotangent, _only(case, i, _unit(arg, k, 1j)))
    if im is None:
        return None
    return complex(float(re.value), float(im.value)), re.error + im.error


def _element(tangent: Any, arg: Any, k: int) -> Any:
    if tangent is None:
        return 0.0
    value = np.asarray(tangent).reshape(-1)[k]
    return value.item() if hasattr(value, "item") else value


def _index(arg: Any, k: int) -> tuple[int, ...]:
    shape = np.shape(arg)
    return tuple(int(j) for j in np.unravel_index(k, shape)) if shape else ()


def _where(i: int, idx: tuple[int, ...] | None) -> str:
    return f"argument {i}" + (f" at {list(idx)}" if idx else "")


@dataclass
class _Wrong:
    arg: int
    dot: _Dot  # the test restricted to this argument
    idx: tuple[int, ...] | None = None  # the element, when localised
    expected: Any = None  # in the rule's own convention
    got: Any = None


def _bisect(case: Case, ybar: Any, v: tuple[Any, ...], tangents: tuple[Any, ...], i: int, tol: tolerances.Tolerance) -> int | None:
    """The first flat index of argument ``i`` whose tangent is wrong, or None where FD fails.

    The direction's support is halved each step: the lower half when the dot-product test restricted to it
    fails, the upper half otherwise, so ``log2(n)`` finite differences find one wrong element of ``n``."""
    lo, hi = 0, int(np.size(case.args[i]))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        d = _masked(v[i], lo, mid)
        lhs = finite_difference(case, ybar, _only(case, i, d))
        if lhs is None:
            return None
        if _dot(lhs, _masked(tangents[i], lo, mid) if tangents[i] is not None else None, d).agrees(tol):
            lo = mid
        else:
            hi = mid
    return lo


def _localise(case: Case, ybar: Any, v: tuple[Any, ...], tangents: tuple[Any, ...], whole: _Dot, conv: str) -> list[_Wrong]:
    tol = case.tol
    moving = [i for i, d in enumerate(v) if d is not None]
    wrong: list[_Wrong] = []
    for i in moving:
        if len(moving) == 1:
            dot = whole
        else:
            lhs = finite_difference(case, ybar, _only(case, i, v[i]))
            if lhs is None:
                continue
            dot = _dot(lhs, tangents[i], v[i])
            if dot.agrees(tol):
                continue
        w = _Wrong(i, dot)
        wrong.append(w)
        size = int(np.size(case.args[i]))
        if size > LOCALISE_MAX_SIZE:
            continue
        k = 0 if size == 1 else _bisect(case, ybar, v, tangents, i, tol)
        if k is None:
            continue
        found = element_derivative(case, ybar, i, k)
        if found is None:
            continue
        expected, error = found
        got = _element(tangents[i], case.args[i], k)
        if not tolerances.close(expected, got, tol, fd_error=error):
            w.idx, w.expected, w.got = _index(case.args[i], k), _as_rule_sees(expected, conv), _as_rule_sees(got, conv)
    return wrong


@check(
    "GG201",
    family="numeric",
    title="pullback disagrees with finite differences",
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
    not differentiable (a kink, like relu at 0), any value between the one-sided derivatives is accepted; where
    finite differences cannot be taken (the edge of a restricted domain), the input is not judged."""
    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    y, pb = case.pair()
    ybar = case.cotangent_like(y)
    v = case.direction()
    conv = convention(case)
    tangents = adjoint_tangents(case, pb, ybar, conv)
    if not numeric_tangents(case, tangents) or not is_finite_tree([tangents[i] for i in case.diff_positions]):
        return  # GG105 judges non-numeric tangents, GG206 non-finite ones
    lhs = finite_difference(case, ybar, v)
    if lhs is None:
        raise Skip(_NO_FD)
    whole = _dot(lhs, tangents, v)
    tol = case.tol
    if whole.agrees(tol) or _at_kink(case, ybar, v, whole, tol):
        return
    hint = ""
    if _has_complex(case, y):
        other = adjoint_tangents(case, case.pair()[1], ybar, other_convention(conv))
        if _dot(lhs, other, v).agrees(tol):
            hint = f" The pullback matches {_owner(other_convention(conv))} conjugation convention instead: see GG205."
    name = case.rule.name
    test = f"<ybar, J v> = {show(float(lhs.value))} by finite differences, <pullback(ybar), v> = {show(whole.rhs)}"
    wrong = _localise(case, ybar, v, tangents, whole, conv) or [_Wrong(-1, whole)]
    for w in wrong:
        if w.arg < 0:
            message = f"the pullback of {name} disagrees with finite differences of the primal: {test}."
            location, expected, actual = None, show(float(lhs.value)), show(whole.rhs)
        elif w.idx is not None:
            where = _where(w.arg, w.idx)
            message = (
                f"the pullback of {name} disagrees with finite differences of the primal: cotangent for {where}: "
                f"expected {show(w.expected)} (finite differences), got {show(w.got)} (dot-product test: {test})."
            )
            location, expected, actual = where, show(w.expected), show(w.got)
        else:
            where = _where(w.arg, None)
            message = (
                f"the pullback of {name} disagrees with finite differences of the primal: the cotangent for {where} "
                f"is wrong: along the drawn direction, <ybar, J v> = {show(float(w.dot.lhs.value))} by finite "
                f"differences, but the pullback gives {show(w.dot.rhs)}."
            )
            location, expected, actual = where, show(float(w.dot.lhs.value)), show(w.dot.rhs)
        yield Problem(
            message=message,
            location=location,
            expected=expected,
            actual=actual,
            fix=(
                f"Re-derive the tangent{f' for argument {w.arg}' if w.arg >= 0 else 's'} at this input (the smallest "
                "failing one found): a wrong sign, a missing chain-rule factor, a missing transpose or a wrong sum "
                "over broadcast axes are the usual causes." + hint
            ),
        )


# -- GG202 ----------------------------------------------------------------------------------------
ALPHAS = st.one_of(
    st.sampled_from([2.0, -1.0, 0.5]),
    st.floats(-4.0, 4.0, allow_nan=False).filter(lambda a: abs(a) >= 0.25 and abs(a - 1) >= 0.25),
)


def _tangents_for(case: Case, ybar: Any) -> tuple[Any, ...]:
    """The pullback's tangents for ``ybar`` from a fresh forward call (reentrancy is GG403's business)."""
    _, pb = case.pair()
    return case.tangents(pb, copy_tree(ybar))


def _add(a: Any, b: Any) -> Any:
    return tree_map(lambda x, y: None if x is None and y is None else (0 if x is None else x) + (0 if y is None else y), a, b)


def first_mismatch(case: Case, got: tuple[Any, ...], want: tuple[Any, ...]) -> tuple[int, tuple[int, ...], Any, Any] | None:
    """``(argument, index, got, want)`` of the first tangent element outside the tolerance, or None.

    ``None`` tangents count as zeros; the bound is ``atol + rtol * max|.|`` over the whole tangent, so
    cancellation inside a pullback is not mistaken for a wrong value; equal infinities and NaN against NaN
    agree (GG206 judges non-finite tangents)."""
    tol = case.tol
    if not (numeric_tangents(case, got) and numeric_tangents(case, want)):
        return None  # GG105 reports tangents that are not numbers
    for i in case.diff_positions:
        shape = np.shape(case.args[i])
        a = np.zeros(shape) if got[i] is None else np.asarray(got[i])
        b = np.zeros(shape) if want[i] is None else np.asarray(want[i])
        a, b = np.broadcast_arrays(a, b)
        with np.errstate(all="ignore"):
            scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)))
            bad = ~((a == b) | (np.abs(a - b) <= tol.atol + tol.rtol * scale) | (np.isnan(a) & np.isnan(b)))
        if np.any(bad):
            idx = tuple(int(j) for j in np.argwhere(bad)[0])
            return i, idx, a[idx].item(), b[idx].item()
    return None


@check(
    "GG202",
    family="numeric",
    title="pullback is not linear in the cotangent",
    broken="""
        @rrule(addone_, arrays(shape=(3,)), mutates=(0,))
        def addone_rrule(a):
            y = addone_(a)
            return y, lambda ybar: (np.ones(a.shape),)           # right only for ybar == 1
    """,
    fixed="""
        @rrule(addone_, arrays(shape=(3,)), mutates=(0,))
        def addone_rrule(a):
            y = addone_(a)
            return y, lambda ybar: (np.full(a.shape, ybar),)
    """,
)
def pullback_linear(case: Case) -> Iterable[Problem]:
    """A pullback is a linear map of the cotangent: ``pullback(alpha * ybar) == alpha * pullback(ybar)`` and
    ``pullback(ybar1 + ybar2) == pullback(ybar1) + pullback(ybar2)``. A pullback returning ``ones(n)`` instead
    of ``full(n, ybar)`` passes every test that uses a unit cotangent (scalar losses, ``gradcheck`` on
    ``sum``) and is wrong in every program where the output is scaled, squared or used twice. This check
    needs no finite differences, so it also covers rules whose primal cannot be differenced."""
    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    y, _ = case.pair()
    ybar = case.cotangent_like(y)
    alpha = case.draw(ALPHAS, "alpha")
    ybar2 = case.cotangent_like(y, "second cotangent")
    # One combined test on the passing path (three pullbacks); the failing path says which law broke.
    base, other = _tangents_for(case, ybar), _tangents_for(case, ybar2)
    combined = _tangents_for(case, _add(scale_tree(ybar, alpha), ybar2))
    bad = first_mismatch(case, combined, _add(scale_tree(base, alpha), other))
    if bad is None:
        return
    a = show(alpha)
    law = f"pullback({a} * ybar1 + ybar2) = {{got}}, but {a} * pullback(ybar1) + pullback(ybar2) = {{want}}"
    fix = "Make the pullback a linear function of ybar: no constant terms, no nonlinear use of ybar (abs, square, sign)."
    scaled = first_mismatch(case, _tangents_for(case, scale_tree(ybar, alpha)), scale_tree(base, alpha))
    if scaled is not None:
        bad = scaled
        law = f"pullback({a} * ybar) = {{got}}, but {a} * pullback(ybar) = {{want}}"
        fix = (
            "Scale every tangent by the cotangent: np.full(x.shape, ybar) or ybar * dydx, never np.ones(x.shape) "
            "(that is right only when ybar == 1), and no nonlinear use of ybar (abs, square, sign)."
        )
    else:
        summed = first_mismatch(case, _tangents_for(case, _add(ybar, ybar2)), _add(base, other))
        if summed is not None:
            bad = summed
            law = "pullback(ybar1 + ybar2) = {got}, but pullback(ybar1) + pullback(ybar2) = {want}"
    i, idx, got, want = bad
    yield Problem(
        message=(
            f"the pullback of {case.rule.name} is not linear in the cotangent: for {_where(i, idx)}, "
            + law.format(got=show(got), want=show(want))
            + "."
        ),
        location=_where(i, idx),
        expected=show(want),
        actual=show(got),
        fix=fix,
    )


# -- GG205 ----------------------------------------------------------------------------------------
@check(
    "GG205",
    family="numeric",
    title="complex inputs: wrong conjugation convention",
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
    y, pb = case.pair()
    if not case.diff_positions or not _has_complex(case, y):
        raise Skip("the rule has no complex argument or output")
    ybar = case.cotangent_like(y)
    v = case.direction()
    conv = convention(case)
    tangents = adjoint_tangents(case, pb, ybar, conv)
    if not numeric_tangents(case, tangents) or not is_finite_tree([tangents[i] for i in case.diff_positions]):
        return
    lhs = finite_difference(case, ybar, v)
    if lhs is None:
        raise Skip(_NO_FD)
    tol = case.tol
    mine = _dot(lhs, tangents, v)
    if mine.agrees(tol):
        return
    other = other_convention(conv)
    theirs = _dot(lhs, adjoint_tangents(case, case.pair()[1], ybar, other), v)
    if not theirs.agrees(tol):
        return  # wrong in both conventions: GG201's finding
    yield Problem(
        message=(
            f"the pullback of {case.rule.name} follows {_owner(other)} conjugation convention, but {_RULES[conv]} "
            f"must follow {_CONVENTION_TEXT[conv]}: <ybar, J v> = {show(float(lhs.value))} by finite differences, "
            f"the pullback gives {show(mine.rhs)}, and read in {_owner(other)} convention it gives {show(theirs.rhs)}, "
            "which matches: a conjugate is missing or extra."
        ),
        expected=show(float(lhs.value)),
        actual=show(mine.rhs),
        fix=(
            "Return np.conj(dfdz) * ybar for a holomorphic f (and 2 * z * ybar for |z|**2), i.e. the adjoint."
            if conv == CHAINRULES
            else "Return dfdz * ybar for a holomorphic f, without conj (JAX transposes; it does not take adjoints)."
        ),
    )


# -- GG206 ----------------------------------------------------------------------------------------
@check(
    "GG206",
    family="numeric",
    title="NaN/Inf tangent where the primal and the true derivative are finite",
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
    """Where the primal output is finite and its derivative is finite (finite differences along the element
    say so), every tangent must be finite. ``x / abs(x)``, ``1 / sqrt(x)`` factors or ``inf * 0`` in a pullback
    give NaN or Inf at points such as 0 where the function itself is smooth; one NaN then poisons a whole
    model's gradient. Hypothesis tries the simplest input (zeros) first, so such points are found reliably
    whenever the argument specs allow them."""
    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    y, pb = case.pair()
    if not is_finite_tree(y):
        return
    ybar = case.cotangent_like(y)
    conv = convention(case)
    tangents = adjoint_tangents(case, pb, ybar, conv)
    if not numeric_tangents(case, tangents):
        return
    tried = 0
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
            where = _where(i, _index(case.args[i], int(k)))
            value = _as_rule_sees(t.reshape(-1)[k].item(), conv)
            yield Problem(
                message=(
                    f"the pullback of {case.rule.name} returned {show(value)} in the tangent for {where}, where the "
                    f"primal is finite and so is its derivative (finite differences give "
                    f"{show(_as_rule_sees(found[0], conv))}); {bad.size} element(s) of this tangent are not finite."
                ),
                location=where,
                expected=show(_as_rule_sees(found[0], conv)),
                actual=show(value),
                fix=(
                    "Guard the singular point instead of dividing by zero: compute the limit there, e.g. "
                    "np.where(x == 0, 0.0, x / np.where(x == 0, 1.0, np.abs(x))) (the inner where keeps NaN out), "
                    "or use a formula that is finite there."
                ),
            )
            return
        if tried >= NONFINITE_CANDIDATES:
            return
