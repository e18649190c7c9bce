"""Real-world corpus: correct NumPy VJPs of HIPS/autograd, as rrules.

Source: https://github.com/HIPS/autograd at commit bff107b8d71a444a1160deade3e1cbd0b92f4fa6,
autograd/numpy/numpy_vjps.py (the comment above each rule quotes the ``defvjp`` line or names the
function). The vjp makers are copied as autograd has them, with ``anp`` (autograd's wrapped NumPy) written
as ``np``; ``_defvjp`` calls them as autograd does (each maker gets ``ans`` and the arguments at forward
time and returns the vjp of one argument), so the math under test is autograd's own. autograd never hands
a pullback ``None``, so these pullbacks do not accept it (GG302 warns; that is autograd's convention).

This module is longer than most because it is a corpus: one short rule per autograd primitive.
Specs are each function's real domain (positive inputs for log and sqrt, |x| < 1 for arcsin, ...).
``LABELS`` maps each rule to its source; ``UPSTREAM_FLAWS`` (below; read by tests/realworld/test_realworld_correct.py)
lists the error findings that are real flaws of the upstream rule, with evidence in INDEX.md.
"""

import numpy as np
from hypothesis import strategies as st

from gradguard import arrays, constant, rrule

AUTOGRAD = "HIPS/autograd@bff107b8d71a444a1160deade3e1cbd0b92f4fa6"
VJPS = "autograd/numpy/numpy_vjps.py"


def _defvjp(fun, args, *makers, kwargs=None):
    """``(ans, pullback)`` for ``defvjp(fun, *makers)``: maker ``i`` (None: not differentiable) gives the vjp
    of argument ``i``; autograd calls the makers when the primitive is recorded, with the same kwargs."""
    kwargs = kwargs or {}
    ans = fun(*args, **kwargs)
    vjps = [None if m is None else m(ans, *args, **kwargs) for m in makers]
    return ans, lambda g: tuple(None if v is None else v(g) for v in vjps)


# ----- helpers, as numpy_vjps.py has them -----------------------------------------------------------------


def metadata(A):  # autograd/numpy/numpy_wrapper.py
    return np.shape(A), np.ndim(A), np.result_type(A), np.iscomplexobj(A)


def unbroadcast(x, target_meta, broadcast_idx=0):
    target_shape, target_ndim, _dtype, target_iscomplex = target_meta
    while np.ndim(x) > target_ndim:
        x = np.sum(x, axis=broadcast_idx)
    for axis, size in enumerate(target_shape):
        if size == 1:
            x = np.sum(x, axis=axis, keepdims=True)
    if np.iscomplexobj(x) and not target_iscomplex:
        x = np.real(x)
    return x


def unbroadcast_f(target, f):
    target_meta = metadata(target)
    return lambda g: unbroadcast(f(g), target_meta)


def balanced_eq(x, z, y):
    return (x == z) / (1.0 + (x == y))


def replace_zero(x, val):
    return np.where(x, x, val)


def match_complex(target, x):
    target_iscomplex = np.iscomplexobj(target)
    x_iscomplex = np.iscomplexobj(x)
    if x_iscomplex and not target_iscomplex:
        return np.real(x)
    elif not x_iscomplex and target_iscomplex:
        return x + 0j
    else:
        return x


def repeat_to_match_shape(g, shape, dtype, axis, keepdims):
    if shape == ():
        return g, 1
    axis = list(axis) if isinstance(axis, tuple) else axis
    new_shape = np.array(shape)
    new_shape[axis] = 1
    num_reps = np.prod(np.array(shape)[axis])
    return np.reshape(g, new_shape) + np.zeros(shape, dtype=dtype), num_reps


def reverse_axis(x, axis):
    x = x.swapaxes(axis, 0)
    x = x[::-1, ...]
    return x.swapaxes(0, axis)


def unpermuter(g, permutation):
    unsort = np.zeros(len(permutation), dtype=int)
    unsort[permutation] = list(range(len(permutation)))
    return g[unsort]


# ----- elementwise ------------------------------------------------------------------------------------------


def exp(x):
    return np.exp(x)


# defvjp(anp.exp, lambda ans, x: lambda g: ans * g)
@rrule(exp, arrays(shape=(2, 3), min_value=-20.0, max_value=20.0))
def exp_rrule(x):
    return _defvjp(np.exp, (x,), lambda ans, x: lambda g: ans * g)


def log(x):
    return np.log(x)


# defvjp(anp.log, lambda ans, x: lambda g: g / x)
@rrule(log, arrays(shape=(3,), min_value=1e-3, max_value=100.0))
def log_rrule(x):
    return _defvjp(np.log, (x,), lambda ans, x: lambda g: g / x)


def log1p(x):
    return np.log1p(x)


# defvjp(anp.log1p, lambda ans, x: lambda g: g / (x + 1))
@rrule(log1p, arrays(shape=(3,), min_value=-0.9, max_value=10.0))
def log1p_rrule(x):
    return _defvjp(np.log1p, (x,), lambda ans, x: lambda g: g / (x + 1))


def tanh(x):
    return np.tanh(x)


# defvjp(anp.tanh, lambda ans, x: lambda g: g / anp.cosh(x) ** 2)
@rrule(tanh, arrays(shape=(3,)))
def tanh_rrule(x):
    return _defvjp(np.tanh, (x,), lambda ans, x: lambda g: g / np.cosh(x) ** 2)


def arcsin(x):
    return np.arcsin(x)


# defvjp(anp.arcsin, lambda ans, x: lambda g: g / anp.sqrt(1 - x**2))
@rrule(arcsin, arrays(shape=(3,), min_value=-0.95, max_value=0.95))
def arcsin_rrule(x):
    return _defvjp(np.arcsin, (x,), lambda ans, x: lambda g: g / np.sqrt(1 - x**2))


def arccosh(x):
    return np.arccosh(x)


# defvjp(anp.arccosh, lambda ans, x: lambda g: g / anp.sqrt(x**2 - 1))
@rrule(arccosh, arrays(shape=(3,), min_value=1.05, max_value=10.0))
def arccosh_rrule(x):
    return _defvjp(np.arccosh, (x,), lambda ans, x: lambda g: g / np.sqrt(x**2 - 1))


def sqrt(x):
    return np.sqrt(x)


# defvjp(anp.sqrt, lambda ans, x: lambda g: g * 0.5 * x**-0.5)
@rrule(sqrt, arrays(shape=(3,), min_value=1e-3, max_value=100.0))
def sqrt_rrule(x):
    return _defvjp(np.sqrt, (x,), lambda ans, x: lambda g: g * 0.5 * x**-0.5)


def sinc(x):
    return np.sinc(x)


# defvjp(anp.sinc, lambda ans, x: lambda g: g * (anp.cos(anp.pi * x) * anp.pi * x - anp.sin(anp.pi * x)) / (anp.pi * x**2))
@rrule(sinc, arrays(shape=(3,), min_value=-3.0, max_value=3.0))
def sinc_rrule(x):
    return _defvjp(
        np.sinc, (x,),
        lambda ans, x: lambda g: g * (np.cos(np.pi * x) * np.pi * x - np.sin(np.pi * x)) / (np.pi * x**2),
    )


def reciprocal(x):
    return np.reciprocal(x)


# defvjp(anp.reciprocal, lambda ans, x: lambda g: -g / x**2)
@rrule(reciprocal, arrays(shape=(3,), min_value=0.1, max_value=10.0))
def reciprocal_rrule(x):
    return _defvjp(np.reciprocal, (x,), lambda ans, x: lambda g: -g / x**2)


def absolute(x):
    return np.abs(x)


# np_abs_vjp = lambda ans, x: lambda g: g * replace_zero(anp.conj(x), 0.0) / replace_zero(ans, 1.0)
@rrule(absolute, arrays(shape=(4,)))
def abs_rrule(x):
    return _defvjp(np.abs, (x,), lambda ans, x: lambda g: g * replace_zero(np.conj(x), 0.0) / replace_zero(ans, 1.0))


# the same np_abs_vjp on complex input (|z| is real); autograd's complex convention is JAX's (f'(z) * g,
# docs/tutorial.md "Complex numbers"), declared as such
@rrule(absolute, arrays(shape=(3,), dtype="complex128", min_value=0.1, max_value=4.0), complex_convention="jax")
def abs_complex_rrule(x):
    return _defvjp(np.abs, (x,), lambda ans, x: lambda g: g * replace_zero(np.conj(x), 0.0) / replace_zero(ans, 1.0))


def angle(x):
    return np.angle(x)


# defvjp(anp.angle, lambda ans, x: lambda g: match_complex(x, g * anp.conj(x * 1j) / anp.abs(x) ** 2))
@rrule(angle, arrays(shape=(3,), dtype="complex128", min_value=0.5, max_value=4.0), complex_convention="jax")
def angle_complex_rrule(x):
    return _defvjp(np.angle, (x,), lambda ans, x: lambda g: match_complex(x, g * np.conj(x * 1j) / np.abs(x) ** 2))


def nan_to_num(x):
    return np.nan_to_num(x)


# defvjp(anp.nan_to_num, lambda ans, x: lambda g: anp.where(anp.isfinite(x), g, 0.0))
@rrule(nan_to_num, arrays(shape=(3,)))
def nan_to_num_rrule(x):
    return _defvjp(np.nan_to_num, (x,), lambda ans, x: lambda g: np.where(np.isfinite(x), g, 0.0))


def clip(x, a_min, a_max):
    return np.clip(x, a_min, a_max)


# defvjp(anp.clip, lambda ans, x, a_min, a_max: lambda g: g * anp.logical_and(ans != a_min, ans != a_max))
@rrule(clip, arrays(shape=(5,), min_value=-2.0, max_value=2.0), constant(-1.0), constant(1.0))
def clip_rrule(x, a_min, a_max):
    return _defvjp(
        np.clip, (x, a_min, a_max),
        lambda ans, x, a_min, a_max: lambda g: g * np.logical_and(ans != a_min, ans != a_max), None, None,
    )


# ----- binary ufuncs, broadcasting ---------------------------------------------------------------------------


def multiply(x, y):
    return np.multiply(x, y)


# defvjp(anp.multiply, lambda ans, x, y: unbroadcast_f(x, lambda g: y * g), lambda ans, x, y: unbroadcast_f(y, lambda g: x * g))
@rrule(multiply, arrays(shape=(2, 3)), arrays(shape=(1, 3)))
def multiply_broadcast_rrule(x, y):
    return _defvjp(
        np.multiply, (x, y),
        lambda ans, x, y: unbroadcast_f(x, lambda g: y * g),
        lambda ans, x, y: unbroadcast_f(y, lambda g: x * g),
    )


def divide(x, y):
    return np.divide(x, y)


# defvjp(anp.divide, ... g / y, ... -g * x / y**2), y of rank 1 against x of rank 2
@rrule(divide, arrays(shape=(2, 3)), arrays(shape=(3,), min_value=0.5, max_value=5.0))
def divide_broadcast_rrule(x, y):
    return _defvjp(
        np.divide, (x, y),
        lambda ans, x, y: unbroadcast_f(x, lambda g: g / y),
        lambda ans, x, y: unbroadcast_f(y, lambda g: -g * x / y**2),
    )


def minimum(x, y):
    return np.minimum(x, y)


# defvjp(anp.minimum, ... g * balanced_eq(x, ans, y), ... g * balanced_eq(y, ans, x)): ties share the cotangent
@rrule(minimum, arrays(shape=(2, 3), elements=st.sampled_from([-1.0, 0.0, 0.5, 2.0])),
       arrays(shape=(3,), elements=st.sampled_from([-1.0, 0.0, 0.5, 2.0])))
def minimum_ties_rrule(x, y):
    return _defvjp(
        np.minimum, (x, y),
        lambda ans, x, y: unbroadcast_f(x, lambda g: g * balanced_eq(x, ans, y)),
        lambda ans, x, y: unbroadcast_f(y, lambda g: g * balanced_eq(y, ans, x)),
    )


def logaddexp(x, y):
    return np.logaddexp(x, y)


# defvjp(anp.logaddexp, ... g * anp.exp(x - ans), ... g * anp.exp(y - ans))
@rrule(logaddexp, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0), arrays(shape=(3,), min_value=-50.0, max_value=50.0))
def logaddexp_rrule(x, y):
    return _defvjp(
        np.logaddexp, (x, y),
        lambda ans, x, y: unbroadcast_f(x, lambda g: g * np.exp(x - ans)),
        lambda ans, x, y: unbroadcast_f(y, lambda g: g * np.exp(y - ans)),
    )


def arctan2(x, y):
    return np.arctan2(x, y)


# defvjp(anp.arctan2, ... g * y / (x**2 + y**2), ... g * -x / (x**2 + y**2)); domain: off the branch cut and 0
@rrule(arctan2, arrays(shape=(3,)), arrays(shape=(3,), min_value=0.1, max_value=10.0))
def arctan2_rrule(x, y):
    return _defvjp(
        np.arctan2, (x, y),
        lambda ans, x, y: unbroadcast_f(x, lambda g: g * y / (x**2 + y**2)),
        lambda ans, x, y: unbroadcast_f(y, lambda g: g * -x / (x**2 + y**2)),
    )


def hypot(x, y):
    return np.hypot(x, y)


# defvjp(anp.hypot, ... g * x / ans, ... g * y / ans); (0, 0) is a cone point with no derivative
@rrule(hypot, arrays(shape=(3,)), arrays(shape=(3,)))
def hypot_rrule(x, y):
    return _defvjp(
        np.hypot, (x, y),
        lambda ans, x, y: unbroadcast_f(x, lambda g: g * x / ans),
        lambda ans, x, y: unbroadcast_f(y, lambda g: g * y / ans),
    )


def where(c, x, y):
    return np.where(c, x, y)


# defvjp(anp.where, None, ... anp.where(c, g, anp.zeros(g.shape)), ... anp.where(c, anp.zeros(g.shape), g))
@rrule(where, constant(np.array([[True, False, True], [False, False, True]])), arrays(shape=(2, 3)), arrays(shape=(2, 3)))
def where_rrule(c, x, y):
    return _defvjp(
        np.where, (c, x, y),
        None,
        lambda ans, c, x=None, y=None: lambda g: np.where(c, g, np.zeros(g.shape)),
        lambda ans, c, x=None, y=None: lambda g: np.where(c, np.zeros(g.shape), g),
    )


# ----- reductions with axis and keepdims ---------------------------------------------------------------------


def grad_np_sum(ans, x, axis=None, keepdims=False, dtype=None, **kwargs):
    shape, dtype = np.shape(x), np.result_type(x)
    return lambda g: repeat_to_match_shape(g, shape, dtype, axis, keepdims)[0]


def np_sum(x, axis=None, keepdims=False):
    return np.sum(x, axis=axis, keepdims=keepdims)


# defvjp(anp.sum, grad_np_sum)
@rrule(np_sum, arrays(shape=(2, 3)), kwargs={"axis": 1, "keepdims": True})
def sum_keepdims_rrule(x, axis=None, keepdims=False):
    return _defvjp(np.sum, (x,), grad_np_sum, kwargs={"axis": axis, "keepdims": keepdims})


def grad_np_mean(ans, x, axis=None, keepdims=False, **kwargs):
    shape, dtype = np.shape(x), np.result_type(x)

    def vjp(g):
        g_repeated, num_reps = repeat_to_match_shape(g, shape, dtype, axis, keepdims)
        return g_repeated / num_reps

    return vjp


def np_mean(x, axis=None, keepdims=False):
    return np.mean(x, axis=axis, keepdims=keepdims)


# defvjp(anp._primitive_mean, grad_np_mean)
@rrule(np_mean, arrays(shape=(3, 2, 2)), kwargs={"axis": (0, 2)})
def mean_axes_rrule(x, axis=None, keepdims=False):
    return _defvjp(np.mean, (x,), grad_np_mean, kwargs={"axis": axis, "keepdims": keepdims})


def grad_np_prod(ans, x, axis=None, keepdims=False, **kwargs):
    shape, dtype = np.shape(x), np.result_type(x)

    def vjp(g):
        g_repeated, _ = repeat_to_match_shape(g * ans, shape, dtype, axis, keepdims)
        return g_repeated / x

    return vjp


def np_prod(x, axis=None, keepdims=False):
    return np.prod(x, axis=axis, keepdims=keepdims)


# defvjp(anp.prod, grad_np_prod): divides by x, so a zero entry gives 0/0 where the derivative exists
@rrule(np_prod, arrays(shape=(2, 3), min_value=-3.0, max_value=3.0), kwargs={"axis": 1})
def prod_rrule(x, axis=None, keepdims=False):
    return _defvjp(np.prod, (x,), grad_np_prod, kwargs={"axis": axis, "keepdims": keepdims})


def grad_np_var(ans, x, axis=None, ddof=0, keepdims=False, **kwargs):
    shape, _, dtype, iscomplex = metadata(x)

    def vjp(g):
        if iscomplex:
            g = g + 0j
        g_repeated, num_reps = repeat_to_match_shape(g, shape, dtype, axis, keepdims)
        x_minus_mean = np.conj(x - np.mean(x, axis=axis, keepdims=True))
        return 2.0 * g_repeated * x_minus_mean / (num_reps - ddof)

    return vjp


def np_var(x, axis=None, ddof=0, keepdims=False):
    return np.var(x, axis=axis, ddof=ddof, keepdims=keepdims)


# defvjp(anp._primitive_var, grad_np_var)
@rrule(np_var, arrays(shape=(3, 4)), kwargs={"axis": 0, "ddof": 1})
def var_ddof_rrule(x, axis=None, ddof=0, keepdims=False):
    return _defvjp(np.var, (x,), grad_np_var, kwargs={"axis": axis, "ddof": ddof, "keepdims": keepdims})


def grad_np_std(ans, x, axis=None, ddof=0, keepdims=False, **kwargs):
    shape, _, dtype, iscomplex = metadata(x)

    def vjp(g):
        if iscomplex:
            g = g + 0j
        g_repeated, num_reps = repeat_to_match_shape(g, shape, dtype, axis, keepdims)  # Avoid division by zero.
        if num_reps <= 1:
            return g_repeated * 0.0
        else:
            g_repeated, num_reps = repeat_to_match_shape(g / ans, shape, dtype, axis, keepdims)
            x_minus_mean = np.conj(x - np.mean(x, axis=axis, keepdims=True))
            return g_repeated * x_minus_mean / (num_reps - ddof)

    return vjp


def np_std(x, axis=None, ddof=0, keepdims=False):
    return np.std(x, axis=axis, ddof=ddof, keepdims=keepdims)


# defvjp(anp._primitive_std, grad_np_std); a constant row is a cone point of std (no derivative)
@rrule(np_std, arrays(shape=(2, 3)), kwargs={"axis": 1, "keepdims": True})
def std_rrule(x, axis=None, ddof=0, keepdims=False):
    return _defvjp(np.std, (x,), grad_np_std, kwargs={"axis": axis, "ddof": ddof, "keepdims": keepdims})


def grad_chooser(ans, x, axis=None, keepdims=None, **kwargs):
    shape, dtype = np.shape(x), np.result_type(x)

    def vjp(g):
        """Builds gradient of functions that choose a single item, such as min or max."""
        g_repeated, _ = repeat_to_match_shape(g, shape, dtype, axis, keepdims)
        argmax_locations = x == repeat_to_match_shape(ans, shape, dtype, axis, keepdims)[0]
        return g_repeated * argmax_locations / np.sum(argmax_locations, axis=axis, keepdims=True)

    return vjp


def np_max(x, axis=None, keepdims=False):
    return np.max(x, axis=axis, keepdims=keepdims)


# defvjp(anp.max, grad_chooser): tied maxima share the cotangent; entries drawn from few values tie often
@rrule(np_max, arrays(shape=(3, 4), elements=st.sampled_from([-1.0, 0.0, 1.5, 3.0])), kwargs={"axis": 1})
def max_axis_ties_rrule(x, axis=None, keepdims=False):
    return _defvjp(np.max, (x,), grad_chooser, kwargs={"axis": axis, "keepdims": keepdims})


def np_min(x, axis=None, keepdims=False):
    return np.min(x, axis=axis, keepdims=keepdims)


# defvjp(anp.min, grad_chooser), whole array
@rrule(np_min, arrays(shape=(2, 3)))
def min_rrule(x, axis=None, keepdims=False):
    return _defvjp(np.min, (x,), grad_chooser, kwargs={"axis": axis, "keepdims": keepdims})


def grad_np_cumsum(ans, x, axis=None):
    def vjp(g):
        if axis:
            return reverse_axis(np.cumsum(reverse_axis(g, axis), axis), axis)
        else:
            return np.reshape(np.cumsum(g[::-1], axis)[::-1], x.shape)

    return vjp


def np_cumsum(x, axis=None):
    return np.cumsum(x, axis=axis)


# defvjp(anp.cumsum, grad_np_cumsum), axis=None flattens
@rrule(np_cumsum, arrays(shape=(2, 3)))
def cumsum_flat_rrule(x, axis=None):
    return _defvjp(np.cumsum, (x,), grad_np_cumsum, kwargs={"axis": axis})


# ----- shape and indexing ------------------------------------------------------------------------------------


def grad_sort(ans, x, axis=-1, kind="quicksort", order=None):
    if len(x.shape) > 1:
        raise NotImplementedError("Gradient of sort not implemented for multi-dimensional arrays.")
    sort_perm = np.argsort(x, axis, kind, order)
    return lambda g: unpermuter(g, sort_perm)


def sort(x):
    return np.sort(x)


# defvjp(anp.sort, grad_sort)
@rrule(sort, arrays(shape=(5,)))
def sort_rrule(x):
    return _defvjp(np.sort, (x,), grad_sort)


def grad_diff(ans, a, n=1, axis=-1):
    nd = np.ndim(a)
    ans_shape = np.shape(ans)
    sl1 = [slice(None)] * nd
    sl1[axis] = slice(None, 1)

    sl2 = [slice(None)] * nd
    sl2[axis] = slice(-1, None)

    def undiff(g):
        if g.shape[axis] > 0:
            return np.concatenate((-g[tuple(sl1)], -np.diff(g, axis=axis), g[tuple(sl2)]), axis=axis)
        shape = list(ans_shape)
        shape[axis] = 1
        return np.zeros(shape)

    def helper(g, n):
        if n == 0:
            return g
        return helper(undiff(g), n - 1)

    return lambda g: helper(g, n)


def diff(a, n=1, axis=-1):
    return np.diff(a, n=n, axis=axis)


# defvjp(anp.diff, grad_diff), n=2 along axis 0
@rrule(diff, arrays(shape=(4, 2)), kwargs={"n": 2, "axis": 0})
def diff_rrule(a, n=1, axis=-1):
    return _defvjp(np.diff, (a,), grad_diff, kwargs={"n": n, "axis": axis})


def grad_repeat(ans, x, repeats, axis=None):
    shape = np.shape(x)

    def vjp(g):
        if axis is None:
            expanded = np.reshape(g, (np.prod(shape),) + (repeats,))
            return np.reshape(np.sum(expanded, axis=1, keepdims=False), shape)
        else:
            if shape[axis] == 1:
                return np.sum(g, axis=axis, keepdims=True)
            else:
                expanded = np.reshape(g, shape[0 : axis + 1] + (repeats,) + shape[axis + 1 :])
                return np.sum(expanded, axis=axis + 1, keepdims=False)

    return vjp


def repeat(x, repeats, axis=None):
    return np.repeat(x, repeats, axis=axis)


# defvjp(anp.repeat, grad_repeat)
@rrule(repeat, arrays(shape=(2, 3)), constant(2), kwargs={"axis": 1})
def repeat_rrule(x, repeats, axis=None):
    return _defvjp(np.repeat, (x, repeats), grad_repeat, None, kwargs={"axis": axis})


def grad_tile(ans, x, reps):
    reps = [reps] if np.isscalar(reps) else reps
    x_shape = np.shape(x)

    def vjp(g):
        for axis, rep in enumerate(reps):
            g = sum(np.split(g, rep, axis))
        return np.reshape(g, x_shape)

    return vjp


def tile(x, reps):
    return np.tile(x, reps)


# defvjp(anp.tile, grad_tile)
@rrule(tile, arrays(shape=(2, 3)), constant((2, 1)))
def tile_rrule(x, reps):
    return _defvjp(np.tile, (x, reps), grad_tile, None)


def grad_transpose(ans, x, axes=None):
    if axes is not None:
        axes = np.argsort(axes)
    return lambda g: np.transpose(g, axes)


def transpose(x, axes=None):
    return np.transpose(x, axes)


# defvjp(anp.transpose, grad_transpose)
@rrule(transpose, arrays(shape=(2, 3, 4)), constant((1, 2, 0)))
def transpose_axes_rrule(x, axes=None):
    return _defvjp(np.transpose, (x, axes), grad_transpose, None)


def roll(x, shift, axis=None):
    return np.roll(x, shift, axis=axis)


# defvjp(anp.roll, lambda ans, x, shift, axis=None: lambda g: anp.roll(g, -shift, axis=axis))
@rrule(roll, arrays(shape=(3, 4)), constant(2), kwargs={"axis": 1})
def roll_rrule(x, shift, axis=None):
    return _defvjp(
        np.roll, (x, shift), lambda ans, x, shift, axis=None: lambda g: np.roll(g, -shift, axis=axis), None,
        kwargs={"axis": axis},
    )


def triu(x, k=0):
    return np.triu(x, k=k)


# defvjp(anp.triu, lambda ans, x, k=0: lambda g: anp.triu(g, k=k))
@rrule(triu, arrays(shape=(3, 4)), kwargs={"k": 1})
def triu_rrule(x, k=0):
    return _defvjp(np.triu, (x,), lambda ans, x, k=0: lambda g: np.triu(g, k=k), kwargs={"k": k})


def trace(x, offset=0):
    return np.trace(x, offset=offset)


# defvjp(anp.trace, lambda ans, x, offset=0: lambda g: anp.einsum("ij,...->ij...", anp.eye(x.shape[0], x.shape[1], k=offset), g))
@rrule(trace, arrays(shape=(3, 4)), kwargs={"offset": 1})
def trace_offset_rrule(x, offset=0):
    return _defvjp(
        np.trace, (x,),
        lambda ans, x, offset=0: (lambda g: np.einsum("ij,...->ij...", np.eye(x.shape[0], x.shape[1], k=offset), g)),
        kwargs={"offset": offset},
    )


def _unpad(array, width):
    if np.isscalar(width):
        width = [[width, width]]
    elif np.shape(width) == (1,):
        width = [np.concatenate((width, width))]
    elif np.shape(width) == (2,):
        width = [width]
    if np.shape(width)[0] == 1:
        width = np.repeat(width, np.ndim(array), 0)
    idxs = tuple(slice(l, -u or None) for l, u in width)  # noqa: E741 (autograd's names)
    return array[idxs]


def pad(array, pad_width, mode="constant"):
    return np.pad(array, pad_width, mode)


# def pad_vjp(ans, array, pad_width, mode, **kwargs): ... lambda g: _unpad(g, pad_width)
@rrule(pad, arrays(shape=(2, 3)), constant(((1, 0), (2, 1))))
def pad_rrule(array, pad_width, mode="constant"):
    def pad_vjp(ans, array, pad_width, mode, **kwargs):
        assert mode == "constant", "Only constant mode padding is supported."
        return lambda g: _unpad(g, pad_width)

    ans = np.pad(array, pad_width, mode)
    vjp = pad_vjp(ans, array, pad_width, mode)
    return ans, lambda g: (vjp(g), None)


def concatenate(a, b, axis=0):
    return np.concatenate((a, b), axis=axis)


def grad_concatenate_args(argnum, ans, axis_args, kwargs):
    axis, args = axis_args[0], axis_args[1:]
    sizes = [np.shape(a)[axis] for a in args[:argnum]]
    start = sum(sizes[:-1])
    idxs = [slice(None)] * ans.ndim
    idxs[axis] = slice(start, start + sizes[-1])
    return lambda g: g[tuple(idxs)]


# defvjp_argnum(anp.concatenate_args, grad_concatenate_args): concatenate_args(axis, *args), argnum 1 and 2
@rrule(concatenate, arrays(shape=(2, 3)), arrays(shape=(2, 1)), kwargs={"axis": 1})
def concatenate_rrule(a, b, axis=0):
    ans = np.concatenate((a, b), axis=axis)
    axis_args = (axis, a, b)
    vjps = [grad_concatenate_args(argnum, ans, axis_args, {}) for argnum in (1, 2)]
    return ans, lambda g: tuple(v(g) for v in vjps)


def take_rows(A, idx):
    return A[idx]


def untake(x, idx, shape):
    """``untake`` as autograd adds it into a zero array (its SparseObject's ``mut_add``)."""
    if isinstance(idx, list) and (len(idx) == 0 or not isinstance(idx[0], slice)):
        idx = np.array(idx, dtype="int64")
    A = np.zeros(shape)
    np.add.at(A, idx, x)
    return A


# defvjp(func(ArrayBox.__getitem__), lambda ans, A, idx: lambda g: untake(g, idx, vspace(A))): repeated indices add up
@rrule(take_rows, arrays(shape=(3, 2)), constant([2, 0, 2, 1, 2]))
def getitem_repeated_rrule(A, idx):
    return _defvjp(take_rows, (A, idx), lambda ans, A, idx: lambda g: untake(g, idx, A.shape), None)


# ----- products ---------------------------------------------------------------------------------------------


def matmul_adjoint_0(B, G, A_meta, B_ndim):
    if np.ndim(G) == 0:  # A_ndim == B_ndim == 1
        return unbroadcast(G * B, A_meta)
    _, A_ndim, _, _ = A_meta
    if A_ndim == 1:
        G = np.expand_dims(G, np.ndim(G) - 1)
    if B_ndim == 1:  # The result we need is an outer product
        B = np.expand_dims(B, 0)
        G = np.expand_dims(G, np.ndim(G))
    else:  # We need to swap the last two axes of B
        B = np.swapaxes(B, B_ndim - 2, B_ndim - 1)
    result = np.matmul(G, B)
    return unbroadcast(result, A_meta)


def matmul_adjoint_1(A, G, A_ndim, B_meta):
    if np.ndim(G) == 0:  # A_ndim == B_ndim == 1
        return unbroadcast(G * A, B_meta)
    _, B_ndim, _, _ = B_meta
    B_is_vec = B_ndim == 1
    if B_is_vec:
        G = np.expand_dims(G, np.ndim(G))
    if A_ndim == 1:  # The result we need is an outer product
        A = np.expand_dims(A, 1)
        G = np.expand_dims(G, np.ndim(G) - 1)
    else:  # We need to swap the last two axes of A
        A = np.swapaxes(A, A_ndim - 2, A_ndim - 1)
    result = np.matmul(A, G)
    if B_is_vec:
        result = np.squeeze(result, np.ndim(G) - 1)
    return unbroadcast(result, B_meta)


def matmul_vjp_0(ans, A, B):
    A_meta = metadata(A)
    B_ndim = np.ndim(B)
    return lambda g: matmul_adjoint_0(B, g, A_meta, B_ndim)


def matmul_vjp_1(ans, A, B):
    A_ndim = np.ndim(A)
    B_meta = metadata(B)
    return lambda g: matmul_adjoint_1(A, g, A_ndim, B_meta)


def matmul(A, B):
    return np.matmul(A, B)


# defvjp(anp.matmul, matmul_vjp_0, matmul_vjp_1): a stack of matrices times one matrix
@rrule(matmul, arrays(shape=(2, 3, 4)), arrays(shape=(4, 2)))
def matmul_batched_rrule(A, B):
    return _defvjp(np.matmul, (A, B), matmul_vjp_0, matmul_vjp_1)


# the same vjps for a matrix times a vector
@rrule(matmul, arrays(shape=(3, 4)), arrays(shape=(4,)))
def matmul_vector_rrule(A, B):
    return _defvjp(np.matmul, (A, B), matmul_vjp_0, matmul_vjp_1)


def outer(a, b):
    return np.outer(a, b)


# defvjp(anp.outer, ... match_complex(a, anp.dot(g, b.T)), ... match_complex(b, anp.dot(a.T, g)))
@rrule(outer, arrays(shape=(3,)), arrays(shape=(4,)))
def outer_rrule(a, b):
    return _defvjp(
        np.outer, (a, b),
        lambda ans, a, b: lambda g: match_complex(a, np.dot(g, b.T)),
        lambda ans, a, b: lambda g: match_complex(b, np.dot(a.T, g)),
    )


def grad_kron(argnum, ans, orig_A, orig_B):
    orig_A_shape = np.shape(orig_A)
    orig_B_shape = np.shape(orig_B)

    def vjp(G):
        A, B = np.atleast_2d(orig_A), np.atleast_2d(orig_B)
        shape = list(A.shape + B.shape)
        n = np.ndim(A)
        shape[n - 1], shape[n] = shape[n], shape[n - 1]
        reshaped_G = np.swapaxes(np.reshape(G, shape), n - 1, n)
        if argnum == 0:
            return match_complex(orig_A, np.reshape(np.tensordot(reshaped_G, B, axes=np.ndim(B)), orig_A_shape))
        else:
            return match_complex(orig_B, np.reshape(np.tensordot(A, reshaped_G, axes=np.ndim(A)), orig_B_shape))

    return vjp


def kron(a, b):
    return np.kron(a, b)


# defvjp(anp.kron, partial(grad_kron, 0), partial(grad_kron, 1))
@rrule(kron, arrays(shape=(2, 3)), arrays(shape=(2, 2)))
def kron_rrule(a, b):
    return _defvjp(np.kron, (a, b), lambda *a_: grad_kron(0, *a_), lambda *a_: grad_kron(1, *a_))


def cross(a, b):
    return np.cross(a, b)


# defvjp(anp.cross, ... anp.cross(b, g, axisb, axisc, axisa, axis), ... anp.cross(g, a, axisc, axisa, axisb, axis))
@rrule(cross, arrays(shape=(2, 3)), arrays(shape=(2, 3)))
def cross_rrule(a, b):
    return _defvjp(
        np.cross, (a, b),
        lambda ans, a, b, axisa=-1, axisb=-1, axisc=-1, axis=None: (lambda g: np.cross(b, g, axisb, axisc, axisa, axis)),
        lambda ans, a, b, axisa=-1, axisb=-1, axisc=-1, axis=None: (lambda g: np.cross(g, a, axisc, axisa, axisb, axis)),
    )


def _label(line):
    return {"source": f"{AUTOGRAD} {VJPS}", "what": line}


LABELS = {
    name: _label(name.removesuffix("_rrule").replace("_", " "))
    for name in [
        "exp_rrule", "log_rrule", "log1p_rrule", "tanh_rrule", "arcsin_rrule", "arccosh_rrule", "sqrt_rrule",
        "sinc_rrule", "reciprocal_rrule", "abs_rrule", "abs_complex_rrule", "angle_complex_rrule",
        "nan_to_num_rrule", "clip_rrule", "multiply_broadcast_rrule", "divide_broadcast_rrule",
        "minimum_ties_rrule", "logaddexp_rrule", "arctan2_rrule", "hypot_rrule", "where_rrule",
        "sum_keepdims_rrule", "mean_axes_rrule", "prod_rrule", "var_ddof_rrule", "std_rrule",
        "max_axis_ties_rrule", "min_rrule", "cumsum_flat_rrule", "sort_rrule", "diff_rrule", "repeat_rrule",
        "tile_rrule", "transpose_axes_rrule", "roll_rrule", "triu_rrule", "trace_offset_rrule", "pad_rrule",
        "concatenate_rrule", "getitem_repeated_rrule", "matmul_batched_rrule", "matmul_vector_rrule",
        "outer_rrule", "kron_rrule", "cross_rrule",
    ]
}


# Error findings that are real flaws of these upstream rules, not gradguard's mistakes: rule -> (check ids,
# evidence in one line; INDEX.md has the full evidence). Read by tests/realworld/test_realworld_correct.py and
# bench/detection.py.
UPSTREAM_FLAWS = {
    "hypot_rrule": (
        {"GG201", "GG203"},
        "autograd's hypot vjp is g * x / ans, which rounds at subnormal inputs: at x = y = 5e-324, hypot rounds to "
        "5e-324 and x / ans is 1.0 where the derivative is 1 / sqrt(2) = 0.7071 (1e-300 gives 0.7071); the "
        "pullback lies outside the one-sided derivatives finite differences read along u there",
        (16,),  # the seed of the run beyond the pin where it showed
    ),
    "sinc_rrule": (
        {"GG201", "GG206", "GG301", "GG501"},
        "autograd's sinc vjp divides by pi * x**2: NaN at x == 0, where d/dx sinc = 0 (jax.grad(jnp.sinc)(0.) == 0), "
        "and cancels for tiny x (0 at x = -1.072612e-09, where d/dx sinc = -pi**2 x / 3 = 3.5288e-09)",
    ),
    "prod_rrule": (
        {"GG201", "GG202", "GG203", "GG206", "GG301", "GG501"},
        "autograd's prod vjp is g * ans / x: NaN at a zero entry, where d/dx_i prod = prod of the others "
        "(jax.grad(jnp.prod) is finite there), 0 where the product underflows, and rounded where it is subnormal "
        "(row [-1.009937, -1.646339, 4.94e-324]: 2.0 for the last entry, whose derivative is 1.6627), so it is not "
        "linear in g there either (row [1.738093, 0.5489644, 4.94e-324], g = 3.202304: the last entry's tangent is "
        "2.0 for 0.5 g, where half its tangent for g is 1.5)",
    ),
    "abs_rrule": (
        {"GG202"},
        "autograd's abs vjp g * conj(x) / |x| rounds at subnormal x: 2.0 at x = 5e-324, g = 1.5, where the "
        "derivative is 1.5 (jax.vjp(jnp.abs) gives 1.5), so it is not linear in g there either",
        (11, 30),  # the seeds of 0-39 whose draws reach a subnormal x (INDEX.md: 3 of 40 before the 29th pass, 2 now)
    ),
}
