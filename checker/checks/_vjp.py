"""The machinery the numeric checks share: complex conventions, finite differences of the primal,
the dot-product test and the localisation of a wrong tangent to one argument and one element.

GG201 (numeric.py) is the dot-product test against finite differences of the *primal*::

    d/dt <ybar, primal(x + t v)> at t = 0   ==   <pullback(ybar), v>

for a random cotangent ``ybar`` and direction ``v``, with ``<., .>`` the real
inner product of :func:`gradguard.checker.trees.inner`. It costs a few dozen primal
evaluations whatever the input size; only when it fails is more spent,
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

import functools
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from gradguard.checker import kinks, tolerances
from gradguard.checker.specs import complex_convention_of
from gradguard.checker.case import UNKNOWN, Case
from gradguard.checker.checks._state import argument_labels
from gradguard.checker.compare import where
from gradguard.checker.kinks import unit_vector
from gradguard.checker.trees import abs_inner, copy_tree, inner, leaves, tree_map
from gradguard.engines import fd

__all__ = [
    "CONVENTION_TEXT",
    "DotTest",
    "ElementSides",
    "LOCALISE_MAX_SIZE",
    "NONFINITE_CANDIDATES",
    "NO_FD",
    "RULES_BY_CONVENTION",
    "WrongTangent",
    "adjoint_tangents",
    "as_rule_sees",
    "at_kink",
    "convention",
    "derivative_range",
    "dot_test",
    "element_derivative",
    "element_index",
    "element_sides",
    "finite_difference",
    "first_adjoint",
    "has_complex",
    "localise",
    "named_place",
    "near_kinks",
    "numeric_tangents",
    "one_sided",
    "only_argument",
    "other_convention",
    "owner",
    "tangent_pairs",
    "unit_vector",
]

CHAINRULES, JAX = "ChainRules", "JAX"
LOCALISE_MAX_SIZE = 4096  # arguments up to this size are localised to one element (bisection: about log2(n) FD calls)
NONFINITE_CANDIDATES = 4  # GG206 tries this many non-finite elements before giving up on an input

NO_FD = (
    "finite differences of the primal failed at every input drawn (it raised or was not finite near them): "
    "the specs may reach outside the function's domain, or its output differs from the rule's (see GG102)"
)
RULES_BY_CONVENTION = {CHAINRULES: "NumPy rrules", JAX: "jax.custom_vjp rules"}  # by default (complex_convention=)
CONVENTION_TEXT = {
    CHAINRULES: "ChainRules' convention (the pullback is the adjoint for the real inner product: "
    "for a holomorphic f it returns conj(f'(z)) * ybar)",
    JAX: "JAX's convention (pullback(ybar) = conj(adjoint(conj(ybar))): for a holomorphic f it returns f'(z) * ybar)",
}


# -- conventions ----------------------------------------------------------------------------------
def convention(case: Case) -> str:
    """The convention a rule's pullback must follow: JAX's for custom_vjp rules; for the others the one the
    rule declares (``complex_convention=``), ChainRules' by default."""
    return JAX if complex_convention_of(case.rule) == "jax" else CHAINRULES


def named_place(case: Case, i: int, index: Any = None) -> str:
    """``"argument 3 (high) at [0]"``: :func:`~gradguard.checker.compare.where` of the argument's label
    (`argument_labels`), as the report's failing input names it (a finding's ``location`` keeps the position alone)."""
    return where(argument_labels(case)[i], index)


def other_convention(name: str) -> str:
    return CHAINRULES if name == JAX else JAX


def _conj(tree: Any) -> Any:
    return tree_map(lambda x: np.conj(x) if x is not None and np.iscomplexobj(x) else x, tree)


def adjoint_tangents(case: Case, pb: Callable[..., Any], ybar: Any, conv: str) -> tuple[Any, ...]:
    """The pullback's answer for ``ybar``, read as the adjoint for :func:`gradguard.checker.trees.inner`.

    Under ChainRules' convention that is ``pullback(ybar)``; under JAX's it is
    ``conj(pullback(conj(ybar)))``. The pullback gets a copy of ``ybar``.
    """
    if conv == CHAINRULES:
        return case.tangents(pb, copy_tree(ybar))
    return _conj(case.tangents(pb, _conj(copy_tree(ybar))))


def first_adjoint(case: Case, conv: str) -> tuple[Any, Any, tuple[Any, ...]]:
    """``(y, ybar, adjoint)`` from the case's first call and first pullback (shared by the checks of one input).

    Under JAX's convention the pullback must see ``conj(ybar)``; that is ``ybar`` itself when the cotangent
    is real, so the shared call serves. A complex cotangent under JAX's convention gets a call of its own.
    """
    pulled, tangents = case.first_tangents()
    y, ybar = pulled.call.output, pulled.ybar
    if conv == CHAINRULES:
        return y, ybar, tangents
    if not any(x is not None and np.iscomplexobj(x) for x in leaves(ybar)):
        return y, ybar, _conj(tangents)
    return y, ybar, adjoint_tangents(case, case.pair()[1], ybar, conv)


def as_rule_sees(value: Any, conv: str) -> Any:
    """An adjoint-form scalar in the rule's own convention (what its pullback returned or should have)."""
    if conv == JAX and np.iscomplexobj(value):
        value = np.conj(value)
    return value.item() if isinstance(value, (np.ndarray, np.generic)) else value


def owner(name: str) -> str:
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


def tangent_pairs(case: Case, got: tuple[Any, ...], want: tuple[Any, ...]) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """``(argument, got, want)`` for each differentiable argument, for :func:`gradguard.checker.compare.first_mismatch`:
    ``None`` tangents count as zeros of the argument's shape, and the two are broadcast to one shape. Nothing
    where either side holds a tangent that is not a number (GG105 reports those)."""
    if not (numeric_tangents(case, got) and numeric_tangents(case, want)):
        return
    for i in case.diff_positions:
        shape = np.shape(case.args[i])
        a = np.zeros(shape) if got[i] is None else np.asarray(got[i])
        b = np.zeros(shape) if want[i] is None else np.asarray(want[i])
        a, b = np.broadcast_arrays(a, b)
        yield i, a, b


def has_complex(case: Case, y: Any) -> bool:
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


def finite_difference(case: Case, cotangent: Any, directions: tuple[Any, ...], *,
                      confirming: fd.Derivative | None = None, table: dict[str, Any] | None = None) -> fd.Derivative | None:
    """``d/dt <cotangent, primal(x + t v)>`` at 0, or None where the primal fails near ``x`` (its domain's edge).
    ``confirming``: this function's earlier answer for the same arguments, confirmed by `fd.confirmed` (tables at
    32-fold finer steps until two agree; that first table is not computed again). ``table``: the table's options
    (`fd.quick`'s), in place of `fd.budget`'s.

    The primal's value at ``x`` itself is not computed again where an earlier check of this drawn input
    established it (:meth:`Case.known_primal`)."""
    known = case.known_primal()
    base = fd.NOT_GIVEN if known is UNKNOWN else tree_map(_numpy, known)
    estimate = fd.directional if confirming is None else functools.partial(fd.confirmed, first=confirming)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d = estimate(_primal(case), case.fresh(), directions, cotangent, **(table or fd.budget(case.args)), base=base)
    except (ValueError, ArithmeticError):
        return None
    if not (np.all(np.isfinite(d.value)) and math.isfinite(d.error)):
        return None
    return d


def _contracted(case: Case, cotangent: Any) -> kinks.Scalar:
    """``args -> (<cotangent, primal(args)>, its magnitude)``: the scalar :mod:`gradguard.checker.kinks` probes."""
    return kinks.contracted(_primal(case), cotangent)


def one_sided(case: Case, cotangent: Any, directions: tuple[Any, ...]) -> tuple[float, float] | None:
    """Second-order one-sided derivatives (left, right) of ``<cotangent, primal(x + t v)>`` at 0."""
    return kinks.one_sided(_contracted(case, cotangent), case.args, directions)


# -- the dot-product test -------------------------------------------------------------------------
@dataclass
class DotTest:
    lhs: fd.Derivative  # <ybar, J v> by finite differences
    rhs: float  # <pullback(ybar), v>
    scale: float

    def agrees(self, tol: tolerances.Tolerance) -> bool:
        return tolerances.close(float(self.lhs.value), self.rhs, tol, scale=self.scale, fd_error=self.lhs.error)

    def settles(self, tol: tolerances.Tolerance) -> bool:
        """Agrees, on a table sharp enough to settle the pass alone (`tolerances.settles`)."""
        return tolerances.settles(float(self.lhs.value), self.rhs, tol, scale=self.scale, fd_error=self.lhs.error)

    def allowed(self, tol: tolerances.Tolerance) -> float:
        """How far apart the two sides may be (:func:`tolerances.allowed`)."""
        return tolerances.allowed(float(self.lhs.value), self.rhs, tol, scale=self.scale, fd_error=self.lhs.error)


def dot_test(lhs: fd.Derivative, tangents: Any, directions: Any) -> DotTest:
    return DotTest(lhs, inner(tangents, directions), abs_inner(tangents, directions))


def derivative_range(case: Case, cotangent: Any, directions: tuple[Any, ...], tol: tolerances.Tolerance, scale: float) -> tuple[float, float] | None:
    """The smallest and largest one-sided derivative of ``<cotangent, primal(x + t v)>`` at 0, over steps
    from ``eps**(1/3)`` down to where rounding would exceed the tolerance (:func:`kinks.derivative_range`)."""
    return kinks.derivative_range(_contracted(case, cotangent), case.args, directions, tol, scale)


def at_kink(case: Case, cotangent: Any, directions: tuple[Any, ...], dot: DotTest, tol: tolerances.Tolerance) -> bool:
    """True where the primal is not differentiable along ``v`` (relu at 0, or kinks closer together than the
    finite-difference step) and the rule's value lies between the one-sided derivatives seen at some scale:
    any such value is a valid (sub)gradient there."""
    return kinks.between_sides(derivative_range(case, cotangent, directions, tol, dot.scale), dot.rhs, tol, dot.scale)


@dataclass
class ElementSides:
    """The one-sided derivatives of ``<cotangent, primal>`` along one element, and the slack that compares
    a tangent element with them (the dtype's tolerance at their scale)."""

    lo: float
    hi: float
    slack: float

    @property
    def kink(self) -> bool:
        return abs(self.hi - self.lo) > self.slack

    def admits(self, value: float) -> bool:
        """Whether ``value`` lies between the sides (within the slack): a valid (sub)gradient element."""
        return self.lo - self.slack <= value <= self.hi + self.slack


def element_sides(case: Case, cotangent: Any, i: int, k: int, value: float, scale: float, tol: tolerances.Tolerance) -> ElementSides | None:
    """:func:`derivative_range` along element ``k`` (flat) of argument ``i``, judged against ``value``."""
    sides = derivative_range(case, cotangent, only_argument(case, i, unit_vector(case.args[i], k)), tol, scale)
    if sides is None:
        return None
    lo, hi = sides
    return ElementSides(lo, hi, tol.atol + tol.rtol * max(abs(lo), abs(hi), abs(value)))


def near_kinks(case: Case, cotangent: Any, directions: tuple[Any, ...], dot: DotTest, conv: str, tol: tolerances.Tolerance) -> bool:
    """True where kinks of the primal pass closer to ``x`` than any usable finite-difference step, and the
    rule's answer is one a (Clarke) subgradient could give there: the rule's answers around ``x`` jump
    between pieces, and the primal's own one-sided derivatives show a kink near ``x``
    (:func:`kinks.jumps_around`)."""

    def answer(args: tuple[Any, ...] | None = None) -> float:
        """The rule's <pullback(cotangent), v> at ``args`` (fresh copies of x by default)."""
        _, pb = case.pair(args)
        return inner(adjoint_tangents(case, pb, cotangent, conv), directions)

    return kinks.jumps_around(answer, case.args, directions, g=_contracted(case, cotangent), step=float(dot.lhs.step), value=dot.rhs,
                              fd_value=float(dot.lhs.value), fd_error=dot.lhs.error, scale=dot.scale, tol=tol)


def only_argument(case: Case, i: int, value: Any) -> tuple[Any, ...]:
    return tuple(value if j == i else None for j in range(case.nargs))


def _masked(v: Any, lo: int, hi: int) -> Any:
    arr = np.array(v, copy=True)
    flat = arr.reshape(-1)
    flat[:lo] = 0
    flat[hi:] = 0
    return arr


def element_derivative(case: Case, cotangent: Any, i: int, k: int) -> tuple[complex | float, float] | None:
    """Element ``k`` (flat) of the adjoint of argument ``i`` by finite differences: (value, error), or None."""
    arg = case.args[i]
    re = finite_difference(case, cotangent, only_argument(case, i, unit_vector(arg, k)))
    if re is None:
        return None
    if not np.iscomplexobj(arg):
        return float(re.value), re.error
    im = finite_difference(case, cotangent, only_argument(case, i, unit_vector(arg, k, 1j)))
    if im is None:
        return None
    return complex(float(re.value), float(im.value)), re.error + im.error


def _element(tangent: Any, arg: Any, k: int) -> Any:
    if tangent is None:
        return 0.0
    value = np.asarray(tangent).reshape(-1)[k]
    return value.item() if hasattr(value, "item") else value


def element_index(arg: Any, k: int) -> tuple[int, ...]:
    shape = np.shape(arg)
    return tuple(int(j) for j in np.unravel_index(k, shape)) if shape else ()


@dataclass
class WrongTangent:
    arg: int
    dot: DotTest  # the test restricted to this argument
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
        lhs = finite_difference(case, ybar, only_argument(case, i, d))
        if lhs is None:
            return None
        if dot_test(lhs, _masked(tangents[i], lo, mid) if tangents[i] is not None else None, d).agrees(tol):
            lo = mid
        else:
            hi = mid
    return lo


def localise(case: Case, ybar: Any, v: tuple[Any, ...], tangents: tuple[Any, ...], whole: DotTest, conv: str) -> list[WrongTangent]:
    tol = case.tol
    moving = [i for i, d in enumerate(v) if d is not None]
    wrong: list[WrongTangent] = []
    for i in moving:
        if len(moving) == 1:
            dot = whole
        else:
            lhs = finite_difference(case, ybar, only_argument(case, i, v[i]))
            if lhs is None:
                continue
            dot = dot_test(lhs, tangents[i], v[i])
            if dot.agrees(tol):
                continue
        w = WrongTangent(i, dot)
        wrong.append(w)
        size = int(np.size(case.args[i]))
        if size > LOCALISE_MAX_SIZE:
            continue
        if 1 < size <= SCAN_ALL_UP_TO:
            _worst_element(case, ybar, v, tangents, i, w, conv)
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
            w.idx, w.expected, w.got = element_index(case.args[i], k), as_rule_sees(expected, conv), as_rule_sees(got, conv)
    return wrong


# localise: arguments up to this many elements have every element the direction moves judged, and the one furthest
# off named (a surrogate's 0.0012 at [0] was named beside a test 2.3 apart, almost all of it 0.86 at [1]); larger
# ones are bisected to the first wrong element
SCAN_ALL_UP_TO = 16


def _worst_element(case: Case, ybar: Any, v: tuple[Any, ...], tangents: tuple[Any, ...], i: int, w: WrongTangent,
                   conv: str) -> None:
    """Names in ``w`` the element of argument ``i`` (among those ``v`` moves) whose tangent is furthest from its
    finite difference, beyond the tolerance; leaves ``w`` as it is where none is."""
    tol, worst = case.tol, None
    for k in np.flatnonzero(np.asarray(v[i]).reshape(-1)):
        found = element_derivative(case, ybar, i, int(k))
        if found is None:
            continue
        expected, error = found
        got = _element(tangents[i], case.args[i], int(k))
        if tolerances.close(expected, got, tol, fd_error=error):
            continue
        off = abs(got - expected)
        if worst is None or off > worst[0]:
            worst = (off, int(k), expected, got)
    if worst is not None:
        _, k, expected, got = worst
        w.idx, w.expected, w.got = element_index(case.args[i], k), as_rule_sees(expected, conv), as_rule_sees(got, conv)
