"""Real-world corpus: thinc's NumPy backward formulas, translated to rrules.

Source: https://github.com/explosion/thinc at commit 20eec35566997d5272d083be1f1a0ec9006934ff (thinc 9.1.1).
Each primal is the forward that ``NumpyOps`` runs on float64 arrays: the generic ``Ops`` method in
``thinc/backends/ops.py`` where ``NumpyOps`` does not override it, else the Cython override in
``thinc/backends/numpy_ops.pyx`` and its C++ kernel in ``thinc/backends/cpu_kernels.hh`` written out in NumPy
(the same loops, order of accumulation, strict ``>`` for maxima, etc.). Each pullback is the matching thinc
backprop (``backprop_*`` / ``d*`` method, or the ``backprop`` closure of a layer's ``forward``), with the same
constants, clips, masks and order of operations. Layers with parameters (``W``, ``b``, ``G``, ``Q``, ``E``) take
them as arguments; the gradients thinc hands to ``model.inc_grad`` are returned as their tangents. Ragged
``lengths`` are constants. A comment above each rule names the file and lines and quotes the formula.
The translation was checked against thinc 9.1.1's own code (NumpyOps, the layers, CosineDistance) on 3 random
inputs per rule: every value and gradient equal, all but five to the bit (at most 1.8e-15: BLIS gemm and C++
exp against NumPy's).

``LABELS`` maps each rule to its source; ``UPSTREAM_FLAWS`` lists the error findings that are real flaws of
thinc's rules, with evidence in INDEX.md. ``thinc_embed_rrule`` and ``thinc_hashembed_rrule`` drew a false GG202
at one seed until GG202 formed its reference in float64 (INDEX.md).
"""

import math

import numpy as np

from gradguard import arrays, constant, rrule

THINC = "explosion/thinc@20eec35566997d5272d083be1f1a0ec9006934ff"

SQRT2PI = math.sqrt(2.0 / math.pi)  # ops.py:55
INV_SQRT2 = 1.0 / math.sqrt(2.0)  # ops.py:56
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)  # ops.py:57


# ----- helpers: thinc's ops written out ----------------------------------------------------------------


def _sigmoid(X):  # ops.py:773-783 (Ops.sigmoid, inplace=False)
    X = np.clip(X, -20.0, 20.0)
    return 1.0 / (1.0 + np.exp(-X))


def _dsigmoid(Y):  # ops.py:795-800 (Ops.dsigmoid, inplace=False)
    return Y * (1.0 - Y)


def _clipped_linear(X, slope=1.0, offset=0.0, min_val=0.0, max_val=1.0):  # ops.py:914-928
    out = X * slope + offset
    return np.clip(out, min_val, max_val)


def _backprop_clipped_linear(dY, X, slope=1.0, offset=0.0, min_val=0.0, max_val=1.0):  # ops.py:930-948
    low = (min_val - offset) / slope
    high = (max_val - offset) / slope
    slope = np.float64(slope).astype(X.dtype)
    zero = np.float64(0.0).astype(X.dtype)
    dX = np.where((low < X) & (X < high), slope, zero)
    return dY * dX


def _erf(X):  # ops.py:1059-1077 (Ops.erf, Abramowitz-Stegun 7.1.26)
    sign = np.sign(X)
    X = np.abs(X)
    a1 = 0.254829592
    a2 = -0.284496736
    a3 = 1.421413741
    a4 = -1.453152027
    a5 = 1.061405429
    p = 0.3275911
    t = 1.0 / (1.0 + p * X)
    y = 1.0 - (((((a5 * t + a4) * t) + a3) * t + a2) * t + a1) * t * np.exp(-X * X)
    out = sign * y
    out = out.astype(X.dtype)
    return out


def _gaussian_cdf(X):  # ops.py:1695-1697
    return 0.5 * (1.0 + _erf(INV_SQRT2 * X))


def _gaussian_pdf(X):  # ops.py:1700-1702
    return INV_SQRT_2PI * np.exp(-0.5 * X * X)


def _sechsq(X):  # ops.py:1079-1082
    X = np.clip(X, -20.0, 20.0)
    return (1 / np.cosh(X)) ** 2


def _vec_add(dst, src, scale):  # cpu_kernels.hh:82-91 ``X[i] += scale * Y[i]``
    dst += scale * src


def _reduce_sum(X, lengths):  # numpy_ops.pyx:385-404, cpu_kernels.hh:292-320 (cpu_reduce_sum)
    sums = np.zeros((lengths.shape[0], X.shape[1]), dtype=X.dtype)
    t = 0
    for b, length in enumerate(lengths):
        for _ in range(length):
            _vec_add(sums[b], X[t], X.dtype.type(1.0))
            t += 1
    return sums


def _backprop_reduce_sum(d_sums, lengths):  # numpy_ops.pyx:406-430, cpu_kernels.hh:323-338
    T = int(sum(int(n) for n in lengths))
    dX = np.zeros((T, d_sums.shape[1]), dtype=d_sums.dtype)
    t = 0
    for b, length in enumerate(lengths):
        for _ in range(length):
            _vec_add(dX[t], d_sums[b], d_sums.dtype.type(1.0))
            t += 1
    return dX


def _softmax_sequences(Xs, lengths):  # ops.py:827-838 (Ops.softmax_sequences)
    Xs = np.clip(Xs, -20.0, 20.0)
    new_x = np.exp(Xs)
    summed = _backprop_reduce_sum(_reduce_sum(new_x, lengths), lengths)
    new_x /= summed
    return new_x


def _backprop_softmax_sequences(dY, Y, lengths):  # ops.py:850-856
    dX = Y * dY
    sum_dX = _backprop_reduce_sum(_reduce_sum(dX, lengths), lengths)
    dX -= Y * sum_dX
    return dX


def _maxout(X):  # numpy_ops.pyx:189-206, cpu_kernels.hh:94-123 (argmax: first of ties, strict >)
    which = X.argmax(axis=-1)
    best = np.take_along_axis(X, which[..., None], axis=-1)[..., 0]
    return best, which.astype(np.int32)


def _backprop_maxout(dY, which, P):  # numpy_ops.pyx:208-220, cpu_kernels.hh:126-145
    B, O = dY.shape
    dX = np.zeros((B, O, P), dtype=dY.dtype)
    for b in range(B):
        for o in range(O):
            dX[b, o, which[b, o]] = dY[b, o]
    return dX


def _seq2col_lengths(lengths, B):  # numpy_ops.pyx:560-570 (check_seq2col_lengths)
    if lengths is None:
        return np.array([B], dtype=np.int32)
    assert int(np.sum(lengths)) == B
    return lengths


def _seq2col(X, nW, lengths=None):  # numpy_ops.pyx:252-290, cpu_kernels.hh:355-421 (seq2col)
    B, I = X.shape
    nF = nW * 2 + 1
    lengths = _seq2col_lengths(lengths, B)
    out = np.zeros((B, nF * I), dtype=X.dtype)
    flat_out = out.reshape(-1)
    flat_X = X.reshape(-1)
    seq_start = 0
    for n in lengths:
        seq_end = seq_start + int(n)
        for j in range(seq_start, seq_end):
            window_start = j - nW
            window_end = j + nW + 1
            x_start = max(seq_start, window_start)
            x_end = min(seq_end, window_end)
            n_elems = x_end - x_start
            out_offset = x_start - window_start
            o = j * nF * I + out_offset * I
            flat_out[o:o + n_elems * I] = flat_X[x_start * I:(x_start + n_elems) * I]
        seq_start += int(n)
    return out


def _backprop_seq2col(dY, nW, lengths=None):  # numpy_ops.pyx:292-326, cpu_kernels.hh:424-468
    nF = nW * 2 + 1
    B = dY.shape[0]
    I = dY.shape[1] // nF
    lengths = _seq2col_lengths(lengths, B)
    dX = np.zeros((B, I), dtype=dY.dtype)
    flat_dX = dX.reshape(-1)
    flat_dY = dY.reshape(-1)
    seq_start = 0
    for n in lengths:
        seq_end = seq_start + int(n)
        for j in range(seq_start, seq_end):
            window_begin = j - nW
            window_end = j + nW + 1
            begin = max(seq_start, window_begin)
            end = min(seq_end, window_end)
            n_elems = end - begin
            out_offset = begin - window_begin
            o = j * nF * I + out_offset * I
            _vec_add(flat_dX[begin * I:(begin + n_elems) * I], flat_dY[o:o + n_elems * I], dY.dtype.type(1.0))
        seq_start += int(n)
    return dX


# ===== activations (thinc/backends/ops.py unless noted) ==================================================


def sigmoid_(X):
    return _sigmoid(X)


# ops.py:773-800 (sigmoid; backprop_sigmoid -> dsigmoid) ``X = clip(X, -20.0, 20.0); 1.0 / (1.0 + exp(-X))``;
# ``dY * (Y * (1.0 - Y))``. Also layers/sigmoid_activation.py:18-31 and layers/logistic.py.
@rrule(sigmoid_, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0))
def thinc_sigmoid_rrule(X):
    Y = _sigmoid(X)
    return Y, lambda dY: (dY * _dsigmoid(Y),)


def tanh_(X):
    return np.tanh(X)


# ops.py:802-809 (dtanh, used by the LSTM's backprop_lstm_gates) ``1 - Y**2`` with Y = tanh(X)
@rrule(tanh_, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0))
def thinc_dtanh_rrule(X):
    Y = np.tanh(X)
    return Y, lambda dY: (dY * (1 - Y ** 2),)


def softmax_(x, axis=-1, temperature=1.0):  # ops.py:811-825
    if temperature != 1.0:
        x = x / temperature
    maxes = np.max(x, axis=axis, keepdims=True)
    shifted = x - maxes
    new_x = np.exp(shifted)
    new_x /= new_x.sum(axis=axis, keepdims=True)
    return new_x


def _softmax_rule(x, axis, temperature):
    Y = softmax_(x, axis=axis, temperature=temperature)

    def pullback(dY):  # ops.py:840-848 (backprop_softmax)
        if temperature != 1.0:
            dY = dY / temperature
        dX = Y * dY
        dX -= Y * dX.sum(axis=axis, keepdims=True)
        return (dX,)

    return Y, pullback


# ops.py:811-848 (softmax; backprop_softmax) ``dX = Y * dY; dX -= Y * dX.sum(axis, keepdims=True)``
# (layers/softmax_activation.py:17-24)
@rrule(softmax_, arrays(shape=(2, 4), min_value=-100.0, max_value=100.0))
def thinc_softmax_rrule(x, axis=-1, temperature=1.0):
    return _softmax_rule(x, axis, temperature)


# ops.py:811-848 with temperature: ``x = x / temperature`` in the forward, ``dY = dY / temperature`` in backprop
@rrule(softmax_, arrays(shape=(3, 2), min_value=-100.0, max_value=100.0), kwargs={"axis": 0, "temperature": 0.5})
def thinc_softmax_temperature_rrule(x, axis=-1, temperature=1.0):
    return _softmax_rule(x, axis, temperature)


def softmax_sequences_(Xs, lengths):
    return _softmax_sequences(Xs, lengths)


# ops.py:827-856 (softmax_sequences; backprop_softmax_sequences) ``Xs = clip(Xs, -20.0, 20.0); new_x = exp(Xs);
# new_x /= backprop_reduce_sum(reduce_sum(new_x, lengths), lengths)``; ``dX = Y * dY;
# dX -= Y * backprop_reduce_sum(reduce_sum(dX, lengths), lengths)``. Drawn inside [-20, 20], where the forward's
# clip ("loses almost no fidelity") is the identity: outside it the backprop ignores the clip.
@rrule(softmax_sequences_, arrays(shape=(5, 2), min_value=-20.0, max_value=20.0),
       constant(np.array([2, 0, 3], dtype=np.int32)))
def thinc_softmax_sequences_rrule(Xs, lengths):
    Y = _softmax_sequences(Xs, lengths)
    return Y, lambda dY: (_backprop_softmax_sequences(dY, Y, lengths), None)


def relu_(X):  # numpy_ops.pyx:128-140, cpu_kernels.hh:341-352 (cpu_relu) ``if (X[i] <= 0.0) X[i] = 0.0``
    Y = np.array(X, copy=True)
    Y[Y <= 0.0] = 0.0
    return Y


# numpy_ops.pyx:142-157 (float64 goes to ops.py:906-912) ``dY * (Y > 0)``
@rrule(relu_, arrays(shape=(2, 3)))
def thinc_relu_rrule(X):
    Y = relu_(X)
    return Y, lambda dY: (dY * (Y > 0),)


def clipped_linear_(X, slope=1.0, offset=0.0, min_val=0.0, max_val=1.0):
    return _clipped_linear(X, slope, offset, min_val, max_val)


# ops.py:914-948 (clipped_linear; backprop_clipped_linear) ``clip(X * slope + offset, min_val, max_val)``;
# ``low = (min_val - offset) / slope; high = (max_val - offset) / slope; where((low < X) & (X < high), slope, 0)``
@rrule(clipped_linear_, arrays(shape=(2, 3)),
       kwargs={"slope": 1.25, "offset": 0.5, "min_val": -1.0, "max_val": 2.0})
def thinc_clipped_linear_rrule(X, slope=1.0, offset=0.0, min_val=0.0, max_val=1.0):
    Y = _clipped_linear(X, slope, offset, min_val, max_val)
    return Y, lambda dY: (_backprop_clipped_linear(dY, X, slope, offset, min_val, max_val),)


def relu_k_(X, n=6.0):
    return _clipped_linear(X, max_val=n)


# ops.py:950-956 (relu_k; backprop_relu_k) ``clipped_linear(X, max_val=n)``
@rrule(relu_k_, arrays(shape=(2, 3)))
def thinc_relu_k_rrule(X, n=6.0):
    Y = _clipped_linear(X, max_val=n)
    return Y, lambda dY: (_backprop_clipped_linear(dY, X, max_val=n),)


def hard_sigmoid_(X):
    return _clipped_linear(X, slope=0.2, offset=0.5)


# ops.py:958-964 (hard_sigmoid; backprop_hard_sigmoid) ``clipped_linear(X, slope=0.2, offset=0.5)``
@rrule(hard_sigmoid_, arrays(shape=(2, 3)))
def thinc_hard_sigmoid_rrule(X):
    Y = _clipped_linear(X, slope=0.2, offset=0.5)
    return Y, lambda dY: (_backprop_clipped_linear(dY, X, slope=0.2, offset=0.5),)


def hard_tanh_(X):
    return _clipped_linear(X, min_val=-1.0, max_val=1.0)


# ops.py:966-972 (hard_tanh; backprop_hard_tanh) ``clipped_linear(X, min_val=-1.0, max_val=1.0)``
@rrule(hard_tanh_, arrays(shape=(2, 3)))
def thinc_hard_tanh_rrule(X):
    Y = _clipped_linear(X, min_val=-1.0, max_val=1.0)
    return Y, lambda dY: (_backprop_clipped_linear(dY, X, min_val=-1.0, max_val=1.0),)


def swish_(X):  # ops.py:974-979 ``X * sigmoid(X)``
    return X * _sigmoid(X)


# ops.py:974-990 (swish; backprop_swish) ``Y = Y + sigmoid(X) * (1 - Y); dY * Y``
@rrule(swish_, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0))
def thinc_swish_rrule(X):
    Y = X * _sigmoid(X)

    def pullback(dY):
        Y2 = Y + _sigmoid(X) * (1 - Y)
        return (dY * Y2,)

    return Y, pullback


def hard_swish_(X):  # ops.py:992-997 ``X * hard_sigmoid(X)``
    return X * _clipped_linear(X, slope=0.2, offset=0.5)


# ops.py:992-1008 (hard_swish; backprop_hard_swish) ``dX = X * 0.4 + 0.5; dX[X > 2.5] = 1.0; dX[X < -2.5] = 0``
@rrule(hard_swish_, arrays(shape=(2, 3)))
def thinc_hard_swish_rrule(X):
    Y = hard_swish_(X)

    def pullback(dY):
        dX = X * 0.4 + 0.5
        dX[X > 2.5] = 1.0
        dX[X < -2.5] = 0
        return (dY * dX,)

    return Y, pullback


def hard_swish_mobilenet_(X):  # ops.py:1011-1015 ``X * (relu_k(X + 3) / 6)``
    return X * (_clipped_linear(X + 3, max_val=6.0) / 6)


# ops.py:1011-1026 (hard_swish_mobilenet; backprop_hard_swish_mobilenet)
# ``dX = (1 / 6) * (X * 2.0 + 3.0); dX[X > 3.0] = 1.0; dX[X < -3.0] = 0; dX * dY``
@rrule(hard_swish_mobilenet_, arrays(shape=(2, 3)))
def thinc_hard_swish_mobilenet_rrule(X):
    Y = hard_swish_mobilenet_(X)

    def pullback(dY):
        dX = (1 / 6) * (X * 2.0 + 3.0)
        dX[X > 3.0] = 1.0
        dX[X < -3.0] = 0
        return (dX * dY,)

    return Y, pullback


def dish_(X):  # ops.py:1028-1039 ``X * 0.5 * (1 + X / sqrt(X**2 + 1))``
    tmp = np.square(X)
    tmp += 1.0
    np.sqrt(tmp, out=tmp)
    tmp = X / tmp
    tmp += 1
    tmp *= 0.5
    return X * tmp


# ops.py:1028-1057 (dish; backprop_dish) ``deriv = X / sqrt(x_sq + 1); second = 0.5 * X * x_sq;
# second /= (x_sq + 1)**1.5; deriv -= second; deriv += 0.5``
@rrule(dish_, arrays(shape=(2, 3), min_value=-1e3, max_value=1e3))
def thinc_dish_rrule(X):
    Y = dish_(X)

    def pullback(dY):
        x_sq = np.square(X)
        x_sq_plus_one = x_sq + 1.0
        deriv = X / np.sqrt(x_sq_plus_one)
        second = 0.5 * X * x_sq
        second /= x_sq_plus_one ** 1.5
        deriv -= second
        deriv += 0.5
        return (dY * deriv,)

    return Y, pullback


def gelu_approx_(X):  # ops.py:1084-1094
    tmp = 1.0 + np.tanh(SQRT2PI * (X + 0.044715 * np.power(X, 3)))
    tmp *= 0.5
    tmp = tmp.astype(X.dtype)
    Y = np.array(X)
    Y *= tmp
    return Y


# ops.py:1084-1110 (gelu_approx; backprop_gelu_approx) ``tmp = 0.5 * tanh(0.0356774 * Xp3 + 0.797885 * X);
# tmp += (0.0535161 * Xp3 + 0.398942 * X) * sechsq(0.0356774 * Xp3 + 0.797885 * X); tmp += 0.5``
@rrule(gelu_approx_, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0))
def thinc_gelu_approx_rrule(X):
    Y = gelu_approx_(X)

    def pullback(dY):
        dX = np.zeros(X.shape, dtype="float32")  # ``self.alloc_f(X.shape)``: alloc_f's default dtype is float32
        Xp3 = np.power(X, 3)
        tmp = 0.5 * np.tanh(0.0356774 * Xp3 + 0.797885 * X)
        tmp += (0.0535161 * Xp3 + 0.398942 * X) * _sechsq(0.0356774 * Xp3 + 0.797885 * X)
        tmp += 0.5
        dX += tmp
        return (dY * dX,)

    return Y, pullback


def gelu_(X):  # ops.py:1112-1118 ``X * gaussian_cdf(X)``
    return X * _gaussian_cdf(X)


# ops.py:1112-1128 (gelu; backprop_gelu) ``dX = gaussian_cdf(X) + X * gaussian_pdf(X)``; the cdf uses Ops.erf
# (ops.py:1059-1077, Abramowitz-Stegun 7.1.26 approximation)
@rrule(gelu_, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0))
def thinc_gelu_rrule(X):
    Y = gelu_(X)
    return Y, lambda dY: (dY * (_gaussian_cdf(X) + X * _gaussian_pdf(X)),)


def mish_(X, threshold=20.0):  # ops.py:1130-1139 (Ops.mish)
    tmp = X * np.tanh(np.log(1.0 + np.exp(X)))
    return np.where(X >= threshold, X, tmp)


# ops.py:1130-1170 (Ops.mish; Ops.backprop_mish) ``omega = 4.0 * (Xsub + 1.0); omega += 4.0 * exp(2.0 * Xsub);
# omega += exp(3.0 * Xsub); omega += exp(Xsub) * ((4.0 * Xsub) + 6.0); delta = (exp(Xsub) + 1.0)**2 + 1.0;
# dXsub = dYsub * ((exp(Xsub) * omega) / (delta**2))`` on ``X < threshold``, dY elsewhere
@rrule(mish_, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0))
def thinc_mish_rrule(X, threshold=20.0):
    Y = mish_(X, threshold)

    def pullback(dY):
        indices = X < threshold
        Xsub = X[indices]
        dYsub = dY[indices]
        omega = 4.0 * (Xsub + 1.0)
        omega += 4.0 * np.exp(2.0 * Xsub)
        omega += np.exp(3.0 * Xsub)
        omega += np.exp(Xsub) * ((4.0 * Xsub) + 6.0)
        delta = np.exp(Xsub) + 1.0
        delta *= delta
        delta += 1.0
        dXsub = dYsub * ((np.exp(Xsub) * omega) / (delta ** 2))
        out = np.copy(dY)
        out[indices] = dXsub
        return (out,)

    return Y, pullback


def mish_cpu_(X, threshold=20.0):  # numpy_ops.pyx:222-234, cpu_kernels.hh:257-268 (cpu_mish)
    Y = np.array(X, copy=True)
    m = Y < threshold
    Y[m] = Y[m] * np.tanh(np.log(1.0 + np.exp(Y[m])))
    return Y


# numpy_ops.pyx:236-250, cpu_kernels.hh:271-289 (cpu_backprop_mish) ``omega = (4. * (x + 1)) + (4 * exp_2x) + exp_3x
# + exp_x * (4. * x + 6); delta = 2. * exp_x + exp_2x + 2.; dX[i] = dX[i] * ((exp_x * omega) / (delta * delta))``
@rrule(mish_cpu_, arrays(shape=(2, 3), min_value=-50.0, max_value=50.0))
def thinc_mish_cpu_rrule(X, threshold=20.0):
    Y = mish_cpu_(X, threshold)

    def pullback(dY):
        dX = np.array(dY, copy=True)
        m = X < threshold
        x = X[m]
        exp_x = np.exp(x)
        exp_2x = np.exp(2 * x)
        exp_3x = np.exp(3 * x)
        omega = (4. * (x + 1)) + (4 * exp_2x) + exp_3x + exp_x * (4. * x + 6)
        delta = 2. * exp_x + exp_2x + 2.
        dX[m] = dX[m] * ((exp_x * omega) / (delta * delta))
        return (dX,)

    return Y, pullback


# ===== maxout and ragged reductions =======================================================================


def maxout_(X):
    return _maxout(X)[0]


# numpy_ops.pyx:189-220 (maxout; backprop_maxout), cpu_kernels.hh:94-145 ``dX__bop[*which__bo] = *dX__bo``
@rrule(maxout_, arrays(shape=(2, 2, 3)))
def thinc_maxout_rrule(X):
    best, which = _maxout(X)
    return best, lambda dY: (_backprop_maxout(dY, which, X.shape[-1]),)


def reduce_sum_(X, lengths):
    return _reduce_sum(X, lengths)


# numpy_ops.pyx:385-430, cpu_kernels.hh:292-338 (cpu_reduce_sum; cpu_backprop_reduce_sum): each row of a
# sequence gets its sum's cotangent (layers/reduce_sum.py:17-27)
@rrule(reduce_sum_, arrays(shape=(5, 3)), constant(np.array([2, 0, 3], dtype=np.int32)))
def thinc_reduce_sum_rrule(X, lengths):
    return _reduce_sum(X, lengths), lambda dY: (_backprop_reduce_sum(dY, lengths), None)


def reduce_mean_(X, lengths):  # numpy_ops.pyx:338-357, cpu_kernels.hh:206-235 ``means += (1. / length) * row``
    means = np.zeros((lengths.shape[0], X.shape[1]), dtype=X.dtype)
    t = 0
    for b, length in enumerate(lengths):
        scale = X.dtype.type(1.0 / length) if length else X.dtype.type(np.inf)
        for _ in range(length):
            _vec_add(means[b], X[t], scale)
            t += 1
    return means


# numpy_ops.pyx:359-383, cpu_kernels.hh:238-254 (cpu_backprop_reduce_mean) ``dX[row] += (1. / length) * d_means``
# (layers/reduce_mean.py:17-28)
@rrule(reduce_mean_, arrays(shape=(5, 3)), constant(np.array([2, 0, 3], dtype=np.int32)))
def thinc_reduce_mean_rrule(X, lengths):
    Y = reduce_mean_(X, lengths)

    def pullback(d_means):
        T = int(sum(int(n) for n in lengths))
        dX = np.zeros((T, d_means.shape[1]), dtype=d_means.dtype)
        t = 0
        for b, length in enumerate(lengths):
            scale = d_means.dtype.type(1.0 / length) if length else d_means.dtype.type(np.inf)
            for _ in range(length):
                _vec_add(dX[t], d_means[b], scale)
                t += 1
        return dX, None

    return Y, pullback


def _reduce_max(X, lengths):  # numpy_ops.pyx:432-454, cpu_kernels.hh:148-179 (first row, then strict >)
    B, O = lengths.shape[0], X.shape[1]
    maxes = np.zeros((B, O), dtype=X.dtype)
    which = np.zeros((B, O), dtype=np.int32)
    t = 0
    for b, length in enumerate(lengths):
        maxes[b] = X[t]
        t += 1
        for i in range(1, length):
            for j in range(O):
                if X[t, j] > maxes[b, j]:
                    maxes[b, j] = X[t, j]
                    which[b, j] = i
            t += 1
    return maxes, which


def reduce_max_(X, lengths):
    return _reduce_max(X, lengths)[0]


# numpy_ops.pyx:432-482, cpu_kernels.hh:182-203 (cpu_backprop_reduce_max) ``dX__to[item * O + i] = d_maxes__bo[i]``
# (layers/reduce_max.py:17-27)
@rrule(reduce_max_, arrays(shape=(6, 3)), constant(np.array([2, 1, 3], dtype=np.int32)))
def thinc_reduce_max_rrule(X, lengths):
    maxes, which = _reduce_max(X, lengths)

    def pullback(d_maxes):
        T = int(sum(int(n) for n in lengths))
        O = d_maxes.shape[1]
        dX = np.zeros((T, O), dtype=d_maxes.dtype)
        start = 0
        for b, length in enumerate(lengths):
            for i in range(O):
                dX[start + which[b, i], i] = d_maxes[b, i]
            start += int(length)
        return dX, None

    return maxes, pullback


def reduce_first_(X, lengths):  # ops.py:1236-1247
    starts_ends = np.zeros(lengths.shape[0] + 1, dtype=np.int32)
    starts_ends[1:] = lengths.cumsum()
    return X[starts_ends[:-1]]


# ops.py:1236-1247, 1289-1300 (reduce_first; backprop_reduce_first) ``dX[starts_ends[:-1]] = d_firsts``
@rrule(reduce_first_, arrays(shape=(6, 3)), constant(np.array([2, 1, 3], dtype=np.int32)))
def thinc_reduce_first_rrule(X, lengths):
    starts_ends = np.zeros(lengths.shape[0] + 1, dtype=np.int32)
    starts_ends[1:] = lengths.cumsum()
    Y = X[starts_ends[:-1]]

    def pullback(d_firsts):
        dX = np.zeros((int(starts_ends[-1]), d_firsts.shape[1]), dtype=d_firsts.dtype)
        dX[starts_ends[:-1]] = d_firsts
        return dX, None

    return Y, pullback


def reduce_last_(X, lengths):  # ops.py:1249-1257
    lasts = lengths.cumsum() - 1
    return X[lasts]


# ops.py:1249-1257, 1302-1309 (reduce_last; backprop_reduce_last) ``dX[lasts] = d_lasts``
@rrule(reduce_last_, arrays(shape=(6, 3)), constant(np.array([2, 1, 3], dtype=np.int32)))
def thinc_reduce_last_rrule(X, lengths):
    lasts = lengths.cumsum() - 1
    Y = X[lasts]

    def pullback(d_lasts):
        dX = np.zeros((int(lasts[-1]) + 1, d_lasts.shape[1]), dtype=d_lasts.dtype)
        dX[lasts] = d_lasts
        return dX, None

    return Y, pullback


def seq2col_(X, nW, lengths=None):
    return _seq2col(X, nW, lengths)


# numpy_ops.pyx:252-326, cpu_kernels.hh:355-468 (seq2col; backprop_seq2col), nW = 1 without lengths
# (layers/expand_window.py:25-38)
@rrule(seq2col_, arrays(shape=(4, 2)), constant(1))
def thinc_seq2col_rrule(X, nW, lengths=None):
    Y = _seq2col(X, nW, lengths)
    return Y, lambda dY: (_backprop_seq2col(dY, nW, lengths), None)


# the same with nW = 2 and ragged lengths (layers/expand_window.py:41-57)
@rrule(seq2col_, arrays(shape=(6, 2)), constant(2), constant(np.array([3, 1, 2], dtype=np.int32)),
       name="thinc_seq2col_ragged_rrule")
def thinc_seq2col_ragged_rrule(X, nW, lengths=None):
    Y = _seq2col(X, nW, lengths)
    return Y, lambda dY: (_backprop_seq2col(dY, nW, lengths), None, None)


# ===== layers with parameters ===========================================================================


def layernorm_(X, G, b):  # layers/layernorm.py:23-26, 58-62, 72-76
    mu = X.mean(axis=1, keepdims=True)
    var = X.var(axis=1, keepdims=True) + 1e-08
    Xhat = (X - mu) * var ** (-1.0 / 2.0)
    Y = Xhat * G
    Y += b
    return Y


# layers/layernorm.py:23-36, 58-69, 79-89 ``dY = dY * G`` (G: ``(dY * Xhat).sum(0)``, b: ``dY.sum(0)``);
# ``d_xhat = N * dY - sum_dy - dist * var ** (-1.0) * sum_dy_dist; d_xhat *= var ** (-1.0 / 2); d_xhat /= N``
@rrule(layernorm_, arrays(shape=(2, 4)), arrays(shape=(4,)), arrays(shape=(4,)))
def thinc_layernorm_rrule(X, G, b):
    N = np.asarray([X.shape[1]], dtype="float32")  # ops.asarray_f([X.shape[1]])
    mu = X.mean(axis=1, keepdims=True)
    var = X.var(axis=1, keepdims=True) + 1e-08
    Xhat = (X - mu) * var ** (-1.0 / 2.0)
    Y = Xhat * G
    Y += b

    def pullback(dY):
        db = dY.sum(axis=0)
        dG = (dY * Xhat).sum(axis=0)
        dY = dY * G
        dist = X - mu
        sum_dy = np.sum(dY, axis=1, keepdims=True)
        sum_dy_dist = np.sum(dY * dist, axis=1, keepdims=True)
        d_xhat = N * dY - sum_dy - dist * var ** (-1.0) * sum_dy_dist
        d_xhat *= var ** (-1.0 / 2)
        d_xhat /= N
        return d_xhat, dG, db

    return Y, pullback


def cauchysimilarity_(X1, X2, W):  # layers/cauchysimilarity.py:26-34, 58-59
    diff = X1 - X2
    square_diff = diff ** 2
    total = (W * square_diff).sum(axis=1)
    return 1.0 / (1 + total)


# layers/cauchysimilarity.py:36-42, 61-62 ``d_total = d_inverse * (-1 / (total + 1) ** 2)``;
# W: ``(d_total * square_diff).sum(axis=0)``; ``d_diff = 2 * (W * d_total) * diff; return (d_diff, -d_diff)``
@rrule(cauchysimilarity_, arrays(shape=(2, 3)), arrays(shape=(2, 3)), arrays(shape=(3,), min_value=0.0, max_value=10.0))
def thinc_cauchysimilarity_rrule(X1, X2, W):
    diff = X1 - X2
    square_diff = diff ** 2
    total = (W * square_diff).sum(axis=1)
    sim = 1.0 / (1 + total)

    def pullback(d_sim):
        d_total = d_sim * (-1 / (total + 1) ** 2)
        d_total = d_total.reshape(-1, 1)
        dW = (d_total * square_diff).sum(axis=0)
        d_square_diff = W * d_total
        d_diff = 2 * d_square_diff * diff
        return d_diff, -d_diff, dW

    return sim, pullback


def parametric_attention_(X, Q, lengths):  # layers/parametricattention.py:18-21, 44-47, 57-58
    attention = X @ Q.reshape(-1, 1)
    attention = _softmax_sequences(attention, lengths)
    return X * attention


# layers/parametricattention.py:23-29, 48-52, 60-63 ``d_attention = (X * d_output).sum(axis=1, keepdims=True);
# dX = d_output * attention``; ``d_attention = backprop_softmax_sequences(d_attention, attention, lengths);
# dQ = X.T @ d_attention; dX2 = outer(d_attention, Q)``; ``dX += dX2``. Drawn where the logits X @ Q stay inside
# softmax_sequences' clip at +-20 (|X| <= 5, |Q| <= 1, 3 features).
@rrule(parametric_attention_, arrays(shape=(5, 3), min_value=-5.0, max_value=5.0),
       arrays(shape=(3,), min_value=-1.0, max_value=1.0), constant(np.array([2, 3], dtype=np.int32)))
def thinc_parametric_attention_rrule(X, Q, lengths):
    attention = X @ Q.reshape(-1, 1)
    attention = _softmax_sequences(attention, lengths)
    output = X * attention

    def pullback(dY):
        d_attention = (X * dY).sum(axis=1, keepdims=True)
        dX = dY * attention
        d_attention = _backprop_softmax_sequences(d_attention, attention, lengths)
        dQ = X.T @ d_attention
        dX2 = np.outer(d_attention, Q)
        dX += dX2
        return dX, dQ.ravel(), None

    return output, pullback


def maxout_layer_(X, W, b):  # layers/maxout.py:45-55
    nO, nP, nI = W.shape
    W2 = W.reshape(nO * nP, nI)
    Y = X @ W2.T
    Y += b.reshape(nO * nP)
    Z = Y.reshape(Y.shape[0], nO, nP)
    return _maxout(Z)[0]


# layers/maxout.py:57-64 ``dZ = backprop_maxout(d_best, which, nP)``; b: ``dZ.sum(axis=0)``;
# W: ``reshape3f(gemm(dY, X, trans1=True), nO, nP, nI)``; ``gemm(dY, reshape2f(W, nO * nP, nI))``
@rrule(maxout_layer_, arrays(shape=(2, 3)), arrays(shape=(2, 3, 3)), arrays(shape=(2, 3)))
def thinc_maxout_layer_rrule(X, W, b):
    nO, nP, nI = W.shape
    W2 = W.reshape(nO * nP, nI)
    Y = X @ W2.T
    Y += b.reshape(nO * nP)
    Z = Y.reshape(Y.shape[0], nO, nP)
    best, which = _maxout(Z)

    def pullback(d_best):
        dZ = _backprop_maxout(d_best, which, nP)
        db = dZ.sum(axis=0)
        dY = dZ.reshape(dZ.shape[0], nO * nP)
        dW = (dY.T @ X).reshape(nO, nP, nI)
        return dY @ W2, dW, db

    return best, pullback


def relu_layer_(X, W, b):  # layers/relu.py:44-48 ``relu(affine(X, W, b))``
    Y = X @ W.T
    Y += b
    return relu_(Y)


# layers/relu.py:50-54 ``dY = backprop_relu(dY, Y)``; b: ``dY.sum(axis=0)``; W: ``gemm(dY, X, trans1=True)``;
# ``gemm(dY, W)``
@rrule(relu_layer_, arrays(shape=(2, 3)), arrays(shape=(4, 3)), arrays(shape=(4,)))
def thinc_relu_layer_rrule(X, W, b):
    Y = relu_layer_(X, W, b)

    def pullback(dY):
        dY = dY * (Y > 0)
        return dY @ W, dY.T @ X, dY.sum(axis=0)

    return Y, pullback


def embed_(E, ids):  # layers/embed.py:48-55 ``vectors[ids]`` (no dropout)
    return E[ids]


# layers/embed.py:62-69 ``d_vectors = alloc2f(*vectors.shape); scatter_add(d_vectors, ids, d_output)``
# (alloc2f's default dtype is float32; numpy_ops.pyx:501-519: float64 values go to ``xp.add.at(table, indices,
# values)``, so thinc's gradient of a float64 table is a float32 array)
@rrule(embed_, arrays(shape=(5, 3)), constant(np.array([0, 2, 2, 4], dtype=np.int32)))
def thinc_embed_rrule(E, ids):
    output = E[ids]

    def pullback(d_output):
        d_vectors = np.zeros(E.shape, dtype="float32")
        np.add.at(d_vectors, ids, d_output)
        return d_vectors, None

    return output, pullback


# ===== losses (thinc/loss.py) ==============================================================================


def _cosine(guesses, truths):  # loss.py:345-358 (CosineDistance.get_similarity)
    yh = guesses + 1e-8
    y = truths + 1e-8
    norm_yh = np.linalg.norm(yh, axis=1, keepdims=True)
    norm_y = np.linalg.norm(y, axis=1, keepdims=True)
    mul_norms = norm_yh * norm_y
    return (yh * y).sum(axis=1, keepdims=True) / mul_norms


def cosine_distance_(guesses, truths, ignore_zeros=False):  # loss.py:386-401 (get_loss, normalize=True)
    cosine = _cosine(guesses, truths)
    losses = np.abs(cosine - 1)
    if ignore_zeros:
        zero_indices = np.abs(truths).sum(axis=1) == 0
        losses[zero_indices] = 0
    losses = losses / guesses.shape[0]
    return losses.sum()


def _cosine_grad(guesses, truths, ignore_zeros):  # loss.py:360-384 (get_grad, normalize=True)
    if ignore_zeros:
        zero_indices = np.abs(truths).sum(axis=1) == 0
    yh = guesses + 1e-8
    y = truths + 1e-8
    norm_yh = np.linalg.norm(yh, axis=1, keepdims=True)
    norm_y = np.linalg.norm(y, axis=1, keepdims=True)
    mul_norms = norm_yh * norm_y
    cosine = (yh * y).sum(axis=1, keepdims=True) / mul_norms
    d_yh = (y / mul_norms) - (cosine * (yh / norm_yh ** 2))
    if ignore_zeros:
        d_yh[zero_indices] = 0
    d_yh = d_yh / guesses.shape[0]
    return -d_yh


TRUTHS = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [-2.0, 1.0, 0.5]])
TRUTHS_ZERO_ROW = np.array([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0], [-2.0, 1.0, 0.5]])


# loss.py:360-401 (CosineDistance(normalize=True), get_loss; get_grad as the gradient of the loss)
# ``d_yh = (y / mul_norms) - (cosine * (yh / norm_yh**2)); d_yh /= N; return -d_yh``
@rrule(cosine_distance_, arrays(shape=(3, 3)), constant(TRUTHS))
def thinc_cosine_distance_rrule(guesses, truths, ignore_zeros=False):
    loss = cosine_distance_(guesses, truths, ignore_zeros)
    return loss, lambda g: (g * _cosine_grad(guesses, truths, ignore_zeros), None)


# the same with ignore_zeros=True and a zero row in the truths: ``d_yh[zero_indices] = 0``, loss 0 for that row
@rrule(cosine_distance_, arrays(shape=(3, 3)), constant(TRUTHS_ZERO_ROW), kwargs={"ignore_zeros": True},
       name="thinc_cosine_distance_ignore_zeros_rrule")
def thinc_cosine_distance_ignore_zeros_rrule(guesses, truths, ignore_zeros=False):
    loss = cosine_distance_(guesses, truths, ignore_zeros)
    return loss, lambda g: (g * _cosine_grad(guesses, truths, ignore_zeros), None)


# ===== further variants ===================================================================================


# ops.py:811-848 at a low temperature (0.05): logits up to 2000 apart, most probabilities 0 or 1
@rrule(softmax_, arrays(shape=(2, 4), min_value=-100.0, max_value=100.0), kwargs={"temperature": 0.05},
       name="thinc_softmax_cold_rrule")
def thinc_softmax_cold_rrule(x, axis=-1, temperature=1.0):
    return _softmax_rule(x, axis, temperature)


# ops.py:914-948 with a slope and offset that are not binary fractions, so ``low`` and ``high`` are rounded
@rrule(clipped_linear_, arrays(shape=(2, 3)),
       kwargs={"slope": 0.1, "offset": 0.3, "min_val": -0.7, "max_val": 0.9}, name="thinc_clipped_linear_inexact_rrule")
def thinc_clipped_linear_inexact_rrule(X, slope=1.0, offset=0.0, min_val=0.0, max_val=1.0):
    Y = _clipped_linear(X, slope, offset, min_val, max_val)
    return Y, lambda dY: (_backprop_clipped_linear(dY, X, slope, offset, min_val, max_val),)


# layers/layernorm.py:23-89 on inputs whose variance is comparable with the 1e-08 added to it
@rrule(layernorm_, arrays(shape=(2, 4), min_value=-1e-3, max_value=1e-3), arrays(shape=(4,)), arrays(shape=(4,)),
       name="thinc_layernorm_small_rrule")
def thinc_layernorm_small_rrule(X, G, b):
    return thinc_layernorm_rrule.rrule(X, G, b)


def mish_layer_(X, W, b):  # layers/mish.py:47-52 ``Y_pre_mish = gemm(X, W, trans2=True) + b; mish(Y_pre_mish)``
    Y_pre_mish = X @ W.T
    Y_pre_mish += b
    return mish_cpu_(Y_pre_mish)


# layers/mish.py:54-59 ``dY_pre_mish = backprop_mish(dY, Y_pre_mish)``; W: ``gemm(dY_pre_mish, X, trans1=True)``;
# b: ``dY_pre_mish.sum(axis=0)``; ``gemm(dY_pre_mish, W)`` (NumpyOps' cpu_backprop_mish)
@rrule(mish_layer_, arrays(shape=(2, 3)), arrays(shape=(4, 3)), arrays(shape=(4,)))
def thinc_mish_layer_rrule(X, W, b):
    Y_pre_mish = X @ W.T
    Y_pre_mish += b
    Y, bp = thinc_mish_cpu_rrule.rrule(Y_pre_mish)

    def pullback(dY):
        (dY_pre_mish,) = bp(dY)
        return dY_pre_mish @ W, dY_pre_mish.T @ X, dY_pre_mish.sum(axis=0)

    return Y, pullback


# ops.hash(np.array([1, 2, 3, 7], dtype="uint64"), 42) % 5, as thinc 9.1.1 computes it (MurmurHash3_x86_128)
HASH_KEYS = np.array([[2, 0, 4, 4], [0, 3, 0, 0], [2, 1, 2, 3], [1, 2, 4, 4]], dtype=np.uint32)


def hashembed_(E, keys):  # layers/hashembed.py:59-73; numpy_ops.pyx:484-499, cpu_kernels.hh:468-479 (cpu_gather_add)
    out = np.zeros((keys.shape[0], E.shape[1]), dtype=E.dtype)
    for b in range(keys.shape[0]):
        for k in range(keys.shape[1]):
            out[b] += 1.0 * E[keys[b, k]]
    return out


# layers/hashembed.py:80-89 ``dE = alloc2f(*vectors.shape)`` (float32); ``for i in range(keysT.shape[0]):
# scatter_add(dE, keysT[i], d_vectors)`` (float64 values: ``xp.add.at``). ids [1, 2, 3, 7], seed 42, nV 5.
@rrule(hashembed_, arrays(shape=(5, 3)), constant(HASH_KEYS))
def thinc_hashembed_rrule(E, keys):
    output = hashembed_(E, keys)

    def pullback(d_vectors):
        dE = np.zeros(E.shape, dtype="float32")
        keysT = np.ascontiguousarray(keys.T, dtype="i")
        for i in range(keysT.shape[0]):
            np.add.at(dE, keysT[i], d_vectors)
        return dE, None

    return output, pullback


LABELS = {
    "thinc_sigmoid_rrule": {"source": f"{THINC} thinc/backends/ops.py:773-800"},
    "thinc_dtanh_rrule": {"source": f"{THINC} thinc/backends/ops.py:802-809"},
    "thinc_softmax_rrule": {"source": f"{THINC} thinc/backends/ops.py:811-848"},
    "thinc_softmax_temperature_rrule": {"source": f"{THINC} thinc/backends/ops.py:811-848"},
    "thinc_softmax_sequences_rrule": {"source": f"{THINC} thinc/backends/ops.py:827-856"},
    "thinc_relu_rrule": {"source": f"{THINC} thinc/backends/numpy_ops.pyx:128-157"},
    "thinc_clipped_linear_rrule": {"source": f"{THINC} thinc/backends/ops.py:914-948"},
    "thinc_relu_k_rrule": {"source": f"{THINC} thinc/backends/ops.py:950-956"},
    "thinc_hard_sigmoid_rrule": {"source": f"{THINC} thinc/backends/ops.py:958-964"},
    "thinc_hard_tanh_rrule": {"source": f"{THINC} thinc/backends/ops.py:966-972"},
    "thinc_swish_rrule": {"source": f"{THINC} thinc/backends/ops.py:974-990"},
    "thinc_hard_swish_rrule": {"source": f"{THINC} thinc/backends/ops.py:992-1008"},
    "thinc_hard_swish_mobilenet_rrule": {"source": f"{THINC} thinc/backends/ops.py:1011-1026"},
    "thinc_dish_rrule": {"source": f"{THINC} thinc/backends/ops.py:1028-1057"},
    "thinc_gelu_approx_rrule": {"source": f"{THINC} thinc/backends/ops.py:1084-1110"},
    "thinc_gelu_rrule": {"source": f"{THINC} thinc/backends/ops.py:1112-1128"},
    "thinc_mish_rrule": {"source": f"{THINC} thinc/backends/ops.py:1130-1170"},
    "thinc_mish_cpu_rrule": {"source": f"{THINC} thinc/backends/cpu_kernels.hh:257-289"},
    "thinc_maxout_rrule": {"source": f"{THINC} thinc/backends/numpy_ops.pyx:189-220"},
    "thinc_reduce_sum_rrule": {"source": f"{THINC} thinc/backends/numpy_ops.pyx:385-430"},
    "thinc_reduce_mean_rrule": {"source": f"{THINC} thinc/backends/numpy_ops.pyx:338-383"},
    "thinc_reduce_max_rrule": {"source": f"{THINC} thinc/backends/numpy_ops.pyx:432-482"},
    "thinc_reduce_first_rrule": {"source": f"{THINC} thinc/backends/ops.py:1236-1300"},
    "thinc_reduce_last_rrule": {"source": f"{THINC} thinc/backends/ops.py:1249-1309"},
    "thinc_seq2col_rrule": {"source": f"{THINC} thinc/backends/numpy_ops.pyx:252-326"},
    "thinc_seq2col_ragged_rrule": {"source": f"{THINC} thinc/backends/numpy_ops.pyx:252-326"},
    "thinc_layernorm_rrule": {"source": f"{THINC} thinc/layers/layernorm.py:23-89"},
    "thinc_cauchysimilarity_rrule": {"source": f"{THINC} thinc/layers/cauchysimilarity.py:26-64"},
    "thinc_parametric_attention_rrule": {"source": f"{THINC} thinc/layers/parametricattention.py:18-65"},
    "thinc_maxout_layer_rrule": {"source": f"{THINC} thinc/layers/maxout.py:45-66"},
    "thinc_relu_layer_rrule": {"source": f"{THINC} thinc/layers/relu.py:44-56"},
    "thinc_embed_rrule": {"source": f"{THINC} thinc/layers/embed.py:48-71"},
    "thinc_cosine_distance_rrule": {"source": f"{THINC} thinc/loss.py:345-401"},
    "thinc_cosine_distance_ignore_zeros_rrule": {"source": f"{THINC} thinc/loss.py:345-401"},
    "thinc_softmax_cold_rrule": {"source": f"{THINC} thinc/backends/ops.py:811-848"},
    "thinc_clipped_linear_inexact_rrule": {"source": f"{THINC} thinc/backends/ops.py:914-948"},
    "thinc_layernorm_small_rrule": {"source": f"{THINC} thinc/layers/layernorm.py:23-89"},
    "thinc_mish_layer_rrule": {"source": f"{THINC} thinc/layers/mish.py:47-61"},
    "thinc_hashembed_rrule": {"source": f"{THINC} thinc/layers/hashembed.py:59-91"},
}

UPSTREAM_FLAWS = {
    "thinc_sigmoid_rrule": (
        {"GG201", "GG501", "GG502"},
        "thinc's sigmoid clips X to [-20, 20] (constant outside, derivative exactly 0) but its backprop "
        "dY * Y * (1 - Y) gives sigmoid(20) * (1 - sigmoid(20)) = 2.06115e-9 per unit cotangent there (the "
        "unclipped derivative at x = 30 is 9.4e-14): above float64's atol of 1e-9",
    ),
    "thinc_swish_rrule": (
        {"GG201", "GG501"},
        "swish = X * sigmoid_clipped(X) has derivative sigmoid(+-20) outside [-20, 20]; backprop_swish's "
        "Y + sigmoid(X) * (1 - Y) adds X * s * (1 - s) with s = sigmoid(+-20): -1.01e-7 instead of 2.06e-9 at x = -50",
    ),
    "thinc_gelu_rrule": (
        {"GG201", "GG501"},
        "the forward uses Ops.erf (Abramowitz-Stegun 7.1.26, error 1.5e-7) and the backprop the exact Gaussian pdf: "
        "the pullback differs from the exact derivative of the forward by up to 5.3e-7 (x = -2.425; mpmath), "
        "relative 1.7e-4 at x = -3.714",
    ),
    "thinc_gelu_approx_rrule": (
        {"GG201", "GG203", "GG501"},
        "backprop_gelu_approx uses 6-digit constants (0.0356774, 0.797885, 0.0535161, 0.398942) and a float32 "
        "buffer (alloc_f): it differs from the exact derivative of the forward by up to 3.1e-7 (x = 1.48; mpmath), "
        "relative 2.2e-6 at x = -2.034",
    ),
    "thinc_embed_rrule": (
        {"GG105"},
        "the gradient of the table is accumulated into alloc2f(*E.shape), a float32 buffer, for a float64 table",
    ),
    "thinc_hashembed_rrule": (
        {"GG105"},
        "the gradient of the table is accumulated into alloc2f(*E.shape), a float32 buffer, for a float64 table",
    ),
}
