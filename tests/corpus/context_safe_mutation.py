"""Corpus: rules that mutate memory, but only memory no caller can see (a private workspace, a copy of the
argument). Safe in every context: every cell of the safety matrix is right."""

import numpy as np

from gradguard import arrays, rrule

_WORK3 = np.empty(3)
_WORK4 = np.empty(4)


def _none_or(tangent):
    return lambda ybar: (None,) if ybar is None else (tangent(ybar),)


def scaled_sum(a):
    np.multiply(a, a, out=_WORK3)
    np.multiply(_WORK3, 3.0, out=_WORK3)
    return float(_WORK3.sum())


@rrule(scaled_sum, arrays(shape=(3,)))
def scaled_sum_rrule(a):
    y = scaled_sum(a)
    da = 6.0 * a  # a fresh residual per call
    return y, _none_or(lambda ybar: da * ybar)


def addone_copy(a):
    a = a.copy()  # mutate a private copy, never the caller's array
    a += 1
    return a.sum()


@rrule(addone_copy, arrays(shape=(3,)))
def addone_copy_rrule(a):
    return addone_copy(a), _none_or(lambda ybar: np.full(a.shape, ybar))


def cumsum_work(a):
    np.cumsum(a, out=_WORK4)
    return _WORK4.copy()


@rrule(cumsum_work, arrays(shape=(4,)))
def cumsum_work_rrule(a):
    y = cumsum_work(a)
    return y, _none_or(lambda ybar: np.cumsum(ybar[::-1])[::-1].copy())


def softmax_work(a):
    np.subtract(a, a.max(), out=_WORK3)
    np.exp(_WORK3, out=_WORK3)
    _WORK3[:] /= _WORK3.sum()
    return _WORK3.copy()


@rrule(softmax_work, arrays(shape=(3,), min_value=-3.0, max_value=3.0))
def softmax_work_rrule(a):
    s = softmax_work(a)  # a copy: later calls overwrite the workspace, not s
    return s, _none_or(lambda ybar: s * (ybar - np.dot(s, ybar)))


def norm_scratch(a):
    tmp = a.copy()
    tmp **= 2
    return float(np.sqrt(tmp.sum()))


@rrule(norm_scratch, arrays(shape=(3,), min_value=0.5, max_value=2.0))
def norm_scratch_rrule(a):
    y = norm_scratch(a)
    return y, _none_or(lambda ybar: a / y * ybar)


LABELS = {
    "scaled_sum_rrule": {"bug": "correct", "what": "none (private workspace)", "expect": []},
    "addone_copy_rrule": {"bug": "correct", "what": "none (mutates a copy)", "expect": []},
    "cumsum_work_rrule": {"bug": "correct", "what": "none (private workspace)", "expect": []},
    "softmax_work_rrule": {"bug": "correct", "what": "none (private workspace)", "expect": []},
    "norm_scratch_rrule": {"bug": "correct", "what": "none (in-place scratch copy)", "expect": []},
}
