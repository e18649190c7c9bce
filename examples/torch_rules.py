"""PyTorch rules: `torch.autograd.Function` subclasses checked with `torch_rule` (needs PyTorch).

    gradguard check examples/torch_rules.py

One correct Function and one per PyTorch-specific way of being wrong:

    exp_rule              correct: passes every check
    scale_rule            backward returns one gradient for two forward inputs        GG701
    mul_rule              backward reads the wrong ctx.needs_input_grad flag          GG702
    square_rule           the input is kept on ctx, past the version counter          GG703
    double_rule           forward writes into its input without ctx.mark_dirty        GG704
    sin_rule              backward is @once_differentiable: no double backward        GG705
    cube_rule             backward sets x.grad and returns it too: counted twice      GG706
    flat_rule             backward views its gradient: raises after y.sum(0)          GG707
"""

import torch

from gradguard import arrays, constant, torch_rule


# -- correct -----------------------------------------------------------------------------------------
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


exp_rule = torch_rule(Exp, arrays(shape=(3,), max_value=3.0))


# -- GG701: one gradient per forward input, None for a non-tensor ----------------------------------------
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k  # should be: grad * ctx.k, None


scale_rule = torch_rule(Scale, arrays(shape=(3,)), constant(2.0))


# -- GG702: each gradient under its own flag -----------------------------------------------------------
class Mul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        ga = grad * b if ctx.needs_input_grad[0] else None
        gb = grad * a if ctx.needs_input_grad[0] else None  # should read needs_input_grad[1]
        return ga, gb


mul_rule = torch_rule(Mul, arrays(shape=(3,), min_value=0.5, max_value=2.0), arrays(shape=(3,), min_value=0.5, max_value=2.0))


# -- GG703: save with ctx.save_for_backward, not as an attribute -------------------------------------------
class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.x = x  # should be: ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        return 2 * ctx.x * grad


square_rule = torch_rule(Square, arrays(shape=(3,)))


# -- GG704: an in-place forward marks its input dirty ----------------------------------------------------
class Double_(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)  # should be followed by ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


double_rule = torch_rule(Double_, arrays(shape=(3,)), mutates=0)


# -- GG705: a backward that can be differentiated again ---------------------------------------------------
class Sin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    @torch.autograd.function.once_differentiable  # drop it: x.cos() is differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


sin_rule = torch_rule(Sin, arrays(shape=(3,)))


# -- GG706: return the gradient; never write x.grad in backward -------------------------------------------
class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        gx = 3 * x ** 2 * grad
        x.grad = gx  # drop it: autograd adds the returned gx to a leaf's .grad
        return gx


cube_rule = torch_rule(Cube, arrays(shape=(3,), min_value=-2.0, max_value=2.0))


# -- GG707: the gradient may be expanded or transposed; reshape it, never .view() it ------------------------
class Flat(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad):
        flat = grad.view(-1)  # grad.reshape(-1): after y.sum(0) the gradient is expanded, and .view() raises
        return (2 * flat).view(grad.shape)


flat_rule = torch_rule(Flat, arrays(shape=(3, 4)))
