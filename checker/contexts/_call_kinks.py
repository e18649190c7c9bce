"""Kinks of the rule at its call sites: which values of ``<gradient, v>`` valid subgradients of each call give.

The whole program's one-sided derivatives along ``v`` (:func:`gradguard.checker.contexts._verdict.kink_excuse`)
bracket a valid answer only where the program has one kink. Where the rule's primal has kinks at several
output elements (of one call, or of two calls), each bent its own way by the program's random weights, a
valid subgradient of each call can sum to a value outside them: ``max(a, b)`` tied in two calls, one weighted
up and one down, makes a program that looks smooth along ``v`` (slope 1), while the rule may rightly give
either side at each tie (0 to 2).

So the program is taken apart at its calls, under plain NumPy with the rule's primal:

* each call's arguments are recorded at the input and at ``x +- h v``; they must move affinely with the
  input (as in every context here: the inputs themselves, views, transposes, constants), which gives the
  direction ``d_k`` each call's arguments move along; the primal must give the same outputs when the
  program runs again at the input (a nondeterministic primal's noise is no kink);
* each output element's one-sided derivatives along ``d_k`` (:func:`gradguard.checker.kinks.element_sides`),
  and the derivatives along ``d_k`` of the pieces that meet at the call's arguments, taken a hair away
  (:func:`gradguard.checker.kinks.piece_sides`: the middle of three tied entries looks the same from both
  sides along every line): an element whose derivatives differ is a kink, where a valid subgradient may give
  any value between the smallest and largest;
* the program with each call's output replaced by its value at ``x`` plus an offset (the primal still runs,
  on the same arguments) must be smooth in the inputs and the offsets: its derivative along ``v`` with the
  offsets moving by the middle of each element's sides, and its derivative along each kinked element's
  offset (the weight the program gives it), give the range ``center +- sum |weight| * half-width``.

That range is exact where the program is piecewise linear in the rule's outputs' pieces, and each step that
cannot be established (arguments that do not move affinely, a program not smooth in the outputs, a primal
that leaves its domain, complex outputs, too many kinked elements) leaves the cell as the other evidence
judged it.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np

from gradguard.checker import kinks, tolerances
from gradguard.checker.contexts._ops import Ops
from gradguard.checker.contexts._programs import Plan
from gradguard.checker.trees import abs_inner, copy_tree, inner, leaves, tree_map

__all__ = ["call_kinks_excuse", "non_finite_call", "unresolved_call", "MAX_KINKED", "UNRESOLVED_UP_TO"]

MAX_KINKED = 64  # kinked output elements in all beyond which the range is not worked out (one program per element)


class _Calls:
    """The rule as a program's ``ops.call``: records each call's arguments and output; with ``base`` and
    ``offsets``, call ``k`` returns ``base[k] + offsets[k]`` (after running the primal on its arguments)."""

    def __init__(self, primal: Callable[..., Any], base: list[Any] | None = None,
                 offsets: list[list[Any]] | None = None) -> None:
        self.primal, self.base, self.offsets = primal, base, offsets
        self.args: list[tuple[Any, ...]] = []
        self.outputs: list[Any] = []

    def __call__(self, *args: Any) -> Any:
        k = len(self.args)
        self.args.append(copy_tree(args))
        out = self.primal(*args)
        self.outputs.append(copy_tree(out))
        if self.base is None:
            return out
        if self.offsets is None or k >= len(self.base):
            raise RuntimeError("the program made another call than at the input")
        pieces = iter(self.offsets[k])
        return tree_map(lambda z: z if not _real_float(z) else np.asarray(z) + next(pieces), self.base[k])


def _pure(primal: Callable[..., Any]) -> Callable[..., Any]:
    """``primal`` on copies of its arguments: the probes of one call's kinks run it many times on the arguments that
    call recorded, which a rule that writes into its argument (``mutates=``, an in-place ReLU) would change under
    them. The program itself runs the primal as it is (`_Calls`), so what the rule writes reaches the program."""
    return lambda *args: primal(*copy_tree(args))


def _same_values(a: list[Any], b: list[Any]) -> bool:
    try:
        la, lb = leaves(a), leaves(b)
        return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
                                          for x, y in zip(la, lb))
    except (TypeError, ValueError):
        return False


def _real_float(z: Any) -> bool:
    return z is not None and np.asarray(z).dtype.kind == "f"


def _run(plan: Plan, calls: _Calls, xs: tuple[Any, ...]) -> float:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(np.real(np.asarray(plan.program(Ops("numpy", np, calls), plan.consts, *copy_tree(xs)))))


def non_finite_call(rule: Any, plan: Plan) -> str | None:
    """Where the rule has no derivative float64 can hold at one of its calls in the program at the plan's
    inputs (under plain NumPy): its value there is not finite ("call k gives inf"), or its pullback's tangent for
    a unit cotangent is not finite where finite differences of the primal resolve no derivative (digamma at
    2.5e-175, whose derivative is 1.6e349; fmod at a divisor of 5e-324: ``checks._kinks.beyond_float64``, as GG301
    judges it) or grow without settling (sqrt at 0: a vertical tangent, ``kinks.vertical_tangent``). None
    otherwise, or where the program cannot be run so."""
    calls = _Calls(rule.primal)
    try:
        _run(plan, calls, plan.inputs)
    except Exception:  # noqa: BLE001 - the program cannot be taken apart here: nothing established
        return None
    for k, out in enumerate(calls.outputs):
        for leaf in leaves(out):
            arr = np.asarray(leaf)
            if arr.dtype.kind in "fc":
                bad = np.flatnonzero(~np.isfinite(arr))
                if bad.size:
                    return f"call {k + 1} of the rule gives {arr.reshape(-1)[bad[0]].item()!r}"
    for k, (args, out) in enumerate(zip(calls.args, calls.outputs)):
        if any(np.asarray(leaf).dtype.kind != "f" for leaf in leaves(out)):
            continue
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _, pullback = rule.rrule(*copy_tree(args))
                tangents = pullback(tree_map(lambda leaf: np.ones_like(np.asarray(leaf)), out))
        except Exception:  # noqa: BLE001 - the pullback raised here: other checks report it
            continue
        tangents = tangents if isinstance(tangents, tuple) else (tangents,)
        for i, t in enumerate(tangents[:len(args)]):
            if t is None or not isinstance(args[i], np.ndarray) or np.asarray(t).shape != args[i].shape:
                continue
            for e in np.flatnonzero(~np.isfinite(np.asarray(t)))[:4]:
                unit = np.zeros_like(args[i])
                unit.reshape(-1)[e] = 1
                d = tuple(unit if j == i else None for j in range(len(args)))
                if kinks.unresolved_at(rule.primal, tuple(args), d) is not None:
                    return f"the derivative at call {k + 1} of the rule is beyond float64 (its pullback's tangent for a " \
                           "unit cotangent is not finite and finite differences resolve none)"
                if kinks.vertical_tangent(rule.primal, tuple(args), d):
                    return f"call {k + 1} of the rule is at a vertical tangent (its pullback's tangent for a unit " \
                           "cotangent is not finite and its one-sided difference quotients grow at every step)"
                if kinks.unresolved_element(rule.primal, tuple(args), i, int(e)) is not None:
                    return f"the derivative at call {k + 1} of the rule is finer than finite differences resolve (its " \
                           "pullback's tangent for a unit cotangent is not finite and the primal's slopes there " \
                           "scatter at the finest steps, or differ from those at finer steps still)"
    return None


UNRESOLVED_UP_TO = 32  # moving argument elements, over all calls, probed alone (those moved most)


def unresolved_call(primal: Callable[..., Any], plan: Plan, v: tuple[Any, ...], *, slope: float, truth: float,
                    fd_error: float, step: float, tol: tolerances.Tolerance, scale: float) -> str | None:
    """Where finite differences of the program at ``step`` cannot judge ``slope`` against ``truth`` because of one
    of the rule's calls, along an element its arguments move with ``v``: the call's slopes there scatter at the
    finest steps, or differ from those at finer steps still (:func:`kinks.unresolved_element`: fmod's pieces
    2e-15 wide at a divisor of 1.2e-7, which every step straddles); or its values climb in stairs
    (:func:`kinks.staircase`: ``-log(1 - sigmoid(x))`` at x = 32, flat over 0.0085) whose blur, times the
    program's weight for that output element, covers the disagreement. None otherwise, or where the arguments do
    not move affinely with the input; of more than UNRESOLVED_UP_TO moving elements, those moved most are probed."""
    try:
        found = _directions(plan, primal, v)
    except Exception:  # noqa: BLE001 - the program cannot be taken apart here: nothing established
        return None
    if found is None:
        return None
    args, outputs, moves = found
    probes = [(k, i, int(e), float(np.abs(m.reshape(-1)[e]))) for k, d in enumerate(moves) for i, m in enumerate(d)
              if isinstance(m, np.ndarray) for e in np.flatnonzero(m.reshape(-1))]
    if not probes:
        return None
    # Beyond UNRESOLVED_UP_TO, the elements moved most: an element found unresolved is an excuse whatever the others
    # do, and stairs excuse only the disagreement their own measured blur covers (LML's two calls on 2 x 10 logits,
    # its threshold bisected to 1e-4, were 40 elements, and called-twice reported a stair's slope as the truth).
    probes = sorted(probes, key=lambda p: -p[3])[:UNRESOLVED_UP_TO]
    ranges, blur, where_stairs = _Ranges(primal, plan, tol, scale), 0.0, None
    pure = _pure(primal)
    for k, i, e, move in probes:
        where = kinks.unresolved_element(pure, tuple(args[k]), i, e)
        if where is not None:
            element, why = where
            return (f"call {k + 1} of the rule has no derivative finite differences establish along element {e} of its "
                    f"argument {i} ({element}: {why})")
        stairs = kinks.staircase(pure, tuple(args[k]), i, e)
        if stairs is not None:
            weight = ranges.weight_of(outputs, k, stairs.leaf, stairs.index)
            if weight is None:
                return None
            blur += abs(weight) * stairs.blur(move, step)
            where_stairs = where_stairs or (k, i, e, stairs)
    if where_stairs is None or not tolerances.close(slope, truth, tol, scale=scale, fd_error=fd_error + kinks.STAIR_SLACK * blur):
        return None
    k, i, e, stairs = where_stairs
    return (f"call {k + 1} of the rule has values that climb in stairs along element {e} of its argument {i} "
            f"({stairs.element}: about {stairs.width:.2g} wide and {stairs.height:.2g} high; rounded inside the primal "
            "far beyond its output's rounding), and what such stairs make of the program's finite differences at "
            f"their step ({kinks.STAIR_SLACK:g} stairs' worth, {kinks.STAIR_SLACK * blur:.2g} in all) covers the disagreement")


def _held_array(a: Any, up: Any, down: Any) -> bool:
    """Whether ``a`` is another library's array (a tensor passed as a constant) with the same values at both
    steps: held as it is, as a NumPy array would be. A tensor constant of a torch rule (deepinv's spline knots)
    made every call's directions unknown, and a program with several kinks got no excuse."""
    if isinstance(a, (tuple, list, dict)) or not hasattr(a, "__array__"):
        return False
    try:
        values = np.asarray(a)
        return np.array_equal(values, np.asarray(up), equal_nan=True) and np.array_equal(values, np.asarray(down), equal_nan=True)
    except (TypeError, ValueError, RuntimeError):  # a tensor that requires grad, a ragged value: not held here
        return False


def _directions(plan: Plan, primal: Callable[..., Any], v: tuple[Any, ...]) -> tuple[list, list, list] | None:
    """Each call's arguments and output at ``x`` and the direction its arguments move along ``v`` (None for
    an argument that does not move), or None where they do not move affinely with the input."""
    at: dict[float, _Calls] = {}
    eps = max((float(np.finfo(np.asarray(x).dtype).eps) for x in leaves(plan.inputs)
               if x is not None and np.asarray(x).dtype.kind == "f"), default=float(np.finfo(np.float64).eps))
    h = eps ** (1 / 3)
    for t in (0.0, h, -h):
        calls = _Calls(primal)
        _run(plan, calls, tuple(kinks.shifted(plan.inputs, v, t)))
        at[t] = calls
    if not at[0.0].args or len({len(c.args) for c in at.values()}) != 1:
        return None
    again = _Calls(primal)
    _run(plan, again, tuple(copy_tree(plan.inputs)))
    if not _same_values(again.outputs, at[0.0].outputs):
        return None  # a rule whose primal changes from run to run (GG406): its kinks cannot be told from noise
    moves = []
    for k, args in enumerate(at[0.0].args):
        if len(args) != len(at[h].args[k]) or len(args) != len(at[-h].args[k]):
            return None
        d = []
        for a, up, down in zip(args, at[h].args[k], at[-h].args[k]):
            if a is None or not (np.isscalar(a) or isinstance(a, np.ndarray)) or np.asarray(a).dtype.kind not in "fc":
                d.append(None)  # a tree argument or a non-float one: held as it is (a tree of floats aborts below)
                if not (a is None or np.isscalar(a) or isinstance(a, np.ndarray)) and not _held_array(a, up, down) \
                        and any(np.asarray(x).dtype.kind in "fc" for x in leaves(a) if x is not None):
                    return None
                continue
            a0, a1, a2 = (np.asarray(x, dtype=np.complex128 if np.iscomplexobj(a) else np.float64) for x in (a, up, down))
            if a1.shape != a0.shape or a2.shape != a0.shape:
                return None
            held = (a1 == a0) & (a2 == a0)  # a constant, infinite ones included (norm(x, p) at p = inf: inf - inf is NaN)
            with np.errstate(invalid="ignore"):
                forward, backward = np.where(held, 0, a1 - a0), np.where(held, 0, a0 - a2)
                rounding = 8 * eps * np.where(held, 0, np.abs(a0) + np.abs(a1) + np.abs(a2))
                if not np.all(np.abs(forward - backward) <= rounding + 1e-300):
                    return None  # the arguments bend with the input: not taken apart here
                step = np.where(held, 0, (a1 - a2) / (2 * h))
            d.append(None if not np.any(step) else step.astype(np.asarray(a).dtype) if isinstance(a, np.ndarray)
                     else step.item())
        moves.append(tuple(d))
    return at[0.0].args, at[0.0].outputs, moves


def call_kinks_excuse(primal: Callable[..., Any], plan: Plan, v: tuple[Any, ...], *, slope: float,
                      truth: float, fd_error: float, tol: tolerances.Tolerance, scale: float,
                      gradient: tuple[Any, ...] | None = None) -> str | None:
    """Why a disagreeing cell gets no verdict because valid subgradients of the rule at each of its calls
    combine to ``slope`` (see the module's docstring), or None where that is not established.

    With the engine's ``gradient`` (a tree like the plan's inputs), its inner product with more directions
    must lie in the range worked out the same way along each: a valid gradient does along every direction,
    while an answer that only happens to sum into the range along ``v`` (both arguments of a tie given the
    whole cotangent, each tie off by its own amount and the errors cancelling in the sum) leaves it along the
    gradient itself (where every element's error counts with its sign), or along one of
    :func:`gradguard.checker.kinks.neighbours`' random directions."""
    ranges = _Ranges(primal, plan, tol, scale)
    along_v = ranges.along(v)
    if along_v is None:
        return None
    low, high, error, kinked, calls, n_calls = along_v
    if not kinked:
        return None  # the calls are smooth along v: the whole program's evidence judged the cell

    def among(value: float, lo: float, hi: float, err: float, size: float) -> bool:
        return lo <= value <= hi or any(tolerances.close(value, b, tol, scale=size, fd_error=err) for b in (lo, hi))

    if not (among(slope, low, high, error, scale) and among(truth, low, high, error + fd_error, scale)):
        return None
    if gradient is not None:
        try:
            more = [*_along_itself(gradient, plan.inputs), *kinks.neighbours(v)[: kinks.NEIGHBOURS]]
        except Exception:  # noqa: BLE001 - a gradient that is no direction of these inputs: nothing established
            return None
        for u in more:
            along_u = ranges.along(u)
            if along_u is None:
                return None
            lo, hi, err = along_u[:3]
            try:
                value, size = inner(gradient, u), abs_inner(gradient, u)
            except Exception:  # noqa: BLE001 - as above
                return None
            if not among(value, lo, hi, err, size):
                return None
    return (
        f"no verdict: the rule's primal has kinks at {calls} of its {n_calls} calls here ({kinked} "
        "output elements whose derivatives along the direction their arguments move differ between their two sides "
        "or between the pieces that meet there); taking each such element's derivative anywhere between the "
        "smallest and largest of those (a valid subgradient of each call) "
        f"gives <gradient, v> from {low:.6g} to {high:.6g}, and both <gradient, v> = {slope:.6g} and finite "
        f"differences of the program ({truth:.6g}) lie among them"
        + ("" if gradient is None else f", as the gradient does along itself and {kinks.NEIGHBOURS} random directions")
    )


def _along_itself(gradient: tuple[Any, ...], inputs: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The gradient as a direction of the inputs (largest element 1, each in its input's dtype), or none
    where it is zero or not finite."""
    parts = [None if g is None else np.asarray(g) for g in gradient]
    top = max((float(np.max(np.abs(g), initial=0.0)) for g in parts if g is not None), default=0.0)
    if not (top > 0 and math.isfinite(top)) or len(parts) != len(inputs):
        return []
    out = []
    for g, x in zip(parts, inputs):
        if g is None or not isinstance(x, (np.ndarray, np.generic, float, complex)) or np.shape(g) != np.shape(x):
            if g is not None:
                return []
            out.append(None)
            continue
        d = (g / top).astype(np.asarray(x).dtype)
        out.append(d if isinstance(x, np.ndarray) else d.item())
    return [tuple(out)]


class _Ranges:
    """The range of ``<gradient, u>`` that valid subgradients of each call give, along any direction ``u``;
    the program's weight for each output element is worked out once."""

    def __init__(self, primal: Callable[..., Any], plan: Plan, tol: tolerances.Tolerance, scale: float) -> None:
        self.primal, self.plan, self.tol, self.scale = primal, plan, tol, scale
        self.weights: dict[tuple[int, int, int], tuple[float, float] | None] = {}
        self.outputs: list[Any] | None = None

    def along(self, u: tuple[Any, ...]) -> tuple[float, float, float, int, int, int] | None:
        """``(low, high, error, kinked elements, calls with kinks, calls)``, or None where not established (with
        no kinked element, low and high are the one derivative along ``u``)."""
        try:
            return self._along(u)
        except Exception:  # noqa: BLE001 - the primal or the program failed beside the input: nothing established
            return None

    def _along(self, u: tuple[Any, ...]) -> tuple[float, float, float, int, int, int] | None:
        primal, plan, tol = self.primal, self.plan, self.tol
        pure = _pure(primal)
        found = _directions(plan, primal, u)
        if found is None:
            return None
        args, outputs, moves = found
        if self.outputs is None:
            if not self._prepare(outputs):
                return None
        elif len(outputs) != len(self.outputs):
            return None
        # Each output element's one-sided derivatives along its call's direction.
        sides: list[list[tuple[np.ndarray, np.ndarray]]] = []
        for k, (a, d) in enumerate(zip(args, moves)):
            real = [z for z in leaves(outputs[k]) if _real_float(z)]
            if all(x is None for x in d):
                sides.append([(np.zeros(np.shape(z)), np.zeros(np.shape(z))) for z in real])
                continue
            found_k = kinks.element_sides(pure, a, d, tol)
            if found_k is None:
                return None
            pieces = kinks.piece_sides(pure, a, d, tol)
            if pieces is not None and len(pieces) == len(found_k):
                # The pieces that meet at x: a kink that looks the same from both sides (the middle of a three-way
                # tie) shows only there.
                found_k = [s if s is None or p is None or p[0].shape != s[0].shape
                           else (np.minimum(s[0], p[0]), np.maximum(s[1], p[1])) for s, p in zip(found_k, pieces)]
            per_leaf = [s for s, z in zip(found_k, leaves(outputs[k])) if _real_float(z)]
            if len(per_leaf) != len(real) or any(s is None for s in per_leaf):
                return None
            sides.append(per_leaf)
        kinked = [(k, i, int(j)) for k, per_leaf in enumerate(sides) for i, (lo, hi) in enumerate(per_leaf)
                  for j in np.flatnonzero(~_close(lo, hi, tol))]
        if len(kinked) > MAX_KINKED:
            return None
        middle = [((lo + hi) / 2).astype(z.dtype) for per_call, per_zero in zip(sides, self.zeros)
                  for (lo, hi), z in zip(per_call, per_zero)]
        center = self._derivative(tuple(u) + tuple(middle))
        if center is None:
            return None
        mid, error = center
        spread = 0.0
        for k, i, j in kinked:
            weight = self._weight(k, i, j)
            if weight is None:
                return None
            lo, hi = sides[k][i]
            w, w_error = weight
            half = float(np.ravel(hi)[j] - np.ravel(lo)[j]) / 2
            spread += abs(w) * half
            error += w_error * half
        return mid - spread, mid + spread, error, len(kinked), len({k for k, _, _ in kinked}), len(outputs)

    def weight_of(self, outputs: list[Any], k: int, leaf: int, index: tuple[int, ...]) -> float | None:
        """The size of the program's weight for the element at ``index`` of leaf ``leaf`` of call ``k``'s output: the
        larger one-sided derivative of the program along that element's offset (a bound, not the smooth weight
        :meth:`_weight` insists on). None where it is not a real float leaf or cannot be taken."""
        try:
            if self.outputs is None and not self._prepare(outputs):
                return None
            real = [n for n, z in enumerate(leaves(self.outputs[k])) if _real_float(z)]
            if leaf not in real:
                return None
            i = real.index(leaf)
            j = int(np.ravel_multi_index(index, np.shape(self.flat[self.starts[k] + i]))) if index else 0
            found = kinks.derivative_range(self._g, tuple(self.plan.inputs) + tuple(self.flat), self._offset(k, i, j),
                                           self.tol, self.scale)
        except Exception:  # noqa: BLE001 - the primal or the program failed beside the input: nothing established
            return None
        if found is None or not all(math.isfinite(b) for b in found):
            return None
        return max(abs(found[0]), abs(found[1]))

    def _prepare(self, outputs: list[Any]) -> bool:
        """Take the calls' outputs at x (False for complex outputs: their weights would be complex too; not worked
        out here)."""
        if any(np.asarray(z).dtype.kind == "c" for out in outputs for z in leaves(out) if z is not None):
            return False
        self.outputs = outputs
        self.zeros = [[np.zeros(np.shape(z), dtype=np.asarray(z).dtype) for z in leaves(out) if _real_float(z)]
                      for out in outputs]
        self.flat = [z for per_call in self.zeros for z in per_call]
        self.starts = np.cumsum([0] + [len(per_call) for per_call in self.zeros])
        return True

    def _offset(self, k: int, i: int, j: int) -> tuple[Any, ...]:
        """The direction that moves only the offset of element ``j`` (flat) of real leaf ``i`` of call ``k``'s output."""
        unit: list[Any] = [None] * len(self.flat)
        e = np.zeros_like(self.flat[self.starts[k] + i])
        e.reshape(-1)[j] = 1
        unit[self.starts[k] + i] = e
        return (None,) * len(self.plan.inputs) + tuple(unit)

    def _g(self, values: tuple[Any, ...]) -> tuple[float, float]:
        """The program with each call's output replaced by its value at x plus offsets (the inputs, then the
        offsets of each call's real float leaves)."""
        n_in = len(self.plan.inputs)
        xs, rest = values[:n_in], list(values[n_in:])
        offsets = []
        for per_call in self.zeros:
            offsets.append([np.asarray(o) for o in rest[: len(per_call)]])
            rest = rest[len(per_call):]
        value = _run(self.plan, _Calls(self.primal, self.outputs, offsets), tuple(xs))
        return value, abs(value)

    def _derivative(self, directions: tuple[Any, ...]) -> tuple[float, float] | None:
        """The derivative of the replaced program along ``directions`` and its error, where it is smooth."""
        found = kinks.derivative_range(self._g, tuple(self.plan.inputs) + tuple(self.flat), directions, self.tol, self.scale)
        if found is None:
            return None
        lo, hi = found
        # At the scale the range was taken at: its finer steps were let in while their rounding stayed within the
        # tolerance at self.scale, so a spread of that rounding is no kink (a weight of 0.49 in a program of scale
        # 10 spread 6e-7 over those steps: smooth, as the replaced program is by construction).
        if not (math.isfinite(lo) and math.isfinite(hi)) or not tolerances.close(lo, hi, self.tol, scale=max(abs(lo), abs(hi), self.scale)):
            return None
        return (lo + hi) / 2, (hi - lo) / 2

    def _weight(self, k: int, i: int, j: int) -> tuple[float, float] | None:
        """The program's weight for element ``j`` of real leaf ``i`` of call ``k``'s output, and its error."""
        if (k, i, j) not in self.weights:
            self.weights[k, i, j] = self._derivative(self._offset(k, i, j))
        return self.weights[k, i, j]


def _close(lo: np.ndarray, hi: np.ndarray, tol: tolerances.Tolerance) -> np.ndarray:
    """Elementwise `tolerances.close` of two arrays of one-sided derivatives."""
    size = np.maximum(np.abs(lo), np.abs(hi))
    return np.abs(hi - lo) <= tol.atol + tol.rtol * size
