"""A `jax.custom_vjp` as a NumPy rrule, so every check written for rrules applies to it.

    rule = rrule_from_custom_vjp(f)        # f decorated with @jax.custom_vjp
    y, pullback = rule(x)                  # NumPy in, NumPy out
    (xbar,) = pullback(ybar)

The forward runs the user's ``fwd`` (float64 enabled), keeping its residuals
as JAX values inside the pullback's closure; the pullback runs ``bwd``. Both
are compiled with `jax.jit` (JAX caches one compilation per argument shapes
and dtypes); when an argument or residual cannot pass through `jit` (an
unhashable non-differentiable argument, a residual that is not an array)
they run eagerly instead.

The pullback passes the cotangent as JAX would: cast to the output's dtypes,
and zeros in place of an absent (None) cotangent, since JAX never hands
``bwd`` a None unless the rule opted into ``symbolic_zeros``.

Whatever ``bwd`` returns is handed back converted leaf-wise to NumPy, wrong
length or not, so the checker's contract checks (GG103, GG104) report it.
When ``bwd`` returns one entry per differentiable argument, ``None`` is
inserted at the ``nondiff_argnums`` positions, giving one tangent per argument.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gradguard.engines.errors import AdapterError, clause
from gradguard.engines.jax_engine._compiled import by_value, unwrapped
from gradguard.engines.jax_engine._runtime import cotangent_for, cotangent_like, load

__all__ = ["rrule_from_custom_vjp", "primal_of_custom_vjp", "CustomVjpParts", "custom_vjp_parts"]


@dataclass(frozen=True)
class CustomVjpParts:
    """The pieces of a `jax.custom_vjp` function, as the adapters use them."""

    fun: Callable[..., Any]
    fwd: Callable[..., Any]
    bwd: Callable[..., Any]
    nondiff_argnums: tuple[int, ...]
    name: str
    symbolic_zeros: bool = False  # fwd then takes CustomVJPPrimal(value, perturbed) arguments


def custom_vjp_parts(fn: Any) -> CustomVjpParts:
    """Take a `jax.custom_vjp` function apart; `AdapterError` if it is not one or has no `defvjp`."""
    jax = load()
    if not isinstance(fn, jax.custom_vjp):
        raise AdapterError(
            f"Got {fn!r}, but a jax.custom_vjp-decorated function was expected "
            "(decorate with @jax.custom_vjp and call f.defvjp(fwd, bwd))."
        )
    name = getattr(fn.fun, "__name__", "custom_vjp")
    if fn.fwd is None or fn.bwd is None:
        raise AdapterError(f"custom_vjp {name} has no rule yet: call {name}.defvjp(fwd, bwd) before checking it.")
    return CustomVjpParts(
        fn.fun,
        fn.fwd,
        fn.bwd,
        tuple(fn.nondiff_argnums),
        name,
        symbolic_zeros=bool(getattr(fn, "symbolic_zeros", False)),
    )


def primal_of_custom_vjp(fn: Any) -> Callable[..., Any]:
    """The undecorated primal of a `jax.custom_vjp` (``fn.fun``): JAX-traceable, for reference gradients."""
    return custom_vjp_parts(fn).fun


def rrule_from_custom_vjp(fn: Any) -> Callable[..., tuple[Any, Callable[..., Any]]]:
    """An rrule (NumPy args -> ``(np output, pullback)``) running ``fn``'s ``fwd`` and ``bwd``."""
    parts = custom_vjp_parts(fn)
    jax = load()
    nondiff = parts.nondiff_argnums
    fwd = _perturbed_fwd(parts) if parts.symbolic_zeros else parts.fwd
    # A nondiff argument holding arrays (a grid, a matrix) is keyed by its contents (`by_value`), so it compiles once
    # per value instead of running eagerly on every call; fwd and bwd get the argument itself.
    jit_fwd = jax.jit(_unwrapping(fwd), static_argnums=nondiff)
    jit_bwd = jax.jit(_unwrapping(parts.bwd), static_argnums=tuple(range(len(nondiff))))

    resolve = _resolver(parts.fun)

    def rule(*given: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        # As jax.custom_vjp calls fwd: keyword arguments at their positions, defaults filled in. The rule's
        # arguments are those given positionally; tangents for the rest (defaults, kwargs) are dropped.
        args = resolve(given, kwargs)
        jargs = [a if i in nondiff else _to_jax(a) for i, a in enumerate(args)]
        statics = tuple(args[i] for i in nondiff if i < len(args))
        keyed = _keyed(statics)
        compiled = keyed is not None
        try:
            if compiled:
                key_at = dict(zip((i for i in nondiff if i < len(args)), keyed))
                y, res = _run(jit_fwd, fwd, [key_at[i] if i in key_at else a for i, a in enumerate(jargs)], eager_args=jargs)
            else:
                y, res = fwd(*jargs)
        except AdapterError:
            raise
        except Exception as exc:
            raise AdapterError(f"the fwd of custom_vjp {parts.name} raised {type(exc).__name__}: {exc}") from exc
        y_np = _to_numpy(y)

        def pullback(ybar: Any) -> Any:
            ct = _cotangent(ybar, y)
            try:
                try:
                    out = (_run(jit_bwd, parts.bwd, [*keyed, res, ct], eager_args=[*statics, res, ct]) if compiled
                           else parts.bwd(*statics, res, ct))
                except Exception:
                    if not compiled:
                        raise
                    # The jitted fwd hands back every residual as an array; JAX itself hands bwd the Python values
                    # fwd put there (spyx keeps spikes.shape, ints its bwd passes to jax.jit as static): bwd again
                    # on the residuals of an eager fwd, whose own error, if any, is the one to report.
                    out = parts.bwd(*statics, fwd(*jargs)[1], ct)
            except Exception as exc:
                raise AdapterError(
                    f"the bwd of custom_vjp {parts.name} raised {type(exc).__name__}: {clause(exc)}. It is called as "
                    "bwd(*nondiff_args, residuals, cotangent) and must return a tuple with one cotangent per "
                    f"differentiable argument ({len(args) - len(statics)}), each shaped like its argument."
                ) from exc
            tangents = _with_nondiff(_to_numpy(_without_float0(out)), nondiff, len(args))
            if len(args) > len(given) and isinstance(tangents, tuple) and len(tangents) == len(args):
                tangents = tangents[: len(given)]
            return tangents

        pullback.__qualname__ = f"pullback of {parts.name}"
        return y_np, pullback

    rule.__name__ = rule.__qualname__ = parts.name
    rule.__doc__ = f"rrule adapted from the jax.custom_vjp {parts.name}."
    rule.custom_vjp_parts = parts  # type: ignore[attr-defined]
    return rule


def _cotangent(ybar: Any, y: Any) -> Any:
    """The cotangent as JAX would pass it: zeros for an absent one, the output's dtypes when the structure matches."""
    jax = load()
    if ybar is None:
        return jax.tree_util.tree_map(lambda o: jax.numpy.zeros(np.shape(o), np.asarray(o).dtype), y)
    if jax.tree_util.tree_structure(cotangent_like(ybar, y)) != jax.tree_util.tree_structure(y):
        return _tree_to_jax(ybar)  # another structure than the output's: bwd gets it as given
    return cotangent_for(ybar, y)  # a plain tuple for a NamedTuple output, as JAX passes it


def _resolver(fun: Callable[..., Any]) -> Callable[[tuple, dict], tuple]:
    """Arguments as ``jax.custom_vjp`` resolves them: bound to ``fun``'s signature, defaults applied."""
    try:
        sig = inspect.signature(fun)
    except (TypeError, ValueError):
        sig = None

    def resolve(args: tuple, kwargs: dict) -> tuple:
        if sig is None:
            if kwargs:
                raise AdapterError(f"cannot resolve keyword arguments {sorted(kwargs)} without a signature")
            return tuple(args)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:
            if kwargs:
                raise
            return tuple(args)  # let the call itself raise the user's own error
        bound.apply_defaults()
        return tuple(bound.args)

    return resolve


def _perturbed_fwd(parts: CustomVjpParts) -> Callable[..., Any]:
    """A fwd taking plain arrays, for rules defined with ``symbolic_zeros=True``: every input counts as perturbed."""
    from jax.custom_derivatives import CustomVJPPrimal

    def fwd(*args: Any) -> Any:
        wrapped = [a if i in parts.nondiff_argnums else CustomVJPPrimal(a, True) for i, a in enumerate(args)]
        return parts.fwd(*wrapped)

    return fwd


def _run(first: Callable[..., Any], eager: Callable[..., Any], args: list[Any], eager_args: list[Any]) -> Any:
    """Call the jitted function on ``args``; on a `TypeError` (a value `jit` cannot take) run eagerly instead, on
    ``eager_args`` (``args`` with the fixed arguments themselves, not their `by_value` keys).

    A genuine `TypeError` of the user's code is raised again by the eager run.
    """
    try:
        return first(*args)
    except TypeError:
        return eager(*eager_args)


def _unwrapping(fun: Callable[..., Any]) -> Callable[..., Any]:
    """``fun`` called with the arguments that `by_value` keys stand for."""

    @functools.wraps(fun)
    def call(*args: Any) -> Any:
        return fun(*(unwrapped(a) for a in args))

    return call


def _keyed(statics: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The nondiff arguments as jit's static arguments (`by_value`), or None where one cannot be keyed."""
    try:
        keyed = tuple(by_value(a) for a in statics)
        hash(keyed)
    except TypeError:
        return None
    return keyed



def _with_nondiff(out: Any, nondiff: tuple[int, ...], nargs: int) -> Any:
    """Insert None at the non-differentiable positions when bwd returned one entry per differentiable one."""
    if not nondiff or not isinstance(out, (tuple, list)) or len(out) != nargs - len(nondiff):
        return out
    it = iter(out)
    return tuple(None if i in nondiff else next(it) for i in range(nargs))


def _to_jax(a: Any) -> Any:
    jax = load()
    if isinstance(a, (np.ndarray, np.generic, float, complex, int)) and not isinstance(a, bool):
        return jax.numpy.asarray(a)
    return a


def _tree_to_jax(tree: Any) -> Any:
    jax = load()
    return jax.tree_util.tree_map(_to_jax, tree)


def _without_float0(tree: Any) -> Any:
    """``tree`` with JAX's float0 cotangents as None: the zero JAX asks a bwd to give an integer or boolean argument
    that is not a nondiff argument (netket's expect, differentiable in its parameters, takes its integer samples that
    way) is no tangent, as None is in the rrule convention; GG106 called it a tangent for an argument that has none."""
    jax = load()
    float0 = jax.dtypes.float0
    return jax.tree_util.tree_map(lambda g: None if getattr(g, "dtype", None) == float0 else g, tree)


def _to_numpy(tree: Any) -> Any:
    """Leaf-wise NumPy conversion of arrays and numbers; None and other objects are kept as they are."""
    jax = load()

    def leaf(x: Any) -> Any:
        return np.asarray(x) if isinstance(x, (jax.Array, np.generic, float, complex)) else x

    return jax.tree_util.tree_map(leaf, tree)
