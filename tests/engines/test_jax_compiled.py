"""`Compiled`: a JAX function on concrete values compiled once per key, eager wherever jit would differ.

Its users: a JAX rule's primal (`jax_rule`), which finite differences call hundreds of times per check, and
the custom_jvp adapter's forward and pullback. Each test counts the Python calls of the function body: a
compiled key runs the body once to trace it and once eagerly to verify the first compiled run; an eager
call runs it every time.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import gradguard.engines.jax_engine as ej
from gradguard.engines.jax_engine import Compiled
from gradguard.engines.jax_engine._compiled import agree

jax = pytest.importorskip("jax")
jnp = jax.numpy
ej.configure("cpu")


def counted(fn):
    calls = []

    def body(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)

    body.calls = calls
    return body


def newton_sqrt(a, x0):
    """A fixed-point solver with fresh closures on every call: eagerly, JAX traces and compiles it each time."""

    def cond(carry):
        prev, x = carry
        return jnp.abs(prev - x) > 1e-12

    def body(carry):
        _, x = carry
        return x, 0.5 * (x + a / x)

    return jax.lax.while_loop(cond, body, (x0, 0.5 * (x0 + a / x0)))[1]


def test_a_while_loop_compiles_once_per_shape_and_gives_eager_values():
    fn = counted(newton_sqrt)
    compiled = Compiled(fn)
    values = [compiled((np.float64(a), np.float64(1.0))) for a in (2.0, 3.0, 5.0, 7.0, 11.0)]
    assert [float(v) for v in values] == pytest.approx(np.sqrt([2.0, 3.0, 5.0, 7.0, 11.0]), rel=1e-14)
    assert len(fn.calls) == 2  # one trace, one eager run checking the first compiled run
    assert float(compiled((np.float32(4.0), np.float32(1.0)))) == pytest.approx(2.0)  # another key: dtypes
    assert len(fn.calls) == 4 and compiled.eager_keys == {}


def test_a_python_branch_on_a_value_runs_eagerly_and_is_not_traced_again():
    def relu_ish(x):
        return x if float(x) > 0 else 0.0 * x  # float() of a tracer: jit cannot run this

    fn = counted(relu_ish)
    compiled = Compiled(fn)
    assert float(compiled((np.float64(2.0),))) == 2.0
    assert float(compiled((np.float64(-2.0),))) == 0.0
    assert float(compiled((np.float64(3.0),))) == 3.0
    (reason,) = compiled.eager_keys.values()
    assert reason.startswith("ConcretizationTypeError") or "Tracer" in reason, reason
    assert len(fn.calls) == 1 + 3  # traced once (and failed), then every call eager


def test_a_function_taking_another_path_on_tracers_gets_eager_values():
    def fast_path(x):
        if isinstance(x, jax.core.Tracer):
            return 2 * x  # wrong, and only under jit
        return 3 * x

    compiled = Compiled(fast_path)
    for value in (1.0, 2.0, 4.0):
        assert float(compiled((np.float64(value),))) == 3 * value
    assert list(compiled.eager_keys.values()) == ["its first compiled run disagreed with eager JAX"]


class Unkeyable:
    """A value with neither a hash nor leaves jit could key on (it defines equality and no hash)."""

    def __init__(self, factor):
        self.factor = factor

    def __eq__(self, other):
        return isinstance(other, Unkeyable) and other.factor == self.factor

    __hash__ = None


def test_fixed_arguments_are_static_and_unkeyable_ones_run_eagerly():
    def applied(f, x):
        return f(x) if callable(f) else x * f.factor

    fn = counted(applied)
    compiled = Compiled(fn)
    for value in (1.0, 2.0):
        assert np.allclose(compiled((jnp.sin, np.full(2, value)), fixed={0}), np.sin(value))
    assert len(fn.calls) == 2
    for value in (1.0, 2.0):  # a value jit cannot key a compilation on: every call eager
        assert np.allclose(compiled((Unkeyable(3.0), np.full(2, value)), fixed={0}), 3 * value)
    assert len(fn.calls) == 4 and compiled.eager_keys == {}


def simpson(nodes, weights, x):
    """A quadrature whose nodes and weights are fixed arrays (a custom rule's nondiff arguments), built on a scan
    with a fresh closure on every call: eagerly, JAX traces and compiles it each time."""

    def step(total, node_weight):
        node, weight = node_weight
        return total + weight * jnp.sin(x * node), None

    return jax.lax.scan(step, jnp.zeros_like(x), (nodes, weights))[0]


@pytest.mark.parametrize("kind", ["numpy", "jax", "tuple"])
def test_a_fixed_argument_holding_arrays_compiles_once_per_value(kind):
    fn = counted(lambda grid, x: simpson(*grid, x) if kind == "tuple" else simpson(grid, jnp.ones_like(grid), x))
    compiled = Compiled(fn)

    def grid(top):
        nodes = np.linspace(0.0, top, 5)
        return {"numpy": nodes, "jax": jnp.asarray(nodes), "tuple": (nodes, np.ones(5))}[kind]

    for value in (0.5, 1.0, 1.5):  # a new array object of the same contents at every call
        got = compiled((grid(1.0), np.full(2, value)), fixed={0})
        assert np.allclose(got, np.sin(value * np.linspace(0.0, 1.0, 5)).sum())
    assert len(fn.calls) == 2  # one trace, one eager run checking it: 4 when every call ran eagerly
    got = compiled((grid(2.0), np.full(2, 0.5)), fixed={0})  # other contents: another key, with its own values
    assert np.allclose(got, np.sin(0.5 * np.linspace(0.0, 2.0, 5)).sum())
    assert len(fn.calls) == 4 and compiled.eager_keys == {}


def test_a_fixed_array_written_between_calls_is_a_new_key():
    fn = counted(lambda scale, x: x * scale)
    compiled = Compiled(fn)
    scale = np.array([2.0, 3.0])
    assert np.allclose(compiled((scale, np.ones(2)), fixed={0}), [2.0, 3.0])
    scale[0] = 5.0  # the same object, written: its compilation must not be reused
    assert np.allclose(compiled((scale, np.ones(2)), fixed={0}), [5.0, 3.0])
    negative_zero = compiled((np.array([-0.0, 1.0]), np.ones(2)), fixed={0})
    assert np.signbit(np.asarray(negative_zero)[0])  # -0.0 and 0.0 are two keys: the sign survives
    assert np.asarray(compiled((np.array([0.0, 1.0]), np.ones(2)), fixed={0}))[0] == 0.0
    assert not np.signbit(np.asarray(compiled((np.array([0.0, 1.0]), np.ones(2)), fixed={0}))[0])


def test_ints_and_keyword_arguments_are_static():
    def total(x, axis, *, keepdims):
        return jnp.sum(x, axis=axis, keepdims=keepdims)

    fn = counted(total)
    compiled = Compiled(fn)
    x = np.arange(6.0).reshape(2, 3)
    assert compiled((x, 1), kwargs={"keepdims": True}).shape == (2, 1)
    assert compiled((x + 1, 1), kwargs={"keepdims": True}).shape == (2, 1)
    assert compiled((x, 0), kwargs={"keepdims": False}).shape == (3,)
    assert len(fn.calls) == 4 and compiled.eager_keys == {}  # two keys, each traced once and verified once


def test_the_users_own_error_comes_from_the_eager_call():
    def refuses(x):
        raise ValueError("outside the domain")

    with pytest.raises(ValueError, match="outside the domain"):
        Compiled(refuses)((np.ones(2),))


def test_agree_is_rounding_not_closeness():
    assert agree((np.float64(1.0), np.ones(2)), (np.float64(1.0) + 1e-15, np.ones(2)))
    assert not agree(np.float64(1.0), np.float64(1.0 + 1e-9))
    assert agree(np.array([np.nan, 1e300]), np.array([np.nan, 1e300 * (1 + 1e-15)]))
    assert not agree(np.ones(2), np.ones(3))
    assert not agree(np.ones(2, np.float32), np.ones(2))
    assert not agree((np.ones(2),), [np.ones(2)])


# -- the users: a JAX rule's primal, the custom_jvp adapter -----------------------------------


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def fixed_point(f, a, x0):
    def cond(carry):
        prev, x = carry
        return jnp.abs(prev - x) > 1e-10

    def body(carry):
        return carry[1], f(a, carry[1])

    return jax.lax.while_loop(cond, body, (x0, f(a, x0)))[1]


def _fixed_point_fwd(f, a, x0):
    x = fixed_point(f, a, x0)
    return x, (a, x)


def _fixed_point_bwd(f, res, g):
    a, x = res
    return g / (2 * x), jnp.zeros_like(x)  # for f = Newton's sqrt update: d sqrt(a) / da


fixed_point.defvjp(_fixed_point_fwd, _fixed_point_bwd)


def newton_update(a, x):
    return 0.5 * (x + a / x)


def test_a_jax_rules_while_loop_primal_is_traced_once_in_a_whole_check():
    from gradguard import check, constant, floats, jax_rule

    traces = []

    def update(a, x):
        traces.append(1)  # runs at each trace of the primal's loop body (and at each eager call)
        return newton_update(a, x)

    rule = jax_rule(fixed_point, constant(update), floats(0.5, 10.0), floats(0.5, 10.0), name="fixed_point_sqrt")
    report = check(rule, select=["GG102", "GG201"], seed=0)
    (result,) = report.rules
    assert result.verdict == "pass", result.findings
    primal = rule.primal.compiled
    assert primal.eager_keys == {}
    # Eagerly, every primal call traced the loop body again: GG201's finite differences alone call the primal
    # about 16 times per drawn input, 20 inputs. Compiled: traces for a couple of keys (float64 scalars;
    # the first draw's Python floats), their eager verifications, and the rule's own fwd.
    assert len(traces) < 30, len(traces)  # 682 when every primal call ran eagerly


@jax.custom_jvp
def softplus(x):
    return jnp.logaddexp(0.0, x)


@softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus(x), jax.nn.sigmoid(x) * t


def test_custom_jvp_adapter_compiles_and_keeps_the_forward_arguments():
    rule = ej.rrule_from_custom_jvp(softplus)
    x = np.array([-1.0, 0.5, 2.0])
    y, pb = rule(x)
    x[:] = 100.0  # the caller writes into its array after the forward call: the pullback keeps the old values
    (xbar,) = pb(np.ones(3))
    assert np.allclose(y, np.logaddexp(0.0, [-1.0, 0.5, 2.0]))
    assert np.allclose(xbar, 1 / (1 + np.exp(-np.array([-1.0, 0.5, 2.0]))))
    for value in (0.1, 0.2, 0.3):
        rule(np.full(3, value))[1](np.ones(3))
    forward, pullback = rule.compiled
    assert forward.eager_keys == {} and pullback.eager_keys == {}


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def weighted_sines(nodes, x):
    return simpson(nodes, jnp.ones_like(nodes), x)


def _weighted_sines_fwd(nodes, x):
    _weighted_sines_fwd.calls.append(1)
    return weighted_sines(nodes, x), x


def _weighted_sines_bwd(nodes, x, ct):
    _weighted_sines_bwd.calls.append(1)
    return (ct * jnp.sum(nodes[:, None] * jnp.cos(nodes[:, None] * x), axis=0),)


_weighted_sines_fwd.calls, _weighted_sines_bwd.calls = [], []
weighted_sines.defvjp(_weighted_sines_fwd, _weighted_sines_bwd)


def test_custom_vjp_adapter_compiles_once_with_an_array_nondiff_argument():
    rule = ej.rrule_from_custom_vjp(weighted_sines)
    _weighted_sines_fwd.calls.clear()
    _weighted_sines_bwd.calls.clear()
    for value in (0.5, 1.0, 1.5):
        nodes = np.linspace(0.0, 1.0, 5)  # a new array of the same contents at every call
        y, pb = rule(nodes, np.full(2, value))
        (_, xbar) = pb(np.ones(2))
        assert np.allclose(y, np.sin(value * nodes).sum())
        assert np.allclose(xbar, (nodes * np.cos(value * nodes)).sum())
    # traced once each (3 calls each when every call ran eagerly, the array being unhashable)
    assert len(_weighted_sines_fwd.calls) == 1 and len(_weighted_sines_bwd.calls) == 1


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def sines_jvp_rule(nodes, x):
    return simpson(nodes, jnp.ones_like(nodes), x)


@sines_jvp_rule.defjvp
def _sines_jvp(nodes, primals, tangents):
    _sines_jvp.calls.append(1)
    (x,), (t,) = primals, tangents
    return sines_jvp_rule(nodes, x), t * jnp.sum(nodes[:, None] * jnp.cos(nodes[:, None] * x), axis=0)


_sines_jvp.calls = []


def test_custom_jvp_adapter_compiles_once_with_an_array_nondiff_argument():
    rule = ej.rrule_from_custom_jvp(sines_jvp_rule)
    for value in (0.5, 1.0, 1.5):
        nodes = jnp.linspace(0.0, 1.0, 5)
        y, pb = rule(nodes, np.full(2, value))
        (_, xbar) = pb(np.ones(2))
        assert np.allclose(xbar, (np.linspace(0.0, 1.0, 5) * np.cos(value * np.linspace(0.0, 1.0, 5))).sum())
    forward, pullback = rule.compiled
    assert forward.eager_keys == {} and pullback.eager_keys == {}
    # each compiled key: one trace and one eager run verifying it (forward and pullback): 6 calls of each
    # when every call ran eagerly
    assert len(_sines_jvp.calls) == 4, len(_sines_jvp.calls)


def test_a_fixed_array_too_large_to_key_runs_eagerly():
    from gradguard.engines.jax_engine._compiled import KEYED_BYTES

    fn = counted(lambda scale, x: x * scale[0])
    compiled = Compiled(fn)
    large = np.full(KEYED_BYTES // 8 + 1, 2.0)  # one element more than a key may hold
    for value in (1.0, 2.0):
        assert np.allclose(compiled((large, np.full(2, value)), fixed={0}), 2 * value)
    assert len(fn.calls) == 2 and compiled.eager_keys == {}  # each call eager, as for an unkeyable value
