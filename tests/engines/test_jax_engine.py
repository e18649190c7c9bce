"""The JAX engine: adapters both ways, reference derivatives, transforms, device, within_gradient."""

from __future__ import annotations

import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from gradguard import engines
import gradguard.engines.jax_engine as ej
from gradguard.engines.errors import AdapterError, PlatformUnavailable

jax = pytest.importorskip("jax")
jnp = jax.numpy
ej.configure("cpu")  # float64 on, before any array is made


# -- rules used throughout -------------------------------------------------------------


def sin_mul_rrule(x, w):
    """y = sin(x) * w, elementwise."""
    y = np.sin(x) * w
    return y, lambda ybar: (np.cos(x) * w * ybar, np.sin(x) * ybar)


def scale_rrule(x, k):
    """y = k * x with an integer, non-differentiable k."""
    return x * k, lambda ybar: (ybar * k, None)


def addone_rrule(a):
    a += 1  # mutates its argument
    return a.sum(), lambda ybar: (np.full(a.shape, ybar),)


@jax.custom_vjp
def cube(x):
    return x**3


cube.defvjp(lambda x: (x**3, x), lambda x, ybar: (3 * x**2 * ybar,))


@jax.custom_vjp
def bad_arity(x):
    return jnp.sin(x)


bad_arity.defvjp(lambda x: (jnp.sin(x), x), lambda x, ybar: (jnp.cos(x) * ybar, ybar))  # one tangent too many


@jax.custom_vjp
def not_a_tuple(x):
    return jnp.sin(x)


not_a_tuple.defvjp(lambda x: (jnp.sin(x), x), lambda x, ybar: jnp.cos(x) * ybar)  # bare array, not a tuple


@jax.custom_vjp
def wrong_shape(x):
    return jnp.sin(x)


wrong_shape.defvjp(lambda x: (jnp.sin(x), x), lambda x, ybar: (jnp.cos(x)[:1] * ybar[:1],))


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def power(x, n):
    return x**n


power.defvjp(lambda x, n: (x**n, x), lambda n, x, ybar: (n * x ** (n - 1) * ybar,))


X = np.array([0.3, -1.2, 2.0])
W = np.array([1.5, 0.5, -2.0])


# -- import laziness --------------------------------------------------------------------


def test_importing_engines_does_not_import_jax():
    code = (
        "import sys, engines, engines.jax_engine; "
        "assert 'jax' not in {m.split('.')[0] for m in sys.modules}, 'jax imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_public_surface():
    assert set(ej.__all__) >= {
        "to_custom_vjp", "rrule_from_custom_vjp", "primal_of_custom_vjp", "reference_vjp", "second_order_vjp",
        "run_under", "configure", "environment", "is_jax_differentiation_tracer", "cache_info",
    }
    for name in ej.__all__:
        assert hasattr(ej, name)


# -- NumPy rrule -> custom_vjp ---------------------------------------------------------------


def test_adapted_rule_gradient_equals_its_pullback():
    f = ej.to_custom_vjp(sin_mul_rrule)
    ybar = np.array([1.0, -2.0, 0.5])
    _, pullback = sin_mul_rrule(X, W)
    _, vjp = jax.vjp(f, jnp.asarray(X), jnp.asarray(W))
    for got, want in zip(vjp(jnp.asarray(ybar)), pullback(ybar)):
        np.testing.assert_allclose(got, want, rtol=1e-14)


@pytest.mark.parametrize("transform", ["none", "jit"])
def test_adapted_rule_value_under_jit(transform):
    f = ej.to_custom_vjp(sin_mul_rrule)
    np.testing.assert_allclose(ej.run_under(f, (X, W), transform=transform), np.sin(X) * W, rtol=1e-14)


@pytest.mark.parametrize("transform", ["grad", "jit_grad"])
def test_adapted_rule_gradient_under_jit(transform):
    f = ej.to_custom_vjp(sin_mul_rrule)
    gx, gw = ej.run_under(lambda x, w: f(x, w).sum(), (X, W), transform=transform)
    np.testing.assert_allclose(gx, np.cos(X) * W, rtol=1e-14)
    np.testing.assert_allclose(gw, np.sin(X), rtol=1e-14)


def test_adapted_rule_under_vmap_matches_a_loop():
    f = ej.to_custom_vjp(sin_mul_rrule)
    xs, ws = np.stack([X, 2 * X]), np.stack([W, -W])
    batched = ej.run_under(f, (xs, ws), transform="vmap")
    np.testing.assert_allclose(batched, [np.sin(x) * w for x, w in zip(xs, ws)], rtol=1e-14)
    grads = jax.vmap(jax.grad(lambda x, w: f(x, w).sum()))(xs, ws)
    np.testing.assert_allclose(grads, np.cos(xs) * ws, rtol=1e-14)


def test_adapted_rule_with_nondiff_and_static_arguments():
    f = ej.to_custom_vjp(scale_rrule, nondiff=(1,))
    gx, gk = ej.run_under(lambda x, k: f(x, k).sum(), (X, 3), transform="jit_grad", nondiff=(1,))
    np.testing.assert_allclose(gx, np.full(3, 3.0))
    assert gk is None

    def labelled(x, label):
        assert label == "tag"
        return 2 * x, lambda ybar: (2 * ybar, None)

    g = ej.to_custom_vjp(labelled)
    np.testing.assert_allclose(jax.grad(lambda x: g(x, "tag").sum())(jnp.asarray(X)), np.full(3, 2.0))


def test_grad_of_grad_through_a_host_rule_is_refused_clearly():
    f = ej.to_custom_vjp(sin_mul_rrule)
    inner = jax.grad(lambda x: f(x, jnp.asarray(W)).sum())
    with pytest.raises(AdapterError, match="second-order derivatives .* through rule sin_mul_rrule are not available"):
        jax.grad(lambda x: inner(x).sum())(jnp.asarray(X))
    with pytest.raises(AdapterError, match="forward-mode and second-order"):
        jax.hessian(lambda x: f(x, jnp.asarray(W)).sum())(jnp.asarray(X))  # forward over reverse


def test_mutating_rule_is_reported_not_crashed():
    f = ej.to_custom_vjp(addone_rrule)
    message = (
        "rule addone_rrule mutates its argument 0 in place; JAX passes read-only buffers, so under JAX this rule "
        "cannot run; declare mutates=(0,) and copy before mutating"
    )
    for transform in ("none", "jit", "grad"):
        with pytest.raises(AdapterError, match=message.replace("(", r"\(").replace(")", r"\)")):
            ej.run_under(f, (np.ones(3),), transform=transform)
    with pytest.raises(AdapterError, match="mutates its argument 0"):
        f(jnp.ones(3))  # an eager call relays the error too


def test_pullback_with_the_wrong_arity_names_the_contract():
    f = ej.to_custom_vjp(lambda x: (2 * x, lambda ybar: (2 * ybar, ybar)), name="twice")
    message = r"pullback of rule twice must return a tuple with one tangent per argument \(1\), but returned 2"
    with pytest.raises(AdapterError, match=message):
        ej.run_under(lambda x: f(x).sum(), (X,), transform="grad")


def test_unrunnable_probe_asks_for_example_args():
    def picky(x):
        if np.all(x == 1.0):
            raise ValueError("ones are not in the domain")
        return x, lambda ybar: (ybar,)

    with pytest.raises(AdapterError, match="Pass example_args"):
        jax.jit(ej.to_custom_vjp(picky))(jnp.asarray(X))
    ok = ej.to_custom_vjp(picky, example_args=(X,))
    np.testing.assert_allclose(jax.jit(ok)(jnp.asarray(X)), X)


def test_a_rules_own_exception_comes_back_as_itself():
    def failing(x):
        def pullback(ybar):
            raise KeyError("missing table entry")

        return x.sum(), pullback

    with pytest.raises(KeyError, match="missing table entry"):
        ej.run_under(ej.to_custom_vjp(failing), (X,), transform="jit_grad")


def test_jax_native_rule_under_every_transform():
    loss = lambda x: cube(x).sum()  # noqa: E731
    np.testing.assert_allclose(ej.run_under(cube, (X,), transform="jit"), X**3)
    np.testing.assert_allclose(ej.run_under(cube, (np.stack([X, -X]),), transform="vmap"), np.stack([X, -X]) ** 3)
    for transform in ("grad", "jit_grad"):
        (g,) = ej.run_under(loss, (X,), transform=transform)
        np.testing.assert_allclose(g, 3 * X**2)
    (g,) = ej.run_under(cube, (X,), transform="grad", cotangent=np.array([1.0, 0.0, 2.0]))
    np.testing.assert_allclose(g, 3 * X**2 * [1.0, 0.0, 2.0])
    with pytest.raises(AdapterError, match="needs cotangent="):
        ej.run_under(cube, (X,), transform="grad")


def test_bad_arguments_are_rejected_eagerly():
    with pytest.raises(AdapterError, match="needs a function"):
        ej.to_custom_vjp(3)
    with pytest.raises(AdapterError, match="nondiff must be argument positions"):
        ej.to_custom_vjp(sin_mul_rrule, nondiff=("x",))
    with pytest.raises(ValueError, match="transform must be one of"):
        ej.run_under(np.sin, (X,), transform="pmap")


# -- custom_vjp -> NumPy rrule ---------------------------------------------------------------


def test_rrule_from_custom_vjp_round_trip():
    rule = ej.rrule_from_custom_vjp(cube)
    y, pullback = rule(X)
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, X**3)
    ybar = np.array([1.0, 2.0, -1.0])
    (xbar,) = pullback(ybar)
    assert isinstance(xbar, np.ndarray)
    _, vjp = jax.vjp(cube, jnp.asarray(X))
    np.testing.assert_allclose(xbar, vjp(jnp.asarray(ybar))[0], rtol=1e-14)
    assert rule.__name__ == "cube"
    assert ej.primal_of_custom_vjp(cube) is cube.fun


def test_rrule_from_custom_vjp_with_symbolic_zeros():
    @jax.custom_vjp
    def sine(x):
        return jnp.sin(x)

    sine.defvjp(lambda x: (jnp.sin(x.value), x.value), lambda x, ybar: (jnp.cos(x) * ybar,), symbolic_zeros=True)
    y, pullback = ej.rrule_from_custom_vjp(sine)(X)
    np.testing.assert_allclose(y, np.sin(X))
    np.testing.assert_allclose(pullback(np.ones(3))[0], np.cos(X))


def test_rrule_from_custom_vjp_hands_bwd_the_python_values_fwd_kept():
    # spyx's packed_spike_dense keeps spikes.shape in its residuals and its bwd passes it to a jitted function as a
    # static argument: JAX hands bwd those Python ints, the adapter's jitted fwd handed back arrays, and bwd raised
    # "ValueError: Non-hashable static arguments are not supported" (a false GG103 at every seed)
    @partial(jax.jit, static_argnums=1)
    def reshaped(g, shape):
        return g.reshape(shape)

    @jax.custom_vjp
    def double(x):
        return 2 * x

    double.defvjp(lambda x: (2 * x, (x.shape,)), lambda res, g: (2 * reshaped(g.reshape(-1), res[0]),))
    x = np.arange(6.0).reshape(2, 3)
    y, pullback = ej.rrule_from_custom_vjp(double)(x)
    np.testing.assert_allclose(y, 2 * x)
    np.testing.assert_allclose(pullback(np.ones((2, 3)))[0], np.full((2, 3), 2.0))
    # the bwd's own error is still reported
    double.defvjp(lambda x: (2 * x, (x.shape,)), lambda res, g: (reshaped(g, (7,)),))
    with pytest.raises(AdapterError, match="the bwd of custom_vjp double raised TypeError"):
        ej.rrule_from_custom_vjp(double)(x)[1](np.ones((2, 3)))


def test_rrule_from_custom_vjp_inserts_none_for_nondiff_argnums():
    rule = ej.rrule_from_custom_vjp(power)
    y, pullback = rule(X, 3)
    np.testing.assert_allclose(y, X**3)
    xbar, nbar = pullback(np.ones(3))
    np.testing.assert_allclose(xbar, 3 * X**2)
    assert nbar is None


def test_both_adapters_compose_back_to_the_same_gradient():
    f = ej.to_custom_vjp(ej.rrule_from_custom_vjp(cube))
    np.testing.assert_allclose(jax.grad(lambda x: f(x).sum())(jnp.asarray(X)), 3 * X**2, rtol=1e-14)


@pytest.mark.parametrize(
    "fn, check",
    [
        (bad_arity, lambda out: isinstance(out, tuple) and len(out) == 2),
        (not_a_tuple, lambda out: isinstance(out, np.ndarray) and out.shape == (3,)),
        (wrong_shape, lambda out: isinstance(out, tuple) and out[0].shape == (1,)),
    ],
    ids=["wrong-length", "not-a-tuple", "wrong-shape"],
)
def test_wrong_bwd_pytrees_come_back_as_data(fn, check):
    _, pullback = ej.rrule_from_custom_vjp(fn)(X)
    assert check(pullback(np.ones(3)))  # the checker's GG103/GG104 report these


def test_bwd_that_raises_is_wrapped_with_the_contract():
    @jax.custom_vjp
    def broken(x):
        return x

    broken.defvjp(lambda x: (x, x), lambda x, ybar: (x @ jnp.ones((7, 2)),))
    _, pullback = ej.rrule_from_custom_vjp(broken)(X)
    with pytest.raises(AdapterError, match="the bwd of custom_vjp broken raised TypeError"):
        pullback(np.ones(3))


def test_non_custom_vjp_is_rejected():
    with pytest.raises(AdapterError, match="jax.custom_vjp-decorated function was expected"):
        ej.rrule_from_custom_vjp(np.sin)


# -- reference derivatives -----------------------------------------------------------------------


def test_reference_vjp_matches_the_analytic_gradient():
    ct = np.array([0.5, 1.0, -3.0])
    gx, gw = ej.reference_vjp(lambda x, w: jnp.sin(x) * w, (X, W), ct)
    np.testing.assert_allclose(gx, np.cos(X) * W * ct, rtol=1e-14)
    np.testing.assert_allclose(gw, np.sin(X) * ct, rtol=1e-14)
    gx, gk = ej.reference_vjp(lambda x, k: x**k, (X, 2), np.ones(3), nondiff=(1,))
    np.testing.assert_allclose(gx, 2 * X)
    assert gk is None


def test_untraceable_primal_raises_adapter_error():
    with pytest.raises(AdapterError, match="primal is not traceable by JAX"):
        ej.reference_vjp(lambda x: np.sin(x), (X,), np.ones(3))


def test_second_order_vjp_matches_the_analytic_hessian_of_a_custom_vjp():
    v = np.array([1.0, 0.0, -1.0])
    ct = np.array([2.0, 1.0, 0.5])
    (d,) = ej.second_order_vjp(cube, (X,), ct, (v,))
    np.testing.assert_allclose(d, 6 * X * ct * v, rtol=1e-14)  # d/dt of 3 (x + t v)^2 ct


def test_second_order_by_reverse_over_reverse_matches_forward_over_reverse():
    v, ct = np.array([1.0, 0.0, -1.0]), np.array([2.0, 1.0, 0.5])
    (d,) = ej.second_order_vjp_reverse(cube, (X,), ct, (v,))
    np.testing.assert_allclose(d, 6 * X * ct * v, rtol=1e-14)
    w = np.array([[0.5, -1.0], [2.0, 0.25]])
    pair = lambda x, m: jnp.sin(x[:2]) @ m  # noqa: E731 - two arguments, each tangent moved by both
    forward = ej.second_order_vjp(pair, (X, w), np.array([1.0, -2.0]), (v, w))
    reverse = ej.second_order_vjp_reverse(pair, (X, w), np.array([1.0, -2.0]), (v, w))
    for f, r in zip(forward, reverse):
        np.testing.assert_allclose(r, f, rtol=1e-13, atol=1e-15)
    with pytest.raises(AdapterError, match="complex"):
        ej.second_order_vjp_reverse(cube, (X.astype(complex),), ct, (v,))


# -- device and environment -------------------------------------------------------------------------


def test_environment_reports_versions_device_and_precision():
    env = ej.environment()
    assert env["jax"] == jax.__version__ and env["x64"] is True
    assert env["device"].startswith(("cpu", "gpu", "cuda"))
    with pytest.raises(ValueError, match="device must be one of"):
        ej.configure("tpu-please")


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU, so asking for one succeeds")
def test_gpu_request_without_gpu_raises_platform_unavailable():
    with pytest.raises(PlatformUnavailable, match=r"GPU requested but JAX sees no GPU here \(devices: cpu\)"):
        ej.configure("gpu")
    assert ej.environment()["device"].startswith("cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="JAX sees no GPU here (jax.devices('gpu') is unavailable)")
def test_adapters_on_gpu():
    try:
        env = ej.configure("gpu")
        assert env["device"].startswith(("gpu", "cuda"))
        f = ej.to_custom_vjp(sin_mul_rrule)
        gx, _ = ej.run_under(lambda x, w: f(x, w).sum(), (X, W), transform="jit_grad")
        np.testing.assert_allclose(gx, np.cos(X) * W, rtol=1e-12)
        (xbar,) = ej.rrule_from_custom_vjp(cube)(X)[1](np.ones(3))
        np.testing.assert_allclose(xbar, 3 * X**2, rtol=1e-12)
    finally:
        ej.configure("cpu")


# -- within_gradient -----------------------------------------------------------------------------------


def test_within_gradient_is_true_only_under_differentiation():
    seen: dict[str, bool] = {}

    def probe(tag):
        def f(x):
            seen[tag] = engines.within_gradient(x)
            return jnp.sum(x * x)

        return f

    x = jnp.asarray(X)
    jax.grad(probe("grad"))(x)
    jax.vjp(probe("vjp"), x)
    jax.jvp(probe("jvp"), (x,), (x,))
    jax.grad(lambda xs: jax.vmap(probe("grad-of-vmap"))(xs).sum())(jnp.stack([x, x]))
    jax.vmap(jax.grad(probe("vmap-of-grad")))(jnp.stack([x, x]))
    jax.jit(jax.grad(probe("jit-of-grad")))(x)
    probe("plain")(x)
    jax.jit(probe("jit"))(x)
    jax.vmap(probe("vmap"))(jnp.stack([x, x]))
    assert seen == {
        "grad": True, "vjp": True, "jvp": True, "grad-of-vmap": True, "vmap-of-grad": True, "jit-of-grad": True,
        "plain": False, "jit": False, "vmap": False,
    }
    assert ej.is_jax_differentiation_tracer(X) is False


# -- caching and speed ----------------------------------------------------------------------------------------


def test_repeated_checks_reuse_the_compiled_function():
    ej.clear_cache()
    f = ej.to_custom_vjp(sin_mul_rrule)
    loss = lambda x, w: f(x, w).sum()  # noqa: E731
    for k in range(5):
        ej.run_under(loss, (X + k, W), transform="jit_grad")
    info = ej.cache_info()
    assert (info["misses"], info["hits"], info["compiled"]) == (1, 4, 1)
    ej.run_under(loss, (np.ones(4), np.ones(4)), transform="jit_grad")  # a new shape compiles once more
    assert ej.cache_info()["compiled"] == 2
    assert f.cache_info() == {"wrappers": 1, "signatures": 2, "callbacks": 4}  # forward and pullback per shape


def test_unhashable_static_arguments_are_never_served_from_the_cache():
    def affine(x, coeffs):
        a, b = coeffs
        return a * x + b, lambda ybar: (a * ybar, None)

    f = ej.to_custom_vjp(affine)
    for a in (2.0, 5.0):
        g = jax.grad(lambda x: f(x, [a, 1.0]).sum())(jnp.asarray(X))
        np.testing.assert_allclose(g, np.full(3, a))
    assert f.cache_info()["callbacks"] == 0


def test_adapted_grad_after_warm_up_is_fast():
    f = ej.to_custom_vjp(sin_mul_rrule)
    grad = jax.jit(jax.grad(lambda x, w: f(x, w).sum()))
    x, w = jnp.asarray(X), jnp.asarray(W)
    grad(x, w).block_until_ready()
    start = time.perf_counter()
    for _ in range(50):
        grad(x, w).block_until_ready()
    per_call = (time.perf_counter() - start) / 50
    assert per_call < 0.01, f"{per_call * 1e6:.0f} us per adapted grad"


def test_a_numpy_ufunc_under_jit_fails_cleanly_every_time_and_never_crashes_the_process():
    """jax.jit keys its C++ cache on a weak reference to the function; a NumPy ufunc has none, and a few hundred
    failed jit(np.sin) calls in one process made the next one a segmentation fault. GG203 tries NumPy primals
    under jit first, so a long check run reached it. In a subprocess, as the crash would take this one down."""
    code = (
        "import numpy as np\n"
        "from gradguard.engines import jax_engine\n"
        "from gradguard.engines.jax_engine import _transforms\n"
        "x = np.ones(3)\n"
        "for i in range(300):\n"
        "    try:\n"
        "        jax_engine.run_under(np.sin, [x], transform='jit')\n"
        "        raise SystemExit('np.sin traced under jit')\n"
        "    except SystemExit:\n"
        "        raise\n"
        "    except Exception:\n"
        "        pass\n"
        "    _transforms._cache.clear()  # as the bounded cache evicts in a long run\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])


def test_a_bwd_error_ending_in_a_period_reads_as_one_sentence_before_the_contract():
    """JAX's broadcasting error ends with a period: the message read "(1, 6).. It is called as bwd(...)"."""
    @jax.custom_vjp
    def broken(x):
        return x

    def bwd(x, ybar):
        raise ValueError("mul got incompatible shapes for broadcasting: (4, 5), (1, 6).")

    broken.defvjp(lambda x: (x, x), bwd)
    _, pullback = ej.rrule_from_custom_vjp(broken)(X)
    with pytest.raises(AdapterError) as raised:
        pullback(np.ones(3))
    assert str(raised.value).startswith("the bwd of custom_vjp broken raised ValueError: mul got incompatible shapes "
                                        "for broadcasting: (4, 5), (1, 6). It is called as bwd(*nondiff_args, ")


def test_clause_drops_one_closing_period_only():
    from gradguard.engines.errors import clause

    assert [clause(ValueError(t)) for t in ("ends here. ", "no period", "an ellipsis..", "")] == [
        "ends here", "no period", "an ellipsis..", ""]
