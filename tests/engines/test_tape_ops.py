"""Every built-in tape op against JAX and central finite differences (micrograd-style).

Each case is one expression written once against a NumPy-like namespace ``m``
and run with ``m = tnp`` (our tape) and ``m = jnp`` (the reference).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradguard.engines.tape import grad, run_backward, tnp, value_and_grad

jax.config.update("jax_enable_x64", True)

IDX = np.array([0, 0, 2])  # a repeated index: the gradient must accumulate (np.add.at)

# name -> (expression, argument shapes, kind of values); kind "pos" keeps log/sqrt/pow in their domain
CASES = {
    "add": (lambda m, x, y: x + y, [(2, 3), (3,)], "any"),
    "add-scalar": (lambda m, x, y: m.add(x, y), [(2, 3), ()], "any"),
    "subtract": (lambda m, x, y: x - y, [(2, 1), (1, 3)], "any"),
    "rsub-const": (lambda m, x: 2.0 - x, [(3,)], "any"),
    "multiply": (lambda m, x, y: x * y, [(4, 1, 3), (2, 1)], "any"),
    "divide": (lambda m, x, y: x / y, [(2, 3), (3,)], "pos"),
    "rdivide-const": (lambda m, x: 1.0 / x, [(3,)], "pos"),
    "power": (lambda m, x, y: x**y, [(2, 3), (3,)], "pos"),
    "power-const": (lambda m, x: x**3.0, [(2, 3)], "any"),
    "rpower": (lambda m, x: 2.0**x, [(3,)], "any"),
    "negative": (lambda m, x: -x, [(3,)], "any"),
    "exp": (lambda m, x: m.exp(x), [(2, 3)], "any"),
    "log": (lambda m, x: m.log(x), [(2, 3)], "pos"),
    "sin": (lambda m, x: m.sin(x), [(2, 3)], "any"),
    "cos": (lambda m, x: m.cos(x), [(2, 3)], "any"),
    "tanh": (lambda m, x: m.tanh(x), [(2, 3)], "any"),
    "sqrt": (lambda m, x: m.sqrt(x), [(2, 3)], "pos"),
    "abs": (lambda m, x: m.abs(x), [(2, 3)], "any"),
    "maximum": (lambda m, x, y: m.maximum(x, y), [(2, 3), (3,)], "any"),
    "where": (lambda m, x, y: m.where(x > 0, x, y), [(2, 3), (3,)], "any"),
    "dot-vv": (lambda m, x, y: m.dot(x, y), [(3,), (3,)], "any"),
    "dot-mv": (lambda m, x, y: m.dot(x, y), [(2, 3), (3,)], "any"),
    "dot-vm": (lambda m, x, y: m.dot(x, y), [(3,), (3, 2)], "any"),
    "dot-mm": (lambda m, x, y: m.dot(x, y), [(2, 3), (3, 4)], "any"),
    "dot-scalar": (lambda m, x, y: m.dot(x, y), [(), (3,)], "any"),
    "matmul": (lambda m, x, y: x @ y, [(2, 3), (3, 4)], "any"),
    "matmul-batch-vec": (lambda m, x, y: m.matmul(x, y), [(4, 2, 3), (3,)], "any"),
    "matmul-vec-batch": (lambda m, x, y: m.matmul(x, y), [(3,), (4, 3, 2)], "any"),
    "matmul-broadcast": (lambda m, x, y: x @ y, [(2, 2, 3), (1, 3, 4)], "any"),
    "sum": (lambda m, x: m.sum(x), [(2, 3, 4)], "any"),
    "sum-axis": (lambda m, x: m.sum(x, axis=1), [(2, 3, 4)], "any"),
    "sum-axes-keepdims": (lambda m, x: m.sum(x, axis=(0, -1), keepdims=True), [(2, 3, 4)], "any"),
    "sum-method": (lambda m, x: x.sum(axis=0), [(2, 3)], "any"),
    "mean": (lambda m, x: m.mean(x), [(2, 3)], "any"),
    "mean-axis-keepdims": (lambda m, x: m.mean(x, axis=-1, keepdims=True), [(2, 3)], "any"),
    "reshape": (lambda m, x: m.reshape(x, (3, -1)), [(2, 3, 2)], "any"),
    "reshape-method": (lambda m, x: x.reshape(6), [(2, 3)], "any"),
    "transpose": (lambda m, x: m.transpose(x), [(2, 3, 4)], "any"),
    "transpose-axes": (lambda m, x: m.transpose(x, (2, -3, 1)), [(2, 3, 4)], "any"),
    "T": (lambda m, x: x.T, [(2, 3)], "any"),
    "getitem-int": (lambda m, x: x[1], [(3, 2)], "any"),
    "getitem-slice": (lambda m, x: x[1:, ::2], [(3, 4)], "any"),
    "getitem-reverse": (lambda m, x: x[::-1], [(4,)], "any"),
    "getitem-index-array": (lambda m, x: x[IDX], [(3, 2)], "any"),
    "getitem-mixed": (lambda m, x: x[:, IDX], [(2, 3)], "any"),
    "concatenate": (lambda m, x, y: m.concatenate([x, y, x], axis=1), [(2, 3), (2, 1)], "any"),
    "stack": (lambda m, x, y: m.stack([x, y], axis=-1), [(2, 3), (2, 3)], "any"),
    "copy": (lambda m, x: m.copy(x), [(2, 3)], "any"),
    "ascontiguousarray": (lambda m, x: (m.asarray if m is jnp else m.ascontiguousarray)(x.T[::2]), [(2, 3)], "any"),  # jnp: no layout
    "square": (lambda m, x: m.square(x), [(2, 3)], "any"),
    "log1p": (lambda m, x: m.log1p(x), [(2, 3)], "pos"),
    "expm1": (lambda m, x: m.expm1(x), [(2, 3)], "any"),
    "minimum": (lambda m, x, y: m.minimum(x, y), [(2, 3), (3,)], "any"),
    "logaddexp": (lambda m, x, y: m.logaddexp(x, y), [(2, 3), (3,)], "any"),
    "outer": (lambda m, x, y: m.outer(x, y), [(3,), (2, 2)], "any"),
    "broadcast_to": (lambda m, x: m.broadcast_to(x, (4, 2, 3)), [(2, 1)], "any"),
    "numpy-dispatch": (lambda m, x, y: np.sin(x) * np.dot(x, y) if m is tnp else m.sin(x) * m.dot(x, y), [(3,), (3,)], "any"),
}


def _inputs(shapes, kind, seed):
    rng = np.random.default_rng(seed)
    lo = 0.5 if kind == "pos" else -2.0
    return [rng.uniform(lo, 2.0, size=s) for s in shapes]


def fd_grad(f, args, i, h=1e-6):
    """Central finite differences of the scalar f(*args) w.r.t. args[i]."""
    x = np.array(args[i], dtype=float)
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[k] += h
        xm[k] -= h
        g[k] = (f(*args[:i], xp, *args[i + 1 :]) - f(*args[:i], xm, *args[i + 1 :])) / (2 * h)
    return g


@pytest.mark.parametrize("name", CASES)
def test_op_matches_jax_and_finite_differences(name):
    expr, shapes, kind = CASES[name]
    args = _inputs(shapes, kind, seed=len(name))
    out_shape = np.shape(expr(np, *args))
    w = np.random.default_rng(0).normal(size=out_shape)
    nums = tuple(range(len(args)))

    value, grads = value_and_grad(lambda *a: tnp.sum(expr(tnp, *a) * w), *args, argnums=nums)
    ref_value, ref_grads = jax.jit(jax.value_and_grad(lambda *a: jnp.sum(expr(jnp, *a) * w), argnums=nums))(*args)

    np.testing.assert_allclose(value, ref_value, rtol=1e-12)
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        assert np.shape(g) == np.shape(args[i]), f"argument {i}"
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12, err_msg=f"argument {i}")
        fd = fd_grad(lambda *a: np.sum(expr(np, *a) * w), args, i)
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7, err_msg=f"argument {i} vs finite differences")


def test_ops_without_tracked_arguments_are_plain_numpy():
    x = np.arange(3.0)
    assert type(tnp.sin(x)) is np.ndarray
    np.testing.assert_array_equal(tnp.dot(x, x), 5.0)


def test_ascontiguousarray_gives_a_new_c_ordered_array_on_the_tape():
    """What the view contexts' twins pass a rule: its values in a C-ordered array of its own, differentiated as x."""
    seen = []

    def program(x):
        y = tnp.ascontiguousarray(x.T)
        seen.append(y.value)
        return tnp.sum(y * np.arange(6.0).reshape(3, 2))

    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(grad(program, x), np.arange(6.0).reshape(3, 2).T)
    assert seen[0].flags.c_contiguous and seen[0].base is None


def test_abs_at_zero_follows_chainrules():
    np.testing.assert_array_equal(grad(lambda x: tnp.sum(tnp.abs(x)), np.zeros(2)), [0.0, 0.0])  # JAX says 1


@pytest.mark.parametrize("y", [1e160, -3e200])
def test_divide_by_a_huge_denominator_keeps_its_derivative(y):
    # d(x / y)/dy = -x / y**2 (1e-170 and -1.1e-251 here), whose y**2 alone overflows float64
    x = 1e150
    got = grad(lambda y: tnp.sum(x / y), np.array([y]))
    np.testing.assert_allclose(got, [-(x / y) / y], rtol=1e-15)
    assert got[0] != 0


def test_boolean_mask_gradient_scatters():
    x = np.array([1.0, -2.0, 3.0])
    mask = x > 0
    np.testing.assert_array_equal(grad(lambda x: tnp.sum(x[mask] ** 2), x), [2.0, 0.0, 6.0])


def test_repeated_index_accumulates():
    np.testing.assert_array_equal(grad(lambda x: tnp.sum(x[np.array([1, 1, 1, 0])]), np.zeros(3)), [1.0, 3.0, 0.0])


def test_ndarray_on_the_left_routes_to_the_tape():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(grad(lambda x: tnp.sum(a @ x) + tnp.sum(a * x), x), a.sum(0) * 2)


def test_shape_queries_and_constant_numpy_functions_work_on_tracked_values():
    def program(x):
        assert np.shape(x) == (2, 3) and np.ndim(x) == 2 and x.shape == (2, 3) and x.dtype == np.float64
        return tnp.sum(x * np.ones_like(x) + np.floor(x))

    np.testing.assert_array_equal(grad(program, np.full((2, 3), 0.5)), np.ones((2, 3)))


def test_comparisons_give_plain_arrays():
    seen = []
    grad(lambda x: seen.append(x > 0) or tnp.sum(x), np.array([1.0, -1.0]))
    assert type(seen[0]) is np.ndarray and seen[0].dtype == bool


def test_float32_inputs_keep_their_dtype():
    x = np.ones(3, np.float32)
    assert grad(lambda x: tnp.sum(x * x), x).dtype == np.float32


# ---- complex numbers: ChainRules convention (the pullback is the conjugate transpose) ----

COMPLEX = {
    "multiply": lambda m, z: z * (2.0 - 1.5j) * z,
    "divide": lambda m, z: 1.0 / (z + 3.0),
    "exp": lambda m, z: m.exp(z),
    "log": lambda m, z: m.log(z),
    "sin": lambda m, z: m.sin(z),
    "cos": lambda m, z: m.cos(z),
    "tanh": lambda m, z: m.tanh(z),
    "sqrt": lambda m, z: m.sqrt(z),
    "abs": lambda m, z: m.abs(z),
    "conj": lambda m, z: m.conj(z) * z,
    "real-imag": lambda m, z: m.real(z) * m.imag(z),
    "dot": lambda m, z: m.dot(z, z),
    "matmul": lambda m, z: m.reshape(z, (2, 2)) @ m.reshape(z, (2, 2)),
    "power": lambda m, z: z**3,
}


@pytest.mark.parametrize("name", COMPLEX)
def test_complex_pullback_is_conjugate_transpose(name):
    expr = COMPLEX[name]
    rng = np.random.default_rng(1)
    z = rng.uniform(0.5, 1.5, 4) + 1j * rng.uniform(0.5, 1.5, 4)
    out = expr(np, z)
    w = rng.normal(size=np.shape(out)) + 1j * rng.normal(size=np.shape(out))
    if not np.iscomplexobj(out):
        w = w.real

    got = run_backward(lambda z: expr(tnp, z), (z,), w).grads[0]

    # For L(z) = Re<w, f(z)>, ChainRules' gradient is dL/dRe(z) + i dL/dIm(z) ...
    def loss(z):
        return np.real(np.sum(np.conj(w) * expr(np, z)))

    h, fd = 1e-6, np.zeros_like(z)
    for k in range(z.size):
        e = np.zeros_like(z)
        e[k] = h
        fd[k] = (loss(z + e) - loss(z - e)) / (2 * h) + 1j * (loss(z + 1j * e) - loss(z - 1j * e)) / (2 * h)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)
    # ... which is the conjugate of JAX's vjp with a conjugated cotangent.
    ref = jax.jit(lambda z, w: jax.vjp(lambda z: expr(jnp, z), z)[1](w)[0])(z, np.conj(w))
    np.testing.assert_allclose(got, np.conj(ref), rtol=1e-10, atol=1e-12)


def test_real_input_times_complex_constant_gets_a_real_gradient():
    x = np.array([1.0, 2.0])
    g = grad(lambda x: tnp.sum(tnp.real(x * (1 + 2j))), x)
    assert not np.iscomplexobj(g)
    np.testing.assert_array_equal(g, [1.0, 1.0])
