"""Real-world corpus: tinygrad's early NumPy backward formulas (``tinygrad/ops_cpu.py``), translated to rrules.

Sources: https://github.com/tinygrad/tinygrad at two commits of its NumPy era:
``ad756f611279a74e7133ea54f4243c9dc3313078`` (2021-06-02: ReLU, Log, Exp, Sum, Max, Add, Sub, Mul, Pow,
Reshape, Transpose, Slice, Matmul, Conv2D) and ``799ad5ba170d9964b915ce3cae4113d327215c60`` (2020-12-17, the
last commit where Sigmoid, LogSoftmax, Pad2D, MaxPool2D and AvgPool2D were NumPy Functions). Each primal is the
Function's ``forward``; each pullback its ``backward``, in the same order and with the same masks and
special cases (the keyword arguments tinygrad stores on ``ctx`` are the rule's keyword arguments). tinygrad
computes every input's gradient, and its ``Tensor.backward`` drops those of inputs that do not require one:
an input that tinygrad creates with ``requires_grad=False`` (a Python scalar exponent) is a constant here.
A comment above each rule names the file and lines and quotes the formula. Specs are each function's real
domain. The translation was checked against tinygrad's own ``ops_cpu.py`` at each commit on 3 random inputs per rule
and on inputs with ties and zeros: every value and gradient equal to the bit.

``LABELS`` maps each rule to its source; ``UPSTREAM_FLAWS`` lists the error findings that are real flaws of
tinygrad's rules, with evidence in INDEX.md.
"""

import warnings

import numpy as np
from hypothesis import strategies as st

from gradguard import arrays, constant, rrule

TG_2021 = "tinygrad/tinygrad@ad756f611279a74e7133ea54f4243c9dc3313078"
TG_2020 = "tinygrad/tinygrad@799ad5ba170d9964b915ce3cae4113d327215c60"


def _unbroadcast(out, in_sh):  # ops_cpu.py:65-68 (2021); the same at :6-9 (2020)
    # adjoint operation to broadcast is sum. Need to sum all axis with 1 = in_sh[i] < out.shape[i]
    sum_axis = tuple([i for i in range(len(in_sh)) if in_sh[i] == 1 and out.shape[i] > 1]) if in_sh != (1,) else None
    return out.sum(axis=sum_axis).reshape(in_sh)


# ===== unary ops (2021) ====================================================================================


def relu_(x):
    return np.maximum(x, 0)


# ops_cpu.py:6-13  ``return grad_output * (input >= 0)``
@rrule(relu_, arrays(shape=(2, 3)))
def tinygrad_relu_rrule(x):
    return np.maximum(x, 0), lambda g: (g * (x >= 0),)


def log_(x):
    return np.log(x)


# ops_cpu.py:15-22  ``return grad_output / input``
@rrule(log_, arrays(shape=(2, 3), min_value=1e-300, max_value=1e300))
def tinygrad_log_rrule(x):
    return np.log(x), lambda g: (g / x,)


def exp_(x):
    return np.exp(x)


# ops_cpu.py:24-32  ``ret = np.exp(input)``; ``return grad_output * ret``
@rrule(exp_, arrays(shape=(2, 3), min_value=-700.0, max_value=700.0))
def tinygrad_exp_rrule(x):
    ret = np.exp(x)
    return ret, lambda g: (g * ret,)


# ===== reduce ops (2021) ===================================================================================


def sum_(x, axis=None):
    return np.array([x.sum()]) if axis is None else x.sum(axis=axis)


def _sum_pullback(x, axis):
    # ops_cpu.py:41-45  ``if isinstance(axis, int): axis = [axis]; shape = [1 if axis is None or i in axis else
    # input.shape[i] for i in range(len(input.shape))]; return grad_output.reshape(shape) + np.zeros_like(input)``
    def pullback(g):
        ax = [axis] if isinstance(axis, int) else axis
        shape = [1 if ax is None or i in ax else x.shape[i] for i in range(len(x.shape))]
        return (g.reshape(shape) + np.zeros_like(x),)

    return pullback


# ops_cpu.py:36-45  Sum with axis=None: ``np.array([input.sum()])``
@rrule(sum_, arrays(shape=(2, 3)))
def tinygrad_sum_rrule(x, axis=None):
    return sum_(x, axis), _sum_pullback(x, axis)


# the same with axis=(0, 2)
@rrule(sum_, arrays(shape=(2, 3, 4)), kwargs={"axis": (0, 2)}, name="tinygrad_sum_axis_rrule")
def tinygrad_sum_axis_rrule(x, axis=None):
    return sum_(x, axis), _sum_pullback(x, axis)


def max_(inp, axis=None):
    if isinstance(axis, int):
        axis = [axis]
    ret = np.amax(inp, axis=None if axis is None else tuple(axis), keepdims=True)
    if axis is not None:
        ret = ret.reshape([inp.shape[i] for i in range(len(inp.shape)) if i not in axis])
    return ret


def _max_rule(inp, axis):
    # ops_cpu.py:47-61  forward ``ret = np.amax(inp, axis=..., keepdims=True)``; backward ``shape = [...];
    # ret2 = (input==ret.reshape(shape)); div = ret2.sum(axis=..., keepdims=True);
    # return ret2*grad_output.reshape(shape)/div``
    if isinstance(axis, int):
        axis = [axis]
    ret = np.amax(inp, axis=None if axis is None else tuple(axis), keepdims=True)
    saved = ret
    if axis is not None:
        ret = ret.reshape([inp.shape[i] for i in range(len(inp.shape)) if i not in axis])

    def pullback(g):
        shape = [1 if axis is None or i in axis else inp.shape[i] for i in range(len(inp.shape))]
        ret2 = (inp == saved.reshape(shape))
        div = ret2.sum(axis=None if axis is None else tuple(axis), keepdims=True)
        return (ret2 * g.reshape(shape) / div,)

    return ret, pullback


# ops_cpu.py:47-61  Max over axis 1
@rrule(max_, arrays(shape=(2, 4)), kwargs={"axis": 1})
def tinygrad_max_rrule(inp, axis=None):
    return _max_rule(inp, axis)


# the same over all axes (output shape (1, 1))
@rrule(max_, arrays(shape=(2, 3)), name="tinygrad_max_all_rrule")
def tinygrad_max_all_rrule(inp, axis=None):
    return _max_rule(inp, axis)


# ===== binary ops (2021) ===================================================================================


def add_(x, y):
    return x + y


# ops_cpu.py:70-77  ``return unbroadcast(grad_output, shape_x), unbroadcast(grad_output, shape_y)``
@rrule(add_, arrays(shape=(2, 3)), arrays(shape=(1, 3)))
def tinygrad_add_rrule(x, y):
    return x + y, lambda g: (_unbroadcast(g, x.shape), _unbroadcast(g, y.shape))


def sub_(x, y):
    return x - y


# ops_cpu.py:79-86  ``return unbroadcast(grad_output, shape_x), unbroadcast(-grad_output, shape_y)``
@rrule(sub_, arrays(shape=(2, 1)), arrays(shape=(2, 3)))
def tinygrad_sub_rrule(x, y):
    return x - y, lambda g: (_unbroadcast(g, x.shape), _unbroadcast(-g, y.shape))


def mul_(x, y):
    return x * y


# ops_cpu.py:88-95  ``return unbroadcast(y*grad_output, x.shape), unbroadcast(x*grad_output, y.shape)``; a Python
# scalar operand arrives as a shape-(1,) array (tensor.py:335-340 dispatch)
@rrule(mul_, arrays(shape=(2, 3)), arrays(shape=(1,)))
def tinygrad_mul_rrule(x, y):
    return x * y, lambda g: (_unbroadcast(y * g, x.shape), _unbroadcast(x * g, y.shape))


def pow_(x, y):
    return x ** y


# ops_cpu.py:97-105  ``return unbroadcast(y * (x**(y-1.0)) * grad_output, x.shape),
# unbroadcast((x**y) * np.log(x) * grad_output, y.shape)`` (base > 0: the real domain with a differentiable exponent)
@rrule(pow_, arrays(shape=(2, 3), min_value=1e-6, max_value=10.0), arrays(shape=(2, 3), min_value=-3.0, max_value=3.0))
def tinygrad_pow_rrule(x, y):
    def pullback(g):
        return (_unbroadcast(y * (x ** (y - 1.0)) * g, x.shape),
                _unbroadcast((x ** y) * np.log(x) * g, y.shape))

    return x ** y, pullback


# the same with a constant exponent -1.0 as ``Tensor.div`` uses it (tensor.py:233-234 ``self * (y ** -1.0)``): the
# exponent is a requires_grad=False tensor of shape (1,), whose gradient tinygrad computes and drops
@rrule(pow_, arrays(shape=(2, 3), elements=st.floats(-10.0, 10.0, allow_nan=False).filter(lambda v: v != 0)),
       constant(np.array([-1.0])), name="tinygrad_pow_reciprocal_rrule")
def tinygrad_pow_reciprocal_rrule(x, y):
    return x ** y, lambda g: (_unbroadcast(y * (x ** (y - 1.0)) * g, x.shape), None)


# the same with the exponent 0.5 of ``Tensor.sqrt`` (tensor.py:230-231 ``self.pow(0.5)``)
@rrule(pow_, arrays(shape=(2, 3), min_value=0.0, max_value=100.0), constant(np.array([0.5])), name="tinygrad_pow_sqrt_rrule")
def tinygrad_pow_sqrt_rrule(x, y):
    return x ** y, lambda g: (_unbroadcast(y * (x ** (y - 1.0)) * g, x.shape), None)


# ===== movement ops (2021) =================================================================================


def reshape_(x, shape):
    return x.reshape(shape)


# ops_cpu.py:109-116  ``return grad_output.reshape(in_shape)``
@rrule(reshape_, arrays(shape=(2, 3, 2)), constant((3, 4)))
def tinygrad_reshape_rrule(x, shape):
    return x.reshape(shape), lambda g: (g.reshape(x.shape), None)


def transpose_(x, order):
    return np.transpose(x, order)


# ops_cpu.py:118-124  ``return np.transpose(x, np.argsort(ctx.order))``
@rrule(transpose_, arrays(shape=(2, 3, 4)), constant((2, 0, 1)))
def tinygrad_transpose_rrule(x, order):
    return np.transpose(x, order), lambda g: (np.transpose(g, np.argsort(order)), None)


def _inner_slice(x, arg):  # ops_cpu.py:126-130
    padding = [(max(0, -p[0]), max(0, p[1] - x.shape[i])) for i, p in enumerate(arg)]
    x = np.pad(x, padding)
    slicee = [(p[0] + padding[i][0], p[1] + padding[i][0]) for i, p in enumerate(arg)]
    return x[tuple([slice(x[0], x[1], None) for x in slicee])]


def slice_(x, arg):
    return _inner_slice(x, arg)


# ops_cpu.py:132-140  ``narg = [(0-p[0], grad_output.shape[i]+(shape[i]-p[1])) for i,p in enumerate(ctx.arg)];
# return inner_slice(grad_output, narg)`` (an arg past the bounds pads with zeros)
@rrule(slice_, arrays(shape=(2, 3)), constant([(-1, 2), (1, 5)]))
def tinygrad_slice_rrule(x, arg):
    def pullback(g):
        shape = x.shape
        narg = [(0 - p[0], g.shape[i] + (shape[i] - p[1])) for i, p in enumerate(arg)]
        return _inner_slice(g, narg), None

    return _inner_slice(x, arg), pullback


# ===== processing ops (2021) ===============================================================================


def matmul_(inp, weight):
    return inp @ weight


# ops_cpu.py:144-153  ``grad_input = grad_output @ np.swapaxes(weight, -2, -1);
# grad_weight = np.swapaxes(input, -2, -1) @ grad_output``
@rrule(matmul_, arrays(shape=(2, 3, 4)), arrays(shape=(2, 4, 5)))
def tinygrad_matmul_rrule(inp, weight):
    def pullback(g):
        grad_input = g @ np.swapaxes(weight, -2, -1)
        grad_weight = np.swapaxes(inp, -2, -1) @ g
        return grad_input, grad_weight

    return inp @ weight, pullback


def _conv2d_forward(x, w, stride, groups):  # ops_cpu.py:156-179
    if isinstance(stride, int):
        stride = (stride, stride)
    cout, cin, H, W = w.shape
    ys, xs = stride
    bs, cin_ = x.shape[0], x.shape[1]
    oy, ox = (x.shape[2] - (H - ys)) // ys, (x.shape[3] - (W - xs)) // xs
    assert cin * groups == cin_
    assert cout % groups == 0
    rcout = cout // groups

    gx = x.reshape(bs, groups, cin, x.shape[2], x.shape[3])
    tx = np.lib.stride_tricks.as_strided(
        gx,
        shape=(bs, groups, cin, oy, ox, H, W),
        strides=(*gx.strides[0:3], gx.strides[3] * ys, gx.strides[4] * xs, *gx.strides[3:5]),
        writeable=False,
    )
    tw = w.reshape(groups, rcout, cin, H, W)
    ret = np.zeros((bs, groups, oy, ox, rcout), dtype=x.dtype)
    for g in range(groups):
        # ijYXyx,kjyx -> iYXk ->ikYX
        ret[:, g] += np.tensordot(tx[:, g], tw[g], ((1, 4, 5), (1, 2, 3)))
    return np.moveaxis(ret, 4, 2).reshape(bs, cout, oy, ox), (tx, tw, x.shape, stride)


def conv2d_(x, w, stride=1, groups=1):
    return _conv2d_forward(x, w, stride, groups)[0]


# ops_cpu.py:155-205  backward ``gdw[g] += np.tensordot(ggg[:,g], tx[:,g], ((0,2,3),(0,2,3)))``; ``for k in
# range(oy*ox): ... tg = np.dot(ggg[:,g,:,Y,X].reshape(bs, -1), tw[g].reshape(rcout, -1));
# gdx[:, g, :, iY:iY+H, iX:iX+W] += tg.reshape((bs, cin, H, W))``
@rrule(conv2d_, arrays(shape=(1, 2, 5, 5)), arrays(shape=(4, 1, 3, 3)), kwargs={"stride": 2, "groups": 2})
def tinygrad_conv2d_rrule(x, w, stride=1, groups=1):
    out, (tx, tw, x_shape, stride_t) = _conv2d_forward(x, w, stride, groups)

    def pullback(grad_output):
        bs, _, oy, ox = grad_output.shape
        _, rcout, cin, H, W = tw.shape
        ys, xs = stride_t
        OY, OX = x_shape[2:4]

        ggg = grad_output.reshape(bs, groups, rcout, oy, ox)

        gdw = np.zeros((groups, rcout, cin, H, W), dtype=tx.dtype)
        for g in range(groups):
            # 'ikYX,ijYXyx -> kjyx'
            gdw[g] += np.tensordot(ggg[:, g], tx[:, g], ((0, 2, 3), (0, 2, 3)))

        gdx = np.zeros((bs, groups, cin, OY, OX), dtype=tx.dtype)
        for k in range(oy * ox):
            Y, X = k // ox, k % ox
            iY, iX = Y * ys, X * xs
            for g in range(groups):
                tg = np.dot(ggg[:, g, :, Y, X].reshape(bs, -1), tw[g].reshape(rcout, -1))
                gdx[:, g, :, iY:iY + H, iX:iX + W] += tg.reshape((bs, cin, H, W))

        return gdx.reshape((bs, groups * cin, OY, OX)), gdw.reshape((groups * rcout, cin, H, W))

    return out, pullback


# ===== 2020 ops: sigmoid, logsoftmax, pad2d, pooling ========================================================


def sigmoid_(x):
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore')
        return np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))


# ops_cpu.py:135-150 (2020)  forward ``np.where(input >= 0, 1/(1 + np.exp(-input)), np.exp(input)/(1 + np.exp(input)))``
# under ``np.warnings.filterwarnings('ignore')``; backward ``grad_output * (ret * (1 - ret))``
@rrule(sigmoid_, arrays(shape=(2, 3), min_value=-100.0, max_value=100.0))
def tinygrad_sigmoid_rrule(x):
    ret = sigmoid_(x)
    return ret, lambda g: (g * (ret * (1 - ret)),)


# the same over a wide range of logits (the real domain is every real number)
@rrule(sigmoid_, arrays(shape=(2, 3), min_value=-1000.0, max_value=1000.0), name="tinygrad_sigmoid_wide_rrule")
def tinygrad_sigmoid_wide_rrule(x):
    ret = sigmoid_(x)
    return ret, lambda g: (g * (ret * (1 - ret)),)


def _exp_normalize(x, axis=None):  # ops_cpu.py:131-133 (2020)
    y = np.exp(x - x.max(axis=axis, keepdims=True))
    return y / y.sum(axis=axis, keepdims=True)


def logsoftmax_(x):
    return np.log(_exp_normalize(x, axis=1))


# ops_cpu.py:153-163 (2020)  forward ``softmax = _exp_normalize(input, axis=1); np.log(softmax)``; backward
# ``grad_output - grad_output.sum(axis=1, keepdims=True)*softmax``
@rrule(logsoftmax_, arrays(shape=(2, 4), min_value=-100.0, max_value=100.0))
def tinygrad_logsoftmax_rrule(x):
    softmax = _exp_normalize(x, axis=1)
    return np.log(softmax), lambda g: (g - g.sum(axis=1, keepdims=True) * softmax,)


def pad2d_(x, padding=None):
    return np.pad(x, ((0, 0), (0, 0), tuple(padding[2:4]), tuple(padding[0:2])))


# ops_cpu.py:92-101 (2020)  forward ``np.pad(x, ((0,0), (0,0), tuple(padding[2:4]), tuple(padding[0:2])))``;
# backward ``grad_output[..., padding[2]:-padding[3], padding[0]:-padding[1]]`` (every padding positive, as in
# the convolutions of the time)
@rrule(pad2d_, arrays(shape=(1, 2, 3, 3)), kwargs={"padding": (1, 2, 1, 1)})
def tinygrad_pad2d_rrule(x, padding=None):
    return pad2d_(x, padding), lambda g: (g[..., padding[2]:-padding[3], padding[0]:-padding[1]],)


def _stack_for_pool(x, py, px):  # ops_cpu.py:228-232 (2020)
    my, mx = (x.shape[2] // py) * py, (x.shape[3] // px) * px
    xup = x[:, :, :my, :mx]
    stack = [xup[:, :, k // px::py, k % px::px][None] for k in range(py * px)]
    return np.concatenate(stack, axis=0)


def _unstack_for_pool(fxn, s, py, px):  # ops_cpu.py:234-242 (2020)
    my, mx = (s[2] // py) * py, (s[3] // px) * px
    for k in range(py * px):
        Y, X = k // px, k % px
        ll = fxn(Y * px + X)
        if X == 0 and Y == 0:
            ret = np.zeros(s, dtype=ll.dtype)
        ret[:, :, Y:my:py, X:mx:px] = ll
    return ret


def max_pool2d_(x, kernel_size=(2, 2)):
    return np.max(_stack_for_pool(x, *kernel_size), axis=0)


# ops_cpu.py:244-255 (2020)  forward ``idxs = np.argmax(stack, axis=0)``; backward
# ``unstack_for_pool(lambda idx: grad_output * (idxs == idx), s, *ctx.kernel_size)``
@rrule(max_pool2d_, arrays(shape=(1, 2, 5, 4)), kwargs={"kernel_size": (2, 2)})
def tinygrad_max_pool2d_rrule(x, kernel_size=(2, 2)):
    stack = _stack_for_pool(x, *kernel_size)
    idxs = np.argmax(stack, axis=0)
    s = x.shape
    return np.max(stack, axis=0), lambda g: (_unstack_for_pool(lambda idx: g * (idxs == idx), s, *kernel_size),)


def avg_pool2d_(x, kernel_size=(2, 2)):
    return np.mean(_stack_for_pool(x, *kernel_size), axis=0)


# ops_cpu.py:258-269 (2020)  backward ``py, px = ctx.kernel_size;
# unstack_for_pool(lambda idx: grad_output/py/px, s, py, px)``
@rrule(avg_pool2d_, arrays(shape=(1, 2, 4, 7)), kwargs={"kernel_size": (2, 3)})
def tinygrad_avg_pool2d_rrule(x, kernel_size=(2, 2)):
    s = x.shape
    py, px = kernel_size
    return avg_pool2d_(x, kernel_size), lambda g: (_unstack_for_pool(lambda idx: g / py / px, s, py, px),)


# ===== composites of the 2021 ops: tinygrad's backprop (Tensor.backward, tensor.py:137-155) ================


def logsoftmax_composite_(x):
    ns = list(x.shape)[:-1] + [1]
    m = max_(x, axis=len(x.shape) - 1).reshape(ns)
    ss = m + np.log(np.exp(x - m).sum(axis=len(x.shape) - 1).reshape(ns))
    return x - ss


# tensor.py:263-267  ``m = self.max(axis=len(self.shape)-1).reshape(shape=ns);
# ss = m + (self-m).exp().sum(axis=len(self.shape)-1).reshape(shape=ns).log(); return self - ss``; the pullback runs
# each op's backward (ops_cpu.py) in tinygrad's reverse topological order, accumulating ``t.grad + gt`` per tensor
@rrule(logsoftmax_composite_, arrays(shape=(2, 4), min_value=-100.0, max_value=100.0))
def tinygrad_logsoftmax_composite_rrule(x):
    N = x.shape[0]
    ns = list(x.shape)[:-1] + [1]
    m_raw, max_pb = _max_rule(x, len(x.shape) - 1)
    m = m_raw.reshape(ns)
    d = x - m
    e = np.exp(d)
    s = e.sum(axis=len(x.shape) - 1)
    s2 = s.reshape(ns)
    lg = np.log(s2)
    ss = m + lg
    out = x - ss

    def pullback(g):
        g_x1, g_ss = _unbroadcast(g, x.shape), _unbroadcast(-g, ss.shape)   # Sub(self, ss)
        g_m1, g_l = _unbroadcast(g_ss, m.shape), _unbroadcast(g_ss, lg.shape)  # Add(m, l)
        g_s2 = g_l / s2                                                      # Log
        g_s = g_s2.reshape(s.shape)                                          # Reshape
        g_e = g_s.reshape([N, 1]) + np.zeros_like(e)                         # Sum(axis=1)
        g_d = g_e * e                                                        # Exp
        g_x2, g_m2 = _unbroadcast(g_d, x.shape), _unbroadcast(-g_d, m.shape)  # Sub(self, m)
        g_m = g_m1 + g_m2
        g_mraw = g_m.reshape(m_raw.shape)                                    # Reshape
        g_x3, = max_pb(g_mraw)                                               # Max (ties share the cotangent)
        return (g_x1 + g_x2 + g_x3,)

    return out, pullback


def leakyrelu_composite_(x, neg_slope=0.01):
    return np.maximum(x, 0) - np.maximum(np.array([-neg_slope]) * x, 0)


# tensor.py:253-254  ``return self.relu() - (-neg_slope*self).relu()``: ReLU (``grad_output * (input >= 0)``), Mul by
# the shape-(1,) constant, ReLU, Sub; at x == 0 both ReLUs pass the cotangent
@rrule(leakyrelu_composite_, arrays(shape=(2, 3)), kwargs={"neg_slope": 0.01})
def tinygrad_leakyrelu_composite_rrule(x, neg_slope=0.01):
    c = np.array([-neg_slope])
    a = np.maximum(x, 0)
    b = c * x
    r = np.maximum(b, 0)

    def pullback(g):
        g_a, g_r = _unbroadcast(g, a.shape), _unbroadcast(-g, r.shape)  # Sub
        g_b = g_r * (b >= 0)                                          # ReLU(b)
        g_x2 = _unbroadcast(c * g_b, x.shape)                         # Mul(c, x): gradient of x
        g_x1 = g_a * (x >= 0)                                         # ReLU(x)
        return (g_x2 + g_x1,)

    return a - r, pullback


LABELS = {
    "tinygrad_relu_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:6-13"},
    "tinygrad_log_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:15-22"},
    "tinygrad_exp_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:24-32"},
    "tinygrad_sum_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:36-45"},
    "tinygrad_sum_axis_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:36-45"},
    "tinygrad_max_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:47-61"},
    "tinygrad_max_all_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:47-61"},
    "tinygrad_add_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:65-77"},
    "tinygrad_sub_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:65-68,79-86"},
    "tinygrad_mul_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:65-68,88-95"},
    "tinygrad_pow_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:65-68,97-105"},
    "tinygrad_pow_reciprocal_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:97-105, tinygrad/tensor.py:233-234"},
    "tinygrad_pow_sqrt_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:97-105, tinygrad/tensor.py:230-231"},
    "tinygrad_reshape_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:109-116"},
    "tinygrad_transpose_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:118-124"},
    "tinygrad_slice_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:126-140"},
    "tinygrad_matmul_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:144-153"},
    "tinygrad_conv2d_rrule": {"source": f"{TG_2021} tinygrad/ops_cpu.py:155-205"},
    "tinygrad_sigmoid_rrule": {"source": f"{TG_2020} tinygrad/ops_cpu.py:135-151"},
    "tinygrad_sigmoid_wide_rrule": {"source": f"{TG_2020} tinygrad/ops_cpu.py:135-151"},
    "tinygrad_logsoftmax_rrule": {"source": f"{TG_2020} tinygrad/ops_cpu.py:131-164"},
    "tinygrad_pad2d_rrule": {"source": f"{TG_2020} tinygrad/ops_cpu.py:92-102"},
    "tinygrad_max_pool2d_rrule": {"source": f"{TG_2020} tinygrad/ops_cpu.py:228-256"},
    "tinygrad_avg_pool2d_rrule": {"source": f"{TG_2020} tinygrad/ops_cpu.py:228-242,258-270"},
    "tinygrad_logsoftmax_composite_rrule": {"source": f"{TG_2021} tinygrad/tensor.py:137-155,263-267"},
    "tinygrad_leakyrelu_composite_rrule": {"source": f"{TG_2021} tinygrad/tensor.py:137-155,253-254"},
}

UPSTREAM_FLAWS = {
    "tinygrad_leakyrelu_composite_rrule": (
        {"GG201", "GG203", "GG501"},
        "tinygrad builds leakyrelu as relu(x) - relu(-0.01 x), and ReLU's backward masks with input >= 0, so at x = 0 "
        "both terms pass the cotangent: 1.01 per unit cotangent (tinygrad's own Tensor.backward gives the same), "
        "outside the one-sided derivatives 0.01 and 1",
    ),
}
