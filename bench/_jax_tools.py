"""The JAX anchor: a rule as a `jax.custom_vjp`, checked by `jax.test_util.check_grads` (reverse mode).

A NumPy rule is wrapped the way a JAX user wraps host code: ``jax.pure_callback``
runs the rrule's forward, the residuals are the inputs, and ``bwd`` runs the
rrule again on the host and calls its pullback (a closure cannot cross the
callback). Arguments are copied on the host (callbacks receive read-only
arrays) and, for complex rules, the ChainRules-convention pullback is turned
into JAX's (``conj(pullback(conj(g)))``) so correct rules pass. JAX-native
rules use their ``custom_vjp`` directly. Order 2 is meaningful only for
JAX-native rules: a callback's ``bwd`` cannot be differentiated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from _cases import BenchCase
from _programs import build

VARIANTS = ("check_grads", "check_grads[order=2]")


def _jax() -> Any:
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def _spec(value: Any) -> Any:
    jax = _jax()
    if isinstance(value, tuple):
        return tuple(_spec(v) for v in value)
    arr = np.asarray(value)
    return jax.ShapeDtypeStruct(arr.shape, arr.dtype)


def _host(value: Any, like: Any) -> Any:
    arr = np.array(value)  # a writable copy
    return float(arr) if isinstance(like, float) else arr


def _as_declared(value: Any, spec: Any) -> Any:
    if isinstance(spec, tuple):
        return tuple(_as_declared(v, s) for v, s in zip(value, spec))
    return np.asarray(value)


def function(case: BenchCase, counter: Callable[[str], None] | None = None) -> Callable[..., Any]:
    """``call(*full_args)``: the rule as a JAX function (JAX arrays at differentiable positions)."""
    jax = _jax()
    if case.rule.kind == "jax":
        return case.rule.jax_fn
    rule, like, diff = case.rule, case.args, case.diff
    complex_rule = any(np.iscomplexobj(like[i]) for i in diff)
    y0 = rule.rrule(*(a.copy() if isinstance(a, np.ndarray) else a for a in like))
    out_spec = _spec(y0[0] if isinstance(y0, tuple) and len(y0) == 2 else y0)
    tan_spec = tuple(_spec(like[i]) for i in diff)

    def full(xs: tuple) -> list[Any]:
        args = list(like)
        for i, x in zip(diff, xs):
            args[i] = _host(x, like[i])
        return args

    def forward_host(*xs: Any) -> Any:
        if counter:
            counter("forward")
        y, _ = rule.rrule(*full(xs))
        return _as_declared(y, out_spec)

    def pullback_host(*xs_and_g: Any) -> Any:
        if counter:
            counter("forward")
            counter("pullback")
        xs, g = xs_and_g[: len(diff)], xs_and_g[len(diff) :]
        g = tuple(np.array(v) for v in g) if isinstance(out_spec, tuple) else np.array(g[0])
        if complex_rule:
            g = np.conj(g)
        _, pb = rule.rrule(*full(xs))
        tangents = pb(g)
        out = []
        for i, s in zip(diff, tan_spec):
            t = np.zeros(s.shape, s.dtype) if tangents[i] is None else np.asarray(tangents[i])
            out.append(np.conj(t) if complex_rule else t)
        return tuple(out)

    def positional(*args: Any) -> tuple:
        return tuple(args[i] for i in diff)

    @jax.custom_vjp
    def f(*args: Any) -> Any:
        return jax.pure_callback(forward_host, out_spec, *positional(*args))

    def f_fwd(*args: Any) -> Any:
        return f(*args), positional(*args)

    def f_bwd(xs: tuple, g: Any) -> tuple:
        gs = tuple(g) if isinstance(out_spec, tuple) else (g,)
        tangents = jax.pure_callback(pullback_host, tan_spec, *xs, *gs)
        full_t: list[Any] = [None] * len(like)
        for i, t in zip(diff, tangents):
            full_t[i] = t
        return tuple(full_t)

    f.defvjp(f_fwd, f_bwd)
    return f


def run(case: BenchCase, variant: str, programs: list[str] | None) -> tuple[str, str]:
    """``(outcome, detail)``: caught / passed / errored / n/a."""
    _jax()  # x64 on before any array is made
    from jax.test_util import check_grads

    order = 2 if variant.endswith("[order=2]") else 1
    if order == 2 and case.rule.kind != "jax":
        return "n/a", "a callback's bwd cannot be differentiated"
    try:
        call = function(case)
    except Exception as exc:  # noqa: BLE001 - the rule raised while we asked it for its shapes
        return "errored", f"{type(exc).__name__}: {str(exc)[:200]}"
    y = case.primal_output()
    outcomes = []
    names: list[Any] = programs or [None]
    for name in names:
        if name is None:
            built = ((lambda *xs: call(*case.with_diff(xs))), [case.args[i] for i in case.diff])
        elif name in ("jit", "vmap"):
            built = _transformed(case, call, name)
        else:
            built = build(case, name, _XP, call, y)
        if built is None:
            continue
        prog, inputs = built
        inputs = [_jax_input(v) for v in inputs]
        try:
            check_grads(prog, tuple(inputs), order=order, modes=["rev"])
            outcomes.append(("passed", ""))
        except AssertionError as exc:
            outcomes.append(("caught", f"{name + ': ' if name else ''}{str(exc).strip().splitlines()[0][:200]}"))
        except Exception as exc:  # noqa: BLE001 - the wrapped rule or JAX raised
            outcomes.append(("errored", f"{name + ': ' if name else ''}{type(exc).__name__}: {str(exc).strip()[:200]}"))
    from _torch_tools import combine

    return combine(outcomes)


def _transformed(case: BenchCase, call: Callable[..., Any], how: str) -> tuple[Callable[..., Any], list[Any]]:
    jax = _jax()
    inputs = [case.args[i] for i in case.diff]
    f = lambda *xs: call(*case.with_diff(xs))
    if how == "jit":
        return jax.jit(f), inputs
    batched = [np.stack([a, b]) for a, b in zip(inputs, [case.args2[i] for i in case.diff])]
    return jax.vmap(f), batched


def _jax_input(value: Any) -> Any:
    import jax.numpy as jnp

    return jnp.asarray(value)


class _JaxXP:
    def __getattr__(self, name: str) -> Any:
        import jax.numpy as jnp

        return {
            "real": jnp.real,
            "sum": jnp.sum,
            "conj": jnp.conj,
            "const": jnp.asarray,
            "transpose": jnp.transpose,
        }[name]


_XP = _JaxXP()
