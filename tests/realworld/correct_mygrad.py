"""Real-world corpus: MyGrad's NumPy backward formulas, translated to rrules.

Source: https://github.com/rsokl/MyGrad at commit 6971309f884bad0b9950dcbee3898ec7f35e2fbb (paths under
``src/mygrad/``). Every operation class below is copied from upstream: ``__call__`` (the NumPy forward) and
``backward_var`` (the NumPy vector-Jacobian product of argument ``index``) are kept exactly as MyGrad has them
(docstrings and ``# pragma`` lines dropped). Only the plumbing is MyGrad's own machinery written out:

* ``_Tensor`` stands in for ``mygrad.Tensor`` where the ops read it (``.data``, ``.shape``, ``.ndim``, ...).
* ``Operation.backward`` is MyGrad's ``operation_base.Operation.backward`` with ``var._grad`` accumulation
  replaced by returning the tangent: ``np.asarray``, the ``where`` mask, ``grad_post_process_fn``
  (``reduce_broadcast``: MyGrad's framework, not ``backward_var``, unbroadcasts), the copy of views and the
  cast to the variable's dtype are all kept, so a tangent is exactly what MyGrad stores in ``x.grad``.
* ``_op`` plays ``Tensor._op`` + ``Tensor.backward``: it runs the op once (the forward), and the pullback
  runs ``Operation.backward`` on a shallow copy of the op made after the forward. MyGrad creates a new op per
  forward call and back-propagates through it once; the copy gives each pullback call that fresh state
  (einsum's lazily built ``cache``, maximum's ``_where_tensor_a_was_selected``; ``fresh=`` names an array
  attribute that ``backward_var`` mutates in place, only FocalLoss's ``back``).
* ``TRACK_GRAPH`` is True.

Each rule's comment names the upstream path and quotes the backward formula. The primal is a plain NumPy
forward equal to MyGrad's forward. Specs are each function's real domain.

``LABELS`` maps each rule to its source; ``UPSTREAM_FLAWS`` lists the error findings that are real flaws of the
upstream rule, with evidence in INDEX.md. The translation was checked against MyGrad's own code: on 30 random
inputs per rule, every forward value and gradient equal to the bit.
"""

import copy
from collections import Counter
from collections.abc import Sequence
from copy import copy as _copy
from functools import reduce
from itertools import accumulate, chain
from numbers import Integral, Real

import numpy as np
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

from gradguard import arrays, constant, rrule

MYGRAD = "rsokl/MyGrad@6971309f884bad0b9950dcbee3898ec7f35e2fbb"
TRACK_GRAPH = True


# ===== plumbing: MyGrad's framework, written out ===========================================================


class _Tensor:
    """What the ops read of a ``mygrad.Tensor``: its array (by reference, as ``Tensor._op`` wraps arrays)."""

    def __init__(self, data):
        self.data = np.asarray(data)

    shape = property(lambda self: self.data.shape)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)
    dtype = property(lambda self: self.data.dtype)

    def __len__(self):
        return len(self.data)

    def __array__(self, dtype=None, copy=None):
        return self.data if dtype is None else self.data.astype(dtype)


Tensor = _Tensor


def asarray(a, dtype=None):  # mygrad.tensor_base.asarray
    return np.asarray(a.data if isinstance(a, _Tensor) else a, dtype=dtype)


class SkipGradient(Exception):  # mygrad/_utils/__init__.py
    pass


class _NoValueType:  # mygrad/operation_base.py
    pass


_NoValue = _NoValueType()


# mygrad/_utils/__init__.py (verbatim)
def reduce_broadcast(grad, var_shape):
    if grad.shape == var_shape:
        return grad

    if grad.ndim != len(var_shape):
        if grad.ndim < len(var_shape):
            raise ValueError(
                f"The dimensionality of the gradient of the broadcasted "
                f"operation ({grad.ndim}) is less than that of its associated variable "
                f"({len(var_shape)})"
            )
        grad = grad.sum(axis=tuple(range(grad.ndim - len(var_shape))))

    keepdims = tuple(n for n, i in enumerate(grad.shape) if i != var_shape[n])
    if keepdims:
        grad = grad.sum(axis=keepdims, keepdims=True)

    return grad


# mygrad/operation_base.py
class Operation:
    can_return_view = False

    def __init__(self):
        self.replay_args = None
        self.replay_kwargs = None
        self.replay_force_constant = None
        self.where = True

    @staticmethod
    def grad_post_process_fn(grad, var_shape):
        if grad.shape == var_shape:
            return grad
        out = reduce_broadcast(grad, var_shape)

        if out.ndim == 0:
            out = np.asarray(out)
        return out

    def backward(self, grad, **kwargs):
        """``Operation.backward``, returning each variable's tangent instead of accumulating ``var._grad``."""
        tangents = []
        for index, var in enumerate(self.variables):
            backed_grad = self.backward_var(grad, index, **kwargs)  # SkipGradient never arises: distinct tensors

            if not isinstance(backed_grad, (np.ndarray, np.number, Real)):
                raise TypeError(f"invalid gradient type {type(backed_grad)}")

            backed_grad = np.asarray(backed_grad)

            if self.where is not True:
                backed_grad = backed_grad * self.where

            backed_grad = self.grad_post_process_fn(backed_grad, var.shape)
            assert backed_grad.shape == var.shape, (backed_grad.shape, var.shape)
            backed_grad = (
                np.copy(backed_grad)
                if backed_grad.base is not None or (backed_grad is grad)
                else backed_grad
            )
            if backed_grad.dtype != var.dtype:
                backed_grad = backed_grad.astype(var.dtype, copy=False)
            tangents.append(backed_grad)
        return tangents


class UnaryUfunc(Operation):  # mygrad/operation_base.py
    def __call__(self, x1, out=None, *, where=True, dtype=None):
        self.variables = (x1,)
        if where is not True:
            self.where = where
        return self.numpy_ufunc(x1.data, out=out, where=where, dtype=dtype)


class BinaryUfunc(Operation):  # mygrad/operation_base.py
    def __call__(self, x1, x2, out=None, *, where=True, dtype=None):
        self.variables = (x1, x2)
        if where is not True and where is not _NoValue:
            self.where = where
            return self.numpy_ufunc(x1.data, x2.data, out=out, where=where, dtype=dtype)
        else:
            return self.numpy_ufunc(x1.data, x2.data, out=out, dtype=dtype)


class Sequential(Operation):  # mygrad/operation_base.py
    _integer_axis_only = False

    def __call__(self, a, axis=None, dtype=None, out=None, keepdims=_NoValue, initial=_NoValue, *,
                 where=_NoValue, ddof=_NoValue):
        self.variables = (a,)

        if where is not True and where is not _NoValue:
            self.where = where

        self.keepdims = keepdims
        self.initial = initial
        self.ddof = ddof

        if (
            not self._integer_axis_only
            and axis is not None
            and not hasattr(axis, "__iter__")
        ):
            self.axis = (axis,)
        else:
            self.axis = axis

        kwargs = {}

        if keepdims is not _NoValue:
            kwargs["keepdims"] = keepdims

        if initial is not _NoValue:
            kwargs["initial"] = initial

        if where is not _NoValue:
            kwargs["where"] = where

        if ddof is not _NoValue:
            kwargs["ddof"] = ddof

        if dtype is not _NoValue:
            kwargs["dtype"] = dtype

        out = self.numpy_func(a.data, axis=axis, out=out, **kwargs)
        self.out_shape = out.shape

        return out


def _op(Op, *tensors, op_args=(), op_kwargs=None, n_nondiff=0, fresh=()):
    """``Tensor._op(Op, *tensors, op_args=..., op_kwargs=...)`` and its ``backward``: ``(out, pullback)``.

    The pullback returns one tangent per tensor, then ``None`` for the ``n_nondiff`` trailing
    non-differentiable arguments of the rule."""
    f = Op()
    tensor_vars = tuple(_Tensor(t) for t in tensors)
    out = f(*tensor_vars, *op_args, **(op_kwargs or {}))
    out_dtype = np.result_type(out)

    def pullback(ybar):
        grad = asarray(ybar, dtype=out_dtype)  # Tensor.backward: asarray(grad, dtype=self.dtype)
        op = _copy(f)  # one back-propagation through a freshly made op, as MyGrad does
        for name in fresh:
            setattr(op, name, getattr(f, name).copy())
        return tuple(op.backward(grad)) + (None,) * n_nondiff

    return out, pullback


# ===== mygrad/math/arithmetic/ops.py =========================================================================


class Power(BinaryUfunc):
    numpy_ufunc = np.power

    def backward_var(self, grad, index, **kwargs):
        x, y = (i.data for i in self.variables)

        if index == 0:
            return grad * y * (x ** np.where(y, (y - 1), 1))
        else:
            return grad * (x**y) * np.log(np.where(x, x, 1))


def power(x, y):
    return np.power(x, y)


# math/arithmetic/ops.py Power.backward_var:
#   index 0: grad * y * (x ** np.where(y, (y - 1), 1));  index 1: grad * (x**y) * np.log(np.where(x, x, 1))
# x >= 0 (0 included: x**y with y >= 1 is differentiable there), broadcasting (2, 3) ** (3,)
@rrule(power, arrays(shape=(2, 3), min_value=0.0, max_value=3.0), arrays(shape=(3,), min_value=1.0, max_value=3.0))
def mygrad_power_rrule(x, y):
    return _op(Power, x, y)


class MultiplySequence(Operation):
    def __call__(self, *input_vars):
        self.variables = input_vars
        assert 2 <= len(self.variables)

        out = reduce(lambda x, y: x * y, (var.data for var in input_vars))
        self._iszero = np.any(np.isclose(out, 0, 1e-25))
        return out

    def backward(self, grad, **kwargs):
        if not self._iszero:
            self._product = grad * reduce(
                lambda x, y: x * y, (var.data for n, var in enumerate(self.variables))
            )
        else:
            self._product = None
        return super().backward(grad, **kwargs)

    def backward_var(self, grad, index, **kwargs):
        var = self.variables[index]
        if not self._iszero:
            return self._product / var.data
        else:
            return grad * reduce(
                lambda x, y: x * y,
                (var.data for n, var in enumerate(self.variables) if n != index),
            )


def multiply_sequence(a, b, c):
    return a * b * c


# math/arithmetic/ops.py MultiplySequence: product / var.data unless np.isclose(out, 0, 1e-25) anywhere, else
#   grad * prod(others); three factors broadcast (2, 3), (3,), (2, 1)
@rrule(multiply_sequence, arrays(shape=(2, 3), min_value=-3.0, max_value=3.0), arrays(shape=(3,), min_value=-3.0, max_value=3.0),
       arrays(shape=(2, 1), min_value=-3.0, max_value=3.0))
def mygrad_multiply_sequence_rrule(a, b, c):
    return _op(MultiplySequence, a, b, c)


# ===== mygrad/math/exp_log/ops.py ============================================================================


class Logaddexp(BinaryUfunc):
    numpy_ufunc = np.logaddexp

    def backward_var(self, grad, index, **kwargs):
        a, b = self.variables
        if index == 0:
            return grad / (1 + np.exp(b.data - a.data))
        elif index == 1:
            return grad / (1 + np.exp(a.data - b.data))
        else:
            raise IndexError(f"Back-propagation through tensor-{index}")


def logaddexp(a, b):
    return np.logaddexp(a, b)


# math/exp_log/ops.py Logaddexp: grad / (1 + np.exp(b - a)), grad / (1 + np.exp(a - b)); all reals
@rrule(logaddexp, arrays(shape=(2, 3), min_value=-800.0, max_value=800.0), arrays(shape=(3,), min_value=-800.0, max_value=800.0))
def mygrad_logaddexp_rrule(a, b):
    return _op(Logaddexp, a, b)


# ===== mygrad/math/trigonometric/ops.py ======================================================================


def _dsinc(x):
    x = x * np.pi
    return (x * np.cos(x) - np.sin(x)) / x**2


class Sinc(Operation):
    def __call__(self, a):
        self.variables = (a,)
        return np.sinc(a.data)

    def backward_var(self, grad, index, **kwargs):
        (a,) = self.variables
        x = a.data

        near_0 = np.isclose(x, 0, atol=1e-162)  # crossover where dsinc is nan
        return (
            np.pi * grad * np.piecewise(x, [near_0, ~near_0], [np.zeros_like, _dsinc])
        )


def sinc(x):
    return np.sinc(x)


# math/trigonometric/ops.py Sinc: np.pi * grad * piecewise(x, [near_0, ~near_0], [zeros_like, _dsinc]),
#   _dsinc(x) = (pi x cos(pi x) - sin(pi x)) / (pi x)**2; near_0 = isclose(x, 0, atol=1e-162); all reals
@rrule(sinc, arrays(shape=(4,), min_value=-3.0, max_value=3.0))
def mygrad_sinc_rrule(x):
    return _op(Sinc, x)


class Csc(Operation):
    def __call__(self, a):
        self.variables = (a,)
        return 1 / np.sin(a.data)

    def backward_var(self, grad, index, **kwargs):
        (a,) = self.variables
        return grad * -np.cos(a.data) / np.sin(a.data) ** 2


def csc(x):
    return 1 / np.sin(x)


_off_poles = st.one_of(st.floats(-3.0, -0.1), st.floats(0.1, 3.0))


# math/trigonometric/ops.py Csc: grad * -np.cos(a) / np.sin(a) ** 2; away from the poles k*pi
@rrule(csc, arrays(shape=(4,), elements=_off_poles))
def mygrad_csc_rrule(x):
    return _op(Csc, x)


class Arccos(UnaryUfunc):
    numpy_ufunc = np.arccos

    def backward_var(self, grad, index, **kwargs):
        # d arccos / dx at x = -1, 1 returns 0, not NaN
        (a,) = self.variables
        return np.select([np.abs(a.data) != 1], [-grad / np.sqrt(1 - a.data**2)])


def arccos(x):
    return np.arccos(x)


# math/trigonometric/ops.py Arccos: np.select([abs(a) != 1], [-grad / np.sqrt(1 - a**2)]) (0 at +-1);
#   domain [-1, 1], endpoints included on purpose (no finite derivative there)
@rrule(arccos, arrays(shape=(4,), elements=st.one_of(st.sampled_from([-1.0, 1.0]), st.floats(-1.0, 1.0))))
def mygrad_arccos_rrule(x):
    return _op(Arccos, x)


class Arcsec(Operation):
    def __call__(self, a):
        self.variables = (a,)
        return np.arccos(1 / a.data)

    def backward_var(self, grad, index, **kwargs):
        # d arcsec / dx at x = -1, 1 returns 0, not NaN
        (a,) = self.variables
        return np.select(
            [np.abs(a.data) != 1], [grad / (np.abs(a.data) * np.sqrt(a.data**2 - 1))]
        )


def arcsec(x):
    return np.arccos(1 / x)


# math/trigonometric/ops.py Arcsec: np.select([abs(a) != 1], [grad / (abs(a) * np.sqrt(a**2 - 1))]); |x| > 1
@rrule(arcsec, arrays(shape=(4,), elements=st.one_of(st.floats(-10.0, -1.01), st.floats(1.01, 10.0))))
def mygrad_arcsec_rrule(x):
    return _op(Arcsec, x)


class Arccot(Operation):
    def __call__(self, a):
        self.variables = (a,)
        arr = a.data
        is_zero = arr == 0
        return np.piecewise(
            arr,
            [is_zero, np.logical_not(is_zero)],
            [np.pi / 2, lambda x: np.arctan(1 / x)],
        )

    def backward_var(self, grad, index, **kwargs):
        (a,) = self.variables
        return -grad / (1 + a.data**2)


def arccot(x):
    return np.where(x == 0, np.pi / 2, np.arctan(1 / np.where(x == 0, 1.0, x)))


# math/trigonometric/ops.py Arccot: -grad / (1 + a**2); forward arctan(1/x) (pi/2 at 0): all reals, the
#   forward jumps by pi at 0
@rrule(arccot, arrays(shape=(4,), min_value=-5.0, max_value=5.0))
def mygrad_arccot_rrule(x):
    return _op(Arccot, x)


# ===== mygrad/math/hyperbolic_trig/ops.py ====================================================================


class Tanh(UnaryUfunc):
    numpy_ufunc = np.tanh

    def backward_var(self, grad, index, **kwargs):
        (a,) = self.variables
        return grad * (1 - np.tanh(a.data) ** 2)


def tanh(x):
    return np.tanh(x)


# math/hyperbolic_trig/ops.py Tanh: grad * (1 - np.tanh(a) ** 2); all reals
@rrule(tanh, arrays(shape=(4,), min_value=-20.0, max_value=20.0))
def mygrad_tanh_rrule(x):
    return _op(Tanh, x)


class Arccsch(Operation):
    def __call__(self, a):
        self.variables = (a,)
        return np.arcsinh(1 / a.data)

    def backward_var(self, grad, index, **kwargs):
        (a,) = self.variables
        return -grad / (np.abs(a.data) * np.sqrt(1 + a.data**2))


def arccsch(x):
    return np.arcsinh(1 / x)


# math/hyperbolic_trig/ops.py Arccsch: -grad / (np.abs(a) * np.sqrt(1 + a**2)); x != 0
@rrule(arccsch, arrays(shape=(4,), elements=st.one_of(st.floats(-10.0, -0.1), st.floats(0.1, 10.0))))
def mygrad_arccsch_rrule(x):
    return _op(Arccsch, x)


# ===== mygrad/math/misc/ops.py ===============================================================================


class Abs(UnaryUfunc):
    numpy_ufunc = np.absolute

    def __call__(self, *args, nan_to_num: bool = True, **kwargs):
        self._nan_to_num = nan_to_num
        return super().__call__(*args, **kwargs)

    def backward_var(self, grad, index, **kwargs):
        (a,) = self.variables

        return grad * np.piecewise(
            a.data,
            [a.data < 0, a.data == 0, a.data > 0],
            [-1, (0 if self._nan_to_num else np.nan), 1],
        )


def absolute(x):
    return np.absolute(x)


# math/misc/ops.py Abs: grad * piecewise(a, [a < 0, a == 0, a > 0], [-1, 0, 1]) (nan_to_num=True, the default);
#   zeros drawn on purpose (0 is a valid subgradient at the kink)
@rrule(absolute, arrays(shape=(4,), elements=st.one_of(st.just(0.0), st.floats(-3.0, 3.0))))
def mygrad_abs_rrule(x):
    return _op(Abs, x)


class Cbrt(UnaryUfunc):
    numpy_ufunc = np.cbrt

    def backward_var(self, grad, index, **kwargs):
        (a,) = self.variables
        return grad / (3 * np.cbrt(a.data**2))


def cbrt(x):
    return np.cbrt(x)


# math/misc/ops.py Cbrt: grad / (3 * np.cbrt(a**2)); all reals (no finite derivative at 0)
@rrule(cbrt, arrays(shape=(4,), min_value=-10.0, max_value=10.0))
def mygrad_cbrt_rrule(x):
    return _op(Cbrt, x)


class _MaxMin(BinaryUfunc):
    def __init__(self):
        super().__init__()
        self._where_tensor_a_was_selected = None

    def backward_var(self, grad, index, **kwargs):
        a, b = self.variables

        if self._where_tensor_a_was_selected is None:
            self._where_tensor_a_was_selected = self._comparison(a.data, b.data)

        if index == 0:
            mask = self._where_tensor_a_was_selected
        elif index == 1:
            equal_mask = a.data == b.data
            mask = np.logical_not(self._where_tensor_a_was_selected)

            if mask.ndim:
                np.logical_not(mask, out=mask, where=equal_mask)
            elif equal_mask:
                mask = np.logical_not(mask)
        else:
            raise IndexError(f"Back-propagation through tensor-{index}")

        return mask * grad


class Maximum(_MaxMin):
    numpy_ufunc = np.maximum
    _comparison = staticmethod(np.greater)


def maximum(a, b):
    return np.maximum(a, b)


# math/misc/ops.py Maximum (_MaxMin.backward_var): a gets (a > b) * grad, b gets (a < b) * grad: both 0 at
#   ties (documented in tests/math/test_misc.py::test_maximum_bkwd_equal); ties drawn on purpose, broadcasting
@rrule(maximum, arrays(shape=(2, 3), elements=st.sampled_from([-1.0, 0.0, 0.5, 2.0])),
       arrays(shape=(3,), elements=st.sampled_from([-1.0, 0.0, 0.5, 2.0])))
def mygrad_maximum_ties_rrule(a, b):
    return _op(Maximum, a, b)


class MatMul(BinaryUfunc):
    numpy_ufunc = np.matmul
    _supports_where = False

    def backward_var(self, grad, index, **kwargs):
        a, b = self.variables
        a = a.data
        b = b.data

        # handle 1D w/ 1D (dot product of vectors)
        if a.ndim == 1 and b.ndim == 1:
            if index == 0:
                return grad * b
            elif index == 1:
                return grad * a

        if index == 0:  # compute grad through a
            if b.ndim > 1:  # ([...], j) w/ ([...], j, k)
                if a.ndim == 1:
                    grad = np.expand_dims(grad, -2)
                dfdx = np.matmul(grad, b.swapaxes(-1, -2))
            else:  # ([...], i, j) w/ (j,)
                dfdx = np.expand_dims(grad, -1) * b
            return dfdx

        if index == 1:  # compute grad through b
            if a.ndim > 1:  # ([...], i, j) w/ ([...], j, [k])
                if b.ndim == 1:
                    grad = np.expand_dims(grad, -1)
                dfdx = np.matmul(a.swapaxes(-1, -2), grad)
                if b.ndim == 1:
                    dfdx = dfdx.squeeze(-1)
            else:  # (j,) w/ ([...], j, k)
                dfdx = a[:, np.newaxis] * np.expand_dims(grad, -2)
            return dfdx
        else:
            raise ValueError()


def matmul(a, b):
    return np.matmul(a, b)


# math/misc/ops.py MatMul: vector (j,) with a stack (2, j, k): index 0 matmul(expand_dims(grad, -2), b.swapaxes(-1, -2)),
#   index 1 a[:, newaxis] * expand_dims(grad, -2); the batch dims are summed by reduce_broadcast (framework)
@rrule(matmul, arrays(shape=(3,)), arrays(shape=(2, 3, 4)))
def mygrad_matmul_vec_stack_rrule(a, b):
    return _op(MatMul, a, b)


# ===== mygrad/math/sequential/ops.py =========================================================================


class MaxMin(Sequential):
    def backward_var(self, grad, index, **kwargs):
        (a,) = self.variables
        axis = self.axis

        if a.ndim == 0:
            return grad

        if hasattr(axis, "__iter__"):
            axis = tuple(ax % a.ndim for ax in axis)
            axis = None if len(axis) == a.ndim else tuple(sorted(axis))
        elif axis is not None:
            axis = (axis % a.ndim,)

        # normalize shape of grad to be same as when keepdims=False
        if self.keepdims:
            if axis is not None:
                reduce_ = [slice(None)] * a.ndim
                for i in axis:
                    reduce_[i] = 0
                reduce_ = tuple(reduce_)
            else:
                reduce_ = (0,) * a.ndim
            grad = grad[reduce_]

        # max(a) -> use argmax
        if axis is None:
            indices = np.unravel_index(self._arg_finder(a.data), a.shape)
            out = np.zeros_like(a.data, dtype=grad.dtype)
            out[indices] = grad
            return out
        # max(x, axis=i) -> use argmax with specified axis
        elif len(axis) == 1:
            op_index = self._arg_finder(a.data, axis=axis[0])
            indices = list(np.indices(op_index.shape))
            indices.insert(axis[0], op_index)
            indices = tuple(indices)

            out = np.zeros_like(a.data, dtype=grad.dtype)
            out[indices] = grad
            return out

        # max(x, axis=(i,j,...) ) -> Reshape data to use argmax along trailing axis
        static_ax = tuple(
            sorted(set(range(a.ndim)) - set(axis))
        )  # non-reduced axes (m, n, ..)
        to_trans = static_ax + axis  # (m, n, ..., i, j, ...)
        from_trans = tuple(np.argsort(to_trans))
        outshape = tuple(a.shape[i] for i in static_ax)

        z = a.data.transpose(*to_trans).reshape(*outshape, -1)  # (m, n, ..., i*j*[...])

        k = self._arg_finder(z, axis=-1)
        indices = tuple(i for i in np.indices(k.shape))
        indices += (k,)
        tmp_grad_shape = z.shape

        out = np.zeros(tmp_grad_shape, dtype=grad.dtype)
        out[indices] = grad
        shape = tuple(a.shape[i] for i in to_trans)
        return out.reshape(shape).transpose(*from_trans)


class Max(MaxMin):
    numpy_func = staticmethod(np.max)
    _arg_finder = staticmethod(np.argmax)


def np_max(x, axis=None, keepdims=False):
    return np.max(x, axis=axis, keepdims=keepdims)


# math/sequential/ops.py MaxMin.backward_var: argmax of the reduced axes (transposed and flattened for a tuple
#   axis) gets grad, the rest 0 (ties: the first maximum, a one-hot subgradient); axis (0, 2), keepdims, ties drawn
@rrule(np_max, arrays(shape=(2, 3, 2), elements=st.sampled_from([-1.0, 0.0, 1.5, 3.0])),
       kwargs={"axis": (0, 2), "keepdims": True})
def mygrad_max_axes_keepdims_rrule(x, axis=None, keepdims=False):
    return _op(Max, x, op_kwargs={"axis": axis, "keepdims": keepdims, "dtype": _NoValue})


class Sum(Sequential):
    numpy_func = staticmethod(np.sum)

    def backward_var(self, grad, index, **kwargs):
        (a,) = self.variables
        if self.axis is None:
            return np.full(a.shape, grad, dtype=a.dtype)

        if not self.keepdims:
            index = [slice(None) for i in range(a.ndim)]
            for i in self.axis:
                index[i] = np.newaxis
            grad = grad[tuple(index)]
        return np.broadcast_to(grad, a.shape).astype(a.dtype, copy=False)


def np_sum(x, axis=None, keepdims=False):
    return np.sum(x, axis=axis, keepdims=keepdims)


# math/sequential/ops.py Sum: grad[newaxis at each reduced axis] broadcast to a.shape; axis (0, 2)
@rrule(np_sum, arrays(shape=(2, 3, 4)), kwargs={"axis": (0, 2), "keepdims": False})
def mygrad_sum_axes_rrule(x, axis=None, keepdims=False):
    return _op(Sum, x, op_kwargs={"axis": axis, "keepdims": keepdims})


class Mean(Sum):
    numpy_func = staticmethod(np.mean)

    def backward_var(self, grad, index, **kwargs):
        (a,) = self.variables
        n = (
            a.data.size
            if self.axis is None
            else np.prod([a.shape[i] for i in self.axis])
        )
        return super().backward_var(grad / n, index, **kwargs)


def np_mean(x, axis=None, keepdims=False):
    return np.mean(x, axis=axis, keepdims=keepdims)


# math/sequential/ops.py Mean: Sum.backward_var(grad / n), n = prod of the reduced sizes; axis -1, keepdims
@rrule(np_mean, arrays(shape=(3, 4)), kwargs={"axis": -1, "keepdims": True})
def mygrad_mean_keepdims_rrule(x, axis=None, keepdims=False):
    return _op(Mean, x, op_kwargs={"axis": axis, "keepdims": keepdims})


class Prod(Sequential):
    numpy_func = staticmethod(np.prod)

    def backward_var(self, grad, index, **kwargs):
        (a,) = self.variables
        x = a.data

        if a.ndim == 0:
            return grad

        axes = (
            set(range(a.ndim))
            if self.axis is None
            else {i if i >= 0 else a.ndim + i for i in self.axis}
        )

        # make grad broadcast-compatible against x
        grad = grad.reshape(*(1 if n in axes else i for n, i in enumerate(a.shape)))

        with np.errstate(divide="ignore", invalid="ignore"):
            dldx = np.prod(x, axis=self.axis, keepdims=True) / x

        if np.any(np.isnan(dldx)):
            x = x.copy()

            # computes the number of 0s to occur within each sequence
            has_zero = np.broadcast_to(
                np.sum(x == 0, axis=self.axis, keepdims=True), x.shape
            )
            dldx[has_zero > 1] = np.nan_to_num(dldx[has_zero > 1])

            if np.any(np.isnan(dldx)):
                is_zero = x == 0
                x[is_zero] = 1
                with np.errstate(divide="ignore", invalid="ignore"):
                    loc = np.logical_and(is_zero, has_zero == 1)
                    dldx[loc] = (np.prod(x, axis=self.axis, keepdims=True) / x)[loc]

        return grad * dldx


def np_prod(x, axis=None, keepdims=False):
    return np.prod(x, axis=axis, keepdims=keepdims)


# math/sequential/ops.py Prod: grad * prod(x, keepdims) / x, NaNs patched: rows with two or more zeros -> 0,
#   the single zero of a row -> product of the others; axis 1, zeros drawn on purpose
@rrule(np_prod, arrays(shape=(2, 3), elements=st.one_of(st.just(0.0), st.floats(-3.0, 3.0))), kwargs={"axis": 1})
def mygrad_prod_zeros_rrule(x, axis=None, keepdims=False):
    return _op(Prod, x, op_kwargs={"axis": axis, "keepdims": keepdims})


def _reverse_cumsum(x, axis=None):
    """(x0, x1, x2) -> (x0, x0 + x1, x0 + x1 + x2)"""
    if axis is None:
        axis = 0
    return np.flip(np.cumsum(np.flip(x, axis=axis), axis=axis), axis=axis)


def _find_first_zeros_along_axis(x, axis):
    def add_to_seen(seen, inds):
        if inds[1:] not in (i[1:] for i in seen):
            seen.append(inds)
        return seen

    def move(seq, origin, dest):
        if origin == dest:
            return seq
        o = seq.pop(origin)
        seq.insert(dest, o)
        return seq

    wer = np.where((np.moveaxis(x, axis, 0) if axis is not None else x) == 0)

    if axis is None:
        axis = 0

    gen_inds = (
        move(list(seq), origin=0, dest=axis)
        for seq in reduce(add_to_seen, zip(*wer), [])
    )
    return tuple(zip(*gen_inds))


class CumProd(Sequential):
    numpy_func = staticmethod(np.cumprod)
    _integer_axis_only = True

    def backward_var(self, grad, index, **kwargs):
        x = self.variables[index].data
        axis = self.axis
        g = grad

        if axis is None:
            orig_shape = x.shape
            x = x.ravel()
            g = g.ravel()
        else:
            orig_shape = None
            if axis < 0:
                axis += x.ndim

        g_cumprod = g * np.cumprod(x, axis=axis)

        with np.errstate(divide="ignore", invalid="ignore"):
            dldx = _reverse_cumsum(g_cumprod, axis=axis) / x

        if np.any(np.isnan(dldx)):
            x = x.copy()
            locs = _find_first_zeros_along_axis(x, axis=axis)
            x[locs] = 1

            g_cumprod = g * np.cumprod(x, axis=axis)
            with np.errstate(divide="ignore", invalid="ignore"):
                dldx[locs] = (_reverse_cumsum(g_cumprod, axis=axis) / x)[locs]
            np.nan_to_num(dldx, copy=False)

        if axis is None:
            dldx.shape = orig_shape
        return dldx


def cumprod(x, axis=None):
    return np.cumprod(x, axis=axis)


# math/sequential/ops.py CumProd: reverse_cumsum(g * cumprod(x)) / x, the first zero along the axis recomputed
#   with that zero set to 1, other NaNs -> 0 (nan_to_num); axis 1, zeros drawn on purpose
@rrule(cumprod, arrays(shape=(2, 4), elements=st.one_of(st.just(0.0), st.floats(-3.0, 3.0))), kwargs={"axis": 1})
def mygrad_cumprod_zeros_rrule(x, axis=None):
    return _op(CumProd, x, op_kwargs={"axis": axis})


class CumSum(Sequential):
    _integer_axis_only = True
    numpy_func = staticmethod(np.cumsum)

    def backward_var(self, grad, index, **kwargs):
        a = self.variables[index]
        g = _reverse_cumsum(grad, self.axis)
        if self.axis is None:
            g.shape = a.shape
        return g


def cumsum(x, axis=None):
    return np.cumsum(x, axis=axis)


# math/sequential/ops.py CumSum: _reverse_cumsum(grad, axis) = flip(cumsum(flip(grad))); axis 0
@rrule(cumsum, arrays(shape=(3, 2)), kwargs={"axis": 0})
def mygrad_cumsum_axis0_rrule(x, axis=None):
    return _op(CumSum, x, op_kwargs={"axis": axis})


class Variance(Sequential):
    numpy_func = staticmethod(np.var)

    def _grad_preprocess(self, grad):
        return grad

    def backward_var(self, grad, index, **kwargs):
        (a,) = self.variables
        axis = self.axis
        if isinstance(axis, Sequence) and len(axis) == 0:
            return np.zeros(a.shape, dtype=float)

        N = a.size if axis is None else np.prod([a.shape[i] for i in axis])
        N -= self.ddof

        grad = self._grad_preprocess(grad)
        if grad.ndim == 0:
            # keepdims=False and axis=None (or all axes)
            grad = np.full(a.shape, grad, dtype=float)
        else:
            if not self.keepdims:
                index = [slice(None)] * a.ndim
                for i in axis:
                    index[i] = np.newaxis
                grad = grad[tuple(index)]
        back = (2.0 / N) * (a.data - a.data.mean(axis=axis, keepdims=True))
        return back * grad


def np_var(x, axis=None, ddof=0, keepdims=False):
    return np.var(x, axis=axis, ddof=ddof, keepdims=keepdims)


# math/sequential/ops.py Variance: (2 / (N - ddof)) * (a - a.mean(axis, keepdims=True)) * grad; axis None, ddof 1
@rrule(np_var, arrays(shape=(2, 3)), kwargs={"ddof": 1, "keepdims": False})
def mygrad_var_all_ddof_rrule(x, axis=None, ddof=0, keepdims=False):
    return _op(Variance, x, op_kwargs={"axis": axis, "keepdims": keepdims, "ddof": ddof})


class StdDev(Variance):
    numpy_func = staticmethod(np.std)

    def _grad_preprocess(self, grad):
        (a,) = self.variables
        return grad / (
            2
            * np.sqrt(
                a.data.var(axis=self.axis, ddof=self.ddof, keepdims=self.keepdims)
            )
        )


def np_std(x, axis=None, ddof=0, keepdims=False):
    return np.std(x, axis=axis, ddof=ddof, keepdims=keepdims)


# math/sequential/ops.py StdDev: Variance.backward_var with grad / (2 * sqrt(var)); axis (0, 1) of (2, 2, 3)
#   (a constant slice is a cone point: no derivative)
@rrule(np_std, arrays(shape=(2, 2, 3)), kwargs={"axis": (0, 1), "ddof": 0, "keepdims": False})
def mygrad_std_axes_rrule(x, axis=None, ddof=0, keepdims=False):
    return _op(StdDev, x, op_kwargs={"axis": axis, "keepdims": keepdims, "ddof": ddof})


# ===== mygrad/math/_special.py + mygrad/nnet/activations/softmax.py ==========================================


def logsumexp(a, axis=None, keepdims=False):  # mygrad/math/_special.py
    a = np.asarray(a)
    a_max = np.amax(a, axis=axis, keepdims=True)

    if a_max.ndim > 0:
        a_max[~np.isfinite(a_max)] = 0
    elif not np.isfinite(a_max):
        a_max = 0

    tmp = np.exp(a - a_max)

    # suppress warnings about log of zero
    with np.errstate(divide="ignore"):
        s = np.sum(tmp, axis=axis, keepdims=keepdims)
        out = np.log(s)

    if not keepdims:
        a_max = np.squeeze(a_max, axis=axis)
    out += a_max

    return out


def _softmax(x, kwargs):
    if x.ndim > 0 and x.size > 0:
        x = x - x.max(**kwargs)
        target = x.astype(float) if issubclass(x.dtype.type, np.integer) else x
        target = np.exp(x, out=target)
        target /= target.sum(**kwargs)
    else:
        target = x.astype(float) if issubclass(x.dtype.type, np.integer) else x
        target = np.ones_like(target)
    return target


class Softmax(Operation):
    def __call__(self, a, axis=-1):
        self.variables = (a,)
        x = a.data
        self._kw = dict(axis=axis, keepdims=True)
        self._cached_output = _softmax(x, self._kw)
        return self._cached_output

    def backward_var(self, grad, index, **kwargs):
        _ = self.variables[index]  # check index error
        soft = self._cached_output
        sg = soft * grad
        return sg - soft * np.sum(sg, **self._kw)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# nnet/activations/softmax.py Softmax: sg = soft * grad; sg - soft * np.sum(sg, axis, keepdims=True); axis 0
@rrule(softmax, arrays(shape=(3, 2), min_value=-50.0, max_value=50.0), kwargs={"axis": 0})
def mygrad_softmax_axis0_rrule(x, axis=-1):
    return _op(Softmax, x, op_kwargs={"axis": axis})


class LogSoftmax(Operation):
    scalar_only = True

    def __call__(self, a, axis=-1):
        self.variables = (a,)
        x = a.data
        self._kw = dict(axis=axis, keepdims=True)
        return x - logsumexp(x, **self._kw)

    def backward_var(self, grad, index, **kwargs):
        a = self.variables[index]
        x = a.data
        soft = _softmax(x, self._kw)
        return grad - soft * np.sum(grad, **self._kw)


def logsoftmax(x, axis=-1):
    m = x.max(axis=axis, keepdims=True)
    return x - (m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)))


# nnet/activations/softmax.py LogSoftmax: grad - softmax(x) * np.sum(grad, axis, keepdims=True); axis -1
@rrule(logsoftmax, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0), kwargs={"axis": -1})
def mygrad_logsoftmax_rrule(x, axis=-1):
    return _op(LogSoftmax, x, op_kwargs={"axis": axis})


# ===== mygrad/nnet/activations/{sigmoid,elu,selu}.py =========================================================


class Sigmoid(Operation):
    def __call__(self, a):
        self.variables = (a,)
        x = np.asarray(-1.0 * a.data)
        np.exp(x, out=x)
        x += 1
        np.reciprocal(x, out=x)
        self.sigmoid = x
        return self.sigmoid

    def backward_var(self, grad, index, **kwargs):
        return grad * self.sigmoid * (1.0 - self.sigmoid)


def sigmoid(x):
    return 1 / (1 + np.exp(-1.0 * x))


# nnet/activations/sigmoid.py Sigmoid: grad * sigmoid * (1.0 - sigmoid); all reals
@rrule(sigmoid, arrays(shape=(4,), min_value=-40.0, max_value=40.0))
def mygrad_sigmoid_rrule(x):
    return _op(Sigmoid, x)


class ELU(Operation):
    def __call__(self, x, alpha):
        self.variables = (x,)
        x = x.data
        self.exp = alpha * (np.exp(x) - 1)
        self.alpha = alpha
        return np.where(x < 0, self.exp, x)

    def backward_var(self, grad, index, **kwargs):
        x = self.variables[index]
        return grad * np.where(x.data < 0, self.exp + self.alpha, 1)


def elu(x, alpha):
    return np.where(x < 0, alpha * (np.exp(x) - 1), x)


# nnet/activations/elu.py ELU: grad * np.where(x < 0, alpha * (exp(x) - 1) + alpha, 1); alpha 0.7 (kink at 0)
@rrule(elu, arrays(shape=(4,), min_value=-5.0, max_value=5.0), constant(0.7))
def mygrad_elu_rrule(x, alpha):
    return _op(ELU, x, op_args=(alpha,), n_nondiff=1)


_ALPHA = 1.6732632423543772848170429916717
_SCALE = 1.0507009873554804934193349852946


class SELU(Operation):
    def __call__(self, x):
        self.variables = (x,)
        x = x.data
        self.exp = _ALPHA * (np.exp(x) - 1)
        return _SCALE * np.where(x < 0, self.exp, x)

    def backward_var(self, grad, index, **kwargs):
        x = self.variables[index]
        return grad * _SCALE * np.where(x.data < 0, self.exp + _ALPHA, 1)


def selu(x):
    return 1.0507009873554804934193349852946 * np.where(x < 0, 1.6732632423543772848170429916717 * (np.exp(x) - 1), x)


# nnet/activations/selu.py SELU: grad * _SCALE * np.where(x < 0, _ALPHA * (exp(x) - 1) + _ALPHA, 1)
@rrule(selu, arrays(shape=(4,), min_value=-5.0, max_value=5.0))
def mygrad_selu_rrule(x):
    return _op(SELU, x)


# ===== mygrad/nnet/losses ====================================================================================


def check_loss_inputs(x, y_true):  # nnet/losses/_utils.py
    if not x.ndim == 2:
        raise ValueError(
            "`x` must be a 2-dimensional array-like object, got {}-dim".format(x.ndim)
        )
    y_true = asarray(y_true)
    if not np.issubdtype(y_true.dtype, np.integer):
        raise TypeError(
            "`y_true` must be an integer-type "
            "array-like object, got {}".format(y_true.dtype)
        )
    if y_true.ndim != 1 or y_true.shape[0] != x.shape[0]:
        raise ValueError("`y_true` must be a shape-(N,) array")


class SoftmaxCrossEntropy(Operation):
    def __call__(self, x, y_true):
        if isinstance(y_true, Tensor):
            y_true = y_true.data

        check_loss_inputs(x, y_true)
        self.variables = (x,)
        scores = x.data
        log_softmax = scores - logsumexp(scores, axis=-1, keepdims=True)
        label_locs = (range(len(scores)), y_true)
        loss = -np.sum(log_softmax[label_locs]) / scores.shape[0]

        if TRACK_GRAPH:
            self.back = np.exp(log_softmax)
            self.back[label_locs] -= 1.0
            self.back /= scores.shape[0]
        return loss

    def backward_var(self, grad, index, **kwargs):
        return grad * self.back


def softmax_crossentropy(x, y_true):
    m = x.max(axis=-1, keepdims=True)
    log_softmax = x - (m + np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True)))
    return -np.sum(log_softmax[np.arange(x.shape[0]), y_true]) / x.shape[0]


# nnet/losses/softmax_crossentropy.py SoftmaxCrossEntropy: grad * back, back = (softmax(x) - onehot(y)) / N
@rrule(softmax_crossentropy, arrays(shape=(3, 4), min_value=-30.0, max_value=30.0), constant(np.array([0, 3, 1])))
def mygrad_softmax_crossentropy_rrule(x, y_true):
    return _op(SoftmaxCrossEntropy, x, op_args=(y_true,), n_nondiff=1)


class MulticlassHinge(Operation):
    def __call__(self, a, y, hinge=1.0):
        check_loss_inputs(a, y)
        self.variables = (a,)
        scores = a.data
        correct_labels = (range(len(y)), y)
        correct_class_scores = scores[correct_labels]  # Nx1

        M = scores - correct_class_scores[:, np.newaxis] + hinge  # NxC margins
        not_thresh = np.where(M <= 0)
        Lij = M
        Lij[not_thresh] = 0
        Lij[correct_labels] = 0
        if TRACK_GRAPH:
            TMP = np.ones(M.shape, dtype=float)
            TMP[not_thresh] = 0
            TMP[correct_labels] = 0  # NxC; 1 where margin > 0
            TMP[correct_labels] = -1 * TMP.sum(axis=-1)
            self.back = TMP
            self.back /= scores.shape[0]
        return np.sum(Lij) / scores.shape[0]

    def backward_var(self, grad, index, **kwargs):
        return grad * self.back


def multiclass_hinge(x, y_true, hinge=1.0):
    rows = np.arange(x.shape[0])
    M = x - x[rows, y_true][:, None] + hinge
    L = np.where(M <= 0, 0.0, M)
    L = np.where(np.arange(x.shape[1])[None, :] == y_true[:, None], 0.0, L)
    return np.sum(L) / x.shape[0]


# nnet/losses/multiclass_hinge.py MulticlassHinge: grad * back, back = 1 where margin > 0 (off the label),
#   minus their row count at the label, / N; kinks where a margin is 0
@rrule(multiclass_hinge, arrays(shape=(3, 4), min_value=-3.0, max_value=3.0), constant(np.array([1, 0, 3])))
def mygrad_multiclass_hinge_rrule(x, y_true, hinge=1.0):
    return _op(MulticlassHinge, x, op_args=(y_true, hinge), n_nondiff=1)


class MarginRanking(Operation):
    def __call__(self, x1, x2, y, margin):
        self.variables = (x1, x2)
        x1 = x1.data
        x2 = x2.data

        self.y = y

        M = margin - self.y * (x1 - x2)
        not_thresh = M <= 0
        loss = M
        loss[not_thresh] = 0.0
        if TRACK_GRAPH:
            self._grad = np.ones_like(M)
            self._grad[not_thresh] = 0.0
            self._grad /= M.size
        return np.mean(loss)

    def backward_var(self, grad, index, **kwargs):
        sign = -self.y if index == 0 else self.y
        return grad * (sign * self._grad)


def margin_ranking_loss(x1, x2, y, margin):
    M = margin - y * (x1 - x2)
    return np.mean(np.where(M <= 0, 0.0, M))


# nnet/losses/margin_ranking_loss.py MarginRanking: grad * (-+y * (M > 0) / M.size); y a constant +-1 array,
#   margin 0.5
@rrule(margin_ranking_loss, arrays(shape=(4,), min_value=-3.0, max_value=3.0), arrays(shape=(4,), min_value=-3.0, max_value=3.0),
       constant(np.array([1.0, -1.0, 1.0, -1.0])), constant(0.5))
def mygrad_margin_ranking_rrule(x1, x2, y, margin):
    return _op(MarginRanking, x1, x2, op_args=(y, margin), n_nondiff=2)


class FocalLoss(Operation):
    def __call__(self, class_probs, targets, alpha, gamma):
        if isinstance(targets, Tensor):
            targets = targets.data

        check_loss_inputs(class_probs, targets)

        self.variables = (class_probs,)
        self.label_locs = (range(len(class_probs)), targets)

        class_probs = asarray(class_probs)
        pc = class_probs[self.label_locs]

        one_m_pc = np.clip(1 - pc, a_min=0, a_max=1)
        log_pc = np.log(pc)
        one_m_pc_gamma = one_m_pc**gamma

        loss = -(alpha * one_m_pc_gamma * log_pc)

        if not TRACK_GRAPH:
            return loss

        self.back = np.zeros(class_probs.shape, dtype=np.float64)

        if np.isclose(gamma, 0, atol=1e-15):
            self.back[self.label_locs] -= alpha / pc
            return loss

        # dL/dp = -alpha * ( (1 - p)**g / p - g * (1 - p)**(g - 1) * log(p) )
        #
        # term 1: (1 - p)**g / p
        term1 = one_m_pc_gamma / pc  # (1 - p)**g / p

        # term 2: - g * (1 - p)**(g - 1) * log(p)
        if np.isclose(gamma, 1, rtol=1e-15):
            term2 = -log_pc
        elif gamma < 1:
            # For g < 1 and p -> 1, the 2nd term -> 0 via L'Hôpital's rule
            term2 = np.zeros(pc.shape, dtype=class_probs.dtype)
            pc_not_1 = ~np.isclose(one_m_pc, 0, atol=1e-25)
            term2[pc_not_1] = (
                -gamma * one_m_pc[pc_not_1] ** (gamma - 1) * log_pc[pc_not_1]
            )
        else:
            term2 = -gamma * one_m_pc ** (gamma - 1) * log_pc

        self.back[self.label_locs] -= alpha * (term1 + term2)
        return loss

    def backward_var(self, grad, index, **kwargs):
        self.back[self.label_locs] *= grad
        return self.back


def focal_loss(class_probs, targets, alpha, gamma):
    pc = class_probs[np.arange(class_probs.shape[0]), targets]
    return -(alpha * np.clip(1 - pc, 0, 1) ** gamma * np.log(pc))


# nnet/losses/focal_loss.py FocalLoss: back[label] = -alpha * ((1-p)**g / p - g * (1-p)**(g-1) * log p) (g < 1:
#   the second term 0 where 1-p is 0); backward_var: back[label] *= grad (mutates its state, so `fresh`);
#   class probabilities in (0, 1], alpha 0.25, gamma 0.5 (the g < 1 branch)
@rrule(focal_loss, arrays(shape=(3, 4), min_value=1e-3, max_value=1.0), constant(np.array([2, 0, 3])), constant(0.25),
       constant(0.5))
def mygrad_focal_loss_rrule(class_probs, targets, alpha, gamma):
    return _op(FocalLoss, class_probs, op_args=(targets, alpha, gamma), n_nondiff=3, fresh=("back",))


# ===== mygrad/nnet/layers ====================================================================================


class BatchNorm(Operation):
    def __call__(self, x, gamma, beta, *, eps):
        normed_dims = tuple(i for i in range(x.ndim) if i != 1)
        keepdims_shape = tuple(1 if n != 1 else d for n, d in enumerate(x.shape))

        self.variables = tuple(i for i in (x, gamma, beta))

        if gamma.size == 0:
            gamma = None

        if beta.size == 0:
            beta = None

        self.gamma = gamma
        self.beta = beta

        x = x.data
        self.x_norm = None  # required for backprop through gamma
        self.mean = x.mean(axis=normed_dims)
        self.var = x.var(axis=normed_dims)

        y = x - self.mean.reshape(keepdims_shape)
        self._std = np.sqrt(self.var + eps).reshape(keepdims_shape)  # sqrt(var + eps)
        y /= self._std
        self.x_norm = y
        # optional affine transformation
        if gamma is not None:
            gamma = gamma.data
            # must copy `y` to prevent mutation of `self.x_norm`
            y = y * gamma.reshape(keepdims_shape)

        if beta is not None:
            beta = beta.data
            y = y + beta.reshape(keepdims_shape)
        return y

    def backward_var(self, grad, index, **kwargs):
        x = self.variables[0].data
        if index == 0:  # backprop through x
            normed_dims = tuple(i for i in range(x.ndim) if i != 1)
            keepdims_shape = tuple(1 if n != 1 else d for n, d in enumerate(x.shape))
            N = x.size / x.shape[1]

            # all sums carried over non-channel dims
            # (1/sqrt(var + eps)) * [dL - dL.mean() - (1/N)*x_norm*(x_norm @ dL)]
            grad_ = grad - np.mean(grad, axis=normed_dims, keepdims=True)

            rterm = self.x_norm * np.reshape(
                np.einsum(grad, range(x.ndim), self.x_norm, range(x.ndim), [1]),
                keepdims_shape,
            )
            rterm /= N
            grad_ -= rterm
            grad_ /= self._std
            if (
                self.gamma is not None
            ):  # backprop through optional affine transformation
                gamma = self.gamma.data
                grad_ *= gamma.reshape(keepdims_shape)
            return grad_

        elif index == 1 and self.gamma is not None:  # backprop through gamma
            return np.einsum(grad, range(x.ndim), self.x_norm, range(x.ndim), [1])

        elif (index == 1 and self.gamma is None) or index == 2:
            normed_dims = tuple(i for i in range(x.ndim) if i != 1)
            return grad.sum(axis=normed_dims)
        else:
            raise IndexError


def batchnorm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=(0, 2), keepdims=True)
    var = x.var(axis=(0, 2), keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma.reshape(1, -1, 1) + beta.reshape(1, -1, 1)


# nnet/layers/batchnorm.py BatchNorm: dx = gamma * (grad - mean(grad) - x_norm * sum(grad * x_norm) / N) / sqrt(var + eps),
#   dgamma = einsum(grad, x_norm -> channel), dbeta = grad.sum(non-channel dims); x (4, 2, 3), eps 1e-5
@rrule(batchnorm, arrays(shape=(4, 2, 3), min_value=-5.0, max_value=5.0), arrays(shape=(2,), min_value=-3.0, max_value=3.0),
       arrays(shape=(2,), min_value=-3.0, max_value=3.0), kwargs={"eps": 1e-5})
def mygrad_batchnorm_rrule(x, gamma, beta, eps=1e-5):
    return _op(BatchNorm, x, gamma, beta, op_kwargs={"eps": eps})


def sliding_window_view(arr, window_shape, step, dilation=None):  # nnet/layers/utils.py (argument checks dropped)
    window_shape = tuple(window_shape)
    step = (
        (int(step),) * len(window_shape) if isinstance(step, Integral) else tuple(step)
    )
    if dilation is None:
        dilation = np.ones((len(window_shape),), dtype=int)
    else:
        if isinstance(dilation, Integral):
            dilation = np.full((len(window_shape),), fill_value=dilation, dtype=int)
        else:
            np.asarray(dilation)

    if not arr.flags["C_CONTIGUOUS"]:
        arr = np.ascontiguousarray(arr)

    step = np.array(step)  # (Sx, ..., Sz)
    window_shape = np.array(window_shape)  # (Wx, ..., Wz)
    in_shape = np.array(arr.shape[-len(step) :])  # (x, ... , z)
    nbyte = arr.strides[-1]  # size, in bytes, of element in `arr`

    # per-byte strides required to fill a window
    win_stride = tuple(np.cumprod(arr.shape[:0:-1])[::-1]) + (1,)

    # per-byte strides required to advance the window
    step_stride = tuple(win_stride[-len(step) :] * step)

    # update win_stride to accommodate dilation
    win_stride = np.array(win_stride)
    win_stride[-len(step) :] *= dilation
    win_stride = tuple(win_stride)

    # tuple of bytes to step to traverse corresponding dimensions of view
    # see: 'internal memory layout of an ndarray'
    stride = tuple(int(nbyte * i) for i in step_stride + win_stride)

    # number of window placements along x-dim: X = (x - (Wx - 1)*Dx + 1) // Sx + 1
    out_shape = tuple((in_shape - ((window_shape - 1) * dilation + 1)) // step + 1)

    # ([X, (...), Z], ..., [Wx, (...), Wz])
    out_shape = out_shape + arr.shape[: -len(step)] + tuple(window_shape)
    out_shape = tuple(int(i) for i in out_shape)
    return as_strided(arr, shape=out_shape, strides=stride, writeable=False)


class MaxPoolND(Operation):
    def __call__(self, x, pool, stride):
        self.variables = (x,)  # data: ((N0, ...), C0, ...)
        x = x.data

        assert isinstance(pool, (tuple, list, np.ndarray)) and all(
            i >= 0 and isinstance(i, Integral) for i in pool
        )
        pool = np.asarray(pool, dtype=int)
        assert all(i > 0 for i in pool)
        assert x.ndim >= len(
            pool
        ), "The number of pooled dimensions cannot exceed the dimensionality of the data."

        stride = (
            np.array([stride] * len(pool))
            if isinstance(stride, Integral)
            else np.asarray(stride, dtype=int)
        )
        assert len(stride) == len(pool) and all(
            s >= 1 and isinstance(s, Integral) for s in stride
        )

        self.pool = pool  # (P0, ...)
        self.stride = stride  # (S0, ...)

        num_pool = len(pool)
        num_no_pool = x.ndim - num_pool

        x_shape = np.array(x.shape[num_no_pool:])
        w_shape = pool

        out_shape = (x_shape - w_shape) / stride + 1

        if not all(i.is_integer() and i > 0 for i in out_shape):
            raise ValueError("Stride and kernel dimensions are incompatible")

        pool_axes = tuple(-(i + 1) for i in range(num_pool))

        maxed = sliding_window_view(x, self.pool, self.stride).max(axis=pool_axes)
        axes = tuple(range(maxed.ndim))

        # (G0, ..., (N0, ...)) -> ((N0, ...), G0, ...)
        out = maxed.transpose(axes[-num_no_pool:] + axes[:-num_no_pool])
        return out if out.flags["C_CONTIGUOUS"] else np.ascontiguousarray(out)

    def backward_var(self, grad, index, **kwargs):
        var = self.variables[index]
        x = var.data
        num_pool = len(self.pool)

        sl = sliding_window_view(x, self.pool, self.stride)
        grid_shape = sl.shape
        maxed = sl.reshape(*sl.shape[:-num_pool], -1).argmax(-1)
        axes = tuple(range(maxed.ndim))

        # argmax within a given flat-window
        maxed = maxed.transpose(
            axes[num_pool:] + axes[:num_pool]
        )  # ((N0, ...), G0, ...)

        # flat-index offset associated with reshaped window within `x`
        row_major_offset = tuple(np.cumprod(x.shape[-num_pool:][:0:-1])[::-1]) + (1,)

        # flat index of argmax, updated based on position within window, according to shape of `x`
        in_window_offset = sum(
            ind * off
            for ind, off in zip(np.unravel_index(maxed, self.pool), row_major_offset)
        )

        # flat-index of strided window placement, relative to `x`
        window_offset = sum(
            ind * s * off
            for ind, s, off in zip(
                np.indices(grid_shape[:num_pool]), self.stride, row_major_offset
            )
        )

        # indices required to traverse pool-axis-flattened array
        # ((N0, ...) G0*...)
        flat_grid_shape = (*maxed.shape[:-num_pool], np.prod(maxed.shape[-num_pool:]))
        index = np.indices(flat_grid_shape)

        # update trailing indices to traverse location of max entries within pooled axes
        index[-1] = (in_window_offset + window_offset).reshape(
            *flat_grid_shape[:-1], -1
        )

        # accumulate gradient within pool-axis-flattened dx, then reshape to match shape of `x`
        dx = np.zeros(x.shape[:-num_pool] + (np.prod(x.shape[-num_pool:]),))
        np.add.at(dx, tuple(index), grad.reshape(*x.shape[:-num_pool], -1))
        return dx.reshape(x.shape)


def max_pool_2x2_s1(x):
    return np.max(np.stack([x[..., i:i + 3, j:j + 3] for i in (0, 1) for j in (0, 1)]), axis=0)


# nnet/layers/pooling.py MaxPoolND: np.add.at of grad at each window's flat argmax (first maximum on ties);
#   pool (2, 2), stride 1 (overlapping windows: one entry may collect several cotangents), x (1, 2, 4, 4)
@rrule(max_pool_2x2_s1, arrays(shape=(1, 2, 4, 4)))
def mygrad_max_pool_overlap_rrule(x):
    return _op(MaxPoolND, x, op_args=((2, 2), 1))


class ConvND(Operation):
    def __call__(self, x, w, *, stride, padding=0, dilation=1):
        self.variables = (x, w)
        # x ... data:    (N, C, X0, X1, ...)
        # w ... filters: (F, C, W0, W1, ...)

        x = x.data
        w = w.data

        assert x.ndim > 2
        assert x.ndim == w.ndim
        assert (
            w.shape[1] == x.shape[1]
        ), "The channel-depth of the batch and filters must agree"

        num_conv_channels = w.ndim - 2
        x_shape = np.array(
            x.shape[2:]
        )  # (X0, ...): shape of the channels being convolved over
        w_shape = np.array(w.shape[2:])  # (W0, ...): shape of each conv filter

        dilation = (
            np.array((dilation,) * num_conv_channels)
            if isinstance(dilation, Integral)
            else np.array(dilation, dtype=int)
        )

        assert len(dilation) == num_conv_channels and all(
            d >= 1 and isinstance(d, Integral) for d in dilation
        )

        padding = (
            np.array((padding,) * num_conv_channels)
            if isinstance(padding, Integral)
            else np.array(padding, dtype=int)
        )
        assert len(padding) == num_conv_channels and all(
            p >= 0 and isinstance(p, Integral) for p in padding
        )

        stride = (
            np.array((stride,) * num_conv_channels)
            if isinstance(stride, Integral)
            else np.asarray(stride, dtype=int)
        )
        assert len(stride) == num_conv_channels and all(
            s >= 1 and isinstance(s, Integral) for s in stride
        )

        out_shape = (
            x_shape + 2 * padding - ((w_shape - 1) * dilation + 1)
        ) / stride + 1

        if not all(i.is_integer() and i > 0 for i in out_shape):
            raise ValueError("Stride and kernel dimensions are incompatible")

        self.padding = padding
        self.stride = stride
        self.dilation = dilation

        # symmetric 0-padding for X0, X1, ... dimensions
        axis_pad = tuple((i, i) for i in (0, 0, *padding))
        x = np.pad(x, axis_pad, mode="constant") if sum(padding) else x

        # (G0, ...) is the tuple of grid-positions for placing each window (not including stride)
        # (N, C, X0, ...) -> (G0, ..., N, C, W0, ...)
        windowed_data = sliding_window_view(
            x, window_shape=w_shape, step=self.stride, dilation=self.dilation
        )

        w_conv_channels = list(range(1, num_conv_channels + 2))  # C, W0, ...
        window_conv_channels = [
            i + 1 + num_conv_channels  # C, W0, ...
            for i in range(num_conv_channels + 1)
        ]

        # (F, C, W0, ...) ⋆ (G0, ..., N, C, W0, ...) -> (F, G0, ..., N)
        conv_out = np.tensordot(
            w, windowed_data, axes=[w_conv_channels, window_conv_channels]
        )

        # (F, G0, ..., N) -> (N, F, G0, ...)
        out = np.moveaxis(conv_out, source=-1, destination=0)
        return out if out.flags["C_CONTIGUOUS"] else np.ascontiguousarray(out)

    def backward_var(self, grad, index, **kwargs):
        x, w = (i.data for i in self.variables)
        num_conv_channels = grad.ndim - 2

        if index == 0:  # backprop through x
            x_shape = x.shape[:2] + tuple(
                i + 2 * p for i, p in zip(x.shape[-num_conv_channels:], self.padding)
            )
            dx = np.zeros(x_shape, dtype=x.dtype)  # (N, C, X0, ...)

            # `gp` stores all of the various broadcast multiplications of each grad
            # element against the conv filter.
            # (N, F, G0, ...) -tdot- (F, C, W0, ...) --> (N, G0, ..., C, W0, ...)
            gp = np.tensordot(grad, w, axes=[[1], [0]])
            for ind in np.ndindex(grad.shape[-num_conv_channels:]):
                # ind: (g0, ...) - grid-position of filter placement
                slices = tuple(
                    slice(i * s, i * s + w * d, d)
                    for i, w, s, d in zip(ind, w.shape[2:], self.stride, self.dilation)
                )
                # Add (grad-element * filter) to each appropriate window position in `dx`
                # dx[N, C, g0*s0 : g0*s0 + w0*d0 : d0, (...)] += gp[N, g0, (...), C, W0, (...)]
                dx[(..., *slices)] += gp[(slice(None), *ind, ...)]

            # remove padding from dx
            if sum(self.padding):
                no_pads = tuple(slice(p, -p if p else None) for p in self.padding)
                dx = dx[(..., *no_pads)]
            return dx

        else:  # backprop through w
            # backprop into f
            # symmetric 0-padding for H, W dimensions
            axis_pad = tuple((i, i) for i in (0, 0, *self.padding))
            x = np.pad(x, axis_pad, mode="constant") if sum(self.padding) else x

            # (G0, ...) is the tuple of grid-indices for placing each window (not including stride)
            # (N, C, X0, ...) -> (G0, ..., N, C, W0, ...)
            windowed_data = sliding_window_view(
                x, window_shape=w.shape[2:], step=self.stride, dilation=self.dilation
            )

            # (N, F, G0, ...) -tdot- (G0, ..., N, C, W0, ...) --> (F, C, W0, ...)
            grad_axes = list(range(2, num_conv_channels + 2)) + [0]  # (G0, ..., N)
            window_axes = list(range(num_conv_channels + 1))  # (G0, ..., N)
            return np.tensordot(grad, windowed_data, axes=[grad_axes, window_axes])


def conv2d_s2_p1_d2(x, w):
    # stride 2, padding 1, dilation 2, 3x3 filters on 7x7: output grid 3x3 (rows 2i + 2a of the padded input)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    return sum(np.einsum("fc,ncij->nfij", w[:, :, a, b], xp[:, :, 2 * a:2 * a + 5:2, 2 * b:2 * b + 5:2])
               for a in range(3) for b in range(3))


# nnet/layers/conv.py ConvND: dx accumulates tensordot(grad, w) into each (strided, dilated) window, padding cut;
#   dw = tensordot(grad, windowed padded x); stride 2, padding 1, dilation 2
@rrule(conv2d_s2_p1_d2, arrays(shape=(2, 2, 7, 7), min_value=-3.0, max_value=3.0), arrays(shape=(2, 2, 3, 3), min_value=-3.0, max_value=3.0))
def mygrad_conv2d_rrule(x, w):
    return _op(ConvND, x, w, op_kwargs={"stride": 2, "padding": 1, "dilation": 2})


# ===== mygrad/linalg/ops.py ==================================================================================


def _unique_from_end(in_str):
    return reduce(lambda acc, x: acc + x if x not in acc else acc, in_str[::-1], "")[
        ::-1
    ]


def _merge_max_mappings(*mappings):
    def _merge_max(d1, d2):
        d1.update((k, v) for k, v in d2.items() if d1.get(k, 0) < v)
        return d1

    return reduce(_merge_max, mappings, {})


def _get_indices(item, seq):
    return (n for n, x in enumerate(seq) if x == item)


class EinSum(Operation):
    can_return_view = True

    def __call__(self, *variables, in_lbls, out_lbls, out=None, optimize=False):
        self.in_lbls = in_lbls.split(",")
        self.out_lbls = out_lbls
        self.variables = variables
        self.optimize = optimize

        # cache counts the number of redundant tensor-label pairs
        # fed to einsum. Only one gradient will be computed for a
        # unique tensor-label pair
        self._cache = None

        # einsum doesn't handle out=None properly in numpy 1.17
        kwargs = {} if out is None else {"out": out}
        return np.einsum(
            "->".join((in_lbls, out_lbls)),
            *(var.data for var in self.variables),
            optimize=optimize,
            **kwargs,
        )

    @property
    def cache(self):
        if self._cache is None:
            self._cache = Counter(zip((id(v) for v in self.variables), self.in_lbls))
        return self._cache

    def backward_var(self, grad, index, **kwargs):
        # ijk, k
        in_lbls = copy.copy(self.in_lbls)
        original_var_lbl = in_lbls.pop(index)
        var = self.variables[index]

        factor = self.cache[(id(var), original_var_lbl)]
        if factor == 0:
            raise SkipGradient()

        numpy_arrays = tuple(i.data for i in self.variables)
        self.cache[(id(var), original_var_lbl)] = 0

        var_lbl = _unique_from_end(original_var_lbl)
        repeat_lbls = len(var_lbl) != len(original_var_lbl)

        if repeat_lbls:
            mapping_gen = (
                {k: v for k, v in zip(lbl, arr.shape)}
                for lbl, arr in zip(self.in_lbls, numpy_arrays)
            )
            lbl_to_size = _merge_max_mappings(*mapping_gen)
            var_shape = tuple(lbl_to_size[lbl] for lbl in var_lbl)
        else:
            var_shape = self.variables[index].shape

        # ji
        grad_lbl = self.out_lbls

        unique_in_lbls = set(chain.from_iterable(in_lbls)) | set(grad_lbl)
        if len(set(var_lbl) - unique_in_lbls) > 0:
            exp_dims = [slice(None) for i in range(grad.ndim)]
            grad_shape = list(grad.shape)
            for n, lbl in enumerate(var_lbl):
                if lbl not in unique_in_lbls:
                    grad_lbl = grad_lbl[:n] + lbl + grad_lbl[n:]
                    exp_dims.insert(n, np.newaxis)
                    grad_shape.insert(n, var_shape[n])

            grad = np.broadcast_to(
                grad if not grad.ndim else grad[tuple(exp_dims)], grad_shape
            )

        # "ji, k -> ijk"
        back_prop_lbls = ",".join([grad_lbl] + in_lbls) + "->" + var_lbl

        # (grad, y)
        operands = (grad,) + numpy_arrays[:index] + numpy_arrays[index + 1 :]

        if not repeat_lbls:
            # dfdx: einsum("ji, k -> ijk", grad, y)
            outshape = self.variables[index].shape
            dfdx = reduce_broadcast(
                np.einsum(back_prop_lbls, *operands, optimize=self.optimize), outshape
            )
            if var_shape != dfdx.shape:
                dfdx = np.broadcast_to(dfdx, var_shape)
            if factor > 1:
                dfdx *= factor
            return dfdx

        dfdx = np.zeros(tuple(lbl_to_size[i] for i in original_var_lbl))
        out_view_shape = tuple(lbl_to_size[i] for i in var_lbl)

        # compute strides required to traverse the appropriate diagonals of
        # the output tensor.
        strides = tuple(
            sum(dfdx.strides[ind] for ind in _get_indices(lbl, original_var_lbl))
            for lbl in var_lbl
        )
        out_view = as_strided(dfdx, shape=out_view_shape, strides=strides)
        np.einsum(back_prop_lbls, *operands, out=out_view, optimize=self.optimize)
        if factor > 1:
            dfdx *= factor
        return dfdx


def einsum_diag(x, y):
    return np.einsum("ii,ij->j", x, y)


# linalg/ops.py EinSum.backward_var: repeated labels ("ii"): einsum("j,ij->i", grad, y) written through an
#   as_strided view onto the diagonal of zeros; y: einsum("j,ii->ij", grad, x)
@rrule(einsum_diag, arrays(shape=(3, 3)), arrays(shape=(3, 4)))
def mygrad_einsum_diag_rrule(x, y):
    return _op(EinSum, x, y, op_kwargs={"in_lbls": "ii,ij", "out_lbls": "j"})


def einsum_outer_sum(x, y):
    return np.einsum("ij,k->i", x, y)


# linalg/ops.py EinSum.backward_var: labels summed without contraction (j of x, k of y): grad is broadcast along
#   them ("ki,ij->k" for y) before the back-propagating einsum
@rrule(einsum_outer_sum, arrays(shape=(2, 3)), arrays(shape=(4,)))
def mygrad_einsum_uncontracted_rrule(x, y):
    return _op(EinSum, x, y, op_kwargs={"in_lbls": "ij,k", "out_lbls": "i"})


def _expand_dims(x, axis, original_ndmin):
    if axis is not None:
        return np.expand_dims(x, axis=axis)
    else:
        return x[(None,) * original_ndmin]


class Norm(Operation):
    def __call__(self, tensor, ord=None, axis=None, keepdims=False, *, nan_to_num=True):
        self.variables = (tensor,)
        self._nan_to_num = nan_to_num
        out = np.linalg.norm(tensor.data, ord=ord, axis=axis, keepdims=keepdims)

        if TRACK_GRAPH:
            if hasattr(axis, "__len__"):
                (axis,) = axis

            self.axis = axis
            self.keepdims = keepdims
            self.ord = ord if ord is not None else 2

            # self._norm is broadcast-compatible with `tensor`
            if self.keepdims is False:
                self._norm = _expand_dims(
                    out, axis=self.axis, original_ndmin=tensor.ndim
                )
            else:
                self._norm = out

        return out

    def backward_var(self, grad, index, **kwargs):
        (tensor,) = self.variables
        x = tensor.data

        if self.keepdims is False:
            # is broadcast-compatible with `tensor`
            grad = _expand_dims(grad, axis=self.axis, original_ndmin=tensor.ndim)

        if not self._nan_to_num:
            invalid_derivative = np.where(x == 0)

        if self.ord == 1:
            out = np.sign(x)
            out *= grad

        elif self.ord == 2:
            out = x / self._norm
            out *= grad

        else:
            out = np.fabs(x)
            if out.size:
                # if out.size is 0, then this produces div-by-zero
                _norm = self._norm / np.sum(
                    out**self.ord, axis=self.axis, keepdims=True
                )
            else:
                _norm = +self._norm
            out **= self.ord - 1
            out *= np.sign(x)
            out *= _norm
            out *= grad

        if not self._nan_to_num:
            out[invalid_derivative] = np.nan
        return out


def norm3(x, axis=None):
    return np.linalg.norm(x, ord=3, axis=axis)


# linalg/ops.py Norm.backward_var (ord 3): |x|**2 * sign(x) * norm / sum(|x|**3, axis) * grad; axis 1 (a zero row
#   is a cone point)
@rrule(norm3, arrays(shape=(2, 3)), kwargs={"axis": 1})
def mygrad_norm3_axis_rrule(x, axis=None):
    return _op(Norm, x, op_kwargs={"axis": axis, "keepdims": False, "ord": 3, "nan_to_num": True})


# ===== mygrad/_tensor_core_ops/indexing.py ===================================================================


def _is_int_array_index(index):
    return any(
        np.issubdtype(np.asarray(ind).dtype, np.int_) and np.asarray(ind).ndim
        for ind in index
    )


def _is_bool_array_index(index):
    return len(index) == 1 and np.issubdtype(np.asarray(index[0]).dtype, np.bool_)


class GetItem(Operation):
    can_return_view = True

    def __call__(self, a, index):
        self.variables = (a,)
        self.index = index if isinstance(index, tuple) else (index,)
        out = a.data[index]

        self._used_distinct_indices = (
            (
                out.base is not None
                and (out.base is a.data or out.base is a.data.base)
                or out.ndim == 0
                or isinstance(out, Real)
                or _is_bool_array_index(self.index)
            )
            if TRACK_GRAPH
            else None
        )
        return out

    def backward_var(self, grad, index, **kwargs):
        a = self.variables[index]
        out = np.zeros_like(a.data)
        if self._used_distinct_indices:
            out[self.index] += grad
        else:
            np.add.at(out, self.index, grad)
        return out


def getitem(x, index):
    return x[index]


# _tensor_core_ops/indexing.py GetItem.backward_var: out[index] += grad for distinct (view) indices, else
#   np.add.at(out, index, grad); a row slice with a repeated integer-array column index
@rrule(getitem, arrays(shape=(3, 4)), constant((slice(0, 2), np.array([3, 1, 3, 3]))))
def mygrad_getitem_repeated_rrule(x, index):
    return _op(GetItem, x, op_args=(index,), n_nondiff=1)


def _arr(*shape):
    return np.arange(np.prod(shape)).reshape(shape)


class SetItem(Operation):
    can_return_view = True

    def __call__(self, a, b, index, *, out):
        self.variables = (a, b)
        self.index = index if isinstance(index, tuple) else (index,)
        out[index] = b.data
        return out

    def backward_var(self, grad, index, **kwargs):
        a, b = self.variables
        if index == 0:
            grad = np.copy(grad)
            grad[self.index] = 0
            return grad
        elif index == 1:
            grad_sel = np.asarray(grad[self.index])

            if (
                (grad_sel.base is None or not np.shares_memory(grad_sel, grad))
                and grad_sel.size > 0
                and grad_sel.ndim > 0
                and not _is_bool_array_index(self.index)
                and _is_int_array_index(self.index)
            ):
                unique = _arr(*grad.shape)
                sub_sel = unique[self.index].flat
                (
                    elements,
                    first_inds,
                ) = np.unique(np.flip(sub_sel, axis=0), return_index=True)
                if len(first_inds) < len(sub_sel):
                    first_inds = (len(sub_sel) - 1) - first_inds
                    mask = np.zeros_like(sub_sel)
                    mask[first_inds] = 1
                    mask = mask.reshape(grad_sel.shape)
                    grad_sel *= mask

            if grad_sel.ndim < b.ndim:
                if grad_sel.size == b.size:
                    grad_sel = grad_sel.reshape(b.shape)
                else:
                    grad_sel = grad_sel[(np.newaxis,) * (b.ndim - grad_sel.ndim)]
            return grad_sel
        else:
            raise IndexError()


def setitem(a, b, index):
    out = a.copy()
    out[index] = b
    return out


# _tensor_core_ops/indexing.py SetItem.backward_var: a gets grad with grad[index] = 0; b gets grad[index], masked
#   to the last write where an integer index repeats ("x[[0, 0]] = [2, 3]": only 3 lands); index [0, 2, 0],
#   b of shape (3,); `out` is a copy of a (Tensor.__setitem__ writes into a fresh copy of a's data)
@rrule(setitem, arrays(shape=(4,)), arrays(shape=(3,)), constant(np.array([0, 2, 0])))
def mygrad_setitem_repeated_rrule(a, b, index):
    return _op(SetItem, a, b, op_args=(index,), op_kwargs={"out": a.copy()}, n_nondiff=1)


# ===== mygrad/tensor_manip/tiling/ops.py =====================================================================


class Repeat(Operation):
    def __call__(self, a, repeats, axis=None):
        self.variables = (a,)
        self._axis = axis
        self._repeats = repeats
        return np.repeat(a.data, repeats=repeats, axis=axis)

    def backward_var(self, grad, index, **kwargs):
        a = self.variables[index].data
        if isinstance(self._repeats, int) or len(self._repeats) == 1:
            if not isinstance(self._repeats, int):
                (self._repeats,) = self._repeats

            if not self._repeats:
                return np.zeros(a.shape, dtype=grad.dtype)

            if self._axis is None:
                grad = grad.ravel()
                window_shape = (self._repeats,)
            else:
                window_shape = [1] * max(1, a.ndim)
                window_shape[self._axis] = self._repeats
                window_shape = tuple(window_shape)

            grad = sliding_window_view(
                grad, window_shape=window_shape, step=window_shape
            )

            grad = grad.sum(axis=tuple(range(-len(window_shape), 0)))
            if self._axis is None:
                grad.shape = a.shape
            return grad
        else:
            out_grad = np.zeros((a.size,), dtype=grad.dtype)
            indices = np.arange(a.size).reshape(a.shape)
            indices = np.repeat(indices, repeats=self._repeats, axis=self._axis)
            np.add.at(out_grad, indices.ravel(), grad.ravel())
            return out_grad.reshape(a.shape)


def repeat(x, repeats, axis=None):
    return np.repeat(x, repeats, axis=axis)


# tensor_manip/tiling/ops.py Repeat.backward_var, several repeats: np.add.at(out_grad, repeat(arange(a.size)),
#   grad.ravel()); repeats [1, 0, 2] along axis 0 (a row repeated 0 times gets 0)
@rrule(repeat, arrays(shape=(3, 2)), constant([1, 0, 2]), kwargs={"axis": 0})
def mygrad_repeat_list_rrule(x, repeats, axis=None):
    return _op(Repeat, x, op_args=(repeats, axis), n_nondiff=1)


# tensor_manip/tiling/ops.py Repeat.backward_var, one repeat with axis=None: sum over windows of a
#   sliding_window_view of the raveled grad; repeats 3
@rrule(repeat, arrays(shape=(2, 2)), constant(3))
def mygrad_repeat_flat_rrule(x, repeats, axis=None):
    return _op(Repeat, x, op_args=(repeats, axis), n_nondiff=1)


LABELS = {
    "mygrad_power_rrule": {"source": f"{MYGRAD} src/mygrad/math/arithmetic/ops.py"},
    "mygrad_multiply_sequence_rrule": {"source": f"{MYGRAD} src/mygrad/math/arithmetic/ops.py"},
    "mygrad_logaddexp_rrule": {"source": f"{MYGRAD} src/mygrad/math/exp_log/ops.py"},
    "mygrad_sinc_rrule": {"source": f"{MYGRAD} src/mygrad/math/trigonometric/ops.py"},
    "mygrad_csc_rrule": {"source": f"{MYGRAD} src/mygrad/math/trigonometric/ops.py"},
    "mygrad_arccos_rrule": {"source": f"{MYGRAD} src/mygrad/math/trigonometric/ops.py"},
    "mygrad_arcsec_rrule": {"source": f"{MYGRAD} src/mygrad/math/trigonometric/ops.py"},
    "mygrad_arccot_rrule": {"source": f"{MYGRAD} src/mygrad/math/trigonometric/ops.py"},
    "mygrad_tanh_rrule": {"source": f"{MYGRAD} src/mygrad/math/hyperbolic_trig/ops.py"},
    "mygrad_arccsch_rrule": {"source": f"{MYGRAD} src/mygrad/math/hyperbolic_trig/ops.py"},
    "mygrad_abs_rrule": {"source": f"{MYGRAD} src/mygrad/math/misc/ops.py"},
    "mygrad_cbrt_rrule": {"source": f"{MYGRAD} src/mygrad/math/misc/ops.py"},
    "mygrad_maximum_ties_rrule": {"source": f"{MYGRAD} src/mygrad/math/misc/ops.py"},
    "mygrad_matmul_vec_stack_rrule": {"source": f"{MYGRAD} src/mygrad/math/misc/ops.py"},
    "mygrad_max_axes_keepdims_rrule": {"source": f"{MYGRAD} src/mygrad/math/sequential/ops.py"},
    "mygrad_sum_axes_rrule": {"source": f"{MYGRAD} src/mygrad/math/sequential/ops.py"},
    "mygrad_mean_keepdims_rrule": {"source": f"{MYGRAD} src/mygrad/math/sequential/ops.py"},
    "mygrad_prod_zeros_rrule": {"source": f"{MYGRAD} src/mygrad/math/sequential/ops.py"},
    "mygrad_cumprod_zeros_rrule": {"source": f"{MYGRAD} src/mygrad/math/sequential/ops.py"},
    "mygrad_cumsum_axis0_rrule": {"source": f"{MYGRAD} src/mygrad/math/sequential/ops.py"},
    "mygrad_var_all_ddof_rrule": {"source": f"{MYGRAD} src/mygrad/math/sequential/ops.py"},
    "mygrad_std_axes_rrule": {"source": f"{MYGRAD} src/mygrad/math/sequential/ops.py"},
    "mygrad_softmax_axis0_rrule": {"source": f"{MYGRAD} src/mygrad/nnet/activations/softmax.py"},
    "mygrad_logsoftmax_rrule": {"source": f"{MYGRAD} src/mygrad/nnet/activations/softmax.py"},
    "mygrad_sigmoid_rrule": {"source": f"{MYGRAD} src/mygrad/nnet/activations/sigmoid.py"},
    "mygrad_elu_rrule": {"source": f"{MYGRAD} src/mygrad/nnet/activations/elu.py"},
    "mygrad_selu_rrule": {"source": f"{MYGRAD} src/mygrad/nnet/activations/selu.py"},
    "mygrad_softmax_crossentropy_rrule": {"source": f"{MYGRAD} src/mygrad/nnet/losses/softmax_crossentropy.py"},
    "mygrad_multiclass_hinge_rrule": {"source": f"{MYGRAD} src/mygrad/nnet/losses/multiclass_hinge.py"},
    "mygrad_margin_ranking_rrule": {"source": f"{MYGRAD} src/mygrad/nnet/losses/margin_ranking_loss.py"},
    "mygrad_focal_loss_rrule": {"source": f"{MYGRAD} src/mygrad/nnet/losses/focal_loss.py"},
    "mygrad_batchnorm_rrule": {"source": f"{MYGRAD} src/mygrad/nnet/layers/batchnorm.py"},
    "mygrad_max_pool_overlap_rrule": {"source": f"{MYGRAD} src/mygrad/nnet/layers/pooling.py"},
    "mygrad_conv2d_rrule": {"source": f"{MYGRAD} src/mygrad/nnet/layers/conv.py"},
    "mygrad_einsum_diag_rrule": {"source": f"{MYGRAD} src/mygrad/linalg/ops.py"},
    "mygrad_einsum_uncontracted_rrule": {"source": f"{MYGRAD} src/mygrad/linalg/ops.py"},
    "mygrad_norm3_axis_rrule": {"source": f"{MYGRAD} src/mygrad/linalg/ops.py"},
    "mygrad_getitem_repeated_rrule": {"source": f"{MYGRAD} src/mygrad/_tensor_core_ops/indexing.py"},
    "mygrad_setitem_repeated_rrule": {"source": f"{MYGRAD} src/mygrad/_tensor_core_ops/indexing.py"},
    "mygrad_repeat_list_rrule": {"source": f"{MYGRAD} src/mygrad/tensor_manip/tiling/ops.py"},
    "mygrad_repeat_flat_rrule": {"source": f"{MYGRAD} src/mygrad/tensor_manip/tiling/ops.py"},
}

UPSTREAM_FLAWS = {
    "mygrad_sinc_rrule": (
        {"GG201"},
        "MyGrad's sinc backward (pi x cos(pi x) - sin(pi x)) / (pi x)**2 cancels for small x (it special-cases "
        "only |x| < 1e-162): at x = 2**-24 it gives 6.38283e-07 times the cotangent where mpmath gives "
        "6.35848092949e-07, a relative error of 3.8e-3",
    ),
    "mygrad_maximum_ties_rrule": (
        {"GG201", "GG203", "GG501"},
        "MyGrad's maximum gives neither argument the cotangent at a tie (pinned by its tests as intended): (0, 0) is "
        "no subgradient (along (1, 1) both one-sided derivatives of maximum(a, b) are 1): MyGrad's own "
        "sum(maximum(x, x)) gets gradient 0 where it is 1; JAX splits a tie 0.5 / 0.5",
    ),
    "mygrad_cumprod_zeros_rrule": (
        {"GG201", "GG202", "GG203"},
        "MyGrad's cumprod backward divides the reversed cumulative sum of g * cumprod(x) by x: where x is "
        "subnormal the product rounds (row [2.638381, -4.94e-324, 0, 0]: 3.0 for the second entry where the "
        "derivative of the row's sum is 2.63838, JAX's reference and finite differences of the primal agreeing), "
        "which also makes it non-linear in the cotangent there",
        {5},  # the seeds of the ten-seed run where it showed (none of the default two)
    ),
}
