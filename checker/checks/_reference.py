"""GG203's JAX reference: which function JAX differentiates, and whether it is the user's primal around the input.

:func:`jax_tangents` is the reference ``J^T cotangent``: ``jax.vjp`` of the function underneath a
``custom_vjp``, or of a NumPy rule's primal as JAX traces it. For a NumPy rule the reference is ``jax.vjp`` of the primal as JAX traces it, if need be with its
``numpy`` calls run as ``jax.numpy``. The two can be different functions that agree at the input only:
``np.linalg.eigvalsh`` reads one triangle of its argument while ``jnp.linalg.eigvalsh`` symmetrises it, so
at a symmetric input the values agree and the derivatives do not. A derivative depends on the function
around the input, so the reference is used only where it is shown to be the same function there: its
values agree with the primal's at the input and at points ``x +- h d`` along seeded random directions
and along the directions the check itself uses. Where they do not (or cannot be compared), GG203 skips
the input with the reason; finite differences of the user's own primal (GG201) still judge it.
"""

from __future__ import annotations

import functools
import itertools
import warnings
import weakref
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from gradguard.checker.case import Case
from gradguard.checker.checks._jax import bind_nondiff, first_line, jax_ready, spread
from gradguard.checker.checks._vjp import _primal
from gradguard.checker.kinks import shifted
from gradguard.checker.checks.registry import Skip
from gradguard.checker.trees import children, is_leaf, leaves, rebuild, tree_map
from gradguard.checker.foreign import is_foreign_layer

__all__ = [
    "jax_tangents",
    "same_around",
    "REFERENCE",
    "TRANSLATED",
    "tuple_like",
    "check_faithful",
    "same_function_around",
    "RANDOM_DIRECTIONS",
    "RELATIVE_STEP",
]

RANDOM_DIRECTIONS = 2  # seeded random directions along which the reference must match the primal
RELATIVE_STEP = 1e-3  # the points compared lie this far from x (relative to its largest element, at least 1)
RETRIES = 2  # a point outside the primal's domain is retried this many times, each 100 times closer

NOT_FAITHFUL = "the primal run with jax.numpy in place of numpy computes other values here, so JAX gives no reference"


def tuple_like(out: Any, cotangent: Any) -> Any:
    """``out`` with the cotangent's container types (JAX returns lists where the primal built tuples)."""
    if not is_leaf(cotangent) and not is_leaf(out):
        return rebuild(cotangent, (tuple_like(o, c) for o, c in zip(children(out), children(cotangent))))
    return out


def _agree(case: Case, got: Any, want: Any) -> bool:
    a, b = leaves(tuple_like(got, want)), leaves(want)
    tol = case.tol
    return len(a) == len(b) and all(
        np.shape(x) == np.shape(y)
        and np.allclose(np.asarray(x), np.asarray(y), rtol=tol.rtol, atol=tol.atol, equal_nan=True)
        for x, y in zip(a, b)
    )


def check_faithful(case: Case, jax_out: Any) -> None:
    """Skip unless the jax.numpy copy of the primal computes the primal's values at this input."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = case.input_primal()  # the value GG102 saw, where the forward's output showed it is the input's
    if not _agree(case, jax_out, want):
        raise Skip(NOT_FAITHFUL)


def _random_directions(case: Case) -> Iterator[tuple[Any, ...]]:
    """The seeded random directions, made one at a time (on large inputs each is a copy of the arguments)."""
    rng = np.random.default_rng(3)
    for _ in range(RANDOM_DIRECTIONS):
        d: list[Any] = [None] * case.nargs
        for i in case.diff_positions:
            a = case.args[i]
            g = rng.standard_normal(np.shape(a))
            if np.iscomplexobj(a):
                g = g + 1j * rng.standard_normal(np.shape(a))
            d[i] = np.asarray(g, dtype=np.asarray(a).dtype) if isinstance(a, np.ndarray) else g.item()
        yield tuple(d)


def _normalised(d: tuple[Any, ...], own: bool = False) -> tuple[Any, ...] | None:
    """``d`` over its largest element; with ``own`` (a direction made here), its arrays divided in place."""
    size = max((float(np.max(np.abs(v), initial=0.0)) for v in d if v is not None), default=0.0)
    if not (size > 0 and np.isfinite(size)):
        return None
    if own:
        for v in d:
            if isinstance(v, np.ndarray):
                v /= size
        return tuple(v if v is None or isinstance(v, np.ndarray) else v / size for v in d)
    return tuple(None if v is None else v / size for v in d)


def same_function_around(case: Case, reference: Callable[..., Any], directions: Sequence[tuple[Any, ...]] = ()) -> None:
    """Skip unless ``reference`` (a function JAX runs on the case's arguments, returning NumPy values) computes
    the primal's values at ``x +- h d`` for seeded random directions and for ``directions``.

    ``h`` is ``RELATIVE_STEP`` times the largest element of the differentiable arguments (at least 1); a point
    where the primal raises is retried closer. A direction with no comparable point at all is no evidence,
    and without evidence the reference is not used.

    Where the reference has a ``batch`` (`_reference_values`) and the inputs are small, the primal runs at every
    point first and the reference at all of them in one run; the verdict, and the point a Skip names, are those
    of comparing one point at a time, which is what happens where the batch cannot run."""
    primal = _primal(case)
    reach = max((float(np.max(np.abs(np.asarray(case.args[i])), initial=0.0)) for i in case.diff_positions), default=0.0)
    # One direction, one point at a time, each dropped before the next is made: on large inputs every
    # direction, point and value is a copy of the arguments or the output.
    sources = itertools.chain(((True, r) for r in _random_directions(case)), ((False, d) for d in directions))
    batch = getattr(reference, "batch", None)
    size = sum(int(np.size(case.args[i])) for i in case.diff_positions)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        steps = [sign * RELATIVE_STEP * max(1.0, reach) for sign in (1.0, -1.0)]
        if batch is not None and size <= BATCHED_UP_TO:
            compared = _compared_in_one_run(case, primal, reference, batch, _units(sources), steps)
        else:
            compared = sum(_compared_along(case, primal, reference, unit, h) for unit in _units(sources) for h in steps)
    if compared == 0:
        raise Skip(
            "JAX's reference could not be compared with the primal at any point around this input (the primal "
            "raised at each), so it is not shown to be the same function there"
        )


BATCHED_UP_TO = 4096  # differentiable elements up to which the points around an input are compared in one run


def _primal_along(case: Case, primal: Callable[..., Any], unit: tuple[Any, ...], h: float) -> tuple[tuple[Any, ...], float, Any] | None:
    """The point ``x + h unit`` (retried closer where the primal raises), its step and the primal's value there;
    None where the primal raised at every try."""
    for _ in range(RETRIES + 1):
        moved = shifted(case.args, unit, h)
        try:
            return moved, h, primal(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in moved])
        except Exception:  # noqa: BLE001 - outside the primal's domain: try closer
            h /= 100
    return None


def _units(sources: Iterator[tuple[bool, Any]]) -> Iterator[tuple[Any, ...]]:
    """The directions of ``sources`` over their largest element (`_normalised`), those that move at all."""
    for own, d in sources:
        unit = _normalised(d, own)
        del d
        if unit is not None:
            yield unit


def _compared_in_one_run(case: Case, primal: Callable[..., Any], reference: Callable[..., Any],
                         batch: Callable[[list[tuple[Any, ...]]], list[Any] | None], units: Iterator[tuple[Any, ...]],
                         steps: list[float]) -> int:
    """`same_function_around`'s comparisons with the reference run once for every point (`batch`); where that
    run cannot be made, the reference runs at each point in turn, as `_compared_along` runs it."""
    points = [found for unit in units for h in steps if (found := _primal_along(case, primal, unit, h)) is not None]
    if not points:
        return 0
    got = batch([moved for moved, _, _ in points])
    for k, (moved, h, want) in enumerate(points):
        _judge_point(case, reference, moved, h, want, _NOT_RUN if got is None else got[k])
    return len(points)


_NOT_RUN = object()  # `_judge_point`: the reference's value is not known yet


def _judge_point(case: Case, reference: Callable[..., Any], moved: tuple[Any, ...], h: float, want: Any,
                 got: Any = _NOT_RUN) -> None:
    """Skip unless the reference's value at ``moved`` (``got``, or run here) agrees with the primal's ``want``."""
    if got is _NOT_RUN:
        try:
            got = reference(*moved)
        except Exception as exc:  # noqa: BLE001 - the reference fails where the primal does not
            raise Skip(
                f"JAX's reference is not the same function as the primal around this input: it raised "
                f"{type(exc).__name__} at a point {abs(h):.1g} away, where the primal did not"
            ) from None
    if not _agree(case, got, want):
        raise Skip(
            "JAX's reference is not the same function as the primal around this input: their values "
            f"differ at a point {abs(h):.1g} away, so its derivative is no evidence about the primal's; "
            "finite differences of the primal (GG201) judge this input"
        )


def _compared_along(case: Case, primal: Callable[..., Any], reference: Callable[..., Any], unit: tuple[Any, ...],
                    h: float) -> int:
    """1 where the primal and the reference agree at ``x + h unit`` (retried closer where the primal raises),
    0 where the primal raised at every try; skips where the reference raises or their values differ."""
    found = _primal_along(case, primal, unit, h)
    if found is None:
        return 0
    _judge_point(case, reference, *found)
    return 1


# -- the reference ----------------------------------------------------------------------------------
_UNTRACEABLE = "gg203_untraceable"  # RuleSpec.extra key: why JAX cannot trace this rule's primal (asked once)
REFERENCE = "gg203_reference"  # RuleSpec.extra key: the primal JAX traces for GG203 (chosen once)
TRANSLATED = "_gradguard_jax_numpy"  # marks a primal copy whose numpy names mean jax.numpy
_SIGNATURES = "gg203_signatures"  # RuleSpec.extra key: input shapes GG203 built a reference for (NumPy rules)
NUMPY_SIGNATURES = 2  # at most this many input shapes per NumPy rule get a JAX reference (traced, or compiled)


def jax_tangents(case: Case, cotangent: Any) -> tuple[Any, ...]:
    """JAX's reference ``J^T cotangent`` of the primal's own code (JAX's convention), None at nondiff positions.

    The primal is traced as it is (the function underneath a custom_vjp, or a
    NumPy primal that JAX happens to trace); a NumPy primal that JAX cannot
    trace is traced once more with its module's ``numpy`` replaced by
    ``jax.numpy`` (:func:`_as_jax_numpy`), and used only where that version
    computes the same values. Skip with the reason when neither traces.
    """
    rule = case.rule
    if _UNTRACEABLE in rule.extra:
        raise Skip(rule.extra[_UNTRACEABLE])
    if rule.kind != "jax":
        signatures = rule.run_state.setdefault(_SIGNATURES, set())
        signature = tuple((np.shape(case.args[i]), str(np.asarray(case.args[i]).dtype)) for i in case.diff_positions)
        if signature not in signatures and (len(signatures) >= NUMPY_SIGNATURES or (signatures and not _telling(signature))):
            raise Skip(
                f"JAX builds the reference once per input shape (traces it, and compiles it where it holds operations "
                f"run only by XLA); for NumPy rules GG203 is checked on {NUMPY_SIGNATURES} shapes only (the first drawn, "
                "then one whose dimensions all differ), so that building references does not eat the other checks' time"
            )
        signatures.add(signature)
    jax_ready(case)
    own = rule.extra.get("jax_primal", rule.primal)
    chosen = rule.extra.get(REFERENCE)
    if chosen is not None:
        return same_around(case, chosen, _vjp_of(case, chosen, cotangent))
    try:
        out = _vjp_of(case, own, cotangent)
        rule.extra[REFERENCE] = own
        return same_around(case, own, out)
    except _Untraceable as exc:
        reason = str(exc)
    translated = _as_jax_numpy(own) if rule.kind != "jax" else None
    if translated is not None:
        try:
            out = _vjp_of(case, translated, cotangent)
            rule.extra[REFERENCE] = translated
            return same_around(case, translated, out)
        except _Untraceable:
            pass
    rule.extra[_UNTRACEABLE] = reason
    raise Skip(reason)


def same_around(case: Case, reference: Callable[..., Any], out: tuple[Any, ...], directions: Any = ()) -> tuple[Any, ...]:
    """``out``, once the reference is shown to be the primal's function around the input (NumPy rules: JAX
    traces another implementation of it; a JAX rule's reference is its own primal's code)."""
    if case.rule.kind != "jax":
        same_function_around(case, _reference_values(case, reference), directions)
    return out


def _reference_values(case: Case, primal: Callable[..., Any]) -> Callable[..., Any]:
    """The reference's values (NumPy) at given arguments: as under jit (`run_traced`, as for its vjp), eagerly
    for primals jit refuses."""
    from gradguard.engines import jax_engine

    bound, diff = bind_nondiff(primal, case)

    def values(*args: Any) -> Any:
        try:
            return jax_engine.run_traced(bound, [args[i] for i in diff], transform="jit", family=(primal, diff))
        except Exception:  # noqa: BLE001 - not jittable: run it eagerly
            return tree_map(lambda v: None if v is None else np.asarray(v), primal(*args))

    def batch(points: list[tuple[Any, ...]]) -> list[Any] | None:
        """The reference's values at each point from one run of it mapped over them (``jax.vmap``), run with
        NumPy as `values` runs it at one point; None where that cannot be done (JAX cannot map or trace the
        function, or NumPy cannot run its trace: then no compiling either), and from then on for this function."""
        mapped = _mapped(bound)
        if mapped is None:
            return None
        try:
            stacked = [np.stack([np.asarray(p[i]) for p in points]) for i in diff]
            out = jax_engine.run_traced(mapped, stacked, transform="jit", family=(primal, diff, "mapped"), xla=False)
        except Exception:  # noqa: BLE001 - not mappable, not traceable, or not run by NumPy: one point at a time
            _unmapped(bound)
            return None
        return [tree_map(lambda v, k=k: None if v is None else np.asarray(v)[k], out) for k in range(len(points))]

    values.batch = batch  # type: ignore[attr-defined]
    return values


# The references mapped over points (`_reference_values`' batch), per bound function: None for one that could not be.
_MAPPED: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _mapped(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """``jax.vmap`` of ``fn`` over the leading axis of every argument, one per function (JAX's trace cache keys
    on it); it holds ``fn`` weakly, so the cache does not keep it alive. None where it is known not to run, and
    for a function that cannot be referenced weakly."""
    try:
        if fn in _MAPPED:
            return _MAPPED[fn]
    except TypeError:
        return None
    import jax

    held = weakref.ref(fn)
    found = _MAPPED[fn] = jax.vmap(lambda *xs: held()(*xs))
    return found


def _unmapped(fn: Callable[..., Any]) -> None:
    try:
        _MAPPED[fn] = None
    except TypeError:
        pass


def _telling(signature: tuple[tuple[tuple[int, ...], str], ...]) -> bool:
    """Whether every argument's dimensions differ from each other: shape bugs (a missing transpose, a mean
    over the wrong axis, a wrong count) hide in square shapes, so the second shape given a reference should have none."""
    return all(len(set(shape)) == len(shape) for shape, _ in signature)


class _Untraceable(Exception):
    pass


def _vjp_of(case: Case, primal: Callable[..., Any], cotangent: Any) -> tuple[Any, ...]:
    """``jax.vjp`` of ``primal`` at the case's input: as under jit first (traced once per shape and run with
    NumPy, or compiled where NumPy does not run the trace: `run_traced`), eagerly for primals jit refuses."""
    from gradguard.engines import jax_engine
    from gradguard.engines.errors import AdapterError

    bound, diff = bind_nondiff(primal, case)
    fresh = case.fresh()
    xs = [fresh[i] for i in diff]
    del fresh
    translated = getattr(primal, TRANSLATED, False)
    traced = False  # whether JAX traced and ran the primal itself (under jit): then only its gradient can fail
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = jax_engine.run_traced(bound, xs, transform="jit", family=(primal, diff))
            traced = True
            if translated:
                check_faithful(case, out)
            ct = tree_map(lambda c, o: None if c is None else np.asarray(c, dtype=np.asarray(o).dtype), cotangent, tuple_like(out, cotangent))
            del out  # the gradient's run makes its own
            return spread(jax_engine.run_traced(bound, xs, transform="jit_grad", cotangent=ct, family=(primal, diff)),
                          diff, case.nargs)
    except Skip:
        raise
    except Exception:  # noqa: BLE001 - not jittable: JAX's eager trace tells traceable from not
        pass
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if translated:
                check_faithful(case, primal(*case.fresh()))
            return tuple(jax_engine.reference_vjp(primal, case.fresh(), cotangent, nondiff=_nondiff(case)))
    except Skip:
        raise
    except AdapterError as exc:
        raise _Untraceable(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - whatever JAX raised while tracing the primal
        if case.rule.kind == "torch":  # JAX's tracers met torch operations: not a fault of the rule
            raise _Untraceable(f"the primal calls PyTorch operations, which JAX cannot trace ({first_line(exc)}); "
                               "GG201's finite differences judge the backward") from None
        if traced:  # a lax.while_loop, which JAX runs but cannot reverse-differentiate
            raise _Untraceable(f"JAX runs the primal but cannot reverse-differentiate it: {first_line(exc)}") from None
        raise _Untraceable(f"primal is not traceable by JAX: {first_line(exc)}") from None


def _nondiff(case: Case) -> tuple[int, ...]:
    return tuple(i for i in range(case.nargs) if i not in case.diff_positions)


def _as_jax_numpy(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """A copy of ``fn`` whose global ``numpy`` names (``np``) mean ``jax.numpy``; None if it uses none.

    The user's module is not touched: the copy gets its own globals. Helper
    functions ``fn`` calls keep NumPy (JAX then cannot trace them, and GG203 is
    skipped). The copy is trusted only where it computes the primal's values.
    """
    import types

    from gradguard.engines.jax_engine._runtime import load

    if is_foreign_layer(fn):  # the layer that hands the primal its own library's arrays
        return _as_jax_numpy(fn.__wrapped__)
    bound = getattr(fn, "bound_kwargs", None)
    if bound is not None and callable(getattr(fn, "__wrapped__", None)):
        # declared with kwargs=: the copy is of the primal itself, called with the same keyword arguments
        inner = _as_jax_numpy(fn.__wrapped__)
        if inner is None:
            return None
        rebound = functools.wraps(fn.__wrapped__)(lambda *args: inner(*args, **bound))
        setattr(rebound, TRANSLATED, True)
        return rebound
    if isinstance(fn, np.ufunc) or (callable(fn) and getattr(fn, "__module__", None) in ("numpy", "numpy.linalg")):
        # np.sin, np.exp, np.linalg.norm...: JAX has the same function under the same name
        jnp = load().numpy
        space = jnp.linalg if getattr(fn, "__module__", None) == "numpy.linalg" else jnp
        twin = getattr(space, getattr(fn, "__name__", ""), None)
        if twin is None:
            return None
        copy = functools.wraps(fn)(lambda *args, **kwargs: twin(*args, **kwargs))
        setattr(copy, TRANSLATED, True)
        return copy
    if not isinstance(fn, types.FunctionType):
        return None
    names = [k for k, v in fn.__globals__.items() if v is np]
    if not names:
        return None
    jnp = load().numpy
    scope = dict(fn.__globals__)
    scope.update({k: jnp for k in names})
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    setattr(copy, TRANSLATED, True)
    return copy
