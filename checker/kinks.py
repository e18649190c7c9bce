"""Kinks under finite differences: where a function is not differentiable near an input, and which
answers a rule may give there. Shared by GG201 (the primal alone, :mod:`gradguard.checker.checks._vjp`)
and the safety matrix (whole context programs, :mod:`gradguard.checker.contexts`).

The function is ``g(args) -> (value, magnitude)``: a real scalar of the arguments (``<cotangent,
primal(args)>``, or a context program's value) and the size of the terms it sums, which sets its
rounding. ``answer(args)`` is what the rule (or an engine running a program with it) claims for
``d/dt g(args + t v)`` at ``args``; ``answer(None)`` asks at the input itself, on fresh copies.

* :func:`derivative_range`: the one-sided derivatives of ``g`` along ``v`` at several scales. Where they
  differ the function has a kink within the finite-difference step, and any value between them is a
  valid (sub)gradient (:func:`between_sides`).
* :func:`jumps_around`: kinks closer to ``x`` than any usable step, recognised by the rule's own answers
  around ``x`` jumping between pieces, and confirmed by the function's own one-sided derivatives
  (:func:`kinked_near`): a rule whose answers jump where the function is smooth is wrong, not excused.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from gradguard.checker import tolerances
from gradguard.checker.compare import first_index, where
from gradguard.checker.trees import abs_inner, copy_tree, inner, is_narrow_float, leaves

__all__ = [
    "FINE_STEPS",
    "SCALE_GROUPS_UP_TO",
    "SCALE_SPAN",
    "STEP_BELOW",
    "ScaleGroup",
    "first_move",
    "scale_groups",
    "computed_at",
    "JUMP_RATIO",
    "NEIGHBOURS",
    "UNIT_NEIGHBOURS_UP_TO",
    "between_sides",
    "contracted",
    "derivative_range",
    "element_sides",
    "finer_steps_admit",
    "jumps_around",
    "unresolved_at",
    "unresolved_element",
    "staircase",
    "stairs_blur",
    "Staircase",
    "STAIR_SLACK",
    "growing",
    "input_steps",
    "vertical_tangent",
    "NOT_SETTLING",
    "kinked_near",
    "neighbours",
    "one_sided",
    "shifted",
    "unit_vector",
    "unresolved",
]

Scalar = Callable[[tuple], tuple[float, float]]  # g(args) -> (value, magnitude)
Answer = Callable[[tuple | None], float]  # the claimed d/dt g(args + t v); None: at x itself

JUMP_RATIO = 64  # jumps_around looks at the rule around x at step / 64 and step / 64**2
NEIGHBOURS = 6  # ... at this many random points at each distance (``random``; GG201 asks for more, `_vjp.near_kinks`)
UNIT_NEIGHBOURS_UP_TO = 8  # ... and along every unit vector for arguments up to this many elements in all
FINE_STEPS = 3  # finer probes of one-sided derivatives, each 1000 times smaller than the last
SCALE_SPAN = 1e6  # scale_groups: the widest ratio of magnitudes among the moved elements of one group (float64),
STEP_BELOW = 1e3  # ... whose steps move its smallest element by at most this fraction of its size (float64),
SCALE_GROUPS_UP_TO = 8  # ... for at most this many groups (an input with more is left to the kink exemptions)


@dataclass
class ScaleGroup:
    """One scale of an input (`scale_groups`): the direction restricted to the elements of that scale, and
    ``reach``, the smallest ratio ``|x_k| / |v_k|`` over them (how far along it a step may go before it moves
    an element by its own size)."""

    along: tuple[Any, ...]
    reach: float
    smallest: float  # the group's smallest and largest |x_k|
    largest: float


def first_move(eps: float) -> float:
    """How far a group's first step moves its smallest element, as a fraction of its size: 1/STEP_BELOW, or the cube
    root of a narrower float's epsilon (float32: 5e-3), at which its finest steps still move it well above rounding."""
    return max(1.0 / STEP_BELOW, eps ** (1.0 / 3.0))


def scale_groups(args: tuple[Any, ...], v: tuple[Any, ...]) -> list[ScaleGroup] | None:
    """The direction ``v`` split by the magnitudes of the real elements it moves into groups spanning at most
    SCALE_SPAN (narrower in a narrower float: a group's largest element must still move by a hundred spacings at
    the finest steps taken at its smallest element's scale), the largest magnitudes first; the parts sum to ``v``.
    None where that is not tried: an argument it moves is not a real float array, a moved element is 0 or not
    finite (a feature at the element itself), or the input has more than SCALE_GROUPS_UP_TO scales."""
    mags, moves, owners, flat = [], [], [], []  # per moved element: |x_k|, |v_k|, its argument, its flat index
    for i, d in enumerate(v):
        if d is None:
            continue
        a = args[i]
        if not (isinstance(a, np.ndarray) and a.dtype.kind == "f"):
            return None
        along = np.abs(np.asarray(d)).reshape(-1)
        k = np.flatnonzero(along)
        mags.append(np.abs(a.reshape(-1)[k]).astype(np.float64))
        moves.append(along[k].astype(np.float64))
        owners.append(np.full(k.size, i))
        flat.append(k)
    if not mags:
        return None
    m, u, owner, index = (np.concatenate(x) for x in (mags, moves, owners, flat))
    if m.size == 0 or not np.all(np.isfinite(m) & (m > 0.0)):
        return None
    # A group's largest element must still move by a hundred spacings at its finest steps (32 times below the first):
    # 1e6 in float64; in float32, whose first steps move an element by eps**(1/3) = 5e-3 of its size, 13.
    eps = max(float(np.finfo(args[i].dtype).eps) for i in set(owner.tolist()))
    span = min(SCALE_SPAN, first_move(eps) / (32 * 100 * eps))
    masks: list[np.ndarray] = []  # over the moved elements, the largest magnitudes first
    left = np.ones(m.size, dtype=bool)
    while left.any():
        if len(masks) == SCALE_GROUPS_UP_TO:
            return None
        top = float(m[left].max())
        masks.append(left & (m * span >= top))
        left &= ~masks[-1]
    groups = []
    for group in masks:
        along: list[Any] = [None] * len(v)
        for i in np.unique(owner[group]).tolist():
            d = np.asarray(v[i])
            part = np.zeros_like(d).reshape(-1)
            k = index[group & (owner == i)]
            part[k] = d.reshape(-1)[k]
            along[i] = part.reshape(d.shape)
        groups.append(ScaleGroup(tuple(along), float(m[group].min()) / float(u[group].max()),
                                 float(m[group].min()), float(m[group].max())))
    return groups


def shifted(args: tuple[Any, ...], directions: tuple[Any, ...], t: float) -> list[Any]:
    """``args + t * directions`` in each argument's own dtype and type (copies; None directions: unmoved)."""
    out = []
    for a, v in zip(args, directions):
        if v is None:
            out.append(copy_tree(a))
            continue
        arr = np.asarray(a)
        wide = np.complex128 if np.iscomplexobj(arr) else np.float64
        moved = t * np.asarray(v).astype(wide, copy=False)  # one array of the argument's size, not four
        moved += arr.astype(wide, copy=False)  # x + t v, bit for bit: the sum is the same either way round
        moved = moved.astype(arr.dtype, copy=False)
        out.append(moved if isinstance(a, np.ndarray) else (moved[()] if isinstance(a, np.generic) else moved.item()))
    return out


# The machine epsilon the functions probed here compute at, where a caller knows it to be coarser than their
# inputs' dtype shows (`computed_at`); 0: the inputs' dtype tells.
_COMPUTED_AT: ContextVar[float] = ContextVar("gradguard_computed_at", default=0.0)


@contextmanager
def computed_at(eps: float | None) -> Iterator[None]:
    """Within: every function this module probes computes at machine epsilon ``eps`` (None: its inputs' dtype
    tells), so steps where that rounding swamps a slope are not taken. A float64 program through a rule that
    computes and returns float32 (NeMo's RNN-T loss) is flat at steps float64 could take: its finer one-sided
    slopes were float32's rounding, and they spanned a wrong gradient (half the right one) as if kinks were there."""
    token = _COMPUTED_AT.set(eps or 0.0)
    try:
        yield
    finally:
        _COMPUTED_AT.reset(token)


def _eps(args: tuple[Any, ...], directions: tuple[Any, ...]) -> float:
    return max([float(np.finfo(np.asarray(args[i]).dtype).eps) for i, v in enumerate(directions) if v is not None]
               + [_COMPUTED_AT.get()])


def contracted(f: Callable[..., Any], covector: Any) -> Scalar:
    """``args -> (<covector, f(*args)>, its magnitude)``: the scalar this module probes, of a primal or a
    pullback."""

    def g(args: tuple[Any, ...]) -> tuple[float, float]:
        y = f(*args)
        return inner(covector, y), abs_inner(covector, y)

    return g


def one_sided(g: Scalar, args: tuple[Any, ...], directions: tuple[Any, ...], *,
              finer: float = 1.0) -> tuple[float, float] | None:
    """Second-order one-sided derivatives (left, right) of ``g(x + t v)`` at 0, at the step ``eps**(1/3)``
    (times ``finer``)."""
    h = _eps(args, directions) ** (1 / 3) * finer
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            at = {k: g(tuple(shifted(args, directions, k * h)))[0] for k in (-2, -1, 0, 1, 2)}
    except Exception:  # noqa: BLE001 - the function left its domain: no verdict from this probe
        return None
    if not all(math.isfinite(v) for v in at.values()):
        return None
    right = (-3 * at[0] + 4 * at[1] - at[2]) / (2 * h)
    left = (3 * at[0] - 4 * at[-1] + at[-2]) / (2 * h)
    return left, right


def defined_side(g: Scalar, args: tuple[Any, ...], directions: tuple[Any, ...]) -> tuple[float, float] | None:
    """``(value, error)``: the derivative of ``g(x + t v)`` at 0 from the one side where ``g`` is defined, where
    the other side is not (``x`` on the edge of the primal's domain: ``sqrt(s)`` at s = 2.6e-42, where a
    central step reaches below 0). Second-order one-sided differences at the step ``eps**(1/3)`` and at a tenth
    of it: the finer is the value, their difference its error. None where both sides are defined (nothing to
    add to central differences), neither is, or a value on the defined side is not finite."""
    h = _eps(args, directions) ** (1 / 3)

    def at(t: float) -> float:
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = float(g(tuple(shifted(args, directions, t)))[0])
        except Exception:  # noqa: BLE001 - outside the function's domain
            return math.nan
        return value

    g0 = at(0.0)
    if not math.isfinite(g0):
        return None
    defined = [sign for sign in (1.0, -1.0) if math.isfinite(at(sign * h))]
    if len(defined) != 1:
        return None
    sign = defined[0]
    estimates = []
    for step in (h, h / 10):
        near, far = at(sign * step), at(2 * sign * step)
        if not (math.isfinite(near) and math.isfinite(far)):
            return None
        estimates.append(sign * (-3 * g0 + 4 * near - far) / (2 * step))
    return estimates[1], abs(estimates[1] - estimates[0])


def derivative_range(g: Scalar, args: tuple[Any, ...], directions: tuple[Any, ...], tol: tolerances.Tolerance,
                     scale: float, coarse: tuple[float, float] | None = None) -> tuple[float, float] | None:
    """The smallest and largest one-sided derivative of ``g(x + t v)`` at 0, over steps from ``eps**(1/3)``
    down to where rounding would exceed the tolerance.

    A kink closer to ``x`` than the finite-difference step (inputs drawn a hair apart, like sorting
    ``[0, -1e-77, -6e-8]``, where three kinks sit within ``1e-7``) makes the derivative depend on the scale
    it is looked at: finer steps see the slopes between the kinks, which is what a pullback at ``x`` returns.
    On a function smooth at every probed scale the range is as narrow as the rounding.

    Each finer step gives its first-order quotients and the second-order one-sided derivatives from the same
    step and twice it: beside a pole a first-order quotient is off by about its step over the pole's distance
    (``safe_acos`` clipped at 1 - 1e-7: 1.24825e11 at step 6e-12 against the inner derivative 1.24834e11), the
    second-order one by its square.

    The finest step taken counts with its own truncation error (its second-order quotient against its first-order
    one, on either side): a bend at a scale finer still is not resolved there. mujoco's MJX regularises the
    derivative of ``|x|`` as ``x / (|x| + 1e-12)`` near 0, a jump at every step but the finest, whose second-order
    quotient at 6e-15 gives 9.99928e11 of the 1e12 the rule's own derivative is (its first-order one 9.94e11).

    Below the finest of those steps come the input's own scales (:func:`input_steps`): an input whose elements are
    far smaller than every step has its features there, and the steps above see only the cone they make from afar.

    ``coarse``: :func:`one_sided`'s answer for the same arguments, where the caller has it already.
    """
    sides = one_sided(g, args, directions) if coarse is None else coarse
    if sides is None:
        return None
    found = list(sides)
    finest: list[tuple[float, float]] = []  # the finest step's (second-order, first-order) quotients
    eps = _eps(args, directions)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g0, magnitude = g(tuple(copy_tree(args)))
            for h in _finer_steps(args, directions):
                if _rounding_swamps(eps, magnitude, h, tol, scale):
                    break  # rounding would swamp the slope at this step and below
                ahead = g(tuple(shifted(args, directions, h)))[0]
                behind = g(tuple(shifted(args, directions, -h)))[0]
                right, left = (ahead - g0) / h, (g0 - behind) / h
                if math.isfinite(left) and math.isfinite(right):
                    found += [left, right]
                further = g(tuple(shifted(args, directions, 2 * h)))[0]
                farther_back = g(tuple(shifted(args, directions, -2 * h)))[0]
                right2 = (-3 * g0 + 4 * ahead - further) / (2 * h)
                left2 = (3 * g0 - 4 * behind + farther_back) / (2 * h)
                if math.isfinite(left2) and math.isfinite(right2):
                    found += [left2, right2]
                finest = [(right2, right), (left2, left)]
    except Exception:  # noqa: BLE001 - the function left its domain: the coarser estimates stand
        pass
    for second, first in finest:
        if math.isfinite(second) and math.isfinite(first):
            found += [second - abs(second - first), second + abs(second - first)]
    return min(found), max(found)


def _rounding_swamps(eps: float, magnitude: float, h: float, tol: tolerances.Tolerance, scale: float) -> bool:
    """Whether a quotient at step ``h`` of a function of size ``magnitude`` holds more rounding than the
    tolerance at ``scale`` allows: :func:`derivative_range` takes no step this fine or finer."""
    return 4 * eps * magnitude / h > tol.atol + tol.rtol * scale


GROWTH = 100.0  # unresolved: the least growth of the one-sided slopes per 1000-fold finer step
RESOLVED = 1000.0  # ... and how far above its rounding each slope must stand


def unresolved(g: Scalar, args: tuple[Any, ...], directions: tuple[Any, ...]) -> bool:
    """Whether ``g(x + t v)`` has no derivative at ``x`` that finite differences in float64 can establish: its
    one-sided slopes at every step from ``eps**(1/3)`` down to 1e-9 of it grow at least GROWTH-fold per
    1000-fold finer step, each far above its rounding. A jump or a singularity nearer to ``x`` than any step
    float64 can take does that: ``log|det|`` of a 3x3 matrix whose determinant is 1e-261 has slopes
    +-1e8, 1e11, 1e14, 1e17 at steps 6e-6 down to 6e-15, and a derivative of 1e259 at ``x`` itself, which no
    finite difference reaches. A smooth function's slopes agree across the steps, and a kink's keep their two
    values; neither grows."""
    eps = _eps(args, directions)
    h = eps ** (1 / 3)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g0, magnitude = g(tuple(copy_tree(args)))
            slopes = []
            for _ in range(FINE_STEPS + 1):
                right = (g(tuple(shifted(args, directions, h)))[0] - g0) / h
                left = (g0 - g(tuple(shifted(args, directions, -h)))[0]) / h
                size = max(abs(left), abs(right))
                if not (math.isfinite(size) and size > RESOLVED * 4 * eps * max(abs(magnitude), abs(g0)) / h):
                    return False
                slopes.append(size)
                h /= 1000.0
    except Exception:  # noqa: BLE001 - the function left its domain: nothing established
        return False
    return all(b >= GROWTH * a for a, b in zip(slopes, slopes[1:]))


def _around(f: Any, args: tuple[Any, ...], d: tuple[Any, ...], steps: list[float],
            outputs: int) -> list[tuple[list[np.ndarray], list[np.ndarray]]] | None:
    """Per step, the real output elements of ``f`` at ``x - step d`` and ``x + step d`` (float64, ``(behind,
    ahead)``); None where ``f`` raises beside x (it left its domain: nothing established) or gives another number
    of outputs than ``outputs``."""
    values = []
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for step in steps:
                ahead = [np.asarray(v, dtype=np.float64) for v in leaves(f(*shifted(args, d, step)))]
                behind = [np.asarray(v, dtype=np.float64) for v in leaves(f(*shifted(args, d, -step)))]
                if len(ahead) != outputs or len(behind) != outputs:
                    return None
                values.append((behind, ahead))
    except Exception:  # noqa: BLE001 - the function left its domain beside x: nothing established
        return None
    return values


def _fine_steps(h: float) -> list[float]:
    return [h / 1000.0 ** j for j in range(FINE_STEPS + 1)]


MOVE_SPACINGS = 10.0  # _moving_steps: a narrow float's finest step moves each element by at least this many spacings
WIDEST_STEP_RATIO = 10.0  # ... and its steps still shrink at least this much from one to the next


def _moving_steps(h: float, args: tuple[Any, ...], d: tuple[Any, ...]) -> list[float] | None:
    """`_fine_steps` from ``h``, where every one of them moves the elements ``d`` moves in their own float; in a
    float narrower than float64 (float16: 0 + 1e-10 is 0, its smallest number being 6e-8) the steps span ``h`` down to
    the least step that moves each such element by MOVE_SPACINGS spacings instead, as evenly as FINE_STEPS allow;
    None where that leaves them closer than WIDEST_STEP_RATIO apart (no growth to read)."""
    steps = _fine_steps(h)
    floor = 0.0
    for a, v in zip(args, d):
        if v is None:
            continue
        a, v = np.asarray(a), np.asarray(v)
        if a.dtype.kind != "f" or not is_narrow_float(a):
            continue
        moved = v != 0
        if moved.any():
            gaps = np.spacing(np.abs(a[moved])).astype(np.float64)
            floor = max(floor, float(np.max(MOVE_SPACINGS * gaps / np.abs(v[moved]).astype(np.float64))))
    if steps[-1] >= floor:
        return steps
    ratio = (h / floor) ** (1.0 / FINE_STEPS) if floor > 0 else 0.0
    if not ratio >= WIDEST_STEP_RATIO:
        return None
    return [h / ratio ** j for j in range(FINE_STEPS + 1)]


def _finer_steps(args: tuple[Any, ...], directions: tuple[Any, ...]) -> list[float]:
    """The steps below ``eps**(1/3)`` that :func:`derivative_range` and :func:`element_sides` take, finest last:
    FINE_STEPS ones each 1000 times smaller, then the input's own scales (:func:`input_steps`)."""
    return _fine_steps(_eps(args, directions) ** (1 / 3))[1:] + input_steps(args, directions)


INPUT_SCALES = 3  # input_steps: at most this many of the input's own scales, the coarsest first
INPUT_STEPS = (1e3, 1e6)  # ... each giving steps these many times smaller than the element that sets it


def input_steps(args: tuple[Any, ...], directions: tuple[Any, ...]) -> list[float]:
    """Steps at the scale of the input's own small elements, for one-sided derivatives finer than
    :func:`_fine_steps`: for each of the INPUT_SCALES largest decades of nonzero magnitudes, among the real
    float arguments that move, below the finest of those steps, steps INPUT_STEPS times smaller than the
    decade's smallest element (coarsest first; none for an input without such elements).

    An input's elements are where its features sit: Hypothesis draws matrices holding 1.8e-167 and 5e-305 beside
    zeros, and a spectral function of a kinked scalar function (jax-fem's phase-field split of the strain,
    ``sum_i f(lambda_i) v_i v_i^T`` with ``f`` kinked at 0) has its kinks where those tiny eigenvalues cross 0.
    Every step from ``eps**(1/3)`` down to 1e-9 of it moves the matrix by far more than that, so the one-sided
    derivatives they give belong to the cone the eigenvalues make from afar (-818.784 and -496.854), not to the
    point (at 1.8e-170: -491.488 from below, the rule's own -491.473; an element whose sides meet there is off by a
    thousandth of the step over the eigenvalues' gap, so a step a million times finer comes too). Steps this fine
    are cheap, and where the function's rounding swamps them (an element of 5e-305 in a function of size 1e-165)
    the callers' rounding bounds drop them. A step must also move every element it moves far above its rounding (RESOLVED times its
    spacing, at the largest element the direction moves): beside an element of 1.8e-167 a step of 5e-308 is lost
    in the sum, and the quotient reads 0 where nothing moved."""
    eps = _eps(args, directions)
    finest = eps ** (1 / 3) / 1000.0 ** FINE_STEPS
    decades: dict[int, float] = {}
    largest = 0.0
    for a, v in zip(args, directions):
        if v is None:
            continue
        arr = np.asarray(a)
        if arr.dtype.kind != "f" or arr.size == 0:
            continue
        finite = np.isfinite(arr)
        moved = finite & np.broadcast_to(np.asarray(v) != 0, arr.shape)
        largest = max(largest, float(np.abs(arr[moved]).max(initial=0.0)))
        mags = np.abs(arr[finite]).astype(np.float64).reshape(-1)
        for m in mags[(mags > 0) & (mags < finest)].tolist():
            decade = math.floor(math.log10(m))
            decades[decade] = min(m, decades.get(decade, math.inf))
    coarsest = sorted(decades, reverse=True)[:INPUT_SCALES]
    steps = [decades[d] / ratio for d in coarsest for ratio in INPUT_STEPS]
    return [h for h in steps if h >= RESOLVED * eps * largest]


def unresolved_at(f: Any, args: tuple[Any, ...], d: tuple[Any, ...]) -> tuple[str, str] | None:
    """``(output element, why)`` for the first real output element of ``f`` whose one-sided slopes along ``d``
    establish no derivative: they grow at least GROWTH-fold per 1000-fold finer step at every step from
    ``eps**(1/3)`` down to 1e-9 of it, each far above its rounding (a pole nearer than any step: 1/x at
    1e-200), or its values at x and x +- h are finite and a slope between them overflows at some step (digamma
    at 2.2e-308, or at -5.6e-297, whose slopes grow to 3e307 and then overflow).
    Element by element, so that another element's large value does not hide it. None where none does."""
    eps = _direction_eps(args, d)
    steps = _fine_steps(eps ** (1 / 3))
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y0 = [np.asarray(v, dtype=np.float64) for v in leaves(f(*shifted(args, d, 0.0)))]
    except Exception:  # noqa: BLE001 - the primal left its domain at x: nothing established
        return None
    values = _around(f, args, d, steps, len(y0))
    if values is None:
        return None
    several = len(y0) > 1
    for n, y in enumerate(y0):
        with np.errstate(all="ignore"):
            sizes = [np.maximum(np.abs(ahead[n] - y), np.abs(y - behind[n])) / step
                     for step, (behind, ahead) in zip(steps, values)]
            finite = np.isfinite(y)
            overflow = np.zeros_like(finite)
            for j, (behind, ahead) in enumerate(values):
                overflow |= finite & np.isfinite(ahead[n]) & np.isfinite(behind[n]) & ~np.isfinite(sizes[j])
            growing = finite.copy()
            for j, step in enumerate(steps):
                growing &= np.isfinite(sizes[j]) & (sizes[j] > RESOLVED * 4 * eps * np.abs(y) / step)
                if j:
                    growing &= sizes[j] >= GROWTH * sizes[j - 1]
        for ok, why in ((growing, "its one-sided slopes grow at every step float64 can take: a singularity nearer "
                                  "than any step"),
                        (overflow, "its one-sided slopes overflow float64 though its values are finite")):
            idx = first_index(ok)
            if idx is not None:
                return where("output " + str(n) if several else "the output", idx), why
    return None


# unresolved_element: multiples of the finest step (powers of the square root of the golden ratio, so that no two
# are in a ratio of small integers, which a periodic sawtooth would see alike), where a smooth function's one-sided
# slopes move one way, or turn once; jumps or noise finer than the steps turn them at random
NOISE_STEPS = tuple(((1 + 5 ** 0.5) / 2) ** (j / 2) for j in range(8))
TURNS = 2  # ... so this many turns, each move far above rounding, say the slopes scatter,
REVERSAL = 0.25  # ... as does one turn where they rise and fall each by this fraction of their size or more
NOISE = 0.01  # ... and a move counts only beyond this fraction of the slopes' size
# The steps finer still that a small element is probed at: this many times RESOLVED times its spacing, so that a
# power law's slope there, c x**p moving y by about p times the step's share of x, stands above the floors that
# compare slopes (RESOLVED * 4 roundings of y) for |p| >= 1/16: at RESOLVED spacings cbrt's slope at 7e-224 was
# below them, and the element passed as resolved where steps of 6e-15 cannot see its derivative of 2e148.
MICRO = 64.0


def _element_probe(args: tuple[Any, ...], i: int, k: int) -> tuple[np.ndarray, Any, float, tuple[Any, ...], float] | None:
    """For probing element ``k`` (flat) of argument ``i`` alone: the argument, its dtype's float info, the element's
    value, the unit direction along it, and the finest step (1e-9 of ``eps**(1/3)``, or RESOLVED times the element's
    spacing where that is coarser: below it the argument's own rounding, not the function, decides what moves).
    None for an argument that is not a real float array."""
    arg = np.asarray(args[i])
    if arg.dtype.kind != "f":
        return None
    info = np.finfo(arg.dtype)
    x = float(arg.reshape(-1)[k])
    d = tuple(unit_vector(arg, k) if j == i else None for j in range(len(args)))
    return arg, info, x, d, max(float(info.eps) ** (1 / 3) / 1000.0 ** FINE_STEPS, RESOLVED * float(info.eps) * abs(x))


def unresolved_element(f: Any, args: tuple[Any, ...], i: int, k: int) -> tuple[str, str] | None:
    """``(output element, why)`` for the first real output element of ``f`` whose derivative along element ``k``
    (flat) of argument ``i`` finite differences do not establish at the finest steps they take, or None.

    The finest steps are ``step`` = 1e-9 of ``eps**(1/3)`` (or RESOLVED times the element's spacing where that is
    coarser) times 1 to 5.4 (NOISE_STEPS), on each side; each slope divides by the step the argument really took. Not
    established where, on one side:

    * the slopes there, in the order of the steps, turn back and forth (TURNS times or more, each move far above
      rounding and NOISE of their size), or rise and fall each by REVERSAL of their size: a smooth function's
      ``f' + f'' t / 2 + ...``, a power law's ``c t**p`` (``x**1.5`` at 0) and a kink's side's move one way, or
      turn once by little, over so short a range, while jumps or noise finer than the steps scatter them (``fmod(x, d)`` along d at x = -3.48, d = 2e-256, whose pieces are
      narrower than the spacing of floats at d);
    * or the element is small enough that steps MICRO * RESOLVED times its own spacing are 1000-fold finer still, and
      the slopes there (at that step and twice it) agree with each other but not with those at ``step`` carried
      to a step of 0 (give or take four times their trend): the function has structure between
      the two scales, finer than every step finite differences take (``fmod(x, d)`` along d at x = 7.15,
      d = -1.19e-7 jumps every 2e-15: slope 9.0e5 at steps of 6e-15 and beyond, its derivative 6.0e7 at 2.6e-20).

    Moves and disagreement must stand far above the values' rounding (relative, or the spacing of subnormal
    numbers where a value underflows) and NOISE of the slopes' size. None
    also where ``f`` raises beside x, or for a complex argument."""
    probe = _element_probe(args, i, k)
    if probe is None:
        return None
    arg, info, x, d, step = probe
    eps = float(info.eps)
    if not step < eps ** (1 / 3):
        return None
    micro = MICRO * RESOLVED * max(eps * abs(x), float(info.smallest_subnormal))  # its spacing, subnormal ones included
    micro_steps = (micro, 2 * micro) if micro * 1000.0 <= step else ()
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            at = [np.asarray(v) for v in leaves(f(*shifted(args, d, 0.0)))]
            y0 = [np.asarray(v, dtype=np.float64) for v in at]
            sides: list[list[tuple[float, list[np.ndarray]]]] = []
            for sign in (1.0, -1.0):
                side = []
                for t in [m * step for m in NOISE_STEPS] + list(micro_steps):
                    moved = shifted(args, d, sign * t)
                    taken = float(np.asarray(moved[i]).reshape(-1)[k]) - x
                    values = [np.asarray(v, dtype=np.float64) for v in leaves(f(*moved))]
                    if len(values) != len(y0) or taken == 0.0:
                        return None
                    side.append((taken, values))
                sides.append(side)
    except Exception:  # noqa: BLE001 - the function left its domain beside x: nothing established
        return None
    several, coarse = len(y0) > 1, len(NOISE_STEPS)
    for n, y in enumerate(y0):
        # A value rounds by eps of its size, or by the spacing of subnormal numbers where it underflows (x * x at
        # x = 6e-198 is 0): in the argument's dtype or the output's, whichever is coarser.
        kind = at[n].dtype if at[n].dtype.kind == "f" else arg.dtype
        rel = max(eps, float(np.finfo(kind).eps))
        spacing = max(float(info.smallest_subnormal), float(np.finfo(kind).smallest_subnormal))
        with np.errstate(all="ignore"):
            unsettled = np.zeros(np.shape(y), dtype=bool)
            for side in sides:
                t = np.array([taken for taken, _ in side])
                q = np.stack([(values[n] - y) / taken for taken, values in side])  # (steps, *shape)
                floors = np.stack([RESOLVED * 4 * (rel * np.abs(y) + spacing) / abs(taken) for taken in t])
                finite = np.logical_and.reduce(np.isfinite(q), axis=0) & np.isfinite(y)
                size = np.max(np.abs(q[:coarse]), axis=0)
                # the moves between the slopes at successive finest steps that stand out, and how often they turn
                moves = np.diff(q[:coarse], axis=0)
                signs = np.sign(moves) * (np.abs(moves) > floors[0] + NOISE * size)
                turns = np.zeros(np.shape(y), dtype=int)
                last = signs[0]
                for sign in signs[1:]:
                    turns += (sign != 0) & (last != 0) & (sign != last)
                    last = np.where(sign != 0, sign, last)
                rise = np.sum(np.where(signs > 0, moves, 0.0), axis=0)
                fall = -np.sum(np.where(signs < 0, moves, 0.0), axis=0)
                reversal = np.minimum(rise, fall)
                unsettled |= finite & ((turns >= TURNS) | ((reversal > 0) & (reversal >= REVERSAL * size)))
                if micro_steps:
                    # the finest steps' slopes carried along their line to a step of 0, give or take four times
                    # that line's change (a power law's c t**p is no line), against the slopes 1000-fold finer still
                    change = (q[1] - q[0]) * (t[0] / (t[1] - t[0]))
                    near, trend = q[0] - change, 4 * np.abs(change)
                    tiny = np.maximum(np.abs(q[coarse]), np.abs(q[coarse + 1]))
                    agree = np.abs(q[coarse] - q[coarse + 1]) <= floors[coarse] + NOISE * tiny
                    apart = np.abs(q[coarse] - near) > floors[coarse] + 3 * floors[0] + trend + \
                        NOISE * np.maximum(tiny, size)
                    unsettled |= finite & agree & apart
        idx = first_index(unsettled)
        if idx is not None:
            return (where("output " + str(n) if several else "the output", idx),
                    "its one-sided slopes at the finest steps scatter from step to step, or differ from its slopes "
                    "at steps finer still: the function changes on a finer scale than the steps finite differences take")
    return None


STAIRS = 3  # staircase: at least this many jumps of one sign, with more flat samples than jumps, make a staircase
STAIR_SAMPLES = 24  # ... among this many samples either side of x,
WINDOWS = (8, 12, 16, STAIR_SAMPLES)  # ... in a window of this many either side (stairs may narrow away from x)
STAIR_SPACINGS = (1 / 8, 1 / 2, 2.0)  # ... this many times the flat run around x apart (stairs of several widths)
STAIR_REACH = 0.05  # ... the run looked for out to this fraction of max(1, |x|) on each side


STAIR_SLACK = 4.0  # how many stairs' worth of blur (Richardson's weights sum to about that) a disagreement may be


@dataclass
class Staircase:
    """An output element whose values along one input element climb (or fall) in stairs about ``width`` wide
    (in that input element) and ``height`` high: rounded inside the primal far beyond its own rounding."""

    element: str
    width: float
    height: float
    leaf: int = 0  # which output leaf, and the element's index in it
    index: tuple[int, ...] = ()

    def blur(self, v: float, step: float) -> float:
        """How far finite differences at ``step`` along a direction moving the input element by ``v`` per unit
        can be from the slope of the function the primal computes to within its stairs: at most one stair per
        evaluation (``height / step``) where the step spans several, the whole slope (``|v| height / width``)
        where the stairs are wider than the step and may hide every jump."""
        if abs(v) * step >= self.width:
            return self.height / step
        return max(self.height / step, abs(v) * self.height / self.width)


STAIRS_UP_TO = 32  # input elements `stairs_blur` probes, those the direction moves most first


def stairs_blur(f: Any, args: tuple[Any, ...], v: tuple[Any, ...], step: float, *, up_to: int = STAIRS_UP_TO) -> float:
    """What stairs in ``f``'s values (:func:`staircase`) can make of finite differences of ``f`` along ``v`` at
    ``step``: the sum of :meth:`Staircase.blur` over the real input elements ``v`` moves, at most ``up_to`` of them
    (those it moves most; the others add nothing, so a caller that excuses a disagreement within this blur excuses
    it on stairs it measured). 0.0 where none climbs in stairs, or an argument ``v`` moves is complex.

    LML's forward bisects for its threshold to eps = 1e-4: its outputs climb in stairs about 1e-4 wide and 1e-6 high,
    and finite differences at finer steps read one stair's slope (0.092 or 0.137 where the derivative is 0.041)."""
    moved = [(abs(float(m)), i, int(k)) for i, d in enumerate(v) if d is not None and isinstance(args[i], np.ndarray)
             for k, m in enumerate(np.asarray(d).reshape(-1)) if m != 0]
    if any(np.iscomplexobj(args[i]) for _, i, _ in moved):
        return 0.0
    blur = 0.0
    for move, i, k in sorted(moved, reverse=True)[:up_to]:
        stairs = staircase(f, args, i, k)
        if stairs is not None:
            blur += stairs.blur(move, step)
    return blur


def staircase(f: Any, args: tuple[Any, ...], i: int, k: int) -> Staircase | None:
    """The first output element of ``f`` whose values along element ``k`` (flat) of argument ``i`` climb (or fall)
    in a staircase, or None: flat at the finest steps (1e-9 of ``eps**(1/3)``, or RESOLVED times the element's
    spacing where that is coarser, times 1, 2, 3) on both sides; the
    flat run around x measured on each side (the step doubled until the element moves, within STAIR_REACH of
    max(1, |x|)); then STAIR_SAMPLES samples either side of x, an eighth, half or twice the run apart,
    holding at least STAIRS jumps of one sign and no more jumps than flat steps (:func:`_stairs_at`; the
    roundings of two operations make stairs of several widths, and x may sit on a narrow one), each jump far
    above the output's own rounding (RESOLVED times 4 eps of its value: float32's rounding of a float32 output is
    no staircase). DeZero's ``-log(1 - sigmoid(x))``, with sigmoid as ``tanh(x / 2) / 2 + 1 / 2``, at x = 32:
    ``1 - sigmoid(x)`` is a few hundred multiples of 2**-53, so the loss is flat over 0.0085 in x and jumps by
    0.0083, and finite differences at smaller steps see a constant where its slope is 1. A constant moves nowhere
    within reach; a kink beyond the steps (relu at -1e-3) moves on one side only; a dead zone's sides move at
    every sample, not in stairs. None also for complex arguments or where ``f`` raises."""
    probe = _element_probe(args, i, k)
    if probe is None:
        return None
    arg, info, x, d, finest = probe
    eps = float(info.eps)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")

            def values(t: float) -> list[np.ndarray]:
                return [np.asarray(v, dtype=np.float64) for v in leaves(f(*shifted(args, d, t)))]

            at = [np.asarray(v) for v in leaves(f(*shifted(args, d, 0.0)))]
            y0 = [np.asarray(v, dtype=np.float64) for v in at]
            flat = [np.isfinite(y) for y in y0]
            for t in (finest, 2 * finest, 3 * finest):
                for sign in (1.0, -1.0):
                    moved = values(sign * t)
                    if len(moved) != len(y0):
                        return None
                    flat = [m & (v == y) for m, v, y in zip(flat, moved, y0)]
            if not any(np.any(m) for m in flat):
                return None
            reach = STAIR_REACH * max(1.0, abs(x))
            # a staircase climbs within reach: outputs that do not move there (those that do not depend on this
            # element at all, in an elementwise rule) are dropped before the doubling walks out to them
            ends = [values(reach), values(-reach)]
            flat = [m & ((up != y) | (down != y)) for m, up, down, y in zip(flat, ends[0], ends[1], y0)]
            if not any(np.any(m) for m in flat):
                return None
            # per side and output: the first doubled step at which the element moved (inf: not yet; nan: not flat)
            run = {sign: [np.where(m, np.inf, np.nan) for m in flat] for sign in (1.0, -1.0)}
            h = finest
            while h <= reach and any(np.any(np.isinf(r)) for side in run.values() for r in side):
                for sign, side in run.items():
                    if any(np.any(np.isinf(r)) for r in side):  # a side whose every run is known needs no call
                        for r, v, y in zip(side, values(sign * h), y0):
                            r[np.isinf(r) & (v != y)] = h
                h *= 2.0
            tried = 0
            several = len(y0) > 1
            for n, (up, down) in enumerate(zip(run[1.0], run[-1.0])):
                # the run around x, from both sides; where one side stays flat through the whole reach (the last
                # stair, a plateau: float32's 1 - sigmoid(x) at 0 beyond x = 16.6), twice the other side's, and
                # the stairs are looked for on that side alone
                both = np.where(np.isinf(up) & np.isfinite(down), 2 * down,
                                np.where(np.isinf(down) & np.isfinite(up), 2 * up, up + down))
                for idx in (tuple(int(j) for j in row) for row in np.argwhere(np.isfinite(both))):  # 0-d too
                    if tried >= 4:
                        return None
                    tried += 1
                    side = -1.0 if np.isinf(up[idx]) else 1.0 if np.isinf(down[idx]) else None
                    # stairs are the primal's own rounding far beyond its output's: each jump far above eps of
                    # the value (float32's rounding of a float32 output is no staircase)
                    kind = np.finfo(np.result_type(arg.dtype, at[n].dtype) if at[n].dtype.kind == "f" else arg.dtype)
                    rounding = RESOLVED * 4 * (float(kind.eps) * abs(float(y0[n][idx])) + float(kind.smallest_subnormal))
                    for spacing in (float(both[idx]) * r for r in STAIR_SPACINGS):
                        found = _stairs_at(values, n, idx, spacing, side, centre=float(y0[n][idx]))
                        if found is not None and found[1] > rounding:
                            index = tuple(int(j) for j in idx)
                            return Staircase(where("output " + str(n) if several else "the output", index), *found,
                                             leaf=n, index=index)
    except Exception:  # noqa: BLE001 - the function left its domain: nothing established
        return None
    return None


def _stairs_at(values: Callable[[float], list[np.ndarray]], n: int, idx: tuple[int, ...],
               spacing: float, side: float | None = None, centre: float | None = None) -> tuple[float, float] | None:
    """``(width, height)`` where STAIR_SAMPLES samples of output ``n`` at ``idx`` either side of x, ``spacing``
    apart, hold a staircase in some window around x (8, 12, 16 or all samples either side: stairs may narrow
    away from x), within the stretch where the samples are finite (the primal may leave its range further out:
    log(0) at the top of the loss above); None otherwise. ``side`` (+1 or -1): x is on the last stair, flat
    for good the other way, and the samples are taken on this side only, where they must hold the staircase
    themselves: a kink just beyond the steps (relu at -1e-3) is flat on one side too, but its other side moves
    at every sample, no staircase.

    The samples are taken window by window, from x outwards, and no further than a window that settles it: a
    window's steps are inside every wider window's, so jumps of both signs there, or more jumps than the widest
    window's flat steps could match, leave no staircase in any of them (a solver's output that moves in steps of
    its own rounding, or smoothly, was sampled 49 times per spacing before: a few seconds an element for a
    primal of 10 ms). The answer is the one the whole set of samples gives, except where the primal raises
    beyond the window that settles it: it is not called there. ``centre``: the value at x, where the caller has
    it already."""
    signs = (side,) if side is not None else (-1.0, 1.0)
    taken: dict[float, list[float]] = {sign: [] for sign in signs}  # samples at j = 1, 2, ... spacings per side
    blocked = {sign: False for sign in signs}  # a non-finite sample ends the stretch on that side
    centre = float(values(0.0)[n][idx]) if centre is None else centre
    widest = STAIR_SAMPLES * len(signs)  # steps in the widest window
    for reach in WINDOWS:
        for sign in signs:
            while not blocked[sign] and len(taken[sign]) < reach:
                sample = float(values(sign * (len(taken[sign]) + 1) * spacing)[n][idx])
                if np.isfinite(sample):
                    taken[sign].append(sample)
                else:
                    blocked[sign] = True
        window = [*taken.get(-1.0, [])[:reach][::-1], centre, *taken.get(1.0, [])[:reach]] if side is None else \
            [centre, *taken[side][:reach]]
        steps = np.diff(np.array(window))
        found = _stairs_in(steps, spacing)
        if found is not None:
            return found
        jumps = steps[steps != 0]
        if (np.any(jumps > 0) and np.any(jumps < 0)) or 2 * len(jumps) > widest:
            return None  # every wider window holds these jumps too
    return None


def _stairs_in(steps: np.ndarray, spacing: float) -> tuple[float, float] | None:
    """``(width, height)`` where the differences ``steps`` of samples ``spacing`` apart hold at least STAIRS jumps of
    one sign and no more jumps than flat steps; None otherwise."""
    jumps = np.flatnonzero(steps)
    if (len(jumps) >= STAIRS and (np.all(steps[jumps] > 0) or np.all(steps[jumps] < 0))
            and len(steps) - len(jumps) >= len(jumps)):
        return spacing * len(steps) / len(jumps), float(np.mean(np.abs(steps[jumps])))
    return None


def _direction_eps(args: tuple[Any, ...], d: tuple[Any, ...]) -> float:
    return max([float(np.finfo(np.asarray(a).dtype).eps) for a, v in zip(args, d) if v is not None]
               + [_COMPUTED_AT.get()])


# Quotients that grow without settling: each step's growth at least this fraction of the last one's. A derivative's
# one-sided quotients settle (their growth shrinks about 1000-fold per 1000-fold finer step); those of a vertical
# tangent grow by a constant (log h: x * log(x) at 0) or more (h**(-2/3): cbrt at 0) at every step.
NOT_SETTLING = 0.9


def vertical_tangent(f: Any, args: tuple[Any, ...], d: tuple[Any, ...]) -> bool:
    """Whether some real output element of ``f`` has a vertical tangent along ``d`` at ``args`` (its one-sided
    quotients grow without settling at every step, :func:`growing`): ``sqrt`` at 0, ``cbrt`` at 0."""
    eps = _direction_eps(args, d)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y0 = [np.asarray(v) for v in leaves(f(*shifted(args, d, 0.0)))]
    except Exception:  # noqa: BLE001 - nothing established
        return False
    return growing(f, args, d, y0, eps ** (1 / 3), eps) is not None


def growing(f: Any, args: tuple[Any, ...], d: tuple[Any, ...], y0: list[np.ndarray], h: float,
            eps: float) -> tuple[int, tuple[int, ...], tuple[tuple[float, float], ...], str | None] | None:
    """``(output, index, (step, quotient) pairs, side)`` for the first real output element whose one-sided
    difference quotients along ``d`` grow without settling (:func:`_diverging`) over every step from ``h`` down
    to 1e-9 of it (in a float narrower than float64, down to the least step that still moves the element:
    `_moving_steps`): from below and from above with one sign (``side`` None), or from one side only where the
    primal is not finite on the other at every step (``side`` "above" or "below": the edge of its domain). None
    where none does, for complex outputs, or where the primal raises beside x."""
    if any(np.iscomplexobj(y) for y in y0):
        return None
    steps = _moving_steps(h, args, d)
    if steps is None:
        return None
    values = _around(f, args, d, steps, len(y0))
    if values is None:
        return None
    for n, y in enumerate(y0):
        y = np.asarray(y, dtype=np.float64)
        with np.errstate(all="ignore"):
            floors = [RESOLVED * 4 * eps * np.abs(y) / step for step in steps]
            below = [(y - behind[n]) / step for step, (behind, _) in zip(steps, values)]
            above = [(ahead[n] - y) / step for step, (_, ahead) in zip(steps, values)]
            undefined_below = np.logical_and.reduce([~np.isfinite(q) for q in below])
            undefined_above = np.logical_and.reduce([~np.isfinite(q) for q in above])
            up, down = _diverging(above, floors), _diverging(below, floors)
            both = up & down & (below[0] * above[0] > 0)
            only_above = up & undefined_below
            only_below = down & undefined_above
            finite = np.isfinite(y)
        for ok, side, q in ((both, None, above), (only_above, "above", above), (only_below, "below", below)):
            idx = first_index(finite & ok)
            if idx is not None:
                return n, idx, tuple((step, float(np.asarray(q[j])[idx])) for j, step in enumerate(steps)), side
    return None


def _diverging(q: list[np.ndarray], floors: list[np.ndarray]) -> np.ndarray:
    """Element-wise: quotients ``q`` (coarsest step first) that share one sign, each far above its rounding
    (``floors``), and grow in magnitude at every step, each growth far above rounding and at least NOT_SETTLING
    times the one before (rounding alone gives quotients that fall to 0 once the step is below the value's
    spacing; a derivative's settle)."""
    ok = np.isfinite(q[0]) & (np.abs(q[0]) > floors[0])
    before = None
    for j in range(1, len(q)):
        growth = np.abs(q[j]) - np.abs(q[j - 1])
        ok &= np.isfinite(q[j]) & (q[j] * q[0] > 0) & (np.abs(q[j]) > floors[j]) & (growth > floors[j])
        if before is not None:
            ok &= growth >= NOT_SETTLING * before
        before = growth
    return ok


def finer_steps_admit(g: Scalar, args: tuple[Any, ...], directions: tuple[Any, ...], value: float,
                      tol: tolerances.Tolerance, scale: float) -> bool:
    """Whether finite differences of ``g`` along ``v`` establish nothing that contradicts ``value``, once
    finer steps are looked at: ``value`` lies between the one-sided derivatives from ``eps**(1/3)`` down
    (:func:`derivative_range`: a kink, or a pole near ``x`` that made a table's coarse steps wrong), or the
    slopes grow at every step (:func:`unresolved`: a jump, or a pole nearer than any step), or no step both
    stays clear of the function's bend and resolves its slope above rounding (:func:`_no_settled_step`)."""
    coarse = one_sided(g, args, directions)  # the first step of both tests below
    return (between_sides(derivative_range(g, args, directions, tol, scale, coarse), value, tol, scale)
            or unresolved(g, args, directions)
            or _no_settled_step(g, args, directions, tol, scale, coarse))


def _no_settled_step(g: Scalar, args: tuple[Any, ...], directions: tuple[Any, ...], tol: tolerances.Tolerance,
                     scale: float, coarse: tuple[float, float] | None) -> bool:
    """Whether finite differences can take no step at which ``g`` looks smooth: at the coarsest step its
    one-sided derivatives ``coarse`` disagree (the step reaches across a pole or a bend), and every finer step is
    within rounding of ``g``'s own size (an output element of 5e18 beside the one whose curvature is asked:
    ``safe_sqrt`` at 1e-38 and at 6e-8), so :func:`derivative_range` took none. Such finite differences establish
    no derivative."""
    if coarse is None:
        return False
    left, right = coarse
    if tolerances.close(left, right, tol, scale=max(abs(left), abs(right), scale)):
        return False
    eps = _eps(args, directions)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, magnitude = g(tuple(copy_tree(args)))
    except Exception:  # noqa: BLE001
        return False
    return _rounding_swamps(eps, magnitude, eps ** (1 / 3) / 1000.0, tol, scale)


def _float_leaves(f: Callable[..., Any], args: tuple[Any, ...], directions: tuple[Any, ...], t: float) -> list[np.ndarray | None]:
    """The leaves of ``f(args + t directions)``: real float ones as float64 arrays, None for the others."""
    out = []
    for leaf in leaves(f(*shifted(args, directions, t))):
        arr = np.asarray(leaf) if leaf is not None else None
        out.append(arr.astype(np.float64) if arr is not None and arr.dtype.kind == "f" else None)
    return out


def element_sides(f: Callable[..., Any], args: tuple[Any, ...], directions: tuple[Any, ...],
                  tol: tolerances.Tolerance) -> list[tuple[np.ndarray, np.ndarray] | None] | None:
    """:func:`derivative_range` for every element of a function's output at once: for each leaf of
    ``f(*args)`` (None for a leaf that is not a real float array or number), the elementwise smallest and
    largest one-sided derivative of ``f(x + t v)`` at 0 over the same steps. A finer step counts for an
    element only where its rounding stays within the tolerance at the element's own size. None where ``f``
    leaves its domain or is not finite at ``x`` (nothing established)."""
    eps = _eps(args, directions)
    h = eps ** (1 / 3)

    def at(t: float) -> list[np.ndarray | None]:
        return _float_leaves(f, args, directions, t)

    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            v = {k: at(k * h) for k in (-2, -1, 0, 1, 2)}
            if any(x is not None and not np.all(np.isfinite(x)) for x in v[0]):
                return None
            if any(len(v[k]) != len(v[0]) for k in v):
                return None
            sides: list[tuple[np.ndarray, np.ndarray] | None] = []
            for i, x0 in enumerate(v[0]):
                if x0 is None:
                    sides.append(None)
                    continue
                right = (-3 * x0 + 4 * v[1][i] - v[2][i]) / (2 * h)
                left = (3 * x0 - 4 * v[-1][i] + v[-2][i]) / (2 * h)
                if not (np.all(np.isfinite(right)) and np.all(np.isfinite(left))):
                    return None
                sides.append((np.minimum(left, right), np.maximum(left, right)))
            for step in _finer_steps(args, directions):
                up, down = at(step), at(-step)
                for i, x0 in enumerate(v[0]):
                    if x0 is None:
                        continue
                    lo, hi = sides[i]
                    right, left = (up[i] - x0) / step, (x0 - down[i]) / step
                    size = np.maximum(np.abs(lo), np.abs(hi))
                    usable = (4 * eps * np.abs(x0) / step <= tol.atol + tol.rtol * size) & np.isfinite(left) & np.isfinite(right)
                    sides[i] = (np.where(usable, np.minimum(lo, np.minimum(left, right)), lo),
                                np.where(usable, np.maximum(hi, np.maximum(left, right)), hi))
    except Exception:  # noqa: BLE001 - the function left its domain: nothing established
        return None
    return sides


PIECE_SAMPLES = 24  # piece_sides: random points around x at which each element's derivative along v is taken
PIECE_RADIUS = 4.0  # ... at this fraction of the coarse step eps**(1/3) from x (which one_sided straddles),
PIECE_STEP = 16.0  # ... each by one-sided differences either way at this fraction of that distance (a step that
# crosses a kink averages two pieces that meet near x: a value between them, never beyond)


def piece_sides(f: Callable[..., Any], args: tuple[Any, ...], directions: tuple[Any, ...],
                tol: tolerances.Tolerance) -> list[tuple[np.ndarray, np.ndarray] | None] | None:
    """For every element of a function's output, the smallest and largest derivative along ``v`` of the
    smooth pieces that meet at ``x``: each taken at one of PIECE_SAMPLES random points a hair from ``x``
    (every real float argument that ``v`` moves, moved at random), where a piecewise-smooth function is on
    one piece, by one-sided differences either way at a step well inside that hair, and again at half the
    distance with half the step: extrapolated to distance 0 (Richardson), a smooth element's derivative there
    is its derivative at ``x`` (its drift with the distance cancels), a piece's the piece's (pieces that meet
    at ``x`` look the same at every scale, so the two agree). Shaped as :func:`element_sides`'
    answer; an element gets no range where the differences' rounding would exceed the tolerance at the size
    of its largest piece (float32, where the hair is below what differences resolve): ``(inf, -inf)``.

    One-sided derivatives at ``x`` itself miss a kink that looks the same from both sides: the middle of
    three tied entries (``median([a, a, a] + t v)`` is ``a + t median(v)`` for every ``t``) is a straight line
    along every direction through ``x``, yet its Clarke subgradients along ``v`` span every tied entry of
    ``v``. The derivatives of the pieces around ``x`` span that range: each is the derivative of a nearby
    point, and any value between the extremes is a convex combination of them. A random point reaches each of
    a tie's k pieces with probability about 1/k, so a piece is missed with probability about
    ``(1 - 1/k)**PIECE_SAMPLES`` (0.006% for a three-way tie): a miss leaves the range narrower, never wider,
    than the pieces' own. None where ``f`` leaves its domain or is not finite at ``x``."""
    # Only the arguments that move along v: one that stays (a constant: a solver's tolerance, a step count) may
    # have a domain of its own, and a random hair off it can leave it (a tolerance of 1e-6 moved below 0 made a
    # fixed-point loop `while |x - x_prev| > eps` run for ever); the pieces that meet at x along v are reached by
    # moving the arguments that move.
    moving = [i for i, a in enumerate(args)
              if i < len(directions) and directions[i] is not None
              and a is not None and (np.isscalar(a) or isinstance(a, (np.ndarray, np.generic)))
              and np.asarray(a).dtype.kind == "f"]
    if not moving or all(directions[i] is None for i in range(len(directions))):
        return None
    eps = _eps(args, directions)
    radius = eps ** (1 / 3) / PIECE_RADIUS
    step = radius / PIECE_STEP
    rng = np.random.default_rng(0)

    def at(point: list[Any], t: float) -> list[np.ndarray | None]:
        return _float_leaves(f, tuple(point), directions, t)

    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x0 = at(list(args), 0.0)
            if any(x is not None and not np.all(np.isfinite(x)) for x in x0):
                return None
            slopes: list[list[np.ndarray]] = [[] for _ in x0]
            for _ in range(PIECE_SAMPLES):
                w = tuple(_unit_like(rng, args[i]) if i in moving else None for i in range(len(args)))
                taken = []
                for scale in (1.0, 0.5):  # the same picture at half the scale: the same piece, the curvature halved
                    point = shifted(args, w, scale * radius)
                    here, up, down = at(point, 0.0), at(point, scale * step), at(point, -scale * step)
                    if not len(here) == len(up) == len(down) == len(x0):
                        return None
                    taken.append((here, up, down, scale * step))
                for i, x in enumerate(x0):
                    if x is None or not all(z[i] is not None and z[i].shape == x.shape for t in taken for z in t[:3]):
                        continue
                    (h1, u1, d1, s1), (h2, u2, d2, s2) = taken
                    # Richardson to radius 0: a smooth element's derivative drifts in proportion to the distance
                    # (gelu's, by 6e-7 at 1.5e-6, would pass for a kink), a piece's stays (its cone scales).
                    slopes[i] += [2 * (u2[i] - h2[i]) / s2 - (u1[i] - h1[i]) / s1,
                                  2 * (h2[i] - d2[i]) / s2 - (h1[i] - d1[i]) / s1]
    except Exception:  # noqa: BLE001 - the function left its domain beside x: nothing established
        return None
    sides: list[tuple[np.ndarray, np.ndarray] | None] = []
    for x, found in zip(x0, slopes):
        if x is None:
            sides.append(None)
            continue
        if not found:
            sides.append((np.full(x.shape, np.inf), np.full(x.shape, -np.inf)))
            continue
        table = np.stack(found)
        finite = np.isfinite(table)
        # The rounding of each difference against the tolerance at the size of the element's largest piece.
        size = np.max(np.where(finite, np.abs(table), 0.0), axis=0)
        # Each difference rounds by up to 4 eps |x| over its step: 2 * 4 / (step / 2) + 4 / step after extrapolating.
        usable = finite & (20 * eps * np.abs(x) / step <= tol.atol + tol.rtol * size)
        sides.append((np.min(np.where(usable, table, np.inf), axis=0), np.max(np.where(usable, table, -np.inf), axis=0)))
    return sides


def between_sides(sides: tuple[float, float] | None, value: float, tol: tolerances.Tolerance, scale: float) -> bool:
    """Whether ``value`` lies between the one-sided derivatives ``sides`` (within the tolerance at ``scale``):
    where they differ, any such value is a valid (sub)gradient."""
    if sides is None:
        return False
    lo, hi = sides
    return lo <= value <= hi or any(tolerances.close(s, value, tol, scale=scale) for s in (lo, hi))


def jumps_around(answer: Answer, args: tuple[Any, ...], directions: tuple[Any, ...], *, g: Scalar, step: float,
                 value: float, fd_value: float, fd_error: float, scale: float, tol: tolerances.Tolerance,
                 random: int = NEIGHBOURS) -> bool:
    """True where kinks of ``g`` pass closer to ``x`` than any usable finite-difference step (``step``, the
    one finite differences used), and the rule's answer ``value`` is one a (Clarke) subgradient could give
    there.

    Inputs drawn a hair apart put kinks within any step float64 can difference: sorting ``[2.5, 2e-168,
    1.5e-34, -1.4e-148]`` ties three values at every such step. The pullback at ``x`` rightly picks the piece
    that holds within ``1e-34`` of it, while finite differences see the pieces beyond, and along some
    directions (the middle of three sorted lines through one point is a straight line) even the one-sided
    derivatives agree with each other. Such an input is recognised by the rule itself: its answers at points
    around ``x`` jump between pieces, and keep jumping as the points close in (a smooth derivative changes in
    proportion to the distance). The input is then not judged if both the rule's answer at ``x`` and the
    finite-difference value lie among the rule's answers around it. A wrong pullback of a smooth function
    changes smoothly around ``x``, and a wrong value at a kink (relu'(0) = 2) lies outside the answers
    around it: both are still judged. So is a rule whose answers jump where ``g`` itself is smooth (a
    pullback wrong only at ``x == 0`` exactly, of a primal without a kink there): the jump is excused only
    where ``g``'s own one-sided derivatives show a kink near ``x`` (:func:`kinked_near`)."""
    if not (step > 0 and math.isfinite(step)):
        return False
    around = neighbours(directions, random)

    def ring(radius: float) -> list[float]:
        return [answer(tuple(shifted(args, u, radius))) for u in around]

    def among(values: list[float], v: float, error: float = 0.0) -> bool:
        lo, hi = min(values), max(values)
        return lo <= v <= hi or any(tolerances.close(v, w, tol, scale=scale, fd_error=error) for w in (lo, hi))

    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(2):  # a nondeterministic rule jumps everywhere, kinks or not (GG406): no excuse
                if not tolerances.close(answer(None), value, tol, scale=scale):
                    return False
            near = ring(step / JUMP_RATIO**2)
            if not (among(near, value) and among(near, fd_value, fd_error)):
                return False  # the usual case for a wrong pullback: finite differences lie outside its answers
            fine = input_steps(args, directions)
            if fine:
                # Steps at the input's own scale are usable (every element the direction moves is that small): kinks
                # nearer than every step must show there too. jaxopt's isotonic regression at [1.4e-306, -1.2e-38,
                # -2.2e-309, -2.00001, -3] is smooth within 1e-309 of x, and its jvp, which merges blocks within 1e-8,
                # answers alike at every point 1e-41 away: a wrong derivative, not a kink.
                tiny = ring(fine[0])
                if not all(math.isfinite(a) for a in tiny) or tolerances.close(max(tiny) - min(tiny), 0.0, tol, scale=scale):
                    return False
            far = ring(step / JUMP_RATIO)
    except Exception:  # noqa: BLE001 - the rule fails beside x (a domain edge): no excuse from here
        return False
    spread_near, spread_far = max(near) - min(near), max(far) - min(far)
    if not math.isfinite(spread_near) or tolerances.close(spread_near, 0.0, tol, scale=scale):
        return False  # the rule's derivative is continuous around x: finite differences can judge it
    if spread_near < spread_far / 2:
        return False  # a smooth change of the rule's answers (which shrinks with the distance), not a jump
    return kinked_near(g, args, directions, tol)


def kinked_near(g: Scalar, args: tuple[Any, ...], directions: tuple[Any, ...], tol: tolerances.Tolerance, *,
                undetermined: bool = True) -> bool:
    """Whether ``g`` is not differentiable near ``x`` by its own finite differences: along ``v`` or along one
    of the :func:`neighbours` directions its one-sided derivatives (at the scales :func:`derivative_range`
    probes) differ, or its directional derivative is not linear in the direction (``D(a + b) != D(a) +
    D(b)`` for pairs of the random directions: the middle of three tied entries of a sort is a straight
    line along every direction through ``x``, yet it is no linear function of the direction). Where ``g``
    cannot be differenced along a direction (the edge of its domain) neither is established, and the answer
    is ``undetermined``: True where a kink excuses a finding (no verdict rather than a false one), False where
    only a kink shown by finite differences may soften one."""
    around = neighbours(directions)
    random = around[:NEIGHBOURS]
    pairs = [tuple(None if a is None else a + b for a, b in zip(d1, d2)) for d1, d2 in zip(random, random[1:])]
    rates = []
    for d in [directions, *around, *pairs]:
        sides = derivative_range(g, args, d, tol, 0.0)
        if sides is None:
            return undetermined
        lo, hi = sides
        if not tolerances.close(lo, hi, tol, scale=max(abs(lo), abs(hi))):
            return True
        rates.append((lo + hi) / 2)
    singles, summed = rates[1 : 1 + len(random)], rates[1 + len(around):]  # rates[0] is along v
    for k, both in enumerate(summed):
        a, b = singles[k], singles[k + 1]
        if not tolerances.close(both, a + b, tol, scale=abs(a) + abs(b) + abs(both)):
            return True
    return False


def neighbours(directions: tuple[Any, ...], random: int = NEIGHBOURS) -> list[tuple[Any, ...]]:
    """Directions to the points around ``x`` that :func:`jumps_around` asks the rule about: ``random`` random
    directions (the first NEIGHBOURS the same whatever their number), then plus and minus every unit vector (while
    the arguments are small: moving one element keeps the others' tiny order, so these reach the piece ``x`` is
    on)."""
    rng = np.random.default_rng(0)
    out = [tuple(None if v is None else _unit_like(rng, v) for v in directions) for _ in range(random)]
    if sum(np.size(v) for v in directions if v is not None) <= UNIT_NEIGHBOURS_UP_TO:
        for i, v in enumerate(directions):
            if v is None:
                continue
            for k in range(int(np.size(v))):
                for sign in (1.0, -1.0):
                    out.append(tuple(unit_vector(np.asarray(w) if isinstance(w, np.ndarray) else w, k, sign) if j == i else (None if w is None else w * 0) for j, w in enumerate(directions)))
    return out


def _unit_like(rng: np.random.Generator, v: Any) -> Any:
    """A random direction shaped like ``v`` with largest element 1 (complex for complex ``v``)."""
    g = rng.standard_normal(np.shape(v))
    if np.iscomplexobj(v):
        g = g + 1j * rng.standard_normal(np.shape(v))
    g = g / max(float(np.max(np.abs(g), initial=0.0)), 1e-300)
    return np.asarray(g, dtype=np.asarray(v).dtype) if isinstance(v, np.ndarray) else g.item()


def unit_vector(arg: Any, k: int, scale: complex = 1.0) -> Any:
    """Element ``k`` (flat) of ``arg``'s shape set to ``scale``, every other zero (a scalar for a scalar)."""
    if not isinstance(arg, np.ndarray):
        return complex(scale) if np.iscomplexobj(arg) or isinstance(scale, complex) else float(scale)
    unit = np.zeros(arg.shape, dtype=arg.dtype)
    unit.reshape(-1)[k] = scale
    return unit
