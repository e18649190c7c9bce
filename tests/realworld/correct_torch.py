"""Real-world corpus: correct PyTorch backward formulas, translated to NumPy rrules.

Source: https://github.com/pytorch/pytorch at commit 0002cecdb2e625127b19aac62e7a911e1869141a,
tools/autograd/derivatives.yaml. The comment above each rule quotes the yaml entry (``name:`` and the
formula per input); the pullback writes the same expression with NumPy: ``self`` is the first argument,
``result`` the forward output, ``grad`` the cotangent, ``x.t()`` is ``x.T``, ``a.mv(b)`` is ``a @ b``,
``a.ger(b)`` is ``np.outer(a, b)``, ``masked_fill_(m, 0)`` is ``np.where(m, 0, ...)``, ``index_add_`` and
``put_(..., accumulate=true)`` are ``np.add.at``. Keyword-only arguments (``*, Scalar alpha``) are
declared with ``kwargs=``. PyTorch materialises zero gradients, so these pullbacks never see ``None``.
Specs are each function's real domain.
"""

import numpy as np
import scipy.special
from hypothesis import strategies as st

from gradguard import arrays, constant, rrule

TORCH = "pytorch/pytorch@0002cecdb2e625127b19aac62e7a911e1869141a tools/autograd/derivatives.yaml"

M_PI = np.pi


# ----- elementwise -----------------------------------------------------------------------------------------


def acos(x):
    return np.arccos(x)


# - name: acos(Tensor self)
#   self: grad * -((-self * self + 1).rsqrt())
@rrule(acos, arrays(shape=(3,), min_value=-0.95, max_value=0.95))
def torch_acos_rrule(self):
    result = np.arccos(self)
    return result, lambda grad: (grad * -(1 / np.sqrt(-self * self + 1)),)


def atan(x):
    return np.arctan(x)


# - name: atan(Tensor self)
#   self: grad / (self * self + 1)
@rrule(atan, arrays(shape=(3,)))
def torch_atan_rrule(self):
    return np.arctan(self), lambda grad: (grad / (self * self + 1),)


def rsqrt(x):
    return 1 / np.sqrt(x)


# - name: rsqrt(Tensor self)
#   self: -0.5 * grad * result.pow(3)
@rrule(rsqrt, arrays(shape=(3,), min_value=0.01, max_value=100.0))
def torch_rsqrt_rrule(self):
    result = 1 / np.sqrt(self)
    return result, lambda grad: (-0.5 * grad * result**3,)


def tan(x):
    return np.tan(x)


# - name: tan(Tensor self)
#   self: grad * (1 + result.pow(2))
@rrule(tan, arrays(shape=(3,), min_value=-1.5, max_value=1.5))
def torch_tan_rrule(self):
    result = np.tan(self)
    return result, lambda grad: (grad * (1 + result**2),)


def erf(x):
    return scipy.special.erf(x)


# - name: erf(Tensor self)
#   self: 2.0 / sqrt(M_PI) * exp(-(self.pow(2))) * grad
@rrule(erf, arrays(shape=(3,)))
def torch_erf_rrule(self):
    return scipy.special.erf(self), lambda grad: (2.0 / np.sqrt(M_PI) * np.exp(-(self**2)) * grad,)


def expm1(x):
    return np.expm1(x)


# - name: expm1(Tensor self)
#   self: grad * (result + 1)
@rrule(expm1, arrays(shape=(3,), min_value=-20.0, max_value=20.0))
def torch_expm1_rrule(self):
    result = np.expm1(self)
    return result, lambda grad: (grad * (result + 1),)


def log10(x):
    return np.log10(x)


# - name: log10(Tensor self)
#   self: grad / (self * 2.3025850929940456)
@rrule(log10, arrays(shape=(3,), min_value=1e-3, max_value=1e3))
def torch_log10_rrule(self):
    return np.log10(self), lambda grad: (grad / (self * 2.3025850929940456),)


def lgamma(x):
    return scipy.special.gammaln(x)


# - name: lgamma(Tensor self)
#   self: grad * digamma(self)
@rrule(lgamma, arrays(shape=(3,), min_value=0.05, max_value=20.0))
def torch_lgamma_rrule(self):
    return scipy.special.gammaln(self), lambda grad: (grad * scipy.special.digamma(self),)


def reciprocal(x):
    return 1 / x


# - name: reciprocal(Tensor self)
#   self: -grad * result * result
@rrule(reciprocal, arrays(shape=(2, 2), min_value=0.1, max_value=10.0))
def torch_reciprocal_rrule(self):
    result = 1 / self
    return result, lambda grad: (-grad * result * result,)


# ----- binary and ternary, keyword-only scalars ---------------------------------------------------------------


def addcdiv(self, tensor1, tensor2, *, value=1.0):
    return self + value * tensor1 / tensor2


# - name: addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value)
#   self: grad
#   tensor1: grad * value / tensor2
#   tensor2: -grad * value * tensor1 / (tensor2 * tensor2)
@rrule(addcdiv, arrays(shape=(3,)), arrays(shape=(3,)), arrays(shape=(3,), min_value=0.5, max_value=5.0), kwargs={"value": 0.5})
def torch_addcdiv_rrule(self, tensor1, tensor2, *, value=1.0):
    result = self + value * tensor1 / tensor2
    return result, lambda grad: (grad, grad * value / tensor2, -grad * value * tensor1 / (tensor2 * tensor2))


def addcmul(self, tensor1, tensor2, *, value=1.0):
    return self + value * tensor1 * tensor2


# - name: addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value)
#   self: grad
#   tensor1: grad * tensor2 * value
#   tensor2: grad * tensor1 * value
@rrule(addcmul, arrays(shape=(2, 3)), arrays(shape=(2, 3)), arrays(shape=(2, 3)), kwargs={"value": -2.0})
def torch_addcmul_rrule(self, tensor1, tensor2, *, value=1.0):
    result = self + value * tensor1 * tensor2
    return result, lambda grad: (grad, grad * tensor2 * value, grad * tensor1 * value)


def lerp(self, end, weight):
    return self + weight * (end - self)


# - name: lerp(Tensor self, Tensor end, Tensor weight)
#   self: grad * (1 - weight)
#   end: grad * weight
# (weight has no formula in this version: not differentiated)
@rrule(lerp, arrays(shape=(3,)), arrays(shape=(3,)), constant(np.array([0.0, 0.25, 1.0])))
def torch_lerp_rrule(self, end, weight):
    return self + weight * (end - self), lambda grad: (grad * (1 - weight), grad * weight, None)


def div(self, other):
    return self / other


# - name: div(Tensor self, Tensor other)
#   self: grad / other
#   other: -grad * self / (other * other)
@rrule(div, arrays(shape=(3,)), arrays(shape=(3,), min_value=0.5, max_value=5.0))
def torch_div_rrule(self, other):
    return self / other, lambda grad: (grad / other, -grad * self / (other * other))


def maximum(self, other):
    return np.maximum(self, other)


# - name: max(Tensor self, Tensor other)
#   self: grad.clone().masked_fill_(self <= other, 0)
#   other: grad.clone().masked_fill_(self > other, 0)
# (at a tie the whole cotangent goes to `other`: a one-sided derivative); entries from few values tie often
@rrule(maximum, arrays(shape=(4,), elements=st.sampled_from([-1.0, 0.0, 2.0])),
       arrays(shape=(4,), elements=st.sampled_from([-1.0, 0.0, 2.0])))
def torch_max_binary_rrule(self, other):
    result = np.maximum(self, other)
    return result, lambda grad: (np.where(self <= other, 0, grad), np.where(self > other, 0, grad))


def clamp_min(self, min):
    return np.maximum(self, min)


# - name: clamp_min(Tensor self, Scalar min)
#   self: grad * (self >= min).to(grad.dtype())
@rrule(clamp_min, arrays(shape=(5,), elements=st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0])), constant(0.0))
def torch_clamp_min_rrule(self, min):
    return np.maximum(self, min), lambda grad: (grad * (self >= min).astype(np.asarray(grad).dtype), None)


# ----- matrices --------------------------------------------------------------------------------------------


def addmv(self, mat, vec, *, beta=1.0, alpha=1.0):
    return beta * self + alpha * (mat @ vec)


# - name: addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta, Scalar alpha)
#   self: maybe_multiply(grad, beta)
#   mat: grad.ger(vec) * alpha
#   vec: mat.t().mv(grad) * alpha
@rrule(addmv, arrays(shape=(3,)), arrays(shape=(3, 4)), arrays(shape=(4,)), kwargs={"beta": 0.5, "alpha": 2.0})
def torch_addmv_rrule(self, mat, vec, *, beta=1.0, alpha=1.0):
    result = beta * self + alpha * (mat @ vec)
    return result, lambda grad: (grad * beta, np.outer(grad, vec) * alpha, mat.T @ grad * alpha)


def addr(self, vec1, vec2, *, beta=1.0, alpha=1.0):
    return beta * self + alpha * np.outer(vec1, vec2)


# - name: addr(Tensor self, Tensor vec1, Tensor vec2, *, Scalar beta, Scalar alpha)
#   self: maybe_multiply(grad, beta)
#   vec1: grad.mv(vec2) * alpha
#   vec2: grad.t().mv(vec1) * alpha
# (defaults beta = alpha = 1: maybe_multiply returns grad itself)
@rrule(addr, arrays(shape=(3, 2)), arrays(shape=(3,)), arrays(shape=(2,)))
def torch_addr_rrule(self, vec1, vec2, *, beta=1.0, alpha=1.0):
    result = beta * self + alpha * np.outer(vec1, vec2)
    return result, lambda grad: (grad if beta == 1 else grad * beta, grad @ vec2 * alpha, grad.T @ vec1 * alpha)


def bmm(self, mat2):
    return np.matmul(self, mat2)


# - name: bmm(Tensor self, Tensor mat2)
#   self: grad.bmm(mat2.transpose(1, 2))
#   mat2: self.transpose(1, 2).bmm(grad)
@rrule(bmm, arrays(shape=(2, 3, 4)), arrays(shape=(2, 4, 2)))
def torch_bmm_rrule(self, mat2):
    return np.matmul(self, mat2), lambda grad: (grad @ mat2.transpose(0, 2, 1), self.transpose(0, 2, 1) @ grad)


def inverse(self):
    return np.linalg.inv(self)


# - name: inverse(Tensor self)
#   self: -at::matmul(result.transpose(-2, -1), at::matmul(grad, result.transpose(-2, -1)))
@rrule(inverse, arrays(shape=(2, 3, 3), min_value=-1.0, max_value=1.0).map(lambda a: a + 4.0 * np.eye(3)))
def torch_inverse_rrule(self):
    result = np.linalg.inv(self)
    rt = np.swapaxes(result, -2, -1)
    return result, lambda grad: (-np.matmul(rt, np.matmul(grad, rt)),)


def cross(self, other, dim):
    return np.cross(self, other, axis=dim)


# - name: cross(Tensor self, Tensor other, int64_t dim)
#   self: other.cross(grad, dim)
#   other: grad.cross(self, dim)
@rrule(cross, arrays(shape=(3, 2)), arrays(shape=(3, 2)), constant(0))
def torch_cross_dim_rrule(self, other, dim):
    result = np.cross(self, other, axis=dim)
    return result, lambda grad: (np.cross(other, grad, axis=dim), np.cross(grad, self, axis=dim), None)


def expand(self, size):
    return np.broadcast_to(self, size).copy()


def sum_to(grad, shape):
    """at::sum_to: sum the leading axes away, then the axes where ``shape`` has 1 (keeping them)."""
    lead = grad.ndim - len(shape)
    g = grad.sum(axis=tuple(range(lead))) if lead else grad
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


# - name: expand(Tensor self, IntArrayRef size, *, bool implicit)
#   self: at::sum_to(grad, self.sizes())
@rrule(expand, arrays(shape=(3, 1)), constant((2, 3, 4)))
def torch_expand_rrule(self, size):
    return np.broadcast_to(self, size).copy(), lambda grad: (sum_to(grad, self.shape), None)


# ----- indexing ----------------------------------------------------------------------------------------------


def index_select(self, dim, index):
    return np.take(self, index, axis=dim)


# - name: index_select(Tensor self, int64_t dim, Tensor index)
#   self: at::zeros(self.sizes(), grad.options()).index_add_(dim, index, grad)
@rrule(index_select, arrays(shape=(3, 4)), constant(1), constant(np.array([3, 0, 3, 1])))
def torch_index_select_rrule(self, dim, index):
    def backward(grad):
        out = np.zeros(self.shape, dtype=grad.dtype)
        np.add.at(out, (slice(None), index) if dim == 1 else index, grad)
        return out

    return np.take(self, index, axis=dim), lambda grad: (backward(grad), None, None)


def gather(self, dim, index):
    return np.take_along_axis(self, index, axis=dim)


# - name: gather(Tensor self, int64_t dim, Tensor index, bool sparse_grad)
#   self: "... at::zeros(self.sizes(), grad.options()).scatter_add_(dim, index, grad)"
@rrule(gather, arrays(shape=(2, 3)), constant(1), constant(np.array([[0, 0, 2, 1], [2, 2, 2, 0]])))
def torch_gather_rrule(self, dim, index):
    def backward(grad):
        out = np.zeros(self.shape, dtype=grad.dtype)
        rows = np.broadcast_to(np.arange(index.shape[0])[:, None], index.shape)
        np.add.at(out, (rows, index), grad)  # scatter_add_ along dim 1
        return out

    return np.take_along_axis(self, index, axis=dim), lambda grad: (backward(grad), None, None)


def take(self, index):
    return np.take(self, index)


# - name: take(Tensor self, Tensor index)
#   self: zeros_like(self).put_(index, grad, true)
@rrule(take, arrays(shape=(2, 3)), constant(np.array([5, 0, 5, 2])))
def torch_take_rrule(self, index):
    def backward(grad):
        out = np.zeros(self.shape, dtype=grad.dtype)  # C order, so that reshape(-1) is a view of it
        np.add.at(out.reshape(-1), index, grad)  # put_ with accumulate=true, on the flattened tensor
        return out

    return np.take(self, index), lambda grad: (backward(grad), None)


def masked_fill(self, mask, value):
    return np.where(mask, value, self)


# - name: masked_fill_(Tensor self, Tensor mask, Tensor value)
#   self: grad.clone().masked_fill_(mask, 0)
#   value: at::where(mask, grad, zeros_like(grad)).sum()
@rrule(masked_fill, arrays(shape=(2, 3)), constant(np.array([[True, False, False], [True, True, False]])), arrays(shape=()))
def torch_masked_fill_rrule(self, mask, value):
    result = np.where(mask, value, self)
    return result, lambda grad: (np.where(mask, 0, grad), None, np.where(mask, grad, np.zeros_like(grad)).sum())


def rot90(self, k, dims):
    return np.rot90(self, k, axes=dims)


# - name: rot90(Tensor self, int64_t k, IntArrayRef dims)
#   self: grad.rot90(-k, dims)
@rrule(rot90, arrays(shape=(2, 3, 4)), constant(1), constant((1, 2)))
def torch_rot90_rrule(self, k, dims):
    return np.rot90(self, k, axes=dims).copy(), lambda grad: (np.rot90(grad, -k, axes=dims).copy(), None, None)


def roll(self, shifts, dims):
    return np.roll(self, shifts, axis=dims)


# - name: roll(Tensor self, IntArrayRef shifts, IntArrayRef dims)
#   self: grad.roll(fmap(reverse_list(shifts), [](int64_t i){return -i;}), reverse_list(dims))
@rrule(roll, arrays(shape=(3, 4)), constant((1, -2)), constant((0, 1)))
def torch_roll_rrule(self, shifts, dims):
    def backward(grad):
        return np.roll(grad, [-i for i in reversed(shifts)], axis=tuple(reversed(dims)))

    return np.roll(self, shifts, axis=dims), lambda grad: (backward(grad), None, None)


def median_all(self):
    return np.sort(self.ravel())[(self.size - 1) // 2]


# - name: median(Tensor self)   self: evenly_distribute_backward(grad, self, result)
# evenly_distribute_backward (FunctionsManual.cpp): mask = self == result; grad / mask.sum() on the mask. At a tie the
# cotangent is shared equally among the tied entries: a convex combination of their one-hot gradients (a Clarke
# subgradient). Checked against torch.autograd.grad of torch.median in float64 (to 4e-15, ties included). Ties drawn
# on purpose.
@rrule(median_all, arrays(shape=(5,), elements=st.sampled_from([-1.0, 0.0, 1.0, 2.0])))
def torch_median_rrule(self):
    result = median_all(self)

    def pullback(grad):
        mask = self == result
        return (np.where(mask, grad / mask.sum(), 0.0),)

    return result, pullback


LABELS = {
    name: {"source": TORCH}
    for name in [
        "torch_acos_rrule", "torch_atan_rrule", "torch_rsqrt_rrule", "torch_tan_rrule", "torch_erf_rrule",
        "torch_expm1_rrule", "torch_log10_rrule", "torch_lgamma_rrule", "torch_reciprocal_rrule",
        "torch_addcdiv_rrule", "torch_addcmul_rrule", "torch_lerp_rrule", "torch_div_rrule",
        "torch_max_binary_rrule", "torch_clamp_min_rrule", "torch_addmv_rrule", "torch_addr_rrule",
        "torch_bmm_rrule", "torch_inverse_rrule", "torch_cross_dim_rrule", "torch_expand_rrule",
        "torch_index_select_rrule", "torch_gather_rrule", "torch_take_rrule", "torch_masked_fill_rrule",
        "torch_rot90_rrule", "torch_roll_rrule",
    ]
}
LABELS["torch_median_rrule"] = {
    "source": f"{TORCH} (median) and torch/csrc/autograd/FunctionsManual.cpp (evenly_distribute_backward)"}
