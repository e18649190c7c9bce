"""Corpus: PyTorch `torch.autograd.Function` rules, correct and buggy (checked with `torch_rule`).

Needs PyTorch (``pip install 'gradguard[torch]'``); the corpus tests skip this module where it is absent.
The buggy ones cover what only PyTorch has (GG701-GG705: backward's structure, needs_input_grad, tensors
kept past the version counter, mark_dirty, double backward) and the common numeric slips.
"""

import numpy as np
import torch

from gradguard import arrays, constant, floats, torch_rule

POSITIVE = arrays(shape=(3,), min_value=0.5, max_value=2.0)


# -- correct -------------------------------------------------------------------------------------------
class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


class MatMul(torch.autograd.Function):
    @staticmethod
    def forward(a, b):
        return a @ b

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.mT, a.mT @ grad


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, s, k):
        ctx.save_for_backward(x, s)
        ctx.k = k
        return x * s * k

    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        return grad * s * ctx.k, (grad * x * ctx.k).sum(), None


class SinCos(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, gs, gc):
        (x,) = ctx.saved_tensors
        return gs * x.cos() - gc * x.sin()


class Mul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (grad * b if ctx.needs_input_grad[0] else None), (grad * a if ctx.needs_input_grad[1] else None)


class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y * (1 - y)


class Softplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.softplus(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x)


exp_torch = torch_rule(Exp, arrays(shape=(3,), max_value=3.0), name="exp_torch")
matmul_setup_context_torch = torch_rule(MatMul, arrays(shape=(2, 3)), arrays(shape=(3, 4)), name="matmul_setup_context_torch")
scale_constant_torch = torch_rule(Scale, arrays(shape=(3,)), floats(), constant(3), name="scale_constant_torch")
sincos_torch = torch_rule(SinCos, arrays(shape=(4,)), name="sincos_torch")
mul_flags_torch = torch_rule(Mul, POSITIVE, POSITIVE, name="mul_flags_torch")
sigmoid_torch = torch_rule(Sigmoid, arrays(shape=(3,), min_value=-10.0, max_value=10.0), name="sigmoid_torch")
softplus_torch = torch_rule(Softplus, arrays(shape=(3,), min_value=-10.0, max_value=10.0), name="softplus_torch")


# -- buggy ---------------------------------------------------------------------------------------------
class ExpTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return 2 * grad * y


class ScaleOneGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k


class ScaleListGrads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, grad):
        return [grad * ctx.k, None]  # a list: PyTorch unpacks only a tuple, so it reads one gradient and raises


class ScaleGradForK(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k, grad.sum()


class MulWrongFlag(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (grad * b if ctx.needs_input_grad[0] else None), (grad * a if ctx.needs_input_grad[0] else None)


class SquareAttr(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return x * x

    @staticmethod
    def backward(ctx, grad):
        return 2 * ctx.x * grad


class DoubleUnmarked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        return x

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


class SinOnce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


class XSinPartlyDetached(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.sin() + x * x.detach().cos())


class TanhSign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.tanh()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (y * y - 1)  # sign slip


class SumOnes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.sum()

    @staticmethod
    def backward(ctx, grad):
        return torch.ones(ctx.shape, dtype=grad.dtype)  # the cotangent's value is ignored


exp_twice_torch = torch_rule(ExpTwice, arrays(shape=(3,), max_value=3.0), name="exp_twice_torch")
scale_one_grad_torch = torch_rule(ScaleOneGrad, arrays(shape=(3,)), constant(2.0), name="scale_one_grad_torch")
scale_list_grads_torch = torch_rule(ScaleListGrads, arrays(shape=(3,)), constant(2.0), name="scale_list_grads_torch")
scale_grad_for_constant_torch = torch_rule(ScaleGradForK, arrays(shape=(3,)), constant(2.0), name="scale_grad_for_constant_torch")
mul_wrong_flag_torch = torch_rule(MulWrongFlag, POSITIVE, POSITIVE, name="mul_wrong_flag_torch")
square_attr_torch = torch_rule(SquareAttr, arrays(shape=(3,)), name="square_attr_torch")
double_unmarked_torch = torch_rule(DoubleUnmarked, arrays(shape=(3,)), mutates=0, name="double_unmarked_torch")
sin_once_torch = torch_rule(SinOnce, arrays(shape=(3,)), name="sin_once_torch")
xsin_detached_torch = torch_rule(XSinPartlyDetached, arrays(shape=(3,)), name="xsin_detached_torch")
tanh_sign_torch = torch_rule(TanhSign, arrays(shape=(3,)), name="tanh_sign_torch")
sum_ones_torch = torch_rule(SumOnes, arrays(shape=(3,)), name="sum_ones_torch")


LABELS = {
    "exp_torch": {"bug": "correct", "expect": []},
    "matmul_setup_context_torch": {"bug": "correct", "expect": []},
    "scale_constant_torch": {"bug": "correct", "expect": []},
    "sincos_torch": {"bug": "correct", "expect": []},
    "mul_flags_torch": {"bug": "correct", "expect": []},
    "sigmoid_torch": {"bug": "correct", "expect": []},
    "softplus_torch": {"bug": "correct", "expect": []},
    "exp_twice_torch": {"bug": "numeric", "expect": ["GG201", "GG501", "GG705"],
                        "what": "backward off by 2; it saves the output, so double backward goes through it twice"},
    "scale_one_grad_torch": {"bug": "torch", "expect": ["GG701"]},
    "scale_list_grads_torch": {"bug": "torch", "expect": ["GG701"],
                               "what": "backward returns a list (torch-interpol's SplineCoeff); PyTorch raises on it"},
    "scale_grad_for_constant_torch": {"bug": "torch", "expect": ["GG701"]},
    "mul_wrong_flag_torch": {"bug": "torch", "expect": ["GG702"]},
    "square_attr_torch": {"bug": "torch", "expect": ["GG703"]},
    "double_unmarked_torch": {"bug": "torch", "expect": ["GG704"],
                              "what": "in-place forward without mark_dirty (in captured-input contexts PyTorch's version "
                                      "counter raises, so its safety matrix, the torch column alone, has no wrong cell)"},
    "sin_once_torch": {"bug": "torch", "expect": ["GG705"]},
    "xsin_detached_torch": {"bug": "torch", "expect": ["GG705"]},
    "tanh_sign_torch": {"bug": "numeric", "expect": ["GG201", "GG501", "GG705"],
                        "what": "sign slip; the saved output carries it into double backward"},
    "sum_ones_torch": {"bug": "numeric", "expect": ["GG201", "GG202", "GG203", "GG301", "GG501"]},
}
