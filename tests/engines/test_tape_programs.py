"""Random programs (Hypothesis expression trees over the op set): the tape's gradients equal JAX's.

Every node of a tree has the shape (a, b) of the input ``x``; ``y`` has shape
(b,) and enters through broadcasting. Each program is written once against a
namespace ``m`` and run with ``m = tnp`` and ``m = jnp``.
"""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gradguard.engines.tape import grad, tnp, vjp

jax.config.update("jax_enable_x64", True)


def _gather(m, e):
    rows = np.minimum(np.arange(e.shape[0]), e.shape[0] // 2)  # repeats a row: gradients accumulate
    return e[rows]


UNARY = {
    "neg": lambda m, e: -e,
    "sin": lambda m, e: m.sin(e),
    "cos": lambda m, e: m.cos(e),
    "tanh": lambda m, e: m.tanh(e),
    "exp": lambda m, e: m.exp(m.tanh(e)),
    "log": lambda m, e: m.log(e * e + 1.0),
    "sqrt": lambda m, e: m.sqrt(e * e + 0.5),
    "abs": lambda m, e: m.abs(e) * e,  # abs'(0) is 0 here (ChainRules) but 1 in JAX; |e|e hides the kink
    "square": lambda m, e: e**2,
    "recip": lambda m, e: 1.0 / (1.0 + e * e),
    "transpose": lambda m, e: m.transpose(e).T,
    "reshape": lambda m, e: m.reshape(m.reshape(e, (-1,)), e.shape),
    "reverse": lambda m, e: e[::-1, ::-1],
    "strided": lambda m, e: m.concatenate([e[::2], e[1::2]], axis=0),
    "gather": _gather,
    "stack": lambda m, e: m.stack([e, 2.0 * e], axis=1)[:, 1],
    "center": lambda m, e: e - m.mean(e, axis=0, keepdims=True),
    "rowsum": lambda m, e: e * m.sum(e, axis=1, keepdims=True),
    "matmul": lambda m, e: e @ m.transpose(e) @ e * 0.1,
    "dot": lambda m, e: m.dot(e, np.linspace(-1.0, 1.0, e.shape[1] ** 2).reshape(e.shape[1], -1)),
    "where": lambda m, e: m.where(e > 0, e, 0.1 * e),
    "copy": lambda m, e: m.copy(e),
}
BINARY = {
    "add": lambda m, p, q: p + q,
    "sub": lambda m, p, q: p - q,
    "mul": lambda m, p, q: p * q,
    "div": lambda m, p, q: p / (1.0 + q * q),
    "max": lambda m, p, q: m.maximum(p, q),
}
LEAVES = {
    "x": lambda m, x, y: x,
    "y": lambda m, x, y: 0.0 * x + y,
    "xy": lambda m, x, y: x * y,
    "y-x": lambda m, x, y: y - x,
}


def _leaf(name):
    return (name, lambda m, x, y: LEAVES[name](m, x, y))


def _extend(children):
    unary = st.tuples(st.sampled_from(sorted(UNARY)), children).map(
        lambda t: (f"{t[0]}({t[1][0]})", lambda m, x, y, f=UNARY[t[0]], c=t[1][1]: f(m, c(m, x, y)))
    )
    binary = st.tuples(st.sampled_from(sorted(BINARY)), children, children).map(
        lambda t: (f"{t[0]}({t[1][0]}, {t[2][0]})",
                   lambda m, x, y, f=BINARY[t[0]], p=t[1][1], q=t[2][1]: f(m, p(m, x, y), q(m, x, y)))
    )
    return unary | binary


programs = st.recursive(st.sampled_from(sorted(LEAVES)).map(_leaf), _extend, max_leaves=6)


@st.composite
def inputs(draw):
    a, b = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    elements = st.floats(-2.0, 2.0, allow_nan=False).filter(lambda v: abs(v) > 1e-3)
    x = draw(hnp.arrays(np.float64, (a, b), elements=elements))
    y = draw(hnp.arrays(np.float64, (b,), elements=elements))
    return x, y


@settings(max_examples=25, deadline=None)
@given(programs, inputs())
def test_random_program_gradients_equal_jax(program, xy):
    text, f = program
    x, y = xy
    w = np.cos(np.arange(x.size, dtype=float)).reshape(x.shape)  # a fixed, non-uniform cotangent

    out, vjp_fn = vjp(lambda x, y: f(tnp, x, y), x, y)
    grads = grad(lambda x, y: tnp.sum(f(tnp, x, y) * w), x, y, argnums=(0, 1))
    ref_out, *ref = jax.jit(lambda x, y: (lambda o, back: (o, *back(w)))(*jax.vjp(lambda x, y: f(jnp, x, y), x, y)))(x, y)

    # atol: an output that cancels to zero ("center" of equal entries) is 0 in one engine and an ulp of the
    # cancelled terms in the other; a relative tolerance alone cannot compare it with anything.
    np.testing.assert_allclose(out, ref_out, rtol=1e-12, atol=1e-12, err_msg=text)
    for g, v, r, name in zip(grads, vjp_fn(w), ref, "xy"):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10, err_msg=f"grad d/d{name} of {text}")
        np.testing.assert_allclose(v, r, rtol=1e-10, atol=1e-10, err_msg=f"vjp d/d{name} of {text}")
