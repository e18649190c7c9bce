"""Constants without an array form of NumPy's own: a SciPy sparse matrix beside a NumPy rule, a PyTorch sparse
tensor beside a `torch_rule` (linear_operator's DSMM takes one). Every check runs, none crashes on them (GG401
compared them through np.asarray, the safety matrix asked whether they were complex), and a wrong pullback is
still found."""

import numpy as np
import pytest
import scipy.sparse as sp

from gradguard.checker import arrays, check, constant, rrule

A = sp.csr_matrix(np.array([[1.5, 0.0, -2.0], [0.0, 0.5, 0.0], [3.0, 0.0, -1.0]]))


def spmv(a, x):
    return a @ x


@rrule(spmv, constant(A), arrays(shape=(3,)))
def spmv_rrule(a, x):
    return a @ x, lambda g: (None, a.T @ g)


@rrule(spmv, constant(A), arrays(shape=(3,)))
def spmv_untransposed_rrule(a, x):
    return a @ x, lambda g: (None, a @ g)  # the transpose forgotten


def _result(rule, **kwargs):
    result = check(rule, seed=0, **kwargs).rules[0]
    assert result.verdict != "error", result.error
    return result


def test_a_scipy_sparse_constant_is_checked_by_every_check(recwarn):
    result = _result(spmv_rrule)
    assert result.findings == [] and result.verdict == "pass"
    assert {"GG101", "GG201", "GG401", "GG402", "GG501"} <= set(result.checks_run)
    assert not [w for w in recwarn if "sparse" in str(w.message).lower()]  # no SciPy warning per comparison
    assert {f.check_id for f in _result(spmv_untransposed_rrule, select=["GG201", "GG5"]).findings} >= {"GG201", "GG501"}


torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install 'gradguard[torch]'")

from gradguard.checker import torch_rule  # noqa: E402


class SparseTimesDense(torch.autograd.Function):  # linear_operator's DSMM, 2-D branch
    @staticmethod
    def forward(ctx, sparse, dense):
        ctx.sparse = sparse
        return torch.sparse.mm(sparse, dense)

    @staticmethod
    def backward(ctx, grad_output):
        return None, torch.sparse.mm(ctx.sparse.mT, grad_output)


class SparseTimesDenseUntransposed(SparseTimesDense):
    @staticmethod
    def backward(ctx, grad_output):
        return None, torch.sparse.mm(ctx.sparse, grad_output)


_T = torch.sparse_coo_tensor(torch.tensor([[0, 0, 1, 2, 2], [1, 2, 2, 0, 2]]),
                             torch.tensor([1.5, -2.0, 0.5, 3.0, -1.0], dtype=torch.float64), (3, 3),
                             check_invariants=True).coalesce()


def test_a_torch_sparse_constant_is_checked_by_every_check():
    result = _result(torch_rule(SparseTimesDense, constant(_T), arrays(shape=(3, 2))))
    assert result.findings == [] and result.verdict == "pass"
    assert {"GG201", "GG401", "GG501"} <= set(result.checks_run)
    broken = _result(torch_rule(SparseTimesDenseUntransposed, constant(_T), arrays(shape=(3, 2))), select=["GG201"])
    assert [f.check_id for f in broken.findings] == ["GG201"]


class _Operator:
    """An operator object as ODL's are: it holds its array module, which copy.deepcopy refuses."""

    def __init__(self, k):
        self.k = k
        self.ns = np


def _scale(op, x):
    return x * op.k


@rrule(_scale, constant(_Operator(2.0)), arrays(shape=(3,)))
def scale_off_by_one_rrule(op, x):
    return x * op.k, lambda g: (None, g * (op.k + 1))  # wrong in several checks


def test_a_constant_deepcopy_refuses_does_not_crash_the_search_of_a_second_failing_check():
    result = check(scale_off_by_one_rrule, seed=0).rules[0]
    assert result.verdict == "fail", result.error
    failed = {f.check_id for f in result.findings if f.severity == "error"}
    assert {"GG201", "GG203"} <= failed, failed  # the second one's search starts from the first's kept input
