"""A `jax.custom_jvp` as a NumPy rrule: JAX's own reverse mode through the user's jvp rule.

    rule = rrule_from_custom_jvp(f)        # f decorated with @jax.custom_jvp, f.defjvp(f_jvp)
    y, pullback = rule(x)                  # NumPy in, NumPy out
    (xbar,) = pullback(ybar)               # the transpose JAX derives from f_jvp (jax.vjp)

A custom_jvp has no pullback of its own: reverse mode linearizes the jvp rule and transposes it. The
pullback here is exactly that (`jax.vjp` of the function), so every check written for rrules judges the
reverse mode users get from the rule; `jvp_of` runs the forward mode (`jax.jvp`) for the forward checks.
Arguments at ``nondiff_argnums`` (and those declared ``nondiff``) are passed as they are and get None;
non-float arguments are constants with a None tangent. Keyword arguments and defaults are resolved against
the primal's signature, as `jax.custom_jvp` resolves them.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from gradguard.engines.errors import AdapterError, ReverseModeError
from gradguard.engines.jax_engine._compiled import Compiled
from gradguard.engines.jax_engine._from_jax import _cotangent, _resolver, _to_numpy, _without_float0
from gradguard.engines.jax_engine._runtime import load

__all__ = ["CustomJvpParts", "custom_jvp_parts", "rrule_from_custom_jvp", "jvp_of", "is_custom_jvp"]


@dataclass(frozen=True)
class CustomJvpParts:
    """The pieces of a `jax.custom_jvp` function."""

    fun: Callable[..., Any]
    jvp: Callable[..., Any]
    nondiff_argnums: tuple[int, ...]
    name: str
    symbolic_zeros: bool = False


def is_custom_jvp(fn: Any) -> bool:
    """Whether ``fn`` is a `jax.custom_jvp` function (False, without importing JAX, for plain functions)."""
    if not type(fn).__module__.startswith("jax"):
        return False
    return isinstance(fn, load().custom_jvp)


def custom_jvp_parts(fn: Any) -> CustomJvpParts:
    """Take a `jax.custom_jvp` function apart; `AdapterError` if it is not one or has no jvp rule yet."""
    jax = load()
    if not isinstance(fn, jax.custom_jvp):
        raise AdapterError(f"Got {fn!r}, but a jax.custom_jvp-decorated function was expected "
                           "(decorate with @jax.custom_jvp and call f.defjvp(f_jvp)).")
    name = getattr(fn.fun, "__name__", "custom_jvp")
    if fn.jvp is None:
        raise AdapterError(f"custom_jvp {name} has no rule yet: call {name}.defjvp(jvp) or {name}.defjvps(...) "
                           "before checking it.")
    return CustomJvpParts(fn.fun, fn.jvp, tuple(fn.nondiff_argnums), name, bool(getattr(fn, "symbolic_zeros", False)))


def _split(parts: CustomJvpParts, args: Sequence[Any], nondiff: Sequence[int], ngiven: int) -> list[int]:
    """Positions that carry a tangent: float values among the given arguments, not declared non-differentiable."""
    static = set(parts.nondiff_argnums) | set(nondiff)
    return [i for i, a in enumerate(args[:ngiven]) if i not in static and _floating(a)]


def _floating(a: Any) -> bool:
    """A float value, or a pytree (tuples, lists, dicts, NamedTuples) with a float leaf: lineax's two-norm takes a dict
    of arrays, efax's natural parameters a NamedTuple whose integer leaf (a count) rides along with the float ones,
    which JAX's reverse mode gives a float0 cotangent."""
    if isinstance(a, bool):
        return False
    if isinstance(a, (float, complex)):
        return True
    if isinstance(a, (tuple, list, dict)):
        return any(_floating(x) for x in load().tree_util.tree_leaves(a))
    return isinstance(a, (np.ndarray, np.generic)) and np.result_type(a).kind in "fc"


def _jnp(a: Any) -> Any:
    """A value, or every leaf of a pytree, as a JAX array."""
    jax = load()
    return jax.tree_util.tree_map(jax.numpy.asarray, a)


def _closed(fn: Any, args: Sequence[Any], diff: Sequence[int]) -> Callable[..., Any]:
    """``fn`` as a function of the arguments at ``diff``, the others fixed (nondiff_argnums stay Python values)."""
    jnp = load().numpy

    def call(*xs: Any) -> Any:
        full = [jnp.asarray(a) if isinstance(a, (np.ndarray, np.generic)) else a for a in args]
        for i, x in zip(diff, xs):
            full[i] = x
        return fn(*full)

    return call


def _why_not_transposed(text: str) -> str:
    """Why JAX could not transpose a jvp rule, read from its error: an operation on the tangents without a transpose
    rule (a custom_vjp or a host callback applied to a tangent: nufftax's jvp variants call its custom_vjp NUFFTs on
    them, a linear map JAX still cannot transpose), or else the jvp not being linear in them."""
    found = re.search(r"Transpose rule .*?for '([^']+)' not implemented", text)
    if found is None:
        return "which must be linear in the tangents"
    return (f"and JAX has no transpose rule for the {found.group(1)} operation the jvp applies to the tangents: a "
            "custom_vjp or a host callback applied to a tangent cannot be transposed, even where the jvp is linear in "
            "them")


def rrule_from_custom_jvp(fn: Any, nondiff: Sequence[int] = ()) -> Callable[..., tuple[Any, Callable[..., Any]]]:
    """An rrule (NumPy args -> ``(np output, pullback)``) whose pullback is the transpose JAX derives from the jvp.

    The output is the one ``jax.vjp`` returns (the jvp rule's primal output, as reverse mode gets it), and the
    pullback runs ``jax.vjp`` again with the cotangent; both are compiled once per (fixed arguments, shapes,
    dtypes) and checked against eager JAX on their first run (`Compiled`), so a rule is not linearized
    primitive by primitive on every call. The pullback keeps JAX copies of the arguments taken at the
    forward call: what the caller does to its arrays afterwards does not reach it, as with eager ``jax.vjp``."""
    parts = custom_jvp_parts(fn)
    jax = load()
    resolve = _resolver(parts.fun)
    for_nondiff = set(parts.nondiff_argnums) | set(nondiff)

    def value(diff: tuple[int, ...], *args: Any) -> Any:
        return jax.vjp(_closed(fn, args, diff), *[_jnp(args[i]) for i in diff])[0]

    def transpose(diff: tuple[int, ...], ct: Any, *args: Any) -> Any:
        return jax.vjp(_closed(fn, args, diff), *[_jnp(args[i]) for i in diff])[1](ct)

    forward_of, pullback_of = Compiled(value, f"{parts.name} (forward)"), Compiled(transpose, f"{parts.name} (pullback)")
    fixed = {0, *(1 + i for i in parts.nondiff_argnums)}  # diff, and the arguments JAX never traces

    def rule(*given: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        args = resolve(given, kwargs)
        diff = tuple(_split(parts, args, tuple(for_nondiff), len(given)))
        try:
            args = tuple(_held(a) for a in args)
            y = forward_of((diff, *args), fixed)
        except Exception as exc:
            if diff and _runs(fn, args):  # the function runs: what failed is reverse mode through its jvp rule
                raise ReverseModeError(
                    f"reverse mode through custom_jvp {parts.name} failed (jax.vjp linearizes its jvp rule to transpose "
                    f"it; the function itself runs at this input): {type(exc).__name__}: {exc}") from exc
            raise AdapterError(f"custom_jvp {parts.name} raised {type(exc).__name__}: {exc}") from exc

        def pullback(ybar: Any) -> tuple[Any, ...]:
            ct = _cotangent(ybar, y)
            try:
                grads = pullback_of((diff, ct, *args), {0, *(2 + i for i in parts.nondiff_argnums)})
            except Exception as exc:
                text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise ReverseModeError(
                    f"JAX could not run reverse mode through the jvp of custom_jvp {parts.name} (it transposes the "
                    f"jvp rule, {_why_not_transposed(text)}): {type(exc).__name__}: {text:.200}"
                ) from exc
            # An integer leaf of a pytree argument gets JAX's float0 cotangent: no tangent, None, as a custom_vjp's
            # bwd gives it.
            float0 = jax.dtypes.float0
            grads = jax.tree_util.tree_map(lambda g: None if getattr(g, "dtype", None) == float0 else g, tuple(grads))
            by_pos = dict(zip(diff, _to_numpy(grads)))
            return tuple(by_pos.get(i) for i in range(len(given)))

        pullback.__qualname__ = f"pullback of {parts.name}"
        return _to_numpy(y), pullback

    rule.__name__ = rule.__qualname__ = parts.name
    rule.__doc__ = f"rrule adapted from the jax.custom_jvp {parts.name} (reverse mode: JAX's transpose of its jvp)."
    rule.custom_jvp_parts = parts  # type: ignore[attr-defined]
    rule.compiled = (forward_of, pullback_of)  # type: ignore[attr-defined]
    return rule


def _runs(fn: Any, args: Sequence[Any]) -> bool:
    """Whether ``fn`` itself returns at ``args``, called as the user calls it (no transform)."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - its own error is the one the forward reports
        return False
    return True


def _held(a: Any) -> Any:
    """A NumPy argument (or each NumPy leaf of a pytree) as the JAX array the pullback keeps (a copy: the caller's
    later writes do not reach it)."""
    jax = load()
    return jax.tree_util.tree_map(lambda x: jax.numpy.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else x, a)


def jvp_of(fn: Any, args: Sequence[Any], tangents: Sequence[Any], *, nondiff: Sequence[int] = ()) -> tuple[Any, Any]:
    """``(output, output tangent)`` of ``jax.jvp`` of ``fn`` at ``args`` along ``tangents`` (None: not moving), as NumPy.

    Compiled once per (fn, moving positions, fixed arguments, shapes, dtypes) and checked against eager JAX on
    its first run (`Compiled`: eager where jit cannot run it or gives another answer), so a jvp is not run
    primitive by primitive on every call: the forward checks call it several times per drawn input."""
    jax = load()
    base = getattr(fn, "reads_outputs_of", fn)  # the custom_jvp under the checker's reading of registered outputs
    parts = custom_jvp_parts(base) if isinstance(base, jax.custom_jvp) else None
    static = set(nondiff) | set(parts.nondiff_argnums if parts else ())
    diff = tuple(i for i, t in enumerate(tangents) if t is not None and i not in static)
    primals = [_jnp(args[i]) for i in diff]
    tans = [jax.tree_util.tree_map(lambda t, p: np.asarray(t, dtype=p.dtype), tangents[i], p) for i, p in zip(diff, primals)]
    compiled = _compiled_jvp(fn)
    if compiled is None:  # a function jit cannot key on (not weakly referable): eager, as JAX runs it
        y, t = jax.jvp(_closed(fn, list(args), diff), primals, [_jnp(t) for t in tans])
    else:
        fixed = {0, 1, *(2 + i for i in (parts.nondiff_argnums if parts else ()))}
        y, t = compiled((diff, len(args), *args, *tans), fixed)
    # an integer or boolean output's tangent is JAX's float0 zero (quadax's step count): no tangent, as None is
    return _to_numpy(y), _to_numpy(_without_float0(t))


# jvp_of's compiled jvps, per function (weakly: a rule's jvp goes with the rule).
_JVPS: "weakref.WeakKeyDictionary[Any, Compiled]" = weakref.WeakKeyDictionary()


def _compiled_jvp(fn: Any) -> Compiled | None:
    try:
        found = _JVPS.get(fn)
    except TypeError:
        return None
    if found is None:
        jax = load()
        held = weakref.ref(fn)  # the compiled function must not keep fn alive through the cache's value

        def tangent_map(diff: tuple[int, ...], nargs: int, *flat: Any) -> Any:
            args, tans = flat[:nargs], flat[nargs:]
            return jax.jvp(_closed(held(), args, diff), [_jnp(args[i]) for i in diff], list(tans))

        name = getattr(getattr(fn, "fun", fn), "__name__", "function")
        found = _JVPS[fn] = Compiled(tangent_map, f"{name} (jvp)")
    return found
