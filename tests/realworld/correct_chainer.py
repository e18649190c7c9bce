"""Real-world corpus: Chainer's NumPy backward formulas, translated to rrules.

Source: https://github.com/chainer/chainer at commit a8e15cbe55a90854a3918b8b5a976abbbff9ec94 (paths under
``chainer/functions/``). Each primal is the NumPy forward of Chainer's CPU path; each pullback is the
backward of the same FunctionNode (its ``*Grad.forward_cpu`` where the backward is a separate node), with
Chainer's ``chainer.functions`` calls written as the equivalent NumPy expressions, in the same order and with
the same eps, masks and special cases. A comment above each rule names the file and lines and quotes the
formula. Specs are each function's real domain (``chainer_inv_rrule`` draws the matrices NumPy can invert).
The translation was checked against Chainer's own code (its source run with NumPy 2) on 3 random inputs per
rule: every value and gradient equal, all but one to the bit (one at 5.6e-17).

``LABELS`` maps each rule to its source; ``UPSTREAM_FLAWS`` lists the error findings that are real flaws of
Chainer's rules, with evidence in INDEX.md. ``chainer_fmod_rrule`` drew false errors at tiny divisors, where fmod's
pieces are finer than every finite-difference step, until the thirteenth pass (INDEX.md).
"""

import math

import numpy as np
from hypothesis import strategies as st
from scipy import special

from gradguard import arrays, constant, rrule

CHAINER = "chainer/chainer@a8e15cbe55a90854a3918b8b5a976abbbff9ec94"


# ----- helpers: Chainer utilities written out ------------------------------------------------------------


def _sum_to(x, shape):  # chainer/utils/array.py:51-65 (also what F.sum_to computes)
    if x.shape == shape:
        return x
    ndim = len(shape)
    lead = x.ndim - ndim
    lead_axis = tuple(range(lead))
    axis = tuple([i + lead for i, sx in enumerate(shape) if sx == 1])
    y = x.sum(lead_axis + axis, keepdims=True)
    if lead > 0:
        y = y.squeeze(lead_axis)
    return y


def _sigmoid_np(x):  # chainer/functions/activation/sigmoid.py:22-25 (also swish.py:18-20)
    half = x.dtype.type(0.5)
    return np.tanh(x * half) * half + half


def _logsumexp_ls(x, axis):  # chainer/functions/activation/log_softmax.py:14-22
    m = x.max(axis=axis, keepdims=True)
    y = x - m
    np.exp(y, out=y)
    s = y.sum(axis=axis, keepdims=True)
    np.log(s, out=s)
    m += s
    return m


def _log_softmax_np(x, axis=1):  # log_softmax.py:25-33 (CPU path)
    log_z = _logsumexp_ls(x, axis)
    return x - log_z


def _flip(a, axis):
    return np.flip(a, axis)


# ===== math ================================================================================================


def exp_(x):
    return np.exp(x)


# math/exponential.py:34-36  ``y = self.get_retained_outputs()[0]; return y * gy[0],``
@rrule(exp_, arrays(shape=(2, 3), min_value=-700.0, max_value=700.0))
def chainer_exp_rrule(x):
    y = np.exp(x)
    return y, lambda gy: (y * gy,)


def log_(x):
    return np.log(x)


# math/exponential.py:72-74  ``return utils.force_array(gy[0] / x),``
@rrule(log_, arrays(shape=(2, 3), min_value=1e-300, max_value=1e300))
def chainer_log_rrule(x):
    return np.log(x), lambda gy: (np.asarray(gy / x),)


def sqrt_(x):
    return np.sqrt(x, dtype=x.dtype)


# math/sqrt.py:29-32  ``gx = self.get_retained_outputs()[0]; return gy / (gx * 2.0),``
@rrule(sqrt_, arrays(shape=(2, 3), min_value=0.0, max_value=1e6))
def chainer_sqrt_rrule(x):
    y = np.sqrt(x, dtype=x.dtype)
    return y, lambda gy: (gy / (y * 2.0),)


def rsqrt_(x):
    return 1.0 / np.sqrt(x, dtype=x.dtype)


# math/sqrt.py:90-91 (CPU path) ``return 1.0 / sqrt(x)``: DivFromConstant (basic_math.py:553-557
# ``-value * gy / (x ** 2)`` with x the sqrt output) followed by Sqrt.backward (sqrt.py:32 ``gy / (gx * 2.0)``)
@rrule(rsqrt_, arrays(shape=(2, 3), min_value=1e-300, max_value=1e300))
def chainer_rsqrt_rrule(x):
    s = np.sqrt(x, dtype=x.dtype)
    y = np.asarray(1.0 / s)

    def pullback(gy):
        gs = np.asarray(-1.0 * gy / (s ** 2))
        return (gs / (s * 2.0),)

    return y, pullback


def erf_(x):
    return np.asarray(special.erf(x), dtype=x.dtype)


# math/erf.py:49-51  ``return 2 / numpy.pi ** 0.5 * chainer.functions.exp(-x ** 2) * gy[0],``
@rrule(erf_, arrays(shape=(2, 3), min_value=-30.0, max_value=30.0))
def chainer_erf_rrule(x):
    y = np.asarray(special.erf(x), dtype=x.dtype)
    return y, lambda gy: (2 / np.pi ** 0.5 * np.exp(-x ** 2) * gy,)


def erfinv_(x):
    return np.asarray(special.erfinv(x), dtype=x.dtype)


BACKWORDC = math.pi ** 0.5 / 2  # math/erfinv.py:16


# math/erfinv.py:45-47  ``return BACKWORDC * chainer.functions.exp(y ** 2) * gy[0],``
@rrule(erfinv_, arrays(shape=(2, 3), min_value=float(np.nextafter(-1.0, 0.0)), max_value=float(np.nextafter(1.0, 0.0))))
def chainer_erfinv_rrule(x):
    y = np.asarray(special.erfinv(x), dtype=x.dtype)
    return y, lambda gy: (BACKWORDC * np.exp(y ** 2) * gy,)


def log_ndtr_(x):
    return np.asarray(special.log_ndtr(x), dtype=x.dtype)


# math/log_ndtr.py:50-52  ``return (2 / numpy.pi) ** 0.5 / erfcx.erfcx(- x / 2 ** 0.5) * gy[0],``
@rrule(log_ndtr_, arrays(shape=(2, 3), min_value=-1e3, max_value=40.0))
def chainer_log_ndtr_rrule(x):
    y = np.asarray(special.log_ndtr(x), dtype=x.dtype)
    return y, lambda gy: ((2 / np.pi) ** 0.5 / special.erfcx(- x / 2 ** 0.5) * gy,)


def ndtri_(x):
    return np.asarray(special.ndtri(x), dtype=x.dtype)


# math/ndtri.py:42-45  ``sqrt_2pi = (2 * math.pi) ** 0.5; return sqrt_2pi * chainer.functions.exp(0.5 * y ** 2) * gy[0],``
@rrule(ndtri_, arrays(shape=(2, 3), min_value=float(np.finfo(np.float64).tiny), max_value=float(np.nextafter(1.0, 0.0))))
def chainer_ndtri_rrule(x):
    y = np.asarray(special.ndtri(x), dtype=x.dtype)
    sqrt_2pi = (2 * math.pi) ** 0.5
    return y, lambda gy: (sqrt_2pi * np.exp(0.5 * y ** 2) * gy,)


def digamma_(x):
    return np.asarray(special.digamma(x), dtype=x.dtype)


# math/digamma.py:39-42  ``return chainer.functions.polygamma(xp.array(1), z) * gy[0],``
@rrule(digamma_, arrays(shape=(2, 3), min_value=-10.0, max_value=10.0))
def chainer_digamma_rrule(x):
    y = np.asarray(special.digamma(x), dtype=x.dtype)
    return y, lambda gy: (np.asarray(special.polygamma(np.array(1), x), dtype=x.dtype) * gy,)


def lgamma_(x):
    return np.asarray(special.gammaln(x), dtype=x.dtype)


# math/lgamma.py:37-39  ``return chainer.functions.digamma(z) * gy[0],``
@rrule(lgamma_, arrays(shape=(2, 3), min_value=-10.0, max_value=10.0))
def chainer_lgamma_rrule(x):
    y = np.asarray(special.gammaln(x), dtype=x.dtype)
    return y, lambda gy: (np.asarray(special.digamma(x), dtype=x.dtype) * gy,)


def polygamma_(n, x):
    return np.asarray(special.polygamma(n, x), dtype=x.dtype)


# math/polygamma.py:44-46  ``return None, polygamma(n + 1, x) * gy[0],``
@rrule(polygamma_, constant(np.array(1)), arrays(shape=(2, 3), min_value=-10.0, max_value=10.0))
def chainer_polygamma_rrule(n, x):
    y = np.asarray(special.polygamma(n, x), dtype=x.dtype)
    return y, lambda gy: (None, np.asarray(special.polygamma(n + 1, x), dtype=x.dtype) * gy)


def arctanh_(x):
    return np.arctanh(x)


# math/arctanh.py:24-28  ``gx = 1. / (1 - x ** 2) * gy``
@rrule(arctanh_, arrays(shape=(2, 3), min_value=float(np.nextafter(-1.0, 0.0)), max_value=float(np.nextafter(1.0, 0.0))))
def chainer_arctanh_rrule(x):
    return np.arctanh(x), lambda gy: (1. / (1 - x ** 2) * gy,)


def log1p_(x):
    return np.log1p(x)


# math/logarithm_1p.py:27-29  ``return gy[0] / (x[0] + 1.0),``
@rrule(log1p_, arrays(shape=(2, 3), min_value=float(np.nextafter(-1.0, 0.0)), max_value=1e6))
def chainer_log1p_rrule(x):
    return np.log1p(x), lambda gy: (gy / (x + 1.0),)


def powvv_(x0, x1):
    return x0 ** x1


# math/basic_math.py:655-664 (PowVarVarGrad.forward_cpu)
# ``gx0 = utils.sum_to(utils.force_array(x1 * (x0 ** (x1 - one)) * gy), x0.shape)``
# ``gx1 = utils.sum_to(utils.force_array(numpy.log(x0) * self.y * gy), x1.shape)``
@rrule(powvv_, arrays(shape=(2, 3), min_value=1e-6, max_value=10.0), arrays(shape=(2, 3), min_value=-10.0, max_value=10.0))
def chainer_pow_rrule(x0, x1):
    y = x0 ** x1

    def pullback(gy):
        one = x1.dtype.type(1)
        gx0 = _sum_to(np.asarray(x1 * (x0 ** (x1 - one)) * gy), x0.shape)
        gx1 = _sum_to(np.asarray(np.log(x0) * y * gy), x1.shape)
        return gx0, gx1

    return np.asarray(y), pullback


def absolute_(x):
    return abs(x)


# math/basic_math.py:119-137  ``return utils.force_array(numpy.sign(self.x) * inputs[0]),``
@rrule(absolute_, arrays(shape=(2, 3)))
def chainer_absolute_rrule(x):
    return abs(x), lambda gy: (np.asarray(np.sign(x) * gy),)


def fmod_(x, divisor):
    return np.fmod(x, divisor)


# math/fmod.py:28-32  ``return gw, - chainer.functions.fix(x / divisor) * gw``
@rrule(fmod_, arrays(shape=(2, 3)),
       arrays(shape=(2, 3), elements=st.floats(-10.0, 10.0, allow_nan=False).filter(lambda v: v != 0)))
def chainer_fmod_rrule(x, divisor):
    return np.fmod(x, divisor), lambda gw: (gw, - np.fix(x / divisor) * gw)


def cumsum_(x, axis=None):
    return np.cumsum(x, axis=axis)


# math/cumsum.py:34-43  ``gx = flip.flip(cumsum(flip.flip(gy, axis), axis), axis)``
@rrule(cumsum_, arrays(shape=(2, 4)), kwargs={"axis": 1})
def chainer_cumsum_rrule(x, axis=None):
    y = np.cumsum(x, axis=axis)

    def pullback(gy):
        if axis is not None:
            gx = _flip(np.cumsum(_flip(gy, axis), axis), axis)
        else:
            gx = _flip(np.cumsum(_flip(gy, 0), 0), 0)
            gx = gx.reshape(x.shape)
        return (gx,)

    return y, pullback


def _cumprodsum_fwd(xmul, xadd, axis):  # math/cumprod.py:67-84 (Cumprodsum.forward)
    y = np.empty_like(xadd)
    expander = (slice(None),) * axis
    cum = np.zeros_like(xadd[expander + (0,)])
    i = 0
    while True:
        ix = expander + (i,)
        cum += xadd[ix]
        y[ix] = cum
        if i >= xmul.shape[axis]:
            break
        cum *= xmul[ix]
        i += 1
    return y


def _flipcumprodsum(xmul, xadd, axis):  # math/cumprod.py:99-101
    z = _cumprodsum_fwd(_flip(xmul, axis), _flip(xadd, axis), axis)
    return _flip(z, axis)


def cumprod_(x, axis=None):
    return np.cumprod(x, axis=axis)


# math/cumprod.py:33-61 (Cumprod.backward)
# ``_, x = F.split_axis(x, (1,), axis); gx = _flipcumprodsum(x, gy, axis)``
# ``y, ylast = F.split_axis(y, (-1,), axis); gx *= F.concat([xp.ones_like(ylast.array), y], axis=axis)``
@rrule(cumprod_, arrays(shape=(2, 4)), kwargs={"axis": 1})
def chainer_cumprod_rrule(x, axis=None):
    y = np.cumprod(x, axis=axis)

    def pullback(gy):
        xx, yy, ax = x, y, axis
        if ax is None:
            shape = xx.shape
            ax = 0
            xx = xx.ravel()
        else:
            shape = None
            if ax < 0:
                ax += yy.ndim
        if yy.shape[ax] <= 1:
            gx = gy
        else:
            xs = np.split(xx, [1], axis=ax)[1]
            gx = _flipcumprodsum(xs, gy, ax)
            ys, ylast = np.split(yy, [yy.shape[ax] - 1], axis=ax)
            gx = gx * np.concatenate([np.ones_like(ylast), ys], axis=ax)
        if shape is not None:
            gx = gx.reshape(shape)
        return (gx,)

    return y, pullback


def prod_(x, axis=None, keepdims=False):
    return np.asarray(x.prod(axis=axis, keepdims=keepdims))


# math/prod.py:57-90 (Prod.backward)
# ``gx = shifted_cumprod(x) * F.flip(shifted_cumprod(F.flip(x, 0)), 0)`` ... ``gx = gx * gy``
@rrule(prod_, arrays(shape=(2, 4)), kwargs={"axis": 1})
def chainer_prod_rrule(x, axis=None, keepdims=False):
    y = np.asarray(x.prod(axis=axis, keepdims=keepdims))
    axis_t = None if axis is None else ((axis,) if isinstance(axis, int) else axis)

    def pullback(gy):
        xx = x
        if axis_t is None:
            axes = tuple(range(xx.ndim))
        else:
            axes = tuple([a if a >= 0 else a + xx.ndim for a in axis_t])
        if not keepdims:
            for a in sorted(axes):
                gy = np.expand_dims(gy, axis=a)
        axes_kept = tuple(a for a in range(xx.ndim) if a not in axes)
        n_reduced_elements = 1
        for a in axes:
            n_reduced_elements *= xx.shape[a]
        transpose_axes = axes + axes_kept
        xx = xx.transpose(transpose_axes)
        transposed_shape = xx.shape
        kept_shape = transposed_shape[len(axes):]
        xx = xx.reshape((n_reduced_elements,) + kept_shape)

        def shifted_cumprod(a):
            a = np.concatenate([np.ones((1,) + kept_shape, a.dtype), a], 0)
            a = np.split(a, [a.shape[0] - 1], 0)[0]
            return np.cumprod(a, 0)

        gx = shifted_cumprod(xx) * np.flip(shifted_cumprod(np.flip(xx, 0)), 0)
        gx = gx.reshape(transposed_shape)
        gx = gx.transpose(list(np.argsort(transpose_axes)))
        gx = gx * gy
        return (gx,)

    return y, pullback


def maximum_(x1, x2):
    return np.maximum(x1, x2)


# math/maximum.py:30-52  ``self.cond = x1 >= x2``
# ``gx1 = numpy.where(self.cond, gy, 0); gx2 = numpy.where(self.cond, 0, gy)``; ``utils.sum_to(gx1, x1_shape)``...
@rrule(maximum_, arrays(shape=(2, 3)), arrays(shape=(3,)))
def chainer_maximum_rrule(x1, x2):
    y = np.asarray(np.maximum(x1, x2))
    cond = x1 >= x2

    def pullback(gy):
        gx1 = np.asarray(np.where(cond, gy, gy.dtype.type(0)))
        gx2 = np.asarray(np.where(cond, gy.dtype.type(0), gy))
        return _sum_to(gx1, x1.shape), _sum_to(gx2, x2.shape)

    return y, pullback


def clip_(x, x_min, x_max):
    return np.asarray(np.clip(x, x_min, x_max), x.dtype)


# math/clip.py:46-61  ``self.cond *= (x_min <= x); self.cond *= (x <= x_max)``; ``gx = gy * self.cond``
@rrule(clip_, arrays(shape=(2, 3)), constant(-1.0), constant(2.0))
def chainer_clip_rrule(x, x_min, x_max):
    y = np.asarray(np.clip(x, x_min, x_max), x.dtype)
    cond = True
    if x_min is not None:
        cond *= (x_min <= x)
    if x_max is not None:
        cond *= (x <= x_max)
    return y, lambda gy: (np.asarray(gy * cond, gy.dtype), None, None)


def squared_error_(x0, x1):
    diff = x0 - x1
    return np.asarray(diff * diff, dtype=x0.dtype)


# loss/squared_error.py:24-28  ``gx = gy * 2 * (x0 - x1); return gx, -gx``
@rrule(squared_error_, arrays(shape=(2, 3)), arrays(shape=(2, 3)))
def chainer_squared_error_rrule(x0, x1):
    def pullback(gy):
        gx = gy * 2 * (x0 - x1)
        return gx, -gx

    return squared_error_(x0, x1), pullback


def matmul_(a, b):
    return np.matmul(a, b)


# math/matmul.py:143-183 (MatMul.backward, a batched matrix, b a vector):
# ``u, v = gy, b; u = expand_dims(u, -1); ga = cast(u * v, a.dtype)``;
# ``at = rollaxis(a, -1); gb = tensordot(at, gy, axes=gy.ndim)``
@rrule(matmul_, arrays(shape=(2, 3, 4)), arrays(shape=(4,)))
def chainer_matmul_vec_rrule(a, b):
    def pullback(gy):
        u, v = gy, b
        u = np.expand_dims(u, -1)
        v = np.expand_dims(v, -2) if v.ndim > 1 else v
        ga = (u * v).astype(a.dtype)
        at = np.rollaxis(a, a.ndim - 1)
        gb = np.tensordot(at, gy, axes=gy.ndim).astype(b.dtype)
        return ga, gb

    return np.matmul(a, b), pullback


# math/matmul.py:158-182 (both matrices, b broadcast over a's batch):
# ``ga, = MatMul(self.transc, not self.transb, self.transa, a.dtype).apply((gy, b)); ga = sum_to(ga, a.shape)``
# ``gb, = MatMul(not self.transa, self.transc, self.transb, b.dtype).apply((a, gy)); gb = sum_to(gb, b.shape)``
@rrule(matmul_, arrays(shape=(2, 3, 4)), arrays(shape=(4, 5)), name="chainer_batch_matmul_rrule")
def chainer_batch_matmul_rrule(a, b):
    def pullback(gy):
        ga = np.matmul(gy, b.swapaxes(-1, -2)).astype(a.dtype)
        ga = _sum_to(ga, a.shape)
        gb = np.matmul(a.swapaxes(-1, -2), gy).astype(b.dtype)
        gb = _sum_to(gb, b.shape)
        return ga, gb

    return np.matmul(a, b), pullback


def batch_det_(x):
    return np.linalg.det(x)


def _batch_inv(a):  # math/inv.py:BatchInv.forward_cpu
    try:
        return np.asarray(np.linalg.inv(a))
    except np.linalg.LinAlgError:
        raise ValueError('Input has singular matrices.')


# math/det.py:33-42  ``inv_x = batch_inv(transpose(x, (0, 2, 1)))``; ``grad = gy * detx * inv_x``
@rrule(batch_det_, arrays(shape=(2, 3, 3)))
def chainer_batch_det_rrule(x):
    detx = np.linalg.det(x)

    def pullback(gy):
        inv_x = _batch_inv(np.transpose(x, (0, 2, 1)))
        gyb = np.broadcast_to(gy[:, None, None], inv_x.shape)
        detb = np.broadcast_to(detx[:, None, None], inv_x.shape)
        return (gyb * detb * inv_x,)

    return detx, pullback


def inv_(a):
    return np.linalg.inv(a)


def _nonsingular(a):  # inv's domain: the matrices NumPy can invert (det != 0)
    try:
        np.linalg.inv(a)
        return True
    except np.linalg.LinAlgError:
        return False


# math/inv.py:81-86  ``invxT = transpose(invx); gx = matmul(matmul(- invxT, gy[0]), invxT)``
@rrule(inv_, arrays(shape=(3, 3)).filter(_nonsingular))
def chainer_inv_rrule(a):
    try:
        invx = np.asarray(np.linalg.inv(a))
    except np.linalg.LinAlgError:
        raise ValueError('Input has singular matrices.')

    def pullback(gy):
        invxT = invx.T
        return (np.matmul(np.matmul(- invxT, gy), invxT),)

    return invx, pullback


def linear_(x, W, b):
    return x.dot(W.T).astype(x.dtype, copy=False) + b


# connection/linear.py:139-150, 175, 225  ``gx = gy.dot(W)``; ``gW = gy.T.dot(x)``; ``gb = F.sum(gy, axis=0)``
@rrule(linear_, arrays(shape=(2, 3)), arrays(shape=(4, 3)), arrays(shape=(4,)))
def chainer_linear_rrule(x, W, b):
    def pullback(gy):
        gx = gy.dot(W).astype(gy.dtype, copy=False)
        gW = gy.T.dot(x).astype(W.dtype, copy=False)
        gb = gy.sum(axis=0)
        return gx, gW, gb

    return linear_(x, W, b), pullback


def sum_(x, axis=None, keepdims=False):
    return np.asarray(x.sum(axis=axis, keepdims=keepdims))


# math/sum.py:57-70  ``shape.insert(axis, 1) ... gy = reshape(gy, shape)``; ``broadcast_to(gy, self.inputs[0].shape)``
@rrule(sum_, arrays(shape=(2, 3, 4)), kwargs={"axis": (0, 2)})
def chainer_sum_rrule(x, axis=None, keepdims=False):
    axis_t = None if axis is None else ((axis,) if isinstance(axis, int) else axis)

    def pullback(gy):
        ndim = x.ndim
        if not (ndim == 0 or axis_t is None or keepdims):
            actual_axis = [a if a >= 0 else a + ndim for a in axis_t]
            shape = list(gy.shape)
            for a in sorted(actual_axis):
                shape.insert(a, 1)
            gy = np.reshape(gy, shape)
        return (np.broadcast_to(gy, x.shape),)

    return np.asarray(x.sum(axis=axis, keepdims=keepdims)), pullback


def average_(x, weights, axis=None, keepdims=False):
    axis_t = (axis + x.ndim if axis < 0 else axis,) if axis is not None else None
    divider = np.sum(weights)
    if axis_t is not None:
        w_shape = [d if i in axis_t else 1 for i, d in enumerate(x.shape)]
        weights = np.broadcast_to(np.reshape(weights, w_shape), x.shape)
    xw = x * weights
    x_sum = np.asarray(xw.sum(axis=axis_t, keepdims=keepdims))
    divider = np.broadcast_to(divider, x_sum.shape)
    return x_sum / divider


# math/average.py:123-133 (weighted: a composite of Chainer nodes)
# ``divider = sum(weights); weights = broadcast_to(reshape(weights, w_shape), x.shape); x = x * weights;``
# ``x_sum = sum(x, axis, keepdims); divider = broadcast_to(divider, x_sum.shape); return x_sum / divider``
# backward = the chain of each node's backward: DivGrad (basic_math.py:456-458 ``gx0 = gy / x1;
# gx1 = -gx0 * x0 / x1``), BroadcastTo (sum_to), Sum (broadcast), Mul (``gy * other``), Reshape.
@rrule(average_, arrays(shape=(2, 4)), arrays(shape=(4,), min_value=0.0, max_value=10.0).filter(lambda w: w.sum() > 0),
       kwargs={"axis": 1})
def chainer_average_rrule(x, weights, axis=None, keepdims=False):
    axis_t = (axis + x.ndim if axis < 0 else axis,) if axis is not None else None
    divider = np.sum(weights)
    w_shape = [d if i in axis_t else 1 for i, d in enumerate(x.shape)]
    wb = np.broadcast_to(np.reshape(weights, w_shape), x.shape)
    xw = x * wb
    x_sum = xw.sum(axis=axis_t, keepdims=keepdims)
    div_b = np.broadcast_to(divider, x_sum.shape)
    y = x_sum / div_b

    def pullback(gy):
        g_xsum = gy / div_b                      # DivGrad gx0
        g_divb = -g_xsum * x_sum / div_b         # DivGrad gx1
        g_div = _sum_to(g_divb, ())  # BroadcastTo.backward
        # Sum.backward
        shape = list(g_xsum.shape)
        if not keepdims:
            for a in sorted(axis_t):
                shape.insert(a, 1)
        g_xw = np.broadcast_to(np.reshape(g_xsum, shape), x.shape)
        gx = g_xw * wb                           # Mul.backward
        g_wb = g_xw * x
        g_w = _sum_to(g_wb, tuple(w_shape)).reshape(weights.shape)  # BroadcastTo, Reshape .backward
        g_w = g_w + np.broadcast_to(g_div, weights.shape)         # Sum(weights).backward, accumulated
        return gx, g_w

    return y, pullback


def max_(x, axis=None, keepdims=False):
    return np.asarray(np.amax(x, axis=axis, keepdims=keepdims))


# math/minmax.py:54-72 (SelectorBase.backward)  ``cond = (x.data == y.data)``; ``return gy * cond,``
@rrule(max_, arrays(shape=(2, 4)), kwargs={"axis": 1})
def chainer_max_rrule(x, axis=None, keepdims=False):
    y = np.asarray(np.amax(x, axis=axis, keepdims=keepdims))

    def pullback(gy):
        ax = range(x.ndim) if axis is None else [a % x.ndim for a in ((axis,) if isinstance(axis, int) else axis)]
        shape = [s if a not in ax else 1 for a, s in enumerate(x.shape)]
        gy = gy.reshape(shape)
        yy = y.reshape(shape)
        cond = (x == yy)
        gy = np.broadcast_to(gy, cond.shape)
        return (gy * cond,)

    return y, pullback


# ===== array ================================================================================================


def broadcast_to_(x, shape):
    return np.broadcast_to(x, shape)


# array/broadcast.py:100-105  ``return chainer.functions.sum_to(gx, x_node.shape),``
@rrule(broadcast_to_, arrays(shape=(3, 1)), constant((2, 3, 4)))
def chainer_broadcast_to_rrule(x, shape):
    return np.broadcast_to(x, shape), lambda gy: (_sum_to(gy, x.shape), None)


def tile_(x, reps):
    return np.tile(x, reps)


# array/tile.py:37-63  ``new_shape.append(reps[i]); new_shape.append(shape[i])``;
# ``reps_axis = tuple(range(0, 2 * gy.ndim, 2)); gy = sum(gy.reshape(new_shape), axis=reps_axis)``
@rrule(tile_, arrays(shape=(2, 3)), constant((2, 1, 2)))
def chainer_tile_rrule(x, reps):
    def pullback(gy):
        rp = reps
        shape = tuple(x.shape)
        ndim = len(shape)
        if ndim > len(rp):
            rp = (1,) * (ndim - len(rp)) + rp
        elif ndim < len(rp):
            shape = (1,) * (len(rp) - ndim) + shape
        new_shape = []
        for i in range(gy.ndim):
            new_shape.append(rp[i])
            new_shape.append(shape[i])
        new_shape = tuple(new_shape)
        reps_axis = tuple(range(0, 2 * gy.ndim, 2))
        g = gy.reshape(new_shape).sum(axis=reps_axis)
        if ndim < len(rp):
            return g.reshape(x.shape), None
        return g, None

    return np.tile(x, reps), pullback


def repeat_(x, repeats, axis=None):
    return np.repeat(x, repeats[0] if len(repeats) == 1 else repeats, axis)


# array/repeat.py:66-108 (RepeatGrad.forward)
# ``gx[tuple(dst)] = gy[tuple(src)].sum(axis=axis, keepdims=True)`` over ``src[-1] = slice(pos, pos + r)``
@rrule(repeat_, arrays(shape=(2, 3)), constant((1, 0, 2)), kwargs={"axis": 1})
def chainer_repeat_rrule(x, repeats, axis=None):
    y = repeat_(x, repeats, axis)

    def pullback(gy):
        ax = axis + x.ndim if (axis is not None and axis < 0) else axis
        shape = list(x.shape)
        dtype = x.dtype
        if len(gy) == 0:
            return np.zeros(shape, dtype), None
        rp = repeats
        if len(rp) == 1:
            rp = int(rp[0])
            if ax is None:
                gx = gy.reshape(-1, rp).sum(axis=1).reshape(shape)
            else:
                shape[ax:ax + 1] = [-1, rp]
                gx = gy.reshape(shape).sum(axis=ax + 1)
            return gx, None
        if ax is None:
            pos = 0
            gx = np.zeros(int(np.prod(shape)), dtype)
            for (i, r) in enumerate(rp):
                gx[i] = np.sum(gy[pos:pos + r])
                pos += r
            gx = gx.reshape(shape)
        else:
            gx = np.zeros(shape, dtype)
            pos = 0
            src = [slice(None)] * ax + [None]
            dst = [slice(None)] * ax + [None]
            for (i, r) in enumerate(rp):
                src[-1] = slice(pos, pos + r)
                dst[-1] = slice(i, i + 1)
                gx[tuple(dst)] = gy[tuple(src)].sum(axis=ax, keepdims=True)
                pos += r
        return gx, None

    return y, pullback


def transpose_(x, axes):
    return x.transpose(axes)


# array/transpose.py:29-33  ``inv_axes = tuple(numpy.argsort([ax % axes_len for ax in inv_axes]))``
@rrule(transpose_, arrays(shape=(2, 3, 4)), constant((2, 0, -2)))
def chainer_transpose_rrule(x, axes):
    def pullback(gy):
        inv_axes = axes
        if inv_axes:
            axes_len = len(inv_axes)
            inv_axes = tuple(np.argsort([ax % axes_len for ax in inv_axes]))
        return gy.transpose(inv_axes), None

    return x.transpose(axes), pullback


def flip_(x, axis):
    return np.flip(x, axis)


# array/flip.py:39-40  ``return flip(grad_outputs[0], self.axis),``
@rrule(flip_, arrays(shape=(2, 3)), constant(-1))
def chainer_flip_rrule(x, axis):
    return np.flip(x, axis), lambda gy: (np.flip(gy, axis), None)


def where_(condition, x, y):
    return np.where(condition, x, y)


# array/where.py:38-50  ``gx, = Where(condition).apply((g, zero)); sum_to(gx, x.shape)``;
# ``gy, = Where(condition).apply((zero, g)); sum_to(gy, y.shape)``
@rrule(where_, constant(np.array([[True, False, True], [False, False, True]])), arrays(shape=(2, 3)), arrays(shape=(3,)))
def chainer_where_rrule(condition, x, y):
    def pullback(g):
        zero = np.zeros((), dtype=g.dtype)
        gx = np.where(condition, g, zero)
        gy = np.where(condition, zero, g)
        return None, _sum_to(gx, x.shape), _sum_to(gy, y.shape)

    return np.where(condition, x, y), pullback


# ===== activation ============================================================================================


def sigmoid_(x):
    return np.asarray(_sigmoid_np(x))


# activation/sigmoid.py:68-72 (SigmoidGrad.forward_cpu)  ``gy * y * (one - y)``
@rrule(sigmoid_, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0))
def chainer_sigmoid_rrule(x):
    y = np.asarray(_sigmoid_np(x))

    def pullback(gy):
        one = y.dtype.type(1)
        return (np.asarray(gy * y * (one - y)),)

    return y, pullback


def softplus_(x, beta=1.0):
    bx = beta * x
    y = (np.fmax(bx, 0) + np.log1p(np.exp(-np.fabs(bx)))) * (1.0 / beta)
    return np.asarray(y, x.dtype)


# activation/softplus.py:65-69 (SoftplusGrad.forward_cpu)  ``gx = (1 - 1 / (1 + numpy.exp(self.beta * x))) * gy``
@rrule(softplus_, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0), kwargs={"beta": 2.0})
def chainer_softplus_rrule(x, beta=1.0):
    beta = float(beta)
    return softplus_(x, beta), lambda gy: (np.asarray((1 - 1 / (1 + np.exp(beta * x))) * gy, x.dtype),)


def _elu_fwd(x, alpha):  # activation/elu.py:22-30
    y = x.copy()
    negzero_indices = y <= 0
    y[negzero_indices] = alpha * np.expm1(y[negzero_indices])
    return y


def _elu_grad(y, alpha, cond):  # activation/elu.py:61-65 (ELUGrad.forward_cpu)
    gx = np.asarray(y + y.dtype.type(alpha))
    gx[cond > 0] = 1
    return gx


def elu_(x, alpha=1.0):
    return _elu_fwd(x, float(alpha))


# activation/elu.py:43-50, 61-65  ``cond = y`` (alpha >= 0); ``gx = y + alpha; gx[cond > 0] = 1``; ``... * gy``
@rrule(elu_, arrays(shape=(2, 3), min_value=-50.0, max_value=10.0), kwargs={"alpha": 0.5})
def chainer_elu_rrule(x, alpha=1.0):
    alpha = float(alpha)
    y = _elu_fwd(x, alpha)
    cond = x if alpha < 0 else y
    return y, lambda gy: (_elu_grad(y, alpha, cond) * gy,)


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def selu_(x):
    return SELU_SCALE * _elu_fwd(x, SELU_ALPHA)


# activation/selu.py:30  ``return scale * elu.elu(x, alpha=alpha)``: MulConstant.backward (basic_math.py:399-401
# ``self.value * g``) then ELU.backward (elu.py:43-50, 61-65)
@rrule(selu_, arrays(shape=(2, 3), min_value=-50.0, max_value=10.0))
def chainer_selu_rrule(x):
    y_elu = _elu_fwd(x, SELU_ALPHA)
    return SELU_SCALE * y_elu, lambda gy: (_elu_grad(y_elu, SELU_ALPHA, y_elu) * (SELU_SCALE * gy),)


def swish_(x, beta):
    b = beta.reshape((1,) + beta.shape + (1,) * (x.ndim - beta.ndim - 1))
    return x * _sigmoid_np(b * x)


# activation/swish.py:86-99 (SwishGrad.forward_cpu)
# ``sig = _sigmoid(beta * x); y = x * sig; by = beta * y; gx = gy * (by + sig * (one - by)); gb = gy * y * (x - y)``
@rrule(swish_, arrays(shape=(2, 3)), arrays(shape=(3,)))
def chainer_swish_rrule(x, beta):
    extended_shape = (1,) + beta.shape + (1,) * (x.ndim - beta.ndim - 1)
    reduction_axes = (0,) + tuple(range(1 + beta.ndim, x.ndim))

    def pullback(gy):
        b = beta.reshape(extended_shape)
        sig = _sigmoid_np(b * x)
        y = x * sig
        by = b * y
        one = x.dtype.type(1)
        gx = gy * (by + sig * (one - by))
        gb = gy * y * (x - y)
        gb = np.asarray(gb.sum(axis=reduction_axes))
        return gx, gb

    return swish_(x, beta), pullback


def log_softmax_(x, axis=1):
    return _log_softmax_np(x, axis)


# activation/log_softmax.py:78-85 (LogSoftmaxGrad.forward)  ``gx = gy - xp.exp(y) * gy.sum(axis=self.axis, keepdims=True)``
@rrule(log_softmax_, arrays(shape=(2, 4), min_value=-100.0, max_value=100.0))
def chainer_log_softmax_rrule(x, axis=1):
    y = _log_softmax_np(x, axis)
    return y, lambda gy: (gy - np.exp(y) * gy.sum(axis=axis, keepdims=True),)


def softmax_(x, axis=1):
    y = x - x.max(axis=axis, keepdims=True)
    np.exp(y, out=y)
    y /= y.sum(axis=axis, keepdims=True)
    return y


# activation/softmax.py:52-63 (_SoftmaxGrad.forward)  ``gx = y * gy; sumdx = gx.sum(axis=self.axis, keepdims=True); gx -= y * sumdx``
@rrule(softmax_, arrays(shape=(2, 4), min_value=-100.0, max_value=100.0))
def chainer_softmax_rrule(x, axis=1):
    y = softmax_(x, axis)

    def pullback(gy):
        gx = y * gy
        sumdx = gx.sum(axis=axis, keepdims=True)
        gx -= y * sumdx
        return (gx,)

    return y, pullback


def logsumexp_(x, axis=None):
    axis_t = None if axis is None else ((axis,) if isinstance(axis, int) else axis)
    m = x.max(axis=axis_t, keepdims=True)
    y = np.asarray(x - m)
    np.exp(y, out=y)
    y_sum = y.sum(axis=axis_t)
    return np.asarray(np.log(y_sum) + m.reshape(y_sum.shape))


# math/logsumexp.py:57-75  ``gy = expand_dims(gy, axis); y = expand_dims(y, axis)``; ``gx = gy * exp(x - y)``
@rrule(logsumexp_, arrays(shape=(2, 4), min_value=-100.0, max_value=100.0), kwargs={"axis": 1})
def chainer_logsumexp_rrule(x, axis=None):
    y = logsumexp_(x, axis)
    axis_t = None if axis is None else ((axis,) if isinstance(axis, int) else axis)

    def pullback(gy):
        yy = y
        if axis_t is not None:
            actual_axis = [a + x.ndim if a < 0 else a for a in axis_t]
            for a in sorted(actual_axis):
                gy = np.expand_dims(gy, axis=a)
                yy = np.expand_dims(yy, axis=a)
        gy = np.broadcast_to(gy, x.shape)
        yy = np.broadcast_to(yy, x.shape)
        return (gy * np.exp(x - yy),)

    return y, pullback


# ===== loss =================================================================================================


def sigmoid_cross_entropy_(x, t):
    ignore_mask = (t != -1)
    loss = -(ignore_mask * (x * (t - (x >= 0)) - np.log1p(np.exp(-np.abs(x)))))
    count = np.maximum(1, ignore_mask.sum())
    return np.asarray(np.divide(np.sum(loss), count), dtype=x.dtype)


# loss/sigmoid_cross_entropy.py:41-92 (reduce='mean', normalize=True)
# ``y, = sigmoid.Sigmoid().forward((x,))``; ``gx = xp.divide(gy * self.ignore_mask * (y - self.t), self.count)``
@rrule(sigmoid_cross_entropy_, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0),
       constant(np.array([[0, 1, -1], [1, 1, 0]], dtype=np.int32)))
def chainer_sigmoid_cross_entropy_rrule(x, t):
    ignore_mask = (t != -1)
    count = np.maximum(1, ignore_mask.sum())

    def pullback(gy):
        y = _sigmoid_np(x)
        gx = np.divide(gy * ignore_mask * (y - t), count).astype(y.dtype)
        return gx, None

    return sigmoid_cross_entropy_(x, t), pullback


def softmax_cross_entropy_(x, t, class_weight):
    log_y = _log_softmax_np(x)
    shape = [1 if d != 1 else -1 for d in range(x.ndim)]
    log_y = log_y * np.broadcast_to(class_weight.reshape(shape), x.shape)
    log_yd = np.rollaxis(log_y, 1)
    log_yd = log_yd.reshape(len(log_yd), -1)
    t_valid = t != -1
    t = t * t_valid
    log_p = log_yd[t.ravel(), np.arange(t.size)]
    log_p = log_p * t_valid.ravel()
    count = t_valid.sum()
    coeff = 1.0 / max(count, 1)
    y = log_p.sum(keepdims=True, dtype=x.dtype)
    y = y * (-coeff)
    return y.astype(x.dtype, copy=False).reshape(())


# loss/softmax_cross_entropy.py:276-323 (_SoftmaxCrossEntropyGrad_NoDoubleBackprop.forward_cpu, 2-D x, class_weight)
# ``gx = y; gx[numpy.arange(len(t)), t] -= 1; c = c[numpy.arange(len(t)), t]; gx *= expand_dims(c, 1)``;
# ``gx *= t_valid.reshape((len(t), 1))``; ``gx *= gloss * self.coeff``
@rrule(softmax_cross_entropy_, arrays(shape=(3, 4), min_value=-100.0, max_value=100.0),
       constant(np.array([0, -1, 3], dtype=np.int32)), constant(np.array([1.0, 0.5, 2.0, 0.25])))
def chainer_softmax_cross_entropy_rrule(x, t, class_weight):
    out = softmax_cross_entropy_(x, t, class_weight)
    y_cache = np.exp(_log_softmax_np(x))
    t_valid = t != -1
    coeff = 1.0 / max(t_valid.sum(), 1)

    def pullback(gloss):
        y = y_cache.copy()
        tt = t * t_valid
        gx = y
        gx[np.arange(len(tt)), tt] -= 1
        shape = [1 if d != 1 else -1 for d in range(x.ndim)]
        c = np.broadcast_to(class_weight.reshape(shape), x.shape)
        c = c[np.arange(len(tt)), tt]
        gx *= np.broadcast_to(np.expand_dims(c, 1), gx.shape)
        gx *= t_valid.reshape((len(tt), 1))
        gx *= gloss * coeff
        return gx, None, None

    return out, pullback


def softmax_cross_entropy_nd_(x, t):
    log_y = _log_softmax_np(x)
    log_yd = np.rollaxis(log_y, 1)
    log_yd = log_yd.reshape(len(log_yd), -1)
    t_valid = t != -1
    t = t * t_valid
    log_p = log_yd[t.ravel(), np.arange(t.size)]
    log_p = log_p * t_valid.ravel()
    return -log_p.reshape(t.shape)


# loss/softmax_cross_entropy.py:298-322 (x.ndim > 2, reduce='no')
# ``gx = y.reshape(y.shape[0], y.shape[1], -1); gx[fst_index, t.ravel(), trd_index] -= 1``;
# ``gx *= t_valid.reshape((len(t), 1, -1)); gx = gx.reshape(y.shape)``; ``gx *= gloss[:, None]``
@rrule(softmax_cross_entropy_nd_, arrays(shape=(2, 3, 2), min_value=-100.0, max_value=100.0),
       constant(np.array([[2, -1], [0, 1]], dtype=np.int32)))
def chainer_softmax_cross_entropy_nd_rrule(x, t):
    out = softmax_cross_entropy_nd_(x, t)
    y_cache = np.exp(_log_softmax_np(x))

    def pullback(gloss):
        y = y_cache.copy()
        t_valid = t != -1
        tt = t * t_valid
        n_unit = tt.size // len(tt)
        gx = y.reshape(y.shape[0], y.shape[1], -1)
        fst_index = np.arange(tt.size) // n_unit
        trd_index = np.arange(tt.size) % n_unit
        gx[fst_index, tt.ravel(), trd_index] -= 1
        gx *= t_valid.reshape((len(tt), 1, -1))
        gx = gx.reshape(y.shape)
        gx *= gloss[:, None]
        return gx, None

    return out, pullback


def huber_loss_(x0, x1, delta):
    linear_part = np.asarray(x0 - x1, x0.dtype)
    d = x0.dtype.type(delta)
    np.abs(linear_part, out=linear_part)
    square_part = np.asarray(np.square(linear_part), x0.dtype)
    linear_part *= 2 * d
    linear_part -= d * d
    np.maximum(linear_part, d * d, out=linear_part)
    np.minimum(square_part, linear_part, out=square_part)
    y = square_part
    y *= 0.5
    return y.sum(axis=1)


# loss/huber_loss.py:50-60  ``gx = chainer.functions.clip(diff, -delta, delta)``; ``gy = expand_dims(gy, 1)``;
# ``gx = broadcast_to(gy, gx.shape) * gx; return gx, -gx``
@rrule(huber_loss_, arrays(shape=(2, 3)), arrays(shape=(2, 3)), constant(1.0))
def chainer_huber_loss_rrule(x0, x1, delta):
    def pullback(gy):
        diff = x0 - x1
        gx = np.clip(diff, -delta, delta)
        gy = np.expand_dims(gy, 1)
        gx = np.broadcast_to(gy, gx.shape) * gx
        return gx, -gx, None

    return huber_loss_(x0, x1, delta), pullback


def contrastive_(x0, x1, y, margin=1):
    diff = x0 - x1
    dist_sq = np.sum(diff ** 2, axis=1)
    dist = np.sqrt(dist_sq)
    mdist = margin - dist
    dist = np.maximum(mdist, 0)
    loss = (y * dist_sq + (1 - y) * dist * dist) * .5
    loss = np.sum(loss) / x0.shape[0]
    return np.array(loss, dtype=x0.dtype)


# loss/contrastive.py:56-86 (reduce='mean')  ``eps = 1e-7; dist = maximum(dist, eps)``;
# ``gx0 = alpha * y * diff``; ``mdist = maximum(repeat(margin - dist), 0)``; ``gx0 += alpha * (1 - y) * mdist * -(diff / dist)``
@rrule(contrastive_, arrays(shape=(3, 2)), arrays(shape=(3, 2)), constant(np.array([1, 0, 0], dtype=np.int32)))
def chainer_contrastive_rrule(x0, x1, y, margin=1):
    def pullback(gy):
        diff = x0 - x1
        dist_sq = np.sum(diff ** 2, axis=1)
        dist = np.sqrt(dist_sq)
        mdist = margin - dist
        x_dim = x0.shape[1]
        yy = np.repeat(y[:, None], x_dim, axis=1)
        alpha = gy / yy.shape[0]
        alpha = np.broadcast_to(alpha, yy.shape)
        distr = np.repeat(dist[:, None], x_dim, axis=1)
        eps = 5e-3 if distr.dtype == 'float16' else 1e-7
        distr = np.maximum(distr, np.full(distr.shape, eps, dtype=distr.dtype))
        gx0 = alpha * yy.astype(alpha.dtype) * diff
        d = np.repeat(mdist[:, None], x_dim, axis=1)
        md = np.maximum(d, np.zeros(shape=d.shape, dtype=d.dtype))
        gx0 = gx0 + alpha * (1 - yy) * md * -(diff / distr)
        gx0 = gx0.astype(x0.dtype)
        return gx0, -gx0, None

    return contrastive_(x0, x1, y, margin), pullback


# ===== normalization ========================================================================================


def _ln_compute(x, eps):  # normalization/layer_normalization.py:27-35
    mu = np.mean(x, axis=1, keepdims=True)
    x_mu = x - mu
    squ_x_mu = np.square(x_mu)
    var = np.mean(squ_x_mu, axis=1, keepdims=True)
    std = np.sqrt(var + eps)
    inv_std = 1. / std
    x_hat = x_mu * inv_std
    return x_mu, var, inv_std, x_hat


def layer_normalization_(x, gamma, beta, eps=1e-5):
    _, _, _, x_hat = _ln_compute(x, eps)
    return x_hat * gamma[None, ] + beta[None, ]


# normalization/layer_normalization.py:45-77  ``g_inv_std = F.sum(g_x_hat * x_mu, axis=1, keepdims=True)``;
# ``g_std = g_inv_std * (- 1. / (var + self.eps)); g_var = g_std * 0.5 * inv_std``; ... ``g_x = g_x_1 + g_x_2``
@rrule(layer_normalization_, arrays(shape=(2, 4)), arrays(shape=(4,)), arrays(shape=(4,)))
def chainer_layer_normalization_rrule(x, gamma, beta, eps=1e-5):
    def pullback(gy):
        x_mu, var, inv_std, x_hat = _ln_compute(x, eps)
        g_beta = np.sum(gy, axis=0)
        g_scaled_x = gy
        g_gamma = np.sum(g_scaled_x * x_hat, axis=0)
        g_x_hat = g_scaled_x * gamma
        g_inv_std = np.sum(g_x_hat * x_mu, axis=1, keepdims=True)
        g_x_mu_1 = g_x_hat * inv_std
        g_std = g_inv_std * (- 1. / (var + eps))
        g_var = g_std * 0.5 * inv_std
        n_units = x.shape[1]
        g_squ_x_mu = g_var * (1. / n_units)
        g_x_mu_2 = g_squ_x_mu * 2 * x_mu
        g_x_1 = g_x_mu_1 + g_x_mu_2
        g_mu = np.sum(g_x_1, axis=1, keepdims=True) * (- 1.)
        g_x_2 = g_mu * (1. / n_units)
        g_x = g_x_1 + g_x_2
        return g_x, g_gamma, g_beta

    return layer_normalization_(x, gamma, beta, eps), pullback


def _bn_stats(x, gamma, eps):  # normalization/batch_normalization.py:31-41, 91-94 (axis=(0,) for 2-D x)
    axis = (0,)
    mean = x.mean(axis=axis, dtype=x.dtype)
    var = x.var(axis=axis, dtype=x.dtype)
    inv_std = np.reciprocal(np.sqrt(var + eps, dtype=x.dtype))
    return axis, mean, var, inv_std


def batch_normalization_(x, gamma, beta, eps=2e-5):
    _, mean, _, inv_std = _bn_stats(x, gamma, eps)
    ex = (None, slice(None))
    x_hat = (x - mean[ex]) * inv_std[ex]
    y = x_hat * gamma[ex]
    y += beta[ex]
    return y.astype(x.dtype)


# normalization/batch_normalization.py:97-135 (GeneralBatchNormalizationImpl.backward, NumPy path)
# ``gbeta = gy.sum(axis); ggamma = (gy * x_hat).sum(axis); inv_m = 1. / (x.size // gamma.size)``;
# ``gx = (gamma * inv_std)[expander] * (gy - (x_hat * ggamma[expander] + gbeta[expander]) * inv_m)``
@rrule(batch_normalization_, arrays(shape=(4, 3)), arrays(shape=(3,)), arrays(shape=(3,)))
def chainer_batch_normalization_rrule(x, gamma, beta, eps=2e-5):
    axis, mean, var, inv_std = _bn_stats(x, gamma, eps)
    ex = (None, slice(None))

    def pullback(gy):
        x_mu = x - mean[ex]
        x_mu *= inv_std[ex]
        x_hat = x_mu
        gbeta = gy.sum(axis=axis, dtype=gamma.dtype)
        ggamma = (gy * x_hat).sum(axis=axis, dtype=gamma.dtype)
        inv_m = gamma.dtype.type(1. / (x.size // gamma.size))
        gx = (gamma * inv_std)[ex] * (gy - (x_hat * ggamma[ex] + gbeta[ex]) * inv_m)
        gx = gx.astype(dtype=x.dtype, copy=False)
        return gx, ggamma, gbeta

    return batch_normalization_(x, gamma, beta, eps), pullback


def normalize_(x, eps=1e-5, axis=1):
    norm = np.sqrt(np.sum(np.square(x), axis=axis, keepdims=True), dtype=x.dtype) + x.dtype.type(eps)
    return np.asarray(x / norm)


# normalization/l2_normalization.py:60-76  ``norm_noeps = sqrt(sum(square(x))); norm = norm_noeps + eps``;
# ``mask = norm_noeps.array != 0; x_gy_reduced = _SetItemZero(mask)(x_gy_reduced[mask] / norm_noeps[mask])``;
# ``gx = gy * norm - x_gy_reduced * x; gx = gx / norm ** 2``
@rrule(normalize_, arrays(shape=(2, 3)))
def chainer_normalize_rrule(x, eps=1e-5, axis=1):
    def pullback(gy):
        norm_noeps = np.sqrt(np.sum(np.square(x), axis=axis, keepdims=True))
        norm = norm_noeps + eps
        x_gy_reduced = np.sum((x * gy), axis=axis, keepdims=True)
        mask = norm_noeps != 0
        red = np.zeros(mask.shape, x.dtype)
        red[mask] = x_gy_reduced[mask] / norm_noeps[mask]
        gx = gy * norm - red * x
        gx = gx / norm ** 2
        return (gx,)

    return normalize_(x, eps, axis), pullback


LABELS = {
    "chainer_exp_rrule": {"source": f"{CHAINER} chainer/functions/math/exponential.py:34-36"},
    "chainer_log_rrule": {"source": f"{CHAINER} chainer/functions/math/exponential.py:72-74"},
    "chainer_sqrt_rrule": {"source": f"{CHAINER} chainer/functions/math/sqrt.py:29-32"},
    "chainer_rsqrt_rrule": {"source": f"{CHAINER} chainer/functions/math/sqrt.py:90-91"},
    "chainer_erf_rrule": {"source": f"{CHAINER} chainer/functions/math/erf.py:49-51"},
    "chainer_erfinv_rrule": {"source": f"{CHAINER} chainer/functions/math/erfinv.py:45-47"},
    "chainer_log_ndtr_rrule": {"source": f"{CHAINER} chainer/functions/math/log_ndtr.py:50-52"},
    "chainer_ndtri_rrule": {"source": f"{CHAINER} chainer/functions/math/ndtri.py:42-45"},
    "chainer_digamma_rrule": {"source": f"{CHAINER} chainer/functions/math/digamma.py:39-42"},
    "chainer_lgamma_rrule": {"source": f"{CHAINER} chainer/functions/math/lgamma.py:37-39"},
    "chainer_polygamma_rrule": {"source": f"{CHAINER} chainer/functions/math/polygamma.py:44-46"},
    "chainer_arctanh_rrule": {"source": f"{CHAINER} chainer/functions/math/arctanh.py:24-28"},
    "chainer_log1p_rrule": {"source": f"{CHAINER} chainer/functions/math/logarithm_1p.py:27-29"},
    "chainer_pow_rrule": {"source": f"{CHAINER} chainer/functions/math/basic_math.py:655-664"},
    "chainer_absolute_rrule": {"source": f"{CHAINER} chainer/functions/math/basic_math.py:119-137"},
    "chainer_fmod_rrule": {"source": f"{CHAINER} chainer/functions/math/fmod.py:28-32"},
    "chainer_cumsum_rrule": {"source": f"{CHAINER} chainer/functions/math/cumsum.py:34-43"},
    "chainer_cumprod_rrule": {"source": f"{CHAINER} chainer/functions/math/cumprod.py:33-61"},
    "chainer_prod_rrule": {"source": f"{CHAINER} chainer/functions/math/prod.py:57-90"},
    "chainer_maximum_rrule": {"source": f"{CHAINER} chainer/functions/math/maximum.py:30-52"},
    "chainer_clip_rrule": {"source": f"{CHAINER} chainer/functions/math/clip.py:46-61"},
    "chainer_squared_error_rrule": {"source": f"{CHAINER} chainer/functions/loss/squared_error.py:24-28"},
    "chainer_matmul_vec_rrule": {"source": f"{CHAINER} chainer/functions/math/matmul.py:143-183"},
    "chainer_batch_matmul_rrule": {"source": f"{CHAINER} chainer/functions/math/matmul.py:158-182"},
    "chainer_batch_det_rrule": {"source": f"{CHAINER} chainer/functions/math/det.py:33-42"},
    "chainer_inv_rrule": {"source": f"{CHAINER} chainer/functions/math/inv.py:81-86"},
    "chainer_linear_rrule": {"source": f"{CHAINER} chainer/functions/connection/linear.py:139-150"},
    "chainer_sum_rrule": {"source": f"{CHAINER} chainer/functions/math/sum.py:57-70"},
    "chainer_average_rrule": {"source": f"{CHAINER} chainer/functions/math/average.py:123-133"},
    "chainer_max_rrule": {"source": f"{CHAINER} chainer/functions/math/minmax.py:54-72"},
    "chainer_broadcast_to_rrule": {"source": f"{CHAINER} chainer/functions/array/broadcast.py:100-105"},
    "chainer_tile_rrule": {"source": f"{CHAINER} chainer/functions/array/tile.py:37-63"},
    "chainer_repeat_rrule": {"source": f"{CHAINER} chainer/functions/array/repeat.py:66-108"},
    "chainer_transpose_rrule": {"source": f"{CHAINER} chainer/functions/array/transpose.py:29-33"},
    "chainer_flip_rrule": {"source": f"{CHAINER} chainer/functions/array/flip.py:39-40"},
    "chainer_where_rrule": {"source": f"{CHAINER} chainer/functions/array/where.py:38-50"},
    "chainer_sigmoid_rrule": {"source": f"{CHAINER} chainer/functions/activation/sigmoid.py:68-72"},
    "chainer_softplus_rrule": {"source": f"{CHAINER} chainer/functions/activation/softplus.py:65-69"},
    "chainer_elu_rrule": {"source": f"{CHAINER} chainer/functions/activation/elu.py:43-50"},
    "chainer_selu_rrule": {"source": f"{CHAINER} chainer/functions/activation/selu.py:30"},
    "chainer_swish_rrule": {"source": f"{CHAINER} chainer/functions/activation/swish.py:86-99"},
    "chainer_log_softmax_rrule": {"source": f"{CHAINER} chainer/functions/activation/log_softmax.py:78-85"},
    "chainer_softmax_rrule": {"source": f"{CHAINER} chainer/functions/activation/softmax.py:52-63"},
    "chainer_logsumexp_rrule": {"source": f"{CHAINER} chainer/functions/math/logsumexp.py:57-75"},
    "chainer_sigmoid_cross_entropy_rrule": {"source": f"{CHAINER} chainer/functions/loss/sigmoid_cross_entropy.py:41-92"},
    "chainer_softmax_cross_entropy_rrule": {"source": f"{CHAINER} chainer/functions/loss/softmax_cross_entropy.py:276-323"},
    "chainer_softmax_cross_entropy_nd_rrule": {"source": f"{CHAINER} chainer/functions/loss/softmax_cross_entropy.py:298-322"},
    "chainer_huber_loss_rrule": {"source": f"{CHAINER} chainer/functions/loss/huber_loss.py:50-60"},
    "chainer_contrastive_rrule": {"source": f"{CHAINER} chainer/functions/loss/contrastive.py:56-86"},
    "chainer_layer_normalization_rrule": {"source": f"{CHAINER} chainer/functions/normalization/layer_normalization.py:45-77"},
    "chainer_batch_normalization_rrule": {"source": f"{CHAINER} chainer/functions/normalization/batch_normalization.py:97-135"},
    "chainer_normalize_rrule": {"source": f"{CHAINER} chainer/functions/normalization/l2_normalization.py:60-76"},
}

UPSTREAM_FLAWS = {
    "chainer_max_rrule": (
        {"GG201", "GG203"},
        "Chainer's max backward (SelectorBase: gy * (x == y)) gives the whole cotangent to every tied entry: at "
        "a row of zeros Chainer's own gradient is all ones, where along the check's positive direction the "
        "one-sided derivatives are 1.68399 and 3.66725 and the rule's answer is 10.7907",
    ),
    "chainer_batch_det_rrule": (
        {"GG103"},
        "Chainer's det backward inverts the matrix (gx = gy * det * inv(x).T): at a singular matrix it raises "
        "ValueError (Chainer's own F.batch_det(...).backward() too), where det's gradient is the cofactor "
        "matrix (0 at the zero matrix)",
    ),
}
