"""Real-world corpus: `jax.custom_jvp` and `jax.custom_vjp` rules of lineax, equinox, flax and PyTensor's JAX
backend, declared with `jax_rule`.

Sources (full commits):
  LINEAX    patrick-kidger/lineax@2f0e083d9f0a3ae3329648410ed32e29f8cc9fb4  lineax/_norm.py, lineax/_misc.py
  EQUINOX   patrick-kidger/equinox@9336d820b2ef66b360fc6cb3611b3da5cefbb14d  equinox/internal/_nextafter.py
  FLAX      google/flax@18f8f311c275d57f46d95e41b15aa97b454754c0  flax/linen/fp8_ops.py
  PYTENSOR  pymc-devs/pytensor@f857e69611b9e36be2443f8e1905f5aa484aa455  pytensor/link/jax/dispatch/linalg/solvers.py

Each function is copied as upstream has it, with the helpers it calls (equinox's ``ω`` tree notation written as
``tree_map``); each custom derivative was compared with finite differences, or with JAX's derivative of the plain
implementation, on 3 random inputs. lineax's two-norm of a dict drew false errors until gradguard's custom_jvp adapter
was fixed (INDEX.md). ``lineax_zero_grad_at_zero_rule`` gives 0 at exactly 0 on purpose (it is used on ``max_norm``'s
output), so its domain leaves 0 out. ``LABELS`` maps each rule to its source; ``UPSTREAM_FLAWS`` lists the error
findings that are real flaws, with evidence.

The same probe copied 13 rules of TensorFlow Probability's JAX substrate (c847a41: ``log_gamma_difference``, ``lbeta``,
``erfcx``, ``lambertw``, ``igammainv``/``igammacinv``, ``betainc``, ``owens_t``, the hpsd log-determinant and quadratic
forms, ``sqrt_with_finite_grads``) through a stand-in for the TensorFlow names TFP's JAX backend maps; they are left
out of the corpus (2000 lines of copied code, minutes of CI a seed). gradguard found four real flaws among them
(INDEX.md) and no false error.
"""

import jax
import jax.numpy as jnp
import numpy as np

LINEAX = "patrick-kidger/lineax@2f0e083"
EQUINOX = "patrick-kidger/equinox@9336d82"
FLAX = "google/flax@18f8f31"
PYTENSOR = "pymc-devs/pytensor@f857e69"


# ===== lineax lineax/_norm.py:27-56 (tree_dot, sum_squares), 70-104 (_two_norm), 142-150 (_zero_grad_at_zero);
# ===== lineax/_misc.py:58-70 (_asarray), 73-77 (default_floating_dtype). `(x**ω / d).ω` is equinox's tree
# ===== notation for tree_map(lambda l: l / d, x).
import functools as ft
import math
import jax.tree_util as jtu


def default_floating_dtype():
    if jax.config.jax_enable_x64:  # pyright: ignore
        return jnp.float64
    else:
        return jnp.float32


def tree_dot(tree1, tree2):
    leaves1, treedef1 = jtu.tree_flatten(tree1)
    leaves2, treedef2 = jtu.tree_flatten(tree2)
    if treedef1 != treedef2:
        raise ValueError("trees must have the same structure")
    assert len(leaves1) == len(leaves2)
    dots = []
    for leaf1, leaf2 in zip(leaves1, leaves2):
        dots.append(
            jnp.dot(
                jnp.conj(leaf1).reshape(-1),
                jnp.reshape(leaf2, -1),
                precision=jax.lax.Precision.HIGHEST,  # pyright: ignore
            )
        )
    if len(dots) == 0:
        return jnp.array(0, default_floating_dtype())
    else:
        return ft.reduce(jnp.add, dots)


def sum_squares(x):
    return tree_dot(x, x).real


def two_norm(x):
    return _two_norm(x)


@jax.custom_jvp
def _two_norm(x):
    leaves = jtu.tree_leaves(x)
    size = sum([jnp.size(xi) for xi in leaves])
    if size == 1:
        # Avoid needless squaring-and-then-rooting.
        for leaf in leaves:
            if jnp.size(leaf) == 1:
                return jnp.abs(jnp.reshape(leaf, ()))
        else:
            assert False
    else:
        return jnp.sqrt(sum_squares(x))


@_two_norm.defjvp
def _two_norm_jvp(x, tx):
    (x,) = x
    (tx,) = tx
    out = two_norm(x)
    # Get zero gradient, rather than NaN gradient, in these cases.
    pred = (out == 0) | jnp.isinf(out)
    denominator = jnp.where(pred, 1, out)
    with jax.numpy_dtype_promotion("standard"):
        div = jtu.tree_map(lambda leaf: leaf / denominator, x)
    t_out = tree_dot(div, tx).real
    t_out = jnp.where(pred, 0, t_out)
    return out, t_out


@jax.custom_jvp
def _zero_grad_at_zero(x):
    return x


@_zero_grad_at_zero.defjvp
def _zero_grad_at_zero_jvp(primals, tangents):
    (out,) = primals
    (t_out,) = tangents
    return out, jnp.where(out == 0, 0, t_out)


def _asarray(dtype, x):
    return jnp.asarray(x, dtype=dtype)


# Work around JAX issue #15676
_asarray = jax.custom_jvp(_asarray, nondiff_argnums=(0,))


@_asarray.defjvp
def _asarray_jvp(dtype, x, tx):
    (x,) = x
    (tx,) = tx
    return _asarray(dtype, x), _asarray(dtype, tx)


# ===== equinox equinox/internal/_nextafter.py:6-36 =====
@jax.custom_jvp
def nextafter(x):
    """Returns the floating point number after `x`."""
    y = jnp.nextafter(x, jnp.inf)
    return jnp.where(x == 0, jnp.finfo(x.dtype).tiny, y)  # pyright: ignore


@nextafter.defjvp
def nextafter_jvp(primals, tangents):
    (x,) = primals
    (tx,) = tangents
    return nextafter(x), tx


@jax.custom_jvp
def prevbefore(x):
    """Returns the floating point number before `x`."""
    y = jnp.nextafter(x, -jnp.inf)
    return jnp.where(x == 0, -jnp.finfo(x.dtype).tiny, y)  # pyright: ignore


@prevbefore.defjvp
def prevbefore_jvp(primals, tangents):
    (x,) = primals
    (tx,) = tangents
    return prevbefore(x), tx


# ===== flax flax/linen/fp8_ops.py:496-525 (dot_general_with_precision) =====
import warnings
from functools import partial
from jax import custom_jvp, lax


@partial(custom_jvp, nondiff_argnums=(2, 3, 4))
def dot_general_with_precision(
  lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None
):
  if precision != None or preferred_element_type != None:
    warnings.warn(
      'The function dot_general_with_precision will set the '
      'precision/preferred_element_type and disregard any provided '
      'values.'
    )
  return lax.dot_general(
    lhs, rhs, dimension_numbers, precision=lax.Precision.DEFAULT
  )


@dot_general_with_precision.defjvp
def dot_general_with_precision_jvp(
  dimension_numbers, precision, preferred_element_type, primals, tangents
):
  lhs, rhs = primals
  lhs_dot, rhs_dot = tangents

  out = lax.dot_general(
    lhs, rhs, dimension_numbers, precision=lax.Precision.DEFAULT
  )
  grad_out = lax.dot_general(
    lhs_dot, rhs, dimension_numbers, precision=lax.Precision.HIGHEST
  ) + lax.dot_general(
    lhs, rhs_dot, dimension_numbers, precision=lax.Precision.HIGHEST
  )
  return out, grad_out


# ===== pytensor pytensor/link/jax/dispatch/linalg/solvers.py:83-106 (jax_funcify_SolveSylvester's inner rule) =====
@jax.custom_vjp
def solve_sylvester(a, b, c):
    return jax.scipy.linalg.solve_sylvester(a, b, c)


def _fwd(a, b, c):
    x = jax.scipy.linalg.solve_sylvester(a, b, c)
    return x, (a, b, x)


def _bwd(res, dx):
    a, b, x = res
    dc = jax.scipy.linalg.solve_sylvester(a.conj().T, b.conj().T, dx)
    da = -dc @ x.conj().T
    db = -x.conj().T @ dc
    return da, db, dc


solve_sylvester.defvjp(_fwd, _bwd)



from hypothesis import strategies as st  # noqa: E402

from gradguard import arrays, constant, jax_rule  # noqa: E402

lineax_two_norm_rule = jax_rule(_two_norm, arrays(shape=(4,)), name="lineax_two_norm_rule")
lineax_two_norm_pytree_rule = jax_rule(
    _two_norm, st.fixed_dictionaries({"a": arrays(shape=(2,)), "b": arrays(shape=(3,))}),
    name="lineax_two_norm_pytree_rule")
lineax_two_norm_size1_rule = jax_rule(_two_norm, arrays(shape=(1,)), name="lineax_two_norm_size1_rule")
# Used on max_norm's output (>= 0) to give 0 rather than 1 at exactly 0 on purpose; the domain leaves 0 out.
lineax_zero_grad_at_zero_rule = jax_rule(_zero_grad_at_zero, arrays(shape=(4,), min_value=1e-6, max_value=10.0),
                                         name="lineax_zero_grad_at_zero_rule")
lineax_asarray_f64_rule = jax_rule(_asarray, constant(jnp.float64), arrays(shape=(3,)), name="lineax_asarray_f64_rule")
lineax_asarray_f32_rule = jax_rule(_asarray, constant(jnp.float32), arrays(shape=(3,), dtype="float32"),
                                   name="lineax_asarray_f32_rule")

equinox_nextafter_rule = jax_rule(nextafter, arrays(shape=(4,)), name="equinox_nextafter_rule")
equinox_prevbefore_rule = jax_rule(prevbefore, arrays(shape=(4,)), name="equinox_prevbefore_rule")

flax_dot_general_with_precision_rule = jax_rule(
    dot_general_with_precision, arrays(shape=(2, 3)), arrays(shape=(3, 4)), constant((((1,), (0,)), ((), ()))),
    name="flax_dot_general_with_precision_rule")


def _shifted(t):
    a, b, c = t
    return a + 4.0 * np.eye(3), b + 4.0 * np.eye(3), c


# Sylvester AX + XB = C is uniquely solvable when spec(A) and spec(-B) are disjoint: A, B = 4 I + E, |E_ij| <= 1.
pytensor_solve_sylvester_rule = jax_rule(
    solve_sylvester, args=st.tuples(arrays(shape=(3, 3), min_value=-1.0, max_value=1.0),
                                    arrays(shape=(3, 3), min_value=-1.0, max_value=1.0),
                                    arrays(shape=(3, 3))).map(_shifted),
    name="pytensor_solve_sylvester_rule")


LABELS = {
    "lineax_two_norm_rule": {"source": f"{LINEAX} lineax/_norm.py:27-56, 70-104"},
    "lineax_two_norm_pytree_rule": {"source": f"{LINEAX} lineax/_norm.py:27-56, 70-104"},
    "lineax_two_norm_size1_rule": {"source": f"{LINEAX} lineax/_norm.py:27-56, 70-104"},
    "lineax_zero_grad_at_zero_rule": {"source": f"{LINEAX} lineax/_norm.py:142-150"},
    "lineax_asarray_f64_rule": {"source": f"{LINEAX} lineax/_misc.py:58-77"},
    "lineax_asarray_f32_rule": {"source": f"{LINEAX} lineax/_misc.py:58-77"},
    "equinox_nextafter_rule": {"source": f"{EQUINOX} equinox/internal/_nextafter.py:6-36"},
    "equinox_prevbefore_rule": {"source": f"{EQUINOX} equinox/internal/_nextafter.py:6-36"},
    "flax_dot_general_with_precision_rule": {"source": f"{FLAX} flax/linen/fp8_ops.py:496-525"},
    "pytensor_solve_sylvester_rule": {"source": f"{PYTENSOR} pytensor/link/jax/dispatch/linalg/solvers.py:83-106"},
}

UPSTREAM_FLAWS = {
    "lineax_two_norm_size1_rule": (
        {"GG601"},
        "_two_norm's jvp guards out == 0, but at a subnormal x (1.1e-308, -2.2e-309) eager JAX's x * x underflows to "
        "0 and the guard gives 0.0, while under jit XLA flushes the subnormal and the jvp gives NaN; the derivative "
        "of |x| there is sign(x) (jit(grad(abs)) gives 1). Seen only on the one-element array, where the norm is "
        "the subnormal itself",
        (2, 3, 5, 9),
    ),
}
