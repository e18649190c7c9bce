"""Real-world corpus: DeZero's NumPy backward formulas, translated to rrules.

Source: https://github.com/oreilly-japan/deep-learning-from-scratch-3 at commit
b5f3cf12a9e4ed84fc97b57bf41a25610d69c9e5 (files ``dezero/functions.py``, ``dezero/core.py``,
``dezero/utils.py``, ``dezero/functions_conv.py``). Each primal is the ``forward`` of DeZero's Function
(CPU path); each pullback is its ``backward``, with DeZero's differentiable functions on Variables written
as the equivalent NumPy expressions, in the same order and with the same masks and special cases. In-place
operators on Variables in DeZero (``gy *= 1/N``, ``gy /= (KW*KH)``, ``gx -= ...``) rebind a new Variable,
so they are written here as out-of-place NumPy (the cotangent is never mutated). A comment above each rule
names the file and lines and quotes the formula. Specs are each function's real domain. The translation was
checked against DeZero's own code (its package run from the repository) on 3 random inputs per rule, and on inputs
with ties and zeros: every value and gradient equal to the bit.

``LABELS`` maps each rule to its source; ``UPSTREAM_FLAWS`` lists the error findings that are real flaws of DeZero's
rules, with evidence in INDEX.md. ``dezero_sigmoid_cross_entropy_rrule`` drew a false GG201 and GG501 at every seed
until finite differences took the stairs of its rounded sigmoid into account (INDEX.md).
"""

import numpy as np

from gradguard import arrays, constant, rrule
from hypothesis import strategies as st

DEZERO = "oreilly-japan/deep-learning-from-scratch-3@b5f3cf12a9e4ed84fc97b57bf41a25610d69c9e5"


# ----- helpers: DeZero utilities written out ---------------------------------------------------------------


def _sum_to(x, shape):  # dezero/utils.py:108-126 (F.sum_to returns x itself when the shapes agree: functions.py:221-224)
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


def _broadcast_to(x, shape):  # dezero/functions.py:227-245
    if x.shape == tuple(shape):
        return x
    return np.broadcast_to(x, shape)


def _reshape_sum_backward(gy, x_shape, axis, keepdims):  # dezero/utils.py:129-158
    ndim = len(x_shape)
    tupled_axis = axis
    if axis is None:
        tupled_axis = None
    elif not isinstance(axis, tuple):
        tupled_axis = (axis,)

    if not (ndim == 0 or tupled_axis is None or keepdims):
        actual_axis = [a if a >= 0 else a + ndim for a in tupled_axis]
        shape = list(gy.shape)
        for a in sorted(actual_axis):
            shape.insert(a, 1)
    else:
        shape = gy.shape

    gy = gy.reshape(shape)
    return gy


def _logsumexp(x, axis=1):  # dezero/utils.py:161-169
    m = x.max(axis=axis, keepdims=True)
    y = x - m
    np.exp(y, out=y)
    s = y.sum(axis=axis, keepdims=True)
    np.log(s, out=s)
    m += s
    return m


def _max_backward_shape(x, axis):  # dezero/utils.py:172-181
    if axis is None:
        axis = range(x.ndim)
    elif isinstance(axis, int):
        axis = (axis,)
    shape = [s if ax not in axis else 1 for ax, s in enumerate(x.shape)]
    return shape


def _pair(x):  # dezero/utils.py:384-391
    if isinstance(x, int):
        return (x, x)
    elif isinstance(x, tuple):
        assert len(x) == 2
        return x
    raise ValueError


def _get_conv_outsize(input_size, kernel_size, stride, pad):  # dezero/utils.py:380-381
    return (input_size + pad * 2 - kernel_size) // stride + 1


def _im2col_array(img, kernel_size, stride, pad, to_matrix=True):  # dezero/functions_conv.py:360-387 (NumPy path)
    N, C, H, W = img.shape
    KH, KW = _pair(kernel_size)
    SH, SW = _pair(stride)
    PH, PW = _pair(pad)
    OH = _get_conv_outsize(H, KH, SH, PH)
    OW = _get_conv_outsize(W, KW, SW, PW)
    img = np.pad(img, ((0, 0), (0, 0), (PH, PH + SH - 1), (PW, PW + SW - 1)), mode='constant', constant_values=(0,))
    col = np.ndarray((N, C, KH, KW, OH, OW), dtype=img.dtype)
    for j in range(KH):
        j_lim = j + SH * OH
        for i in range(KW):
            i_lim = i + SW * OW
            col[:, :, j, i, :, :] = img[:, :, j:j_lim:SH, i:i_lim:SW]
    if to_matrix:
        col = col.transpose((0, 4, 5, 1, 2, 3)).reshape((N * OH * OW, -1))
    return col


def _col2im_array(col, img_shape, kernel_size, stride, pad, to_matrix=True):  # dezero/functions_conv.py:390-413
    N, C, H, W = img_shape
    KH, KW = _pair(kernel_size)
    SH, SW = _pair(stride)
    PH, PW = _pair(pad)
    OH = _get_conv_outsize(H, KH, SH, PH)
    OW = _get_conv_outsize(W, KW, SW, PW)
    if to_matrix:
        col = col.reshape(N, OH, OW, C, KH, KW).transpose(0, 3, 4, 5, 1, 2)
    img = np.zeros((N, C, H + 2 * PH + SH - 1, W + 2 * PW + SW - 1), dtype=col.dtype)
    for j in range(KH):
        j_lim = j + SH * OH
        for i in range(KW):
            i_lim = i + SW * OW
            img[:, :, j:j_lim:SH, i:i_lim:SW] += col[:, :, j, i, :, :]
    return img[:, :, PH:H + PH, PW:W + PW]


def _softmax_np(x, axis=1):  # dezero/functions.py:356-361 (Softmax.forward)
    y = x - x.max(axis=axis, keepdims=True)
    y = np.exp(y)
    y /= y.sum(axis=axis, keepdims=True)
    return y


# ===== basic functions =====================================================================================


def sin_(x):
    return np.sin(x)


# functions.py:16-19  ``gx = gy * cos(x)``
@rrule(sin_, arrays(shape=(2, 3), min_value=-100.0, max_value=100.0))
def dezero_sin_rrule(x):
    return np.sin(x), lambda gy: (gy * np.cos(x),)


def cos_(x):
    return np.cos(x)


# functions.py:32-35  ``gx = gy * -sin(x)``
@rrule(cos_, arrays(shape=(2, 3), min_value=-100.0, max_value=100.0))
def dezero_cos_rrule(x):
    return np.cos(x), lambda gy: (gy * -np.sin(x),)


def tanh_(x):
    return np.tanh(x)


# functions.py:48-51  ``y = self.outputs[0](); gx = gy * (1 - y * y)``
@rrule(tanh_, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0))
def dezero_tanh_rrule(x):
    y = np.tanh(x)
    return y, lambda gy: (gy * (1 - y * y),)


def exp_(x):
    return np.exp(x)


# functions.py:64-67  ``y = self.outputs[0](); gx = gy * y``
@rrule(exp_, arrays(shape=(2, 3), min_value=-700.0, max_value=700.0))
def dezero_exp_rrule(x):
    y = np.exp(x)
    return y, lambda gy: (gy * y,)


def log_(x):
    return np.log(x)


# functions.py:80-83  ``gx = gy / x``
@rrule(log_, arrays(shape=(2, 3), min_value=1e-300, max_value=1e300))
def dezero_log_rrule(x):
    return np.log(x), lambda gy: (gy / x,)


# ===== tensor operations ===================================================================================


def reshape_(x, shape):
    return x.reshape(shape)


# functions.py:102-103  ``return reshape(gy, self.x_shape)``
@rrule(reshape_, arrays(shape=(2, 3, 2)), constant((3, 4)))
def dezero_reshape_rrule(x, shape):
    return x.reshape(shape), lambda gy: (gy.reshape(x.shape), None)


def transpose_(x, axes):
    return x.transpose(axes)


# functions.py:120-126  ``inv_axes = tuple(np.argsort([ax % axes_len for ax in self.axes])); transpose(gy, inv_axes)``
@rrule(transpose_, arrays(shape=(2, 3, 4)), constant((2, 0, -2)))
def dezero_transpose_rrule(x, axes):
    def pullback(gy):
        if axes is None:
            return gy.transpose(), None
        axes_len = len(axes)
        inv_axes = tuple(np.argsort([ax % axes_len for ax in axes]))
        return gy.transpose(inv_axes), None

    return x.transpose(axes), pullback


def get_item_(x, slices):
    return x[slices]


_REPEATED = (np.array([1, 0, 1, 1]), np.array([2, 2, 0, 2]))


# functions.py:141-160  GetItem.backward: ``GetItemGrad(self.slices, x.shape)(gy)``, whose forward is
# ``gx = xp.zeros(self.in_shape, dtype=gy.dtype); np.add.at(gx, self.slices, gy)``
@rrule(get_item_, arrays(shape=(2, 3)), constant(_REPEATED))
def dezero_get_item_rrule(x, slices):
    def pullback(gy):
        gx = np.zeros(x.shape, dtype=gy.dtype)
        np.add.at(gx, slices, gy)
        return gx, None

    return x[slices], pullback


# the same with a basic slice and a repeated integer index list: ``x[:, [0, 2, 0]]``
@rrule(get_item_, arrays(shape=(2, 3)), constant((slice(None), [0, 2, 0])), name="dezero_get_item_slice_rrule")
def dezero_get_item_slice_rrule(x, slices):
    def pullback(gy):
        gx = np.zeros(x.shape, dtype=gy.dtype)
        np.add.at(gx, slices, gy)
        return gx, None

    return x[slices], pullback


def get_item_grad_(gy, slices, in_shape):
    gx = np.zeros(in_shape, dtype=gy.dtype)
    np.add.at(gx, slices, gy)
    return gx


# functions.py:147-163  GetItemGrad: forward ``np.add.at(gx, self.slices, gy)``; backward ``get_item(ggx, self.slices)``
@rrule(get_item_grad_, arrays(shape=(4,)), constant(_REPEATED), constant((2, 3)))
def dezero_get_item_grad_rrule(gy, slices, in_shape):
    return get_item_grad_(gy, slices, in_shape), lambda ggx: (ggx[slices], None, None)


# ===== sum / sum_to / broadcast_to / matmul / linear =======================================================


def sum_(x, axis=None, keepdims=False):
    return np.asarray(x.sum(axis=axis, keepdims=keepdims))


# functions.py:196-200  ``gy = utils.reshape_sum_backward(gy, self.x_shape, self.axis, self.keepdims)``;
# ``gx = broadcast_to(gy, self.x_shape)``
@rrule(sum_, arrays(shape=(2, 3, 4)), kwargs={"axis": (0, -1)})
def dezero_sum_rrule(x, axis=None, keepdims=False):
    def pullback(gy):
        gy = _reshape_sum_backward(gy, x.shape, axis, keepdims)
        return (_broadcast_to(gy, x.shape),)

    return np.asarray(x.sum(axis=axis, keepdims=keepdims)), pullback


# the same with keepdims=True on one axis
@rrule(sum_, arrays(shape=(2, 3)), kwargs={"axis": 1, "keepdims": True}, name="dezero_sum_keepdims_rrule")
def dezero_sum_keepdims_rrule(x, axis=None, keepdims=False):
    def pullback(gy):
        gy = _reshape_sum_backward(gy, x.shape, axis, keepdims)
        return (_broadcast_to(gy, x.shape),)

    return np.asarray(x.sum(axis=axis, keepdims=keepdims)), pullback


def sum_to_(x, shape):
    return _sum_to(x, shape)


# functions.py:207-218  forward ``utils.sum_to(x, self.shape)``; backward ``broadcast_to(gy, self.x_shape)``
@rrule(sum_to_, arrays(shape=(2, 3, 4)), constant((3, 1)))
def dezero_sum_to_rrule(x, shape):
    return _sum_to(x, shape), lambda gy: (_broadcast_to(gy, x.shape), None)


def broadcast_to_(x, shape):
    return np.broadcast_to(x, shape)


# functions.py:227-239  forward ``xp.broadcast_to(x, self.shape)``; backward ``sum_to(gy, self.x_shape)``
@rrule(broadcast_to_, arrays(shape=(3, 1)), constant((2, 3, 4)))
def dezero_broadcast_to_rrule(x, shape):
    return np.broadcast_to(x, shape), lambda gy: (_sum_to(gy, x.shape), None)


def matmul_(x, W):
    return x.dot(W)


# functions.py:257-266  ``gx = matmul(gy, W.T); gW = matmul(x.T, gy)``
@rrule(matmul_, arrays(shape=(2, 3)), arrays(shape=(3, 4)))
def dezero_matmul_rrule(x, W):
    return x.dot(W), lambda gy: (gy.dot(W.T), x.T.dot(gy))


def linear_(x, W, b):
    y = x.dot(W)
    if b is not None:
        y += b
    return y


# functions.py:273-285  ``gb = None if b.data is None else sum_to(gy, b.shape); gx = matmul(gy, W.T);
# gW = matmul(x.T, gy)``
@rrule(linear_, arrays(shape=(2, 3)), arrays(shape=(3, 4)), arrays(shape=(4,)))
def dezero_linear_rrule(x, W, b):
    def pullback(gy):
        gb = _sum_to(gy, b.shape)
        gx = gy.dot(W.T)
        gW = x.T.dot(gy)
        return gx, gW, gb

    return linear_(x, W, b), pullback


# ===== activations =========================================================================================


def sigmoid_(x):
    return np.tanh(x * 0.5) * 0.5 + 0.5


# functions.py:311-321  forward ``xp.tanh(x * 0.5) * 0.5 + 0.5``; backward ``gx = gy * y * (1 - y)``
@rrule(sigmoid_, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0))
def dezero_sigmoid_rrule(x):
    y = sigmoid_(x)
    return y, lambda gy: (gy * y * (1 - y),)


# the same over a wide range of logits (the real domain is every real number)
@rrule(sigmoid_, arrays(shape=(2, 3), min_value=-1000.0, max_value=1000.0), name="dezero_sigmoid_wide_rrule")
def dezero_sigmoid_wide_rrule(x):
    y = sigmoid_(x)
    return y, lambda gy: (gy * y * (1 - y),)


def relu_(x):
    return np.maximum(x, 0.0)


# functions.py:328-338  ``mask = x.data > 0; gx = gy * mask``
@rrule(relu_, arrays(shape=(2, 3)))
def dezero_relu_rrule(x):
    def pullback(gy):
        mask = x > 0
        return (gy * mask,)

    return np.maximum(x, 0.0), pullback


def softmax_(x, axis=1):
    return _softmax_np(x, axis)


# functions.py:352-368  ``gx = y * gy; sumdx = gx.sum(axis=self.axis, keepdims=True); gx -= y * sumdx``
@rrule(softmax_, arrays(shape=(2, 4), min_value=-100.0, max_value=100.0))
def dezero_softmax_rrule(x, axis=1):
    y = _softmax_np(x, axis)

    def pullback(gy):
        gx = y * gy
        sumdx = gx.sum(axis=axis, keepdims=True)
        gx = gx - y * sumdx
        return (gx,)

    return y, pullback


def log_softmax_(x, axis=1):
    log_z = _logsumexp(x, axis)
    return x - log_z


# functions.py:375-387  forward ``log_z = utils.logsumexp(x, self.axis); y = x - log_z``;
# backward ``gx = gy - exp(y) * gy.sum(axis=self.axis, keepdims=True)``
@rrule(log_softmax_, arrays(shape=(2, 4), min_value=-100.0, max_value=100.0))
def dezero_log_softmax_rrule(x, axis=1):
    y = log_softmax_(x, axis)
    return y, lambda gy: (gy - np.exp(y) * gy.sum(axis=axis, keepdims=True),)


# the same over a wide range of logits
@rrule(log_softmax_, arrays(shape=(2, 4), min_value=-1000.0, max_value=1000.0), name="dezero_log_softmax_wide_rrule")
def dezero_log_softmax_wide_rrule(x, axis=1):
    y = log_softmax_(x, axis)
    return y, lambda gy: (gy - np.exp(y) * gy.sum(axis=axis, keepdims=True),)


def leaky_relu_(x, slope=0.2):
    y = x.copy()
    y[x <= 0] *= slope
    return y


# functions.py:394-408  forward ``y[x <= 0] *= self.slope``; backward ``mask = (x.data > 0).astype(gy.dtype);
# mask[mask <= 0] = self.slope; gx = gy * mask``
@rrule(leaky_relu_, arrays(shape=(2, 3)), kwargs={"slope": 0.2})
def dezero_leaky_relu_rrule(x, slope=0.2):
    def pullback(gy):
        mask = (x > 0).astype(gy.dtype)
        mask[mask <= 0] = slope
        return (gy * mask,)

    return leaky_relu_(x, slope), pullback


# ===== losses ==============================================================================================


def mean_squared_error_(x0, x1):
    diff = x0 - x1
    return np.asarray((diff ** 2).sum() / len(diff))


# functions.py:425-436  forward ``(diff ** 2).sum() / len(diff)``; backward ``gx0 = gy * diff * (2. / len(diff));
# gx1 = -gx0``
@rrule(mean_squared_error_, arrays(shape=(2, 3)), arrays(shape=(2, 3)))
def dezero_mean_squared_error_rrule(x0, x1):
    def pullback(gy):
        diff = x0 - x1
        gx0 = gy * diff * (2. / len(diff))
        gx1 = -gx0
        return gx0, gx1

    return mean_squared_error_(x0, x1), pullback


def softmax_cross_entropy_(x, t):
    N = x.shape[0]
    log_z = _logsumexp(x, axis=1)
    log_p = x - log_z
    log_p = log_p[np.arange(N), t.ravel()]
    return np.asarray(-log_p.sum() / np.float32(N))


# functions.py:454-473  ``gy *= 1/N; y = softmax(x); t_onehot = xp.eye(CLS_NUM, dtype=t.dtype)[t.data];
# y = (y - t_onehot) * gy``
@rrule(softmax_cross_entropy_, arrays(shape=(3, 4), min_value=-100.0, max_value=100.0),
       constant(np.array([0, 3, 3], dtype=np.int64)))
def dezero_softmax_cross_entropy_rrule(x, t):
    def pullback(gy):
        N, CLS_NUM = x.shape
        gy = gy * (1 / N)
        y = _softmax_np(x, 1)
        t_onehot = np.eye(CLS_NUM, dtype=t.dtype)[t]
        y = (y - t_onehot) * gy
        return y, None

    return softmax_cross_entropy_(x, t), pullback


# ===== batch norm (training mode) ==========================================================================


def batch_norm_(x, gamma, beta, eps=2e-5):
    mean = x.mean(axis=0)
    var = x.var(axis=0)
    inv_std = 1 / np.sqrt(var + eps)
    xc = (x - mean) * inv_std
    return gamma * xc + beta


# functions.py:530-595 (2-D input, Config.train): forward ``inv_std = 1 / xp.sqrt(var + self.eps);
# xc = (x - mean) * inv_std; y = gamma * xc + beta``; backward ``mean = x.sum(axis=0) / batch_size;
# xc = (x - mean) * self.inv_std; gbeta = sum(gy, axis=0); ggamma = sum(xc * gy, axis=0);
# gx = gy - gbeta / batch_size - xc * ggamma / batch_size; gx *= gamma * self.inv_std``
# (eps=2e-5 is batch_nrom's default, functions.py:598; the running averages are state, not outputs)
@rrule(batch_norm_, arrays(shape=(4, 3)), arrays(shape=(3,)), arrays(shape=(3,)))
def dezero_batch_norm_rrule(x, gamma, beta, eps=2e-5):
    mean = x.mean(axis=0)
    var = x.var(axis=0)
    inv_std = 1 / np.sqrt(var + eps)
    xc0 = (x - mean) * inv_std
    y = gamma * xc0 + beta

    def pullback(gy):
        batch_size = len(gy)
        mean_b = x.sum(axis=0) / batch_size
        xc = (x - mean_b) * inv_std
        gbeta = gy.sum(axis=0)
        ggamma = (xc * gy).sum(axis=0)
        gx = gy - gbeta / batch_size - xc * ggamma / batch_size
        gx = gx * (gamma * inv_std)
        return gx, ggamma, gbeta

    return y, pullback


# ===== max / min / clip ====================================================================================


def max_(x, axis=None, keepdims=False):
    return np.asarray(x.max(axis=axis, keepdims=keepdims))


def _max_pullback(x, y, axis):
    # functions.py:618-627  ``shape = utils.max_backward_shape(x, self.axis); gy = reshape(gy, shape);
    # y = reshape(y, shape); cond = (x.data == y.data); gy = broadcast_to(gy, cond.shape); return gy * cond``
    def pullback(gy):
        shape = _max_backward_shape(x, axis)
        gy = gy.reshape(shape)
        yy = y.reshape(shape)
        cond = (x == yy)
        gy = _broadcast_to(gy, cond.shape)
        return (gy * cond,)

    return pullback


# functions.py:609-627  Max
@rrule(max_, arrays(shape=(2, 4)), kwargs={"axis": 1})
def dezero_max_rrule(x, axis=None, keepdims=False):
    y = max_(x, axis, keepdims)
    return y, _max_pullback(x, y, axis)


def min_(x, axis=None, keepdims=False):
    return np.asarray(x.min(axis=axis, keepdims=keepdims))


# functions.py:630-633  Min (Max.backward with ``x.min`` forward)
@rrule(min_, arrays(shape=(3, 2)), kwargs={"axis": 0})
def dezero_min_rrule(x, axis=None, keepdims=False):
    y = min_(x, axis, keepdims)
    return y, _max_pullback(x, y, axis)


def clip_(x, x_min, x_max):
    return np.clip(x, x_min, x_max)


# functions.py:644-658  ``mask = (x.data >= self.x_min) * (x.data <= self.x_max); gx = gy * mask``
@rrule(clip_, arrays(shape=(2, 3)), constant(-1.0), constant(2.0))
def dezero_clip_rrule(x, x_min, x_max):
    def pullback(gy):
        mask = (x >= x_min) * (x <= x_max)
        return gy * mask, None, None

    return np.clip(x, x_min, x_max), pullback


# ===== core arithmetic (dezero/core.py) ====================================================================


def mul_(x0, x1):
    return x0 * x1


# core.py:231-243  ``gx0 = gy * x1; gx1 = gy * x0; if x0.shape != x1.shape: gx0 = sum_to(gx0, x0.shape);
# gx1 = sum_to(gx1, x1.shape)``
@rrule(mul_, arrays(shape=(2, 3)), arrays(shape=(3,)))
def dezero_mul_rrule(x0, x1):
    def pullback(gy):
        gx0 = gy * x1
        gx1 = gy * x0
        if x0.shape != x1.shape:
            gx0 = _sum_to(gx0, x0.shape)
            gx1 = _sum_to(gx1, x1.shape)
        return gx0, gx1

    return x0 * x1, pullback


def sub_(x0, x1):
    return x0 - x1


# core.py:263-275  ``gx0 = gy; gx1 = -gy; if self.x0_shape != self.x1_shape: sum_to(...)``
@rrule(sub_, arrays(shape=(2, 1)), arrays(shape=(2, 3)))
def dezero_sub_rrule(x0, x1):
    def pullback(gy):
        gx0 = gy
        gx1 = -gy
        if x0.shape != x1.shape:
            gx0 = _sum_to(gx0, x0.shape)
            gx1 = _sum_to(gx1, x1.shape)
        return gx0, gx1

    return x0 - x1, pullback


def div_(x0, x1):
    return x0 / x1


# core.py:288-300  ``gx0 = gy / x1; gx1 = gy * (-x0 / x1 ** 2); if x0.shape != x1.shape: sum_to(...)``
@rrule(div_, arrays(shape=(2, 3)),
       arrays(shape=(3,), elements=st.floats(-10.0, 10.0, allow_nan=False).filter(lambda v: v != 0)))
def dezero_div_rrule(x0, x1):
    def pullback(gy):
        gx0 = gy / x1
        gx1 = gy * (-x0 / x1 ** 2)
        if x0.shape != x1.shape:
            gx0 = _sum_to(gx0, x0.shape)
            gx1 = _sum_to(gx1, x1.shape)
        return gx0, gx1

    return x0 / x1, pullback


def pow_(x, c):
    return x ** c


# core.py:313-325  ``gx = c * x ** (c - 1) * gy``
@rrule(pow_, arrays(shape=(2, 3)), constant(3))
def dezero_pow_rrule(x, c):
    return x ** c, lambda gy: (c * x ** (c - 1) * gy, None)


# the same with c = 0.5 on x >= 0
@rrule(pow_, arrays(shape=(2, 3), min_value=0.0, max_value=100.0), constant(0.5), name="dezero_pow_half_rrule")
def dezero_pow_half_rrule(x, c):
    return x ** c, lambda gy: (c * x ** (c - 1) * gy, None)


# ===== conv / pooling (dezero/functions_conv.py) ===========================================================


def conv2d_(x, W, b, stride=1, pad=0):
    KH, KW = W.shape[2:]
    col = _im2col_array(x, (KH, KW), _pair(stride), _pair(pad), to_matrix=False)
    y = np.tensordot(col, W, ((1, 2, 3), (1, 2, 3)))
    if b is not None:
        y += b
    y = np.rollaxis(y, 3, 1)
    return y


# functions_conv.py:49-79 Conv2d.backward: ``gx = deconv2d(gy, W, b=None, stride, pad, outsize=(H, W))``
# (Deconv2d.forward, :93-116: ``gcol = xp.tensordot(Weight, x, (0, 1)); gcol = xp.rollaxis(gcol, 3);
# y = col2im_array(gcol, img_shape, (KH, KW), stride, pad, to_matrix=False)``); ``gW = Conv2DGradW(self)(x, gy)``
# (:145-151: ``col = im2col_array(x, ...); gW = xp.tensordot(gy, col, ((0, 2, 3), (0, 4, 5)))``);
# ``gb = gy.sum(axis=(0, 2, 3))``
@rrule(conv2d_, arrays(shape=(1, 2, 4, 4)), arrays(shape=(3, 2, 3, 3)), arrays(shape=(3,)),
       kwargs={"stride": 2, "pad": 1})
def dezero_conv2d_rrule(x, W, b, stride=1, pad=0):
    stride_p, pad_p = _pair(stride), _pair(pad)

    def pullback(gy):
        # deconv2d(gy, W, None, stride, pad, outsize=(x.shape[2], x.shape[3]))
        C, OC, KH, KW = W.shape
        N = gy.shape[0]
        img_shape = (N, OC, x.shape[2], x.shape[3])
        gcol = np.tensordot(W, gy, (0, 1))
        gcol = np.rollaxis(gcol, 3)
        gx = _col2im_array(gcol, img_shape, (KH, KW), stride_p, pad_p, to_matrix=False)
        # Conv2DGradW
        col = _im2col_array(x, (KH, KW), stride_p, pad_p, to_matrix=False)
        gW = np.tensordot(gy, col, ((0, 2, 3), (0, 4, 5)))
        gb = gy.sum(axis=(0, 2, 3))
        return gx, gW, gb

    return conv2d_(x, W, b, stride, pad), pullback


def pooling_(x, kernel_size, stride=1, pad=0):
    col = _im2col_array(x, kernel_size, stride, pad, to_matrix=False)
    N, C, KH, KW, OH, OW = col.shape
    col = col.reshape(N, C, KH * KW, OH, OW)
    return col.max(axis=2)


# functions_conv.py:167-217  forward ``self.indexes = col.argmax(axis=2); y = col.max(axis=2)``;
# Pooling2DGrad.forward ``gcol = xp.zeros(...); indexes = self.indexes.ravel() + xp.arange(0, self.indexes.size
# * KH * KW, KH * KW); gcol[indexes] = gy.ravel(); gcol = gcol.reshape(N, C, OH, OW, KH, KW);
# gcol = swapaxes(gcol, 2, 4); gcol = swapaxes(gcol, 3, 5); gx = col2im_array(gcol, (N, C, H, W), ...)``
@rrule(pooling_, arrays(shape=(1, 2, 4, 4)), constant(2), kwargs={"stride": 2})
def dezero_pooling_rrule(x, kernel_size, stride=1, pad=0):
    col = _im2col_array(x, kernel_size, stride, pad, to_matrix=False)
    N, C, KH, KW, OH, OW = col.shape
    col = col.reshape(N, C, KH * KW, OH, OW)
    indexes_saved = col.argmax(axis=2)
    y = col.max(axis=2)

    def pullback(gy):
        N, C, OH, OW = gy.shape
        N, C, H, W = x.shape
        KH, KW = _pair(kernel_size)
        gcol = np.zeros((N * C * OH * OW * KH * KW), dtype=x.dtype)
        indexes = (indexes_saved.ravel() + np.arange(0, indexes_saved.size * KH * KW, KH * KW))
        gcol[indexes] = gy.ravel()
        gcol = gcol.reshape(N, C, OH, OW, KH, KW)
        gcol = np.swapaxes(gcol, 2, 4)
        gcol = np.swapaxes(gcol, 3, 5)
        gx = _col2im_array(gcol, (N, C, H, W), kernel_size, stride, pad, to_matrix=False)
        return gx, None

    return y, pullback


def average_pooling_(x, kernel_size, stride=1, pad=0):
    col = _im2col_array(x, kernel_size, stride, pad, to_matrix=False)
    return col.mean(axis=(2, 3))


# functions_conv.py:248-272  ``KW, KH = pair(self.kernel_size); gy /= (KW*KH); gcol = broadcast_to(gy.reshape(-1),
# (KH, KW, N*C*OH*OW)); gcol = gcol.reshape(KH, KW, N, C, OH, OW).transpose(2, 3, 0, 1, 4, 5);
# gx = col2im(gcol, self.input_shape, ...)``
@rrule(average_pooling_, arrays(shape=(1, 2, 4, 4)), constant(2), kwargs={"stride": 2})
def dezero_average_pooling_rrule(x, kernel_size, stride=1, pad=0):
    def pullback(gy):
        N, C, OH, OW = gy.shape
        KW, KH = _pair(kernel_size)
        gy = gy / (KW * KH)
        gcol = np.broadcast_to(gy.reshape(-1), (KH, KW, N * C * OH * OW))
        gcol = gcol.reshape(KH, KW, N, C, OH, OW).transpose(2, 3, 0, 1, 4, 5)
        gx = _col2im_array(gcol, x.shape, kernel_size, stride, pad, to_matrix=False)
        return gx, None

    return average_pooling_(x, kernel_size, stride, pad), pullback


# ===== composite losses: DeZero's backprop through its own Functions ======================================


def softmax_cross_entropy_simple_(x, t):
    N = x.shape[0]
    p = _softmax_np(x, 1)
    p = np.clip(p, 1e-15, 1.0)
    log_p = np.log(p)
    tlog_p = log_p[np.arange(N), t]
    return np.asarray(-1 * tlog_p.sum() / N)


# functions.py:443-451  ``p = softmax(x); p = clip(p, 1e-15, 1.0); log_p = log(p); tlog_p = log_p[np.arange(N), t.data];
# y = -1 * sum(tlog_p) / N``; the pullback is DeZero's backprop through those Functions in reverse: Div (core.py:293-300
# ``gy / x1``), Mul (core.py:236-243 ``gy * x1``), Sum (functions.py:196-200), GetItem (np.add.at), Log (``gy / x``),
# Clip (``gy * mask``), Softmax (``gx = y * gy; gx -= y * sumdx``)
@rrule(softmax_cross_entropy_simple_, arrays(shape=(3, 4), min_value=-100.0, max_value=100.0),
       constant(np.array([0, 3, 3], dtype=np.int64)))
def dezero_softmax_cross_entropy_simple_rrule(x, t):
    N = x.shape[0]
    p = _softmax_np(x, 1)
    p2 = np.clip(p, 1e-15, 1.0)
    log_p = np.log(p2)
    tlog_p = log_p[np.arange(N), t]
    y = np.asarray(-1 * tlog_p.sum() / N)

    def pullback(gy):
        g = gy / np.asarray(N)                       # Div(m, N)
        g = g * np.asarray(-1)                       # Mul(s, -1)
        g = np.broadcast_to(g.reshape(()), tlog_p.shape)  # Sum(axis=None)
        gl = np.zeros(log_p.shape, dtype=g.dtype)    # GetItem -> GetItemGrad
        np.add.at(gl, (np.arange(N), t), g)
        gp2 = gl / p2                                # Log
        gp = gp2 * ((p >= 1e-15) * (p <= 1.0))       # Clip
        gx = p * gp                                  # Softmax
        sumdx = gx.sum(axis=1, keepdims=True)
        gx = gx - p * sumdx
        return gx, None

    return y, pullback


def sigmoid_cross_entropy_(x, t):
    N = len(x)
    p = sigmoid_(x)
    p = np.clip(p, 1e-15, 1.0)
    tlog_p = t * np.log(p) + (1 - t) * np.log(1 - p)
    return np.asarray(-1 * tlog_p.sum() / N)


# functions.py:480-489  ``p = sigmoid(x); p = clip(p, 1e-15, 1.0); tlog_p = t * log(p) + (1 - t) * log(1 - p);
# y = -1 * sum(tlog_p) / N``; the pullback is DeZero's backprop through Div, Mul, Sum, Add, Mul (``gy * x1``), Log,
# Sub (``-gy``), Clip and Sigmoid (``gy * y * (1 - y)``). |x| <= 36: beyond about 36.7 sigmoid rounds to 1 and
# ``log(1 - p)`` is -inf (DeZero's own loss is then -inf or NaN)
@rrule(sigmoid_cross_entropy_, arrays(shape=(2, 3), min_value=-36.0, max_value=36.0),
       constant(np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])))
def dezero_sigmoid_cross_entropy_rrule(x, t):
    N = len(x)
    p0 = sigmoid_(x)
    p = np.clip(p0, 1e-15, 1.0)
    a = np.log(p)
    c = 1 - t
    d = 1 - p
    e = np.log(d)
    y = np.asarray(-1 * (t * a + c * e).sum() / N)

    def pullback(gy):
        g = gy / np.asarray(N)                       # Div
        g = g * np.asarray(-1)                       # Mul(s, -1)
        g = np.broadcast_to(g.reshape(()), x.shape)  # Sum
        ge = g * c                                   # Add, then Mul(c, e): gx1 = gy * x0
        gd = ge / d                                  # Log(d)
        gp_d = -gd                                   # Sub(1, p): gx1 = -gy (sum_to to p.shape: the same shape)
        ga = g * t                                   # Mul(t, a): gx1 = gy * x0
        gp_a = ga / p                                # Log(p)
        gp = gp_d + gp_a
        gp0 = gp * ((p0 >= 1e-15) * (p0 <= 1.0))     # Clip
        gx = gp0 * p0 * (1 - p0)                     # Sigmoid
        return gx, None

    return y, pullback


LABELS = {
    "dezero_sin_rrule": {"source": f"{DEZERO} dezero/functions.py:10-19"},
    "dezero_cos_rrule": {"source": f"{DEZERO} dezero/functions.py:26-35"},
    "dezero_tanh_rrule": {"source": f"{DEZERO} dezero/functions.py:42-51"},
    "dezero_exp_rrule": {"source": f"{DEZERO} dezero/functions.py:58-67"},
    "dezero_log_rrule": {"source": f"{DEZERO} dezero/functions.py:74-83"},
    "dezero_reshape_rrule": {"source": f"{DEZERO} dezero/functions.py:93-103"},
    "dezero_transpose_rrule": {"source": f"{DEZERO} dezero/functions.py:112-126"},
    "dezero_get_item_rrule": {"source": f"{DEZERO} dezero/functions.py:133-160"},
    "dezero_get_item_slice_rrule": {"source": f"{DEZERO} dezero/functions.py:133-160"},
    "dezero_get_item_grad_rrule": {"source": f"{DEZERO} dezero/functions.py:147-163"},
    "dezero_sum_rrule": {"source": f"{DEZERO} dezero/functions.py:186-200, dezero/utils.py:129-158"},
    "dezero_sum_keepdims_rrule": {"source": f"{DEZERO} dezero/functions.py:186-200, dezero/utils.py:129-158"},
    "dezero_sum_to_rrule": {"source": f"{DEZERO} dezero/functions.py:207-218, dezero/utils.py:108-126"},
    "dezero_broadcast_to_rrule": {"source": f"{DEZERO} dezero/functions.py:227-239"},
    "dezero_matmul_rrule": {"source": f"{DEZERO} dezero/functions.py:257-266"},
    "dezero_linear_rrule": {"source": f"{DEZERO} dezero/functions.py:273-285"},
    "dezero_sigmoid_rrule": {"source": f"{DEZERO} dezero/functions.py:311-321"},
    "dezero_sigmoid_wide_rrule": {"source": f"{DEZERO} dezero/functions.py:311-321"},
    "dezero_relu_rrule": {"source": f"{DEZERO} dezero/functions.py:328-338"},
    "dezero_softmax_rrule": {"source": f"{DEZERO} dezero/functions.py:352-368"},
    "dezero_log_softmax_rrule": {"source": f"{DEZERO} dezero/functions.py:375-387, dezero/utils.py:161-169"},
    "dezero_log_softmax_wide_rrule": {"source": f"{DEZERO} dezero/functions.py:375-387, dezero/utils.py:161-169"},
    "dezero_leaky_relu_rrule": {"source": f"{DEZERO} dezero/functions.py:394-408"},
    "dezero_mean_squared_error_rrule": {"source": f"{DEZERO} dezero/functions.py:425-436"},
    "dezero_softmax_cross_entropy_rrule": {"source": f"{DEZERO} dezero/functions.py:454-473"},
    "dezero_batch_norm_rrule": {"source": f"{DEZERO} dezero/functions.py:530-595"},
    "dezero_max_rrule": {"source": f"{DEZERO} dezero/functions.py:609-627, dezero/utils.py:172-181"},
    "dezero_min_rrule": {"source": f"{DEZERO} dezero/functions.py:630-633"},
    "dezero_clip_rrule": {"source": f"{DEZERO} dezero/functions.py:644-658"},
    "dezero_mul_rrule": {"source": f"{DEZERO} dezero/core.py:231-243"},
    "dezero_sub_rrule": {"source": f"{DEZERO} dezero/core.py:263-275"},
    "dezero_div_rrule": {"source": f"{DEZERO} dezero/core.py:288-300"},
    "dezero_pow_rrule": {"source": f"{DEZERO} dezero/core.py:313-325"},
    "dezero_pow_half_rrule": {"source": f"{DEZERO} dezero/core.py:313-325"},
    "dezero_conv2d_rrule": {"source": f"{DEZERO} dezero/functions_conv.py:49-151"},
    "dezero_pooling_rrule": {"source": f"{DEZERO} dezero/functions_conv.py:167-217"},
    "dezero_average_pooling_rrule": {"source": f"{DEZERO} dezero/functions_conv.py:248-272"},
    "dezero_softmax_cross_entropy_simple_rrule": {"source": f"{DEZERO} dezero/functions.py:443-451"},
    "dezero_sigmoid_cross_entropy_rrule": {"source": f"{DEZERO} dezero/functions.py:480-489"},
}

UPSTREAM_FLAWS = {
    "dezero_max_rrule": (
        {"GG201", "GG203"},
        "DeZero's Max backward (gy * (x == y)) gives the whole cotangent to every tied entry: at x = zeros(2, 4) "
        "DeZero's own gradient is all ones, where along the check's positive direction the one-sided derivatives of "
        "the sum of row maxima are 1.7 and 0.3 and the rule's answer is 3.9",
    ),
    "dezero_min_rrule": (
        {"GG201", "GG203"},
        "DeZero's Min is its Max with min: every tied entry gets the whole cotangent, as for dezero_max_rrule",
    ),
    "dezero_div_rrule": (
        {"GG301"},
        "DeZero's Div backward computes gx1 = gy * (-x0 / x1 ** 2): at x0 = 0 and |x1| below about 1.5e-162, x1 ** 2 "
        "underflows to 0 and -0 / 0 is NaN (seen at x1 = 3.67e-269 and 2.2e-313; DeZero's own backward gives NaN for "
        "a zero and a unit cotangent), where the derivative is 0",
    ),
}
