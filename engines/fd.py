"""Finite differences as ground truth.

Three entry points, all returning a `Derivative` (value, error estimate, cost):

- `derivative(g)`: d/dt g(t) at t = 0 by central differences with Richardson
  extrapolation (step halving, a table of `order` levels). The error estimate
  combines the spread of the extrapolation table with a rounding-error term
  ~ eps * |g| / h, so it stays honest when noise, not truncation, dominates.
- `complex_step(g)`: Im(g(i h)) / h, exact to machine precision for analytic g.
- `directional(f, args, directions, cotangent)`: d/dt <cotangent, f(args + t v)>,
  the left-hand side of the checker's dot-product test. Its cost does not grow
  with the input size, every call of `f` gets fresh copies of the arguments,
  and the error estimate reflects the precision of the arguments and outputs
  (a float32 function gets a float32-sized error).
- `confirmed(f, args, directions, cotangent)`: `directional`, confirmed by
  tables started at finer steps until two agree. A function that varies on a
  finer scale than the first table's steps (sin of a value in the thousands)
  can fool one table's error estimate; a second opinion at another scale
  cannot be fooled the same way, and where none agrees the error estimate
  grows to the disagreement.

`inner(a, b)` is the real inner product the checker must use on the other side
of the dot-product test: sum(Re(conj(a) * b)) over the leaves of two matching
pytrees of tuples/lists/dicts, with None counting as zero.
"""

from __future__ import annotations

import copy
import functools
import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

__all__ = ["Derivative", "StepsExhausted", "LARGE_INPUT", "NOT_GIVEN", "budget", "computed_eps", "first_step", "confirmed", "derivative",
           "complex_step", "directional", "inner", "quick"]

_RATIO = 2.0  # step ratio between the levels of the Richardson table
_SAFETY = 8.0  # rounding errors of a few ulps per evaluation are common
_SHRINKS = 4  # times the step is divided by 8 when g fails at a probe point
_EPS64 = float(np.finfo(np.float64).eps)
_LEVELS = 6  # Richardson levels of `directional`: deep enough to reach the asymptotic regime
# Arguments larger than this (elements in all) get a shallower table from `budget`: each level costs two
# evaluations, and on large inputs the evaluations, not the accuracy, are the limit.
LARGE_INPUT = 2**14
SHALLOW_LEVELS = 3
_CS_STEP = 1e-20  # imaginary step of the complex step in `directional`
_REFINE = 32  # `confirmed` starts each further table at a step this many times smaller than the last one's
_REFINEMENTS = 4  # ... at most this many times
# `confirmed`: a finer table contradicts the kept value only beyond this many times its own error estimate. At steps
# where rounding dominates, a table's error is the spread of its entries, a sample of the noise that the next sample
# exceeds by a few times (a float32 silu' inside a float64 backward: 60.9 +- 8.4 at a step of 5.6e-7, where the
# value is 81.305); what a coarse pair averages away (a finer oscillation) contradicts it by orders of magnitude.
_CONTRADICTS = 4.0


@dataclass(frozen=True)
class Derivative:
    """A derivative with its estimated absolute error (max over elements) and cost."""

    value: Any
    error: float
    evaluations: int
    method: str
    step: float


# ---------------------------------------------------------------- pytrees


def _is_node(x: Any) -> bool:
    return isinstance(x, (tuple, list, dict))


def _children(x: Any) -> list:
    """A node's children: a dict's values by sorted key (JAX's order), a sequence's items."""
    if isinstance(x, dict):
        try:
            return [x[k] for k in sorted(x)]
        except TypeError:
            return list(x.values())
    return list(x)


def _leaves(x: Any) -> list:
    return [leaf for item in _children(x) for leaf in _leaves(item)] if _is_node(x) else [x]


def _tree_map(fn: Callable, x: Any) -> Any:
    if not _is_node(x):
        return fn(x)
    if isinstance(x, dict):
        return {k: _tree_map(fn, item) for k, item in x.items()}
    items = [_tree_map(fn, item) for item in x]
    return type(x)(*items) if hasattr(type(x), "_fields") else type(x)(items)  # NamedTuples take fields


def _pairs(a: Any, b: Any, path: str = ""):
    """Matching leaf pairs of two pytrees, skipping None; ValueError naming the first mismatch."""
    if a is None or b is None:
        return
    if _is_node(a) or _is_node(b):
        if not (_is_node(a) and _is_node(b)) or len(a) != len(b) or isinstance(a, dict) != isinstance(b, dict):
            raise ValueError(f"pytrees differ at {path or 'the root'}: {_describe(a)} vs {_describe(b)}")
        for i, (x, y) in enumerate(zip(_children(a), _children(b))):
            yield from _pairs(x, y, f"{path}[{i}]")
        return
    x, y = np.asarray(a), np.asarray(b)
    if x.shape != y.shape:
        raise ValueError(f"shapes differ at {path or 'the root'}: {x.shape} vs {y.shape}")
    yield x, y


def _describe(x: Any) -> str:
    return f"{type(x).__name__} of length {len(x)}" if _is_node(x) else f"leaf of shape {np.shape(x)}"


def _real_arrays(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are plain arrays of one shape and real dtypes: `inner`'s common case, which
    needs no tree walk (the same arithmetic, in the same order, as the walk's)."""
    return (type(a) is np.ndarray and type(b) is np.ndarray and a.shape == b.shape
            and a.dtype.kind in _REAL_KINDS and b.dtype.kind in _REAL_KINDS)


_REAL_KINDS = frozenset("fiub")


def inner(a: Any, b: Any) -> float:
    """Real inner product sum(Re(conj(a) * b)) over matching pytrees; None counts as zero."""
    if _real_arrays(a, b):
        return float(0 + (a * b).sum())  # 0 + : the sum over leaves below starts at 0 (a -0.0 becomes 0.0)
    return float(sum(np.sum(np.real(np.conj(x) * y) if np.iscomplexobj(x) or np.iscomplexobj(y) else x * y)
                     for x, y in _pairs(a, b)))


def _abs_inner(a: Any, b: Any) -> float:
    if _real_arrays(a, b):
        return float(0 + (np.abs(a) * np.abs(b)).sum())
    return float(sum(np.sum(np.abs(x) * np.abs(y)) for x, y in _pairs(a, b)))


def _eps(x: Any) -> float:
    """Machine epsilon of an inexact leaf's dtype (float64 for Python numbers and exact dtypes)."""
    dtype = np.asarray(x).dtype
    return float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.inexact) else _EPS64


_EPS32 = float(np.finfo(np.float32).eps)


def computed_eps(x: Any) -> float:
    """The machine epsilon a value was computed at: its dtype's (`_eps`), or float32's for a float64 leaf whose
    every finite element is a float32 number and not every one a simple number (12 significant bits or fewer,
    which any precision gives exactly): a function computed in float32 and cast back (a table built in a float32
    tensor, a gradient returned with ``.float()``) rounds at 1e-7 of its values, whatever its dtype says."""
    eps = _eps(x)
    a = np.asarray(x)
    if eps != _EPS64 or a.dtype not in (np.float64, np.complex128) or a.size == 0:
        return eps
    with np.errstate(all="ignore"):
        flat = a.reshape(-1)  # a 1-d view first: a 0-d complex scalar cannot change its itemsize in place
        flat = flat.view(np.float64) if a.dtype == np.complex128 else flat
        flat = flat[np.isfinite(flat)]
        if flat.size == 0 or not np.array_equal(flat.astype(np.float32).astype(np.float64), flat):
            return eps
        mantissa = np.frexp(flat)[0] * 2.0**12
    return eps if np.all(mantissa == np.round(mantissa)) else _EPS32


# ---------------------------------------------------------------- argument checks


def _check_step(name: str, value: Any) -> None:
    valid = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value) and value > 0
    if value is not None and not valid:
        raise ValueError(f"Got {name}={value!r}, but {name} must be a finite number > 0 (or None for the default)")


def _check_order(order: Any) -> None:
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"Got {order=}, but order must be an int >= 1 (levels of the Richardson table; 4 is a good default)")


# ---------------------------------------------------------------- Richardson core


class StepsExhausted(ValueError):
    """Every step, down to the smallest, reached a point where the function raised or was not finite: the input is
    that close to the edge of its domain (or a pole)."""

    def __init__(self, what: str, first: float, last: float, failure: str) -> None:
        super().__init__(f"{what} failed at a probe point even after shrinking the step from {first:g} to {last:g}: "
                         f"{failure}. Pass max_step smaller than the distance to the edge of the function's domain.")
        self.what, self.first, self.last, self.failure = what, first, last, failure


class _ProbeFailed(Exception):
    """g raised or returned a non-finite value at a probe point."""


def _richardson(g: Callable, h0: float, order: int, input_noise: float = 0.0) -> tuple:
    """Richardson table over central differences of g, which returns (value, noise).

    `noise` is g's own absolute rounding error at that point (e.g. eps * |y|, or
    eps * sum |c| |y| for a contraction <c, y>); `input_noise` is the absolute error
    in g caused by rounding the probe points. Returns (value, error) for the table
    entry with the smallest estimated error (truncation plus amplified rounding).
    """
    diffs, rounding = [], []
    for k in range(order):
        h = h0 / _RATIO**k
        (yp, np_), (ym, nm) = g(h), g(-h)
        diffs.append((yp - ym) / (2 * h))
        if type(np_) is float and type(nm) is float and np.ndim(input_noise) == 0:
            # a contraction's noise: the same sum in plain floats (no 0-d arrays, no NumPy scalars)
            rounding.append((np_ + nm + float(input_noise)) / (2 * h))
        else:
            rounding.append((np.asarray(np_) + np.asarray(nm) + input_noise) / (2 * h))
    if order == 1:
        return diffs[0], np.inf
    # Each entry is (value, weights on the base differences); the weights price the rounding. The weights
    # are plain floats (the rows of an identity matrix, combined element by element as the values are), and
    # a table of scalars (a contraction) is computed in plain floats: the same IEEE operations in the same
    # order as with NumPy's scalars, without their cost per operation.
    table = [[(diffs[k], [1.0 if i == k else 0.0 for i in range(order)])] for k in range(order)]
    for j in range(1, order):
        factor = _RATIO ** (2 * j) - 1
        for k in range(j, order):
            (hi, w_hi), (lo, w_lo) = table[k][j - 1], table[k - 1][j - 1]
            table[k].append((hi + (hi - lo) / factor, [a + (a - b) / factor for a, b in zip(w_hi, w_lo)]))
    best = (diffs[0], np.inf)
    for j in range(1, order):
        for k in range(j, order):
            value, weights = table[k][j]
            # A converged entry agrees with the entry it refines and with its same-order
            # neighbours at the adjacent steps; two entries agreeing by coincidence rarely do.
            neighbours = [table[k - 1][j - 1][0]] + [table[i][j][0] for i in (k - 1, k + 1) if j <= i < order]
            truncation = _largest([abs(value - other) for other in neighbours])
            noise = _SAFETY * sum(_weighted(w, r) for w, r in zip(weights, rounding))
            total = truncation + noise
            error = float(total) if np.ndim(total) == 0 else float(np.max(total))
            if error < best[1]:
                best = (value, error)
    return best


def _weighted(w: float, r: Any) -> Any:
    """|w| r, with w a NumPy float64 where ``r`` is of another type (a float32 array stays float32 times a
    Python float, but becomes float64 times a NumPy one, as it did when the weights were NumPy rows)."""
    return abs(w) * r if type(r) is float or type(r) is np.float64 else np.float64(abs(w)) * r


def _largest(values: list) -> Any:
    """The element-wise maximum of scalars or arrays, NaN where any is NaN (as ``np.max(values, axis=0)``)."""
    if all(type(v) is float for v in values):
        return math.nan if any(v != v for v in values) else max(values)
    return functools.reduce(np.maximum, values)


def _with_shrinking(run: Callable[[float], tuple], h0: float, what: str) -> tuple:
    """Call run(h) with h0, dividing the step by 8 when a probe point fails; returns (result, h)."""
    h = h0
    for _ in range(_SHRINKS + 1):
        try:
            return run(h), h
        except _ProbeFailed as failure:
            last = failure
            h /= 8
    raise StepsExhausted(what, h0, h * 8, str(last)) from last.__cause__


def _probe(fn: Callable, t: float) -> Any:
    """fn(t), turning exceptions and non-finite values into _ProbeFailed."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            result = fn(t)
    except Exception as exc:
        raise _ProbeFailed(f"raised {exc!r} at t={t!r}") from exc
    value = result[0] if isinstance(result, tuple) else result
    if not (math.isfinite(value) if type(value) is float else np.all(np.isfinite(value))):
        raise _ProbeFailed(f"returned a non-finite value at t={t!r}")
    return result


def _default_step(order: int, noise: float) -> float:
    """Largest step balancing truncation ~h^(2 order) against rounding ~noise/h."""
    return noise ** (1.0 / (2 * order + 1))


def _plain(value: Any) -> Any:
    value = np.asarray(value)
    return value.item() if value.ndim == 0 else value


def derivative(g: Callable, *, step: float | None = None, max_step: float | None = None, order: int = 4) -> Derivative:
    """d/dt g(t) at t = 0 for g: float -> float | complex | ndarray, by central differences.

    Richardson extrapolation over `order` levels of step halving starting at `step`
    (default: about 1.8e-2 for order 4, chosen for float64; 6e-6 for order 1, which
    has no error estimate and reports error=inf). Evaluations stay within
    [-max_step, max_step]. If g raises or returns a non-finite value at a probe
    point, the step is divided by 8 (up to 4 times) before a ValueError.
    """
    if not callable(g):
        raise TypeError(f"Got g={g!r}, but g must be a callable taking a float t")
    _check_step("step", step)
    _check_step("max_step", max_step)
    _check_order(order)
    h0 = _default_step(order, _EPS64) if step is None else float(step)
    if max_step is not None:
        h0 = min(h0, float(max_step))
    calls = 0

    def evaluate(t: float) -> tuple:
        nonlocal calls
        calls += 1
        y = np.asarray(g(t))
        return y, _eps(y) * np.abs(y)

    run = lambda h: _richardson(lambda t: _probe(evaluate, t), h, order)  # noqa: E731
    (value, error), h = _with_shrinking(run, h0, "g")
    return Derivative(_plain(value), float(error), calls, "richardson", h)


# ---------------------------------------------------------------- complex step


def complex_step(g: Callable, *, step: float = 1e-20) -> Derivative:
    """Im(g(i h)) / h for g analytic on the real line: no cancellation, exact to rounding.

    Raises TypeError if g does not accept complex input and ValueError if it returns
    a real value (it dropped the imaginary part: abs, np.real, float(), ...). For
    steps above 1e-8 a second evaluation at h/2 estimates the O(h^2) truncation.
    """
    if not callable(g):
        raise TypeError(f"Got g={g!r}, but g must be a callable taking a (complex) t")
    _check_step("step", step)
    h = float(step)

    def at(t: float) -> np.ndarray:
        try:
            y = np.asarray(g(1j * t))
        except Exception as exc:
            raise TypeError(
                f"g raised {exc!r} when called with the complex t={1j * t!r}; the complex step needs a "
                f"function written for complex input. Use derivative(g) instead."
            ) from exc
        if not np.iscomplexobj(y):
            raise ValueError(
                f"g returned the real value {y!r} for the complex t={1j * t!r}, so it dropped the imaginary "
                f"part (abs, np.real, float(), a real output buffer). Use derivative(g) instead."
            )
        return y

    y = at(h)
    value = np.imag(y) / h
    if not np.all(np.isfinite(value)):
        raise ValueError(f"g returned the non-finite {y!r} at t={1j * h!r}; the complex step needs g finite near 0")
    # Rounding relative to the value and, for cancellation inside the chain rule, to |g| itself.
    error = _SAFETY * _eps(y) * (np.abs(value) + np.abs(np.real(y)))
    calls = 1
    if h > 1e-8:
        half = np.imag(at(h / 2)) / (h / 2)
        calls, error = 2, error + np.abs(value - half) * 4 / 3
        value = half + (half - value) / 3
    return Derivative(_plain(value), float(np.max(error, initial=0.0)), calls, "complex-step", h)


# ---------------------------------------------------------------- directional derivatives


def _fresh(a: Any) -> Any:
    """A copy f may mutate without touching the caller's value."""
    if isinstance(a, np.ndarray):
        return np.array(a, copy=True, order="K")
    return copy.deepcopy(a) if isinstance(a, (list, dict, set)) else a


class _NotGiven:
    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN = _NotGiven()  # directional's `base` where the caller has no value of f at the base point


def _unmoved(args: Sequence, directions: Sequence) -> bool:
    """Whether every moving argument, moved by 0 (what the call at the base point receives), keeps exactly its
    bits: a C-contiguous array of a float or complex dtype whose elements compare bit for bit."""
    for a, v in zip(args, directions):
        if v is None:
            continue
        if not (isinstance(a, np.ndarray) and a.dtype.kind in "fc" and a.flags.c_contiguous):
            return False
        point = _moved(a, v, 0.0)
        if not (isinstance(point, np.ndarray) and point.dtype == a.dtype and point.shape == a.shape
                and point.flags.c_contiguous):
            return False
        width = {2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.uint64}.get(a.dtype.itemsize)
        if width is None or not np.array_equal(point.reshape(-1).view(width), a.reshape(-1).view(width)):
            return False
    return True


def _moved(a: Any, v: Any, t: complex) -> Any:
    """a + t v in float64/complex128 arithmetic, returned in a's own precision and type."""
    if (type(t) is float and type(a) is np.ndarray and type(v) is np.ndarray and a.dtype == _F64 and v.dtype == _F64
            and a.ndim and a.flags.c_contiguous and v.flags.c_contiguous):
        return _added(a, v, t)  # the common case, decided without the general path's dtype promotions
    arr = np.asarray(a)
    dtype = arr.dtype
    if isinstance(t, complex) and not np.issubdtype(dtype, np.complexfloating):
        dtype = np.result_type(dtype, np.complex64)
    wide = np.complex128 if np.issubdtype(dtype, np.complexfloating) else np.float64
    step = np.asarray(v)
    if (arr.ndim and arr.dtype == wide and step.dtype == wide and not isinstance(t, complex)
            and arr.flags.c_contiguous and step.flags.c_contiguous):
        point = _added(arr, step, t)
    else:
        point = (arr.astype(wide) + t * step.astype(wide)).astype(dtype)
    if isinstance(a, np.ndarray):
        return point
    return point[()] if isinstance(a, np.generic) else point.item()


def _added(a: np.ndarray, v: np.ndarray, t: float) -> np.ndarray:
    """a + t v for C-contiguous arrays of one wide dtype: the sum without the copies astype makes (one new
    array on large inputs instead of four)."""
    point = np.multiply(v, t)
    np.add(a, point, out=point)
    return point


_F64 = np.dtype(np.float64)


def _check_directional(args: Any, directions: Any, max_step: Any, complex_step: Any) -> list[int]:
    for name, value in (("args", args), ("directions", directions)):
        if not isinstance(value, (tuple, list)):
            raise TypeError(f"Got {name}={value!r}, but {name} must be a tuple or list (one entry per argument of f)")
    if len(args) != len(directions):
        raise ValueError(
            f"Got {len(args)} args but {len(directions)} directions; pass one direction per argument "
            f"(None for arguments that do not move)"
        )
    _check_step("max_step", max_step)
    if complex_step not in ("auto", True, False):
        raise ValueError(f"Got {complex_step=}, but complex_step must be 'auto', True or False")
    moving = [i for i, v in enumerate(directions) if v is not None]
    if not moving:
        raise ValueError("Got directions that are all None; at least one argument must move")
    for i in moving:
        a, v = np.asarray(args[i]), np.asarray(directions[i])
        if not np.issubdtype(a.dtype, np.inexact):
            raise ValueError(f"Got args[{i}] of dtype {a.dtype}, which cannot move; pass None as its direction (or a float argument)")
        if a.shape != v.shape:
            raise ValueError(f"Got directions[{i}] of shape {v.shape} for args[{i}] of shape {a.shape}; shapes must match")
        if np.iscomplexobj(v) and not np.iscomplexobj(a):
            raise ValueError(f"Got a complex directions[{i}] for the real args[{i}]; a real argument moves along a real direction")
        if not np.all(np.isfinite(v)):
            raise ValueError(f"Got directions[{i}] with non-finite entries; directions must be finite")
    return moving


def first_step(args: Sequence, directions: Sequence) -> float:
    """The step :func:`directional`'s first table starts at for these moving arguments, where the output's
    precision is no coarser than theirs (its coarsest step: finer tables and :func:`confirmed`'s only shrink it)."""
    eps = max([_eps(a) for a, v in zip(args, directions) if v is not None] + [_EPS64])
    return _default_step(4, eps)


def budget(args: Sequence) -> dict[str, Any]:
    """Keyword arguments for :func:`directional` suited to the size of ``args``: the default six-level table
    (and complex-step attempt) up to LARGE_INPUT elements in all, three levels and no complex step beyond."""
    size = sum(int(np.size(a)) for a in _leaves(list(args)) if isinstance(a, np.ndarray))
    return {} if size <= LARGE_INPUT else {"levels": SHALLOW_LEVELS, "complex_step": False}


def quick(args: Sequence) -> dict[str, Any] | None:
    """Keyword arguments for a shallow table (SHALLOW_LEVELS levels: 6 evaluations instead of 12) to try before
    :func:`budget`'s on ``args``, for a caller that settles a pass on it only where its error estimate is within the
    tolerance (`tolerances.settles`) and takes the full table otherwise; None where ``budget``'s table is that
    shallow already (large arguments)."""
    return {"levels": SHALLOW_LEVELS} if not budget(args) else None


def directional(
    f: Callable,
    args: Sequence,
    directions: Sequence,
    cotangent: Any = None,
    *,
    max_step: float | None = None,
    complex_step: bool | str = "auto",
    levels: int = _LEVELS,
    base: Any = NOT_GIVEN,
    computed_at: float | None = None,
) -> Derivative:
    """d/dt <cotangent, f(*(a + t v))> at t = 0, or d/dt f(...) itself when cotangent is None.

    `directions` has one entry per argument, None for arguments that do not move.
    Every call of f gets fresh copies of its arguments, so f may mutate them. The
    cost does not depend on the size of the arguments (1 for the base point, 2 for
    the rounding probes, 12 for a six-level Richardson table, 1 for a complex step).
    `complex_step`: "auto" also tries the complex step when every moving argument
    is real and f maps complex input to complex output, and keeps it only when it
    agrees with the Richardson value within that value's error; True uses only the
    complex step (ValueError/TypeError if impossible); False never uses it.
    `levels`: depth of the Richardson table (2 evaluations each); fewer levels
    cost less on expensive functions and report a larger error estimate.
    `base`: f's value at `args` themselves, where the caller already has it
    from a call on equal copies and vouches that f is deterministic there. It
    stands in for the call at the base point only where every point
    a + 0 v holds exactly a's bits (it does not where, say, a holds -0.0 and v
    is positive); that call is then saved and not counted in `evaluations`.
    f must not write into it: only its contraction with the cotangent is read.
    `computed_at`: the machine epsilon f computes at where the caller knows it and f's output does not show
    it (a float64 program through a rule that returns float32: NeMo's RNN-T loss, whose table at float64's
    steps was flat, a slope of 0 where it is -0.369): the steps are chosen for it and its rounding priced in.
    """
    if not callable(f):
        raise TypeError(f"Got f={f!r}, but f must be callable")
    if not isinstance(levels, int) or isinstance(levels, bool) or levels < 2:
        raise ValueError(f"Got {levels=}, but levels must be an int >= 2")
    moving = _check_directional(args, directions, max_step, complex_step)
    calls = 0

    def call(t: complex, along: Sequence = directions) -> Any:
        nonlocal calls
        calls += 1
        point = [_fresh(a) if v is None else _moved(a, v, t) for a, v in zip(args, along)]
        return f(*point)

    try:
        base = base if base is not NOT_GIVEN and _unmoved(args, directions) else call(0.0)
    except Exception as exc:
        raise ValueError(f"f raised {exc!r} at the given args, before any step was taken") from exc
    if cotangent is None and _is_node(base):
        raise ValueError(
            f"f returned a {type(base).__name__} of {len(base)} outputs; pass a cotangent with the same "
            f"structure to contract them"
        )
    try:
        inner(cotangent, base)
    except ValueError as exc:
        raise ValueError(f"The cotangent does not match f's output: {exc}") from None
    out_eps = max([_eps(leaf) for leaf in _leaves(base) if leaf is not None] + [_EPS64])
    # The rounding each evaluation carries: at the precision f computed in (float32 inside a float64 function rounds
    # at 1e-7), which widens the error bound; the steps stay those of the dtype, fine enough for what f resolves.
    noise_eps = max([computed_eps(leaf) for leaf in _leaves(base) if leaf is not None] + [_EPS64, computed_at or 0.0])
    in_eps = max([_eps(args[i]) for i in moving] + [computed_at or 0.0])
    base_complex = any(np.iscomplexobj(leaf) for leaf in _leaves(base))

    def contract(out: Any) -> tuple:
        """(value, its rounding noise) of the contraction with the cotangent."""
        if cotangent is None:
            y = np.asarray(out)
            return y.astype(np.result_type(y.dtype, np.float64)), noise_eps * np.abs(y)
        return inner(cotangent, out), noise_eps * _abs_inner(cotangent, out)

    base_value = contract(base)[0]
    del base  # only its contraction is read from here on: on large inputs f's output is a copy of them
    if complex_step is True:
        value, error = _complex_directional(call, contract, args, moving, base_complex, forced=True)
        return Derivative(_plain(value), error, calls, "complex-step", _CS_STEP)

    h0 = _default_step(4, max(in_eps, out_eps))  # tuned for 4 levels; 2 more refine it
    if max_step is not None:
        h0 = min(h0, float(max_step))
    input_noise = in_eps * _rounding_scale(call, contract, base_value, args, directions, h0, in_eps)
    run = lambda h: _richardson(lambda t: _probe(lambda s: contract(call(s)), t), h, levels, input_noise)  # noqa: E731
    (value, error), h = _with_shrinking(run, h0, "f")
    if complex_step == "auto":
        try:
            cs_value, cs_error = _complex_directional(call, contract, args, moving, base_complex, forced=False)
            gap = float(np.max(np.abs(cs_value - value)))
            if gap <= error:  # a non-analytic f (abs, conj, a real part) gives a different value
                return Derivative(_plain(cs_value), max(cs_error, gap), calls, "complex-step", _CS_STEP)
        except _ProbeFailed:
            pass
    return Derivative(_plain(value), float(error), calls, "richardson", h)


def _rounding_scale(call: Callable, contract: Callable, base_value: Any, args: Sequence, directions: Sequence, h: float,
                    eps: float = _EPS64) -> Any:
    """About |sum_i dg/dx_i x_i s_i| for random signs s: how much rounding the inputs moves g.

    Rounding a probe point perturbs each x_i by ~eps |x_i| with unknown signs. Differences
    along w = x * s for two sign patterns (the larger one, so that one unlucky
    cancellation does not hide the scale), rescaled to the size of the directions so
    they move no further than the main probes, price that at two evaluations. Where the
    moving inputs are a narrower float (``eps``, their epsilon, above float64's), the probe
    moves them by at least ROUNDING_PROBE_SPACINGS of their spacings: at the steps of a
    deep table (2.3e-4 on float16 inputs near 1, whose spacing is 4.9e-4) the probe point
    rounded back onto the input, the scale read 0, and a table flat at those steps claimed
    its slope of 0 with no error.
    """
    moving = [(np.asarray(a), np.asarray(v)) for a, v in zip(args, directions) if v is not None]
    reach = max(float(np.max(np.abs(a), initial=0.0)) for a, _ in moving)
    size = max(float(np.max(np.abs(v), initial=0.0)) for _, v in moving)
    if reach == 0 or size == 0:
        return 0.0
    if eps > _EPS64:
        h = max(h, ROUNDING_PROBE_SPACINGS * eps * reach / size)
    scale = 0.0
    for signs in _sign_patterns(tuple(np.shape(a) for a, _ in moving)):
        drawn = iter(signs)
        along = [None if v is None else _signed(a, next(drawn), size / reach) for a, v in zip(args, directions)]
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                moved, _ = contract(call(h, along))
        except Exception:
            continue  # e.g. the probe left the domain; the table's spread still sees the noise
        slope = np.abs(moved - base_value) / h * (reach / size)
        scale = np.maximum(scale, np.where(np.isfinite(slope), slope, 0.0))
    return scale


ROUNDING_PROBE_SPACINGS = 8.0  # _rounding_scale's least move of narrow-float inputs, in their spacings

_SIGNS: dict[tuple, list[list[np.ndarray]]] = {}
_SIGNS_KEEP = 256


def _sign_patterns(shapes: tuple) -> Iterator[list[np.ndarray]]:
    """The two rounds of random signs of `_rounding_scale`, one array per moving argument's shape: always
    those a generator seeded with 0 draws for these shapes in this order. Made once per shapes up to
    LARGE_INPUT elements in all and handed out as copies (`_signed` writes into them); drawn afresh beyond."""
    kept = _SIGNS.get(shapes)
    if kept is None:
        rng = np.random.default_rng(0)
        rounds = ([rng.choice([-1.0, 1.0], size=shape) for shape in shapes] for _ in range(2))
        if sum(math.prod(shape) for shape in shapes) > LARGE_INPUT:
            yield from rounds
            return
        if len(_SIGNS) >= _SIGNS_KEEP:
            _SIGNS.clear()
        kept = _SIGNS[shapes] = list(rounds)
        for signs in kept:
            for array in signs:
                array.flags.writeable = False
    for signs in kept:
        yield [array.copy() for array in signs]


def _signed(a: Any, signs: Any, factor: float) -> Any:
    """``a * signs * factor``, computed in the array of signs where it can hold the result (no temporaries)."""
    if isinstance(signs, np.ndarray) and signs.ndim and np.result_type(np.asarray(a).dtype, signs.dtype) == signs.dtype:
        np.multiply(a, signs, out=signs)
        np.multiply(signs, factor, out=signs)
        return signs
    return a * signs * factor


def _complex_directional(call: Callable, contract: Callable, args: Sequence, moving: list[int], base_complex: bool, *,
                         forced: bool) -> tuple:
    """(value, error) of the complex step Im(<c, f(a + i h v)>) / h; _ProbeFailed when impossible."""

    def impossible(reason: str, exc: type = ValueError):
        if forced:
            raise exc(f"complex_step=True is impossible: {reason}. Pass complex_step='auto' or False.")
        raise _ProbeFailed(reason)

    if any(np.iscomplexobj(args[i]) for i in moving):
        impossible("a moving argument is complex (the complex step needs real arguments)")
    if base_complex:
        impossible("f returns complex output for real input (the complex step needs a real-valued f)")
    h = _CS_STEP
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = call(1j * h)
    except Exception as exc:
        impossible(f"f raised {exc!r} on complex input", TypeError)
    if not any(np.iscomplexobj(leaf) for leaf in _leaves(out)):
        impossible("f returned real output for complex input, so it dropped the imaginary part")
    value, noise = contract(_tree_map(np.imag, out))
    value, noise = np.asarray(value) / h, np.asarray(noise) / h + contract(_tree_map(np.real, out))[1]
    if not np.all(np.isfinite(value)):
        impossible("the complex step gave a non-finite value")
    return value, float(np.max(_SAFETY * noise, initial=0.0))


def confirmed(f: Callable, args: Sequence, directions: Sequence, cotangent: Any = None, *,
              refinements: int = _REFINEMENTS, first: Derivative | None = None, **options: Any) -> Derivative:
    """:func:`directional`, confirmed by Richardson tables started at steps 32, 32**2, ... times smaller.

    One table's error estimate trusts that its steps resolve ``f``: a function that oscillates on a finer
    scale (``sin(x**x)`` near x = 6 turns every 5e-5) can make its entries agree by coincidence, and the
    estimate then claims 1% where the value is off by 90%. Tables whose steps differ 32-fold are not fooled
    alike. Each successive pair gives a candidate: the sharper table's value, with an error of at least the
    gap between the two. Refining stops once the other table lies within the sharper one's error (then
    the sharper one stands as it is), after ``refinements`` further tables, or when finer probes fail (the
    edge of the function's domain); the candidate with the smallest error is returned, its error widened
    to cover any table at a finer step that contradicts it (what the candidate's steps averaged away: an
    oscillation finer than they are, which no later table confirmed either way), by more than a few times
    that table's own error (`_CONTRADICTS`: rounding's spread at fine steps is no contradiction). A complex-step
    value (exact to rounding, and already checked against a table) is not refined. ``options`` are
    :func:`directional`'s (``max_step`` bounds every table). Costs one more table on a function the first
    table resolves. ``first``: that first table where the caller already has it (:func:`directional` with the
    same arguments and options); it is not computed again, nor counted in ``evaluations``.
    """
    if not isinstance(refinements, int) or isinstance(refinements, bool) or refinements < 0:
        raise ValueError(f"Got {refinements=}, but refinements must be an int >= 0")
    coarse = directional(f, args, directions, cotangent, **options) if first is None else first
    if coarse.method == "complex-step":
        return coarse
    tables, calls, best, finest = [coarse], 0 if first is not None else coarse.evaluations, None, 0
    for _ in range(refinements):
        limit = coarse.step / _REFINE
        try:
            fine = directional(f, args, directions, cotangent,
                               **{**options, "max_step": min(limit, options.get("max_step") or limit)})
        except ValueError:
            break  # the finer probes fail where the coarser ones ran: keep what was seen
        calls += fine.evaluations
        tables.append(fine)
        gap = float(np.max(np.abs(np.asarray(fine.value) - np.asarray(coarse.value))))
        sharper = min((coarse, fine), key=lambda d: d.error)
        candidate = Derivative(sharper.value, max(sharper.error, gap), 0, sharper.method, sharper.step)
        if best is None or candidate.error < best.error:
            best, finest = candidate, len(tables) - 1
        if gap <= sharper.error:
            break  # confirmed: the other table lies within the sharper one's error
        coarse = fine
    if best is None:  # no finer table ran: the first stands unconfirmed
        return Derivative(tables[0].value, tables[0].error, calls, tables[0].method, tables[0].step)
    # A table at a finer step than the candidate's pair that contradicts it (beyond the candidate's error and
    # `_CONTRADICTS` of its own) saw what the candidate's steps average away (y + sin(y) / 2 with y = exp(x) ~ 1e8
    # turns every 6e-8 in x: steps of 1e-2 and 6e-4 agree on the slope without the cos(y) / 2 term). Nothing here
    # tells which scale is right, so the error bound covers the contradiction; coarser tables cannot contradict,
    # as a nearby pole or oscillation is what fools them.
    error = best.error
    for table in tables[finest + 1:]:
        apart = float(np.max(np.abs(np.asarray(table.value) - np.asarray(best.value))))
        if apart > _CONTRADICTS * table.error + best.error:
            error = max(error, apart)
    return Derivative(best.value, error, calls, best.method, best.step)
