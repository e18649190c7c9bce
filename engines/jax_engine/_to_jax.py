"""A NumPy rrule as a `jax.custom_vjp`: the rule runs on the host through `jax.pure_callback`.

    f = to_custom_vjp(my_rrule)
    jax.grad(lambda x: f(x).sum())(x)      # also under jit and vmap

Residuals. The forward callback returns only the output; the residuals JAX
keeps between the forward and backward pass are the primal inputs
themselves. The backward callback re-runs the rrule on them to get a fresh
pullback and applies it to the cotangent. No pullback closure is kept on the
host between the passes, so nothing leaks and a traced (jit) program stays a
pure function of its inputs. The price is one extra forward call per
backward pass.

Batching. A NumPy rule expects unbatched arguments, so the callbacks use
``vmap_method="sequential"``: under `vmap` JAX loops over the batch and calls
the rule once per example.

Second order. The rule and its pullback are host black boxes; forward mode
or grad of grad through them raises `AdapterError` at trace time with the
reason (JAX would say only "Pure callbacks do not support JVP"). Use a
JAX-native rule for second-order checks.

Argument mutation. JAX hands callbacks read-only buffers, so a rule that
writes into its argument fails; that surfaces as `AdapterError` naming the
argument.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from gradguard.engines.errors import AdapterError, clause
from gradguard.engines.jax_engine import _relay
from gradguard.engines.jax_engine._runtime import load

__all__ = ["to_custom_vjp", "AdaptedRule"]

_READ_ONLY = ("assignment destination is read-only", "output array is read-only")


def to_custom_vjp(
    rrule: Callable[..., Any],
    *,
    nondiff: Sequence[int] = (),
    name: str | None = None,
    example_args: Sequence[Any] | None = None,
) -> "AdaptedRule":
    """Wrap a NumPy ``rrule`` (returning ``(output, pullback)``) as a JAX-differentiable function.

    ``nondiff`` lists argument positions that get no tangent. Arguments that
    are not arrays or numbers (strings, callables, ...) are passed to the
    rule unchanged and never traced. Output shapes and dtypes come from
    ``example_args`` when their shapes match, from the call's own values when
    it is not traced, and otherwise from one run of the rule on arrays of
    ones of the traced shapes (its untraced arguments as they are).
    """
    if not callable(rrule):
        raise AdapterError(f"Got rrule={rrule!r}, but to_custom_vjp needs a function returning (output, pullback).")
    if isinstance(nondiff, int):
        nondiff = (nondiff,)
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in nondiff):
        raise AdapterError(f"Got nondiff={nondiff!r}, but nondiff must be argument positions, e.g. nondiff=(1,).")
    if name is not None and (not isinstance(name, str) or not name):
        raise AdapterError(f"Got name={name!r}, but name must be a non-empty string.")
    return AdaptedRule(rrule, frozenset(nondiff), name or getattr(rrule, "__name__", "rule"), example_args)


class AdaptedRule:
    """A NumPy rrule callable on JAX values; `jax.grad`, `jit` and `vmap` go through its pullback."""

    def __init__(self, rrule: Callable[..., Any], nondiff: frozenset[int], name: str, example_args: Any) -> None:
        functools.update_wrapper(self, rrule, updated=())  # name and docstring only, first: attributes below win
        self.rrule = rrule
        self.nondiff = nondiff
        self.name = name
        self.example_args = tuple(example_args) if example_args is not None else None
        self._by_static: dict[tuple[int, ...], Any] = {}  # custom_vjp per set of static positions
        self._out_structs: dict[Any, Any] = {}  # output ShapeDtypeStruct per argument signature
        self._hosts: dict[Any, Callable[..., Any]] = {}  # host callbacks per (kind, argument signature)
        self._caller: Callable[..., Any] | None = None  # the differentiation-refusing pure_callback, made on first use

    def __repr__(self) -> str:
        return f"<AdaptedRule {self.name} (NumPy rrule as jax.custom_vjp)>"

    def __call__(self, *args: Any) -> Any:
        jax = load()
        static = tuple(i for i, a in enumerate(args) if not _is_array_like(a, jax))
        fn = self._by_static.get(static)
        if fn is None:
            fn = self._by_static[static] = self._build(static, len(args))
        if any(isinstance(a, jax.core.Tracer) for a in args):
            return fn(*args)
        with _relay.relaying():  # an eager call runs the callbacks now: give back the rule's own errors
            return jax.block_until_ready(fn(*args))

    def cache_info(self) -> dict[str, int]:
        """How many custom_vjp wrappers, output signatures and host callbacks this rule has cached."""
        return {"wrappers": len(self._by_static), "signatures": len(self._out_structs), "callbacks": len(self._hosts)}

    # -- building the custom_vjp -------------------------------------------------

    def _build(self, static: tuple[int, ...], nargs: int) -> Any:
        jax = load()
        dyn_pos = [i for i in range(nargs) if i not in static]

        def merge(statics: Sequence[Any], dyn: Sequence[Any]) -> list[Any]:
            full: list[Any] = [None] * nargs
            for i, v in zip(static, statics):
                full[i] = v
            for i, v in zip(dyn_pos, dyn):
                full[i] = v
            return full

        def primal(*args: Any) -> Any:
            statics = [args[i] for i in static]
            out_struct = self._out_struct(args)

            def make_host() -> Callable[..., Any]:
                return lambda *dyn_np: self._host_forward(merge(statics, dyn_np), out_struct)

            host = self._host("forward", args, make_host)
            return self._call_host(host, out_struct, *[args[i] for i in dyn_pos])

        fn = jax.custom_vjp(primal, nondiff_argnums=static)

        def fwd(*args: Any) -> Any:
            return primal(*args), tuple(args[i] for i in dyn_pos)

        def bwd(*rest: Any) -> Any:
            statics, (dyn, ybar) = rest[: len(static)], rest[len(static) :]
            full = merge(statics, dyn)
            wanted = [i for i in dyn_pos if i not in self.nondiff and _inexact(full[i])]
            structs = tuple(jax.ShapeDtypeStruct(np.shape(full[i]), _dtype(full[i])) for i in wanted)

            def make_host() -> Callable[..., Any]:
                def host(*operands: Any) -> Any:
                    return self._host_pullback(merge(statics, operands[:-1]), operands[-1], wanted, structs)

                return host

            host = self._host("pullback", full, make_host)
            grads = self._call_host(host, structs, *dyn, ybar)
            by_pos = dict(zip(wanted, grads))
            return tuple(by_pos.get(i) for i in dyn_pos)

        fn.defvjp(fwd, bwd)
        return fn

    def _call_host(self, host: Callable[..., Any], structs: Any, *operands: Any) -> Any:
        if self._caller is None:
            self._caller = _host_call(self.name)
        return self._caller(host, structs, *operands)

    def _host(self, kind: str, args: Sequence[Any], make: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
        """One host callback per (kind, argument signature): a stable callback lets JAX reuse its compilations."""
        key = (kind, tuple(_signature(a, load()) for a in args))
        if key not in self._hosts:
            if not _cacheable(key[1]):
                return make()  # an unhashable static argument: never reuse a callback that captured another one
            self._hosts[key] = make()
        return self._hosts[key]

    def _out_struct(self, args: Sequence[Any]) -> Any:
        jax = load()
        key = tuple(_signature(a, jax) for a in args)
        if key in self._out_structs:
            return self._out_structs[key]
        probe = self._probe_args(args, key, jax)
        try:
            out, _ = _call_rule(self, [np.array(a) if _is_array_like(a, jax) else a for a in probe])
        except AdapterError:
            raise
        except Exception as exc:
            raise AdapterError(
                f"could not infer the output shape of rule {self.name} by running it on {_describe(probe)}: "
                f"{type(exc).__name__}: {clause(exc)}. Pass example_args=(...) with valid inputs of these shapes."
            ) from exc
        struct = jax.tree_util.tree_map(lambda leaf: jax.ShapeDtypeStruct(np.shape(leaf), _dtype(leaf)), out)
        if _cacheable(key):
            self._out_structs[key] = struct
        return struct

    def _probe_args(self, args: Sequence[Any], key: Any, jax: Any) -> Sequence[Any]:
        if not any(isinstance(a, jax.core.Tracer) for a in args):
            return args
        if self.example_args is not None and tuple(_signature(a, jax) for a in self.example_args) == key:
            return self.example_args
        # Only traced values are stood in for by ones: a concrete argument (a repeat count, a fixed axis length)
        # may set the output's shape, and is passed as it is.
        return [np.ones(np.shape(a), _dtype(a)) if isinstance(a, jax.core.Tracer) else a for a in args]

    # -- host side -----------------------------------------------------------------

    def _host_forward(self, args: list[Any], out_struct: Any) -> Any:
        try:
            out, _ = _call_rule(self, _host_args(args))
            return _conform(out, out_struct, f"the output of rule {self.name}")
        except Exception as exc:
            raise _relay.relay(exc) from None

    def _host_pullback(self, args: list[Any], ybar: Any, wanted: list[int], structs: tuple[Any, ...]) -> Any:
        jax = load()
        try:
            _, pullback = _call_rule(self, _host_args(args))
            try:
                tangents = pullback(jax.tree_util.tree_map(np.asarray, ybar))  # a tuple output's cotangent stays a tuple
            except ValueError as exc:
                if not any(m in str(exc) for m in _READ_ONLY):
                    raise
                raise AdapterError(
                    f"the pullback of rule {self.name} writes in place into a read-only buffer (a primal argument, "
                    "a value captured by the forward pass, or the cotangent); JAX passes read-only buffers, so under "
                    "JAX this pullback cannot run. Copy before writing."
                ) from exc
            if not isinstance(tangents, tuple) or len(tangents) != len(args):
                got = f"{len(tangents)} values" if isinstance(tangents, (tuple, list)) else type(tangents).__name__
                raise AdapterError(
                    f"the pullback of rule {self.name} must return a tuple with one tangent per argument "
                    f"({len(args)}), but returned {got}. Use None for non-differentiable arguments."
                )
            out = []
            for i, struct in zip(wanted, structs):
                t = tangents[i]
                if t is None:
                    out.append(np.zeros(struct.shape, struct.dtype))
                else:
                    out.append(_conform(t, struct, f"the tangent for argument {i} of rule {self.name}"))
            return tuple(out)
        except Exception as exc:
            raise _relay.relay(exc) from None


def _call_rule(adapted: AdaptedRule, args: list[Any]) -> tuple[Any, Callable[..., Any]]:
    """Run the rrule; report in-place writes to JAX's read-only buffers as `AdapterError`."""
    try:
        result = adapted.rrule(*args)
    except ValueError as exc:
        if not any(m in str(exc) for m in _READ_ONLY):
            raise
        i = _mutated_position(adapted.rrule, args)
        which = f"its argument {i}" if i is not None else "one of its arguments"
        raise AdapterError(
            f"rule {adapted.name} mutates {which} in place; JAX passes read-only buffers, so under JAX this "
            f"rule cannot run; declare mutates=({i if i is not None else 0},) and copy before mutating."
        ) from exc
    if not (isinstance(result, tuple) and len(result) == 2 and callable(result[1])):
        raise AdapterError(f"rule {adapted.name} must return (output, pullback), but returned {type(result).__name__}.")
    return result


def _mutated_position(rrule: Callable[..., Any], args: list[Any]) -> int | None:
    """Re-run the rule on writable copies to find which argument it writes into."""
    copies = [np.array(a) if isinstance(a, np.ndarray) else a for a in args]
    try:
        rrule(*copies)
    except Exception:
        return None
    for i, (a, c) in enumerate(zip(args, copies)):
        if isinstance(a, np.ndarray) and not np.array_equal(a, c, equal_nan=True):
            return i
    return None


def _host_call(name: str) -> Callable[..., Any]:
    """`pure_callback` (sequential under vmap) that refuses differentiation with a clear message.

    The custom_vjp supplies the first derivative; anything that differentiates
    a callback itself (jvp, jacfwd, grad of grad) would otherwise fail with
    JAX's generic "Pure callbacks do not support JVP".
    """
    jax = load()

    @functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
    def call(host: Any, structs: Any, *operands: Any) -> Any:
        return jax.pure_callback(host, structs, *operands, vmap_method="sequential")

    @call.defjvp
    def _jvp(host: Any, structs: Any, primals: Any, tangents: Any) -> Any:
        raise AdapterError(
            f"forward-mode and second-order derivatives (jvp, jacfwd, grad of grad) through rule {name} are not "
            "available: it is a NumPy rrule running on the host as a black box, so only its first-order pullback "
            "exists. Write the rule as a JAX custom_vjp for second-order checks."
        )

    return call


def _host_args(args: list[Any]) -> list[Any]:
    # JAX gives callbacks its own arrays; NumPy views of them are read-only, which is what exposes mutation.
    return [np.asarray(a) if hasattr(a, "__array__") and not isinstance(a, np.ndarray) else a for a in args]


def _conform(value: Any, struct: Any, what: str) -> Any:
    jax = load()
    leaves, tree = jax.tree_util.tree_flatten(value)
    want, want_tree = jax.tree_util.tree_flatten(struct)
    if tree != want_tree:
        raise AdapterError(f"{what} has structure {tree}, but {want_tree} was expected from the first call.")
    out = []
    for leaf, s in zip(leaves, want):
        arr = np.asarray(leaf)
        if arr.shape != tuple(s.shape):
            raise AdapterError(f"{what} has shape {arr.shape}, but shape {tuple(s.shape)} was expected.")
        out.append(arr.astype(s.dtype, copy=False))
    return jax.tree_util.tree_unflatten(tree, out)


def _is_array_like(a: Any, jax: Any) -> bool:
    return isinstance(a, (np.ndarray, np.generic, jax.Array, int, float, complex)) or isinstance(a, jax.core.Tracer)


def _inexact(a: Any) -> bool:
    return np.dtype(_dtype(a)).kind in "fc"


def _dtype(a: Any) -> Any:
    dt = getattr(a, "dtype", None)
    return dt if dt is not None else np.asarray(a).dtype


def _signature(a: Any, jax: Any) -> Any:
    if _is_array_like(a, jax):
        return (np.shape(a), str(_dtype(a)))
    try:
        hash(a)
        return ("static", a)
    except TypeError:
        return ("unhashable", id(a))


def _cacheable(key: tuple[Any, ...]) -> bool:
    return not any(part[0] == "unhashable" for part in key)


def _describe(args: Sequence[Any]) -> str:
    return "(" + ", ".join(f"array{np.shape(a)} {_dtype(a)}" if hasattr(a, "shape") else repr(a) for a in args) + ")"
