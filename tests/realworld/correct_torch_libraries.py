"""Real-world corpus: correct `torch.autograd.Function`s from public PyTorch projects, checked with `torch_rule`.

Copied from nerfstudio, gpytorch, pyro, e3nn, geoopt, entmax, PennyLane, memcnn, flash-attention and icefall (the commit of each is in the constants below;
the comment above each Function names its file and lines and quotes the upstream backward). The math is kept
exactly as the source has it; helpers are copied beside it. Specs are each Function's real domain. Left out on
purpose: torchdiffeq's ``_UncheckedAssign``, whose backward hands the overwritten slot a gradient on purpose (its
callers never need one there). PennyLane's fidelity comes in its three interfaces' rules (an autograd VJP written
as an rrule, a JAX custom_vjp and a PyTorch Function) over one formula. Needs PyTorch: tests/realworld/test_realworld_correct.py skips this module where
PyTorch is not installed. ``LABELS`` maps each rule to its source; ``UPSTREAM_FLAWS`` lists the error findings
that are real flaws of the upstream rule, with evidence in INDEX.md.
"""

import functools
import math

import hypothesis.strategies as st

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch.autograd import Function
from torch.cuda.amp import custom_bwd, custom_fwd
from torch.distributions import Normal
from torch.utils.checkpoint import get_device_states, set_device_states

from gradguard import arrays, constant, jax_rule, rrule, torch_rule

NERFSTUDIO = "nerfstudio-project/nerfstudio@50e0e3c70c775e89333256213363badbf074f29d"
GPYTORCH = "cornellius-gp/gpytorch@7c4ec80f0f05cf530348a8a8972d67a11dd26ed2"
PYRO = "pyro-ppl/pyro@ff6ae1c9572591791aae8842bcd702fcf0b46fd6"
E3NN = "e3nn/e3nn@2aa7f58440a06b15352a2cbce01fa4c26f824969"
GEOOPT = "geoopt/geoopt@11f781daa404e80f419d0a2cf709d2a67b846985"  # parent of d7c115c, which removed them
ENTMAX = "deep-spin/entmax@c2bec6d5e7d649cba7766c2172d89123ec2a6d70"
PENNYLANE = "PennyLaneAI/pennylane@4ac3a0fc72c26333c91f8f4c58f2dcd9e9a9a27c"
MEMCNN = "silvandeleemput/memcnn@439ac2673093d6e226c4f45927c50b7210036e18"
FLASH_ATTN = "Dao-AILab/flash-attention@3c0d49532cb3bc0a36b405f34590ff82cf582853"
ICEFALL = "k2-fsa/icefall@36e0420c7e3e849a25b3d24dbf913c424f3d23c9"


# =====================================================================================================
# nerfstudio  nerfstudio/field_components/activations.py:28-41  (from torch-ngp activation.py)
#   return g * torch.exp(x.clamp(-15, 15))
# "Same as torch.exp, but with the backward pass clipped": exact on [-15, 15], the declared domain.
# =====================================================================================================
class _TruncExp(Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.exp(x)

    @staticmethod
    @custom_bwd
    def backward(ctx, g):
        x = ctx.saved_tensors[0]
        return g * torch.exp(x.clamp(-15, 15))


nerfstudio_trunc_exp_rule = torch_rule(_TruncExp, arrays(shape=(4,), min_value=-15.0, max_value=15.0),
                                       name="nerfstudio_trunc_exp_rule")


# =====================================================================================================
# gpytorch  gpytorch/functions/_log_normal_cdf.py:12-117
#   small z (< -1): |denominator / numerator| * sqrt(2/pi);  else exp(-z^2/2 - log_phi_z + log 0.5) * sqrt(2/pi)
# log Phi(z) with three regimes (series near 0, rational approximation for z < -1, log(Normal.cdf) else).
# Domain: all reals (drawn in [-40, 40]).
# =====================================================================================================
class LogNormalCDF(Function):
    @staticmethod
    def forward(ctx, z):
        c = torch.tensor(
            [
                0.00048204,
                -0.00142906,
                0.0013200243174,
                0.0009461589032,
                -0.0045563339802,
                0.00556964649138,
                0.00125993961762116,
                -0.01621575378835404,
                0.02629651521057465,
                -0.001829764677455021,
                2 * (1 - math.pi / 3),
                (4 - math.pi) / 3,
                1,
                1,
            ],
            dtype=z.dtype,
            device=z.device,
        )

        r = torch.tensor(
            [
                1.2753666447299659525,
                5.019049726784267463450,
                6.1602098531096305441,
                7.409740605964741794425,
                2.9788656263939928886,
            ],
            dtype=z.dtype,
            device=z.device,
        )

        q = torch.tensor(
            [
                2.260528520767326969592,
                9.3960340162350541504,
                12.048951927855129036034,
                17.081440747466004316,
                9.608965327192787870698,
                3.3690752069827527677,
            ],
            dtype=z.dtype,
            device=z.device,
        )

        log_phi_z = torch.zeros_like(z)

        z_near_zero = z.pow(2).lt(0.04)
        z_is_small = z.lt(-1)
        z_is_ordinary = ~(z_near_zero | z_is_small)

        if z_near_zero.sum() > 0:
            log_phi_first = -z.masked_select(z_near_zero).div_(math.sqrt(2 * math.pi))
            f = 0
            for c_i in c.tolist():
                f = log_phi_first.mul(c_i + f)

            log_phi_z.masked_scatter_(z_near_zero, f.mul_(-2).sub_(math.log(2)))

        if z_is_small.sum() > 0:
            z_where_z_is_small = z.masked_select(z_is_small)
            numerator = torch.tensor(0.5641895835477550741, dtype=z.dtype, device=z.device)
            numerator = numerator.expand_as(z_where_z_is_small)
            denominator = torch.tensor(1.0, dtype=z.dtype, device=z.device)
            denominator = denominator.expand_as(z_where_z_is_small)

            for r_i in r:
                numerator = -z_where_z_is_small.mul(numerator.div(math.sqrt(2))) + r_i

            for q_i in q:
                denominator = -z_where_z_is_small.mul(denominator.div(math.sqrt(2))) + q_i

            e = numerator.div(denominator)
            log_phi_z.masked_scatter_(z_is_small, torch.log(e / 2) - z_where_z_is_small.pow(2).div_(2))

            ctx.denominator = denominator
            ctx.numerator = numerator

        log_phi_z.masked_scatter_(z_is_ordinary, torch.log(Normal(0.0, 1.0).cdf(z.masked_select(z_is_ordinary))))

        ctx.save_for_backward(z, log_phi_z)
        return log_phi_z

    @staticmethod
    def backward(ctx, grad_output):
        z, log_phi_z = ctx.saved_tensors
        log_phi_z_grad = torch.zeros_like(z)

        z_is_small = z.lt(-1)
        z_is_not_small = ~z_is_small

        if z_is_small.sum() > 0:
            log_phi_z_grad[z_is_small] = torch.abs(ctx.denominator.div(ctx.numerator)).mul(math.sqrt(2 / math.pi))

        exp = z[z_is_not_small].pow(2).div(-2).sub(log_phi_z[z_is_not_small]).add(math.log(0.5))

        log_phi_z_grad[z_is_not_small] = torch.exp(exp).mul(math.sqrt(2 / math.pi))

        return log_phi_z_grad.mul(grad_output)


gpytorch_log_normal_cdf_rule = torch_rule(LogNormalCDF, arrays(shape=(4,), min_value=-40.0, max_value=40.0),
                                          name="gpytorch_log_normal_cdf_rule")


# =====================================================================================================
# gpytorch  gpytorch/functions/matern_covariance.py:8-56 ; dist() from gpytorch/kernels/kernel.py:52-61
#   lengthscale_grad = grad_output * d_output_d_input   (nu = 2.5: (1 + s)(s^2/3) e^{-s} / lengthscale)
# Gradient only for the lengthscale (x1, x2 must not require grad: the forward raises otherwise).
# Domain: x1, x2 any points (non-differentiable), lengthscale > 0 of shape (1, 1); dist_func as
# MaternKernel passes it (covar_dist -> dist with x1_eq_x2=False).
# =====================================================================================================
def dist(x1, x2, x1_eq_x2=False):
    """Equivalent to `torch.cdist` with p=2, but clamps the minimum element to 1e-15."""
    if not x1_eq_x2:
        res = torch.cdist(x1, x2)
        return res.clamp_min(1e-15)
    res = sq_dist(x1, x2, x1_eq_x2=x1_eq_x2)
    return res.clamp_min_(1e-30).sqrt_()


def sq_dist(x1, x2, x1_eq_x2=False):
    """Equivalent to the square of `torch.cdist` with p=2."""
    adjustment = x1.mean(-2, keepdim=True)
    x1 = x1 - adjustment

    x1_norm = x1.pow(2).sum(dim=-1, keepdim=True)
    x1_pad = torch.ones_like(x1_norm)
    if x1_eq_x2 and not x1.requires_grad and not x2.requires_grad:
        x2, x2_norm, x2_pad = x1, x1_norm, x1_pad
    else:
        x2 = x2 - adjustment
        x2_norm = x2.pow(2).sum(dim=-1, keepdim=True)
        x2_pad = torch.ones_like(x2_norm)
    x1_ = torch.cat([-2.0 * x1, x1_norm, x1_pad], dim=-1)
    x2_ = torch.cat([x2, x2_pad, x2_norm], dim=-1)
    res = x1_.matmul(x2_.transpose(-2, -1))

    if x1_eq_x2 and not x1.requires_grad and not x2.requires_grad:
        res.diagonal(dim1=-2, dim2=-1).fill_(0)

    return res.clamp_min_(0)


class MaternCovariance(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2, lengthscale, nu, dist_func):
        if any(ctx.needs_input_grad[:2]):
            raise RuntimeError("MaternCovariance cannot compute gradients with " "respect to x1 and x2")
        if lengthscale.size(-1) > 1:
            raise ValueError("MaternCovariance cannot handle multiple lengthscales")
        needs_grad = any(ctx.needs_input_grad)
        mean = x1.mean(dim=-2, keepdim=True)
        x1_ = (x1 - mean).div(lengthscale)
        x2_ = (x2 - mean).div(lengthscale)
        scaled_unitless_dist = dist_func(x1_, x2_).mul_(math.sqrt(2 * nu))
        if nu == 0.5:
            scaled_unitless_dist_ = scaled_unitless_dist.clone() if needs_grad else scaled_unitless_dist
            exp_component = scaled_unitless_dist_.neg_().exp_()
            covar_mat = exp_component
            if needs_grad:
                d_output_d_input = scaled_unitless_dist.div_(lengthscale).mul_(exp_component)
        elif nu == 1.5:
            if needs_grad:
                scaled_unitless_dist_ = scaled_unitless_dist.clone()
            linear_term = scaled_unitless_dist.clone().add_(1)
            exp_component = scaled_unitless_dist.neg_().exp_()
            covar_mat = linear_term.mul_(exp_component)
            if needs_grad:
                d_output_d_input = scaled_unitless_dist_.pow_(2).div_(lengthscale).mul_(exp_component)
        elif nu == 2.5:
            linear_term = scaled_unitless_dist.clone().add_(1)
            quadratic_term = scaled_unitless_dist.clone().pow_(2).div_(3)
            exp_component = scaled_unitless_dist.neg_().exp_()
            if needs_grad:
                covar_mat = (linear_term + quadratic_term).mul_(exp_component)
                d_output_d_input = linear_term.mul_(quadratic_term).mul_(exp_component).div_(lengthscale)
            else:
                covar_mat = exp_component.mul_(linear_term.add_(quadratic_term))
        if needs_grad:
            ctx.save_for_backward(d_output_d_input)
        return covar_mat

    @staticmethod
    def backward(ctx, grad_output):
        d_output_d_input = ctx.saved_tensors[0]
        lengthscale_grad = grad_output * d_output_d_input
        return None, None, lengthscale_grad, None, None


def _matern_dist(x1, x2):
    return dist(x1, x2)


gpytorch_matern25_rule = torch_rule(MaternCovariance, arrays(shape=(3, 2)), arrays(shape=(4, 2)),
                                    arrays(shape=(1, 1), min_value=0.1, max_value=10.0), constant(2.5),
                                    constant(_matern_dist), nondiff=(0, 1), name="gpytorch_matern25_rule")
gpytorch_matern15_rule = torch_rule(MaternCovariance, arrays(shape=(3, 2)), arrays(shape=(4, 2)),
                                    arrays(shape=(1, 1), min_value=0.1, max_value=10.0), constant(1.5),
                                    constant(_matern_dist), nondiff=(0, 1), name="gpytorch_matern15_rule")


# =====================================================================================================
# gpytorch  gpytorch/functions/rbf_covariance.py:6-29 ; sq_dist() from gpytorch/kernels/kernel.py:26-49
#   d_output_d_input = unitless_sq_dist * covar_mat / lengthscale
# Domain: x1, x2 non-differentiable points, lengthscale > 0 of shape (1, 1); sq_dist_func as RBFKernel
# passes it (covar_dist(square_dist=True) -> sq_dist with x1_eq_x2=False).
# =====================================================================================================
class RBFCovariance(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2, lengthscale, sq_dist_func):
        if any(ctx.needs_input_grad[:2]):
            raise RuntimeError("RBFCovariance cannot compute gradients with " "respect to x1 and x2")
        if lengthscale.size(-1) > 1:
            raise ValueError("RBFCovariance cannot handle multiple lengthscales")
        needs_grad = any(ctx.needs_input_grad)
        x1_ = x1.div(lengthscale)
        x2_ = x2.div(lengthscale)
        unitless_sq_dist = sq_dist_func(x1_, x2_)
        unitless_sq_dist_ = unitless_sq_dist.clone() if needs_grad else unitless_sq_dist
        covar_mat = unitless_sq_dist_.div_(-2.0).exp_()
        if needs_grad:
            d_output_d_input = unitless_sq_dist.mul_(covar_mat).div_(lengthscale)
            ctx.save_for_backward(d_output_d_input)
        return covar_mat

    @staticmethod
    def backward(ctx, grad_output):
        d_output_d_input = ctx.saved_tensors[0]
        lengthscale_grad = grad_output * d_output_d_input
        return None, None, lengthscale_grad, None


def _rbf_sq_dist(x1, x2):
    return sq_dist(x1, x2)


gpytorch_rbf_rule = torch_rule(RBFCovariance, arrays(shape=(3, 2)), arrays(shape=(4, 2)),
                               arrays(shape=(1, 1), min_value=0.1, max_value=10.0), constant(_rbf_sq_dist),
                               nondiff=(0, 1), name="gpytorch_rbf_rule")


# =====================================================================================================
# pyro  pyro/ops/special.py:15-32
#   return grad / x.clamp(min=torch.finfo(x.dtype).eps)
# "Like torch.log but avoids infinite gradients at log(0) by clamping them to at most 1 / finfo.eps":
# the exact derivative for x >= eps.  Domain: x in [1e-12, 100] (>= eps = 2.2e-16).
# =====================================================================================================
class _SafeLog(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.log()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x.clamp(min=torch.finfo(x.dtype).eps)


pyro_safe_log_rule = torch_rule(_SafeLog, arrays(shape=(4,), min_value=1e-12, max_value=100.0),
                                name="pyro_safe_log_rule")


# =====================================================================================================
# e3nn  e3nn/math/_soft_unit_step.py:4-24
#   dx = where(x > 0, exp(-1 / safe_x) / (safe_x * safe_x), 0)
# theta(x) e^{-1/x}, C-infinity.  Domain: all reals.
# =====================================================================================================
class _SoftUnitStep(torch.autograd.Function):
    # pylint: disable=arguments-differ

    @staticmethod
    def forward(ctx, x) -> torch.Tensor:
        ctx.save_for_backward(x)
        y = torch.zeros_like(x)
        mask = x > 0.0
        safe_x = torch.where(mask, x, torch.ones_like(x))  # Avoid division by zero
        y = torch.where(mask, torch.exp(-1.0 / safe_x), torch.zeros_like(x))
        return y

    @staticmethod
    def backward(ctx, dy) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        mask = x > 0.0
        safe_x = torch.where(mask, x, torch.ones_like(x))  # Avoid division by zero
        dx = torch.where(mask, torch.exp(-1.0 / safe_x) / (safe_x * safe_x), torch.zeros_like(x))
        return dx * dy


e3nn_soft_unit_step_rule = torch_rule(_SoftUnitStep, arrays(shape=(4,)), name="e3nn_soft_unit_step_rule")


# =====================================================================================================
# geoopt  geoopt/manifolds/poincare/math.py:23-56 at 11f781d (removed in d7c115c, "K-Stereographic")
#   Artanh: x = x.clamp(-1 + 1e-5, 1 - 1e-5); backward grad_output / (1 - input ** 2)
#   Arsinh: forward log(clamp_min(z + sqrt(1 + z^2), 1e-15)) in double; backward grad / (1 + input^2) ** 0.5
# Domains: artanh exact where the clamp is inactive (|x| <= 1 - 1e-5, drawn |x| <= 0.9999);
#          arsinh on the reals (drawn in [-1000, 1000]).
# =====================================================================================================
MIN_NORM = 1e-15


class Artanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clamp(-1 + 1e-5, 1 - 1e-5)
        ctx.save_for_backward(x)
        dtype = x.dtype
        x = x.double()
        res = (torch.log_(1 + x).sub_(torch.log_(1 - x))).mul_(0.5)
        return res.to(dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        return grad_output / (1 - input ** 2)


class Arsinh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        z = x.double()
        return (z + torch.sqrt_(1 + z.pow(2))).clamp_min_(MIN_NORM).log_().to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        return grad_output / (1 + input ** 2) ** 0.5


geoopt_artanh_rule = torch_rule(Artanh, arrays(shape=(4,), min_value=-0.9999, max_value=0.9999),
                                name="geoopt_artanh_rule")
geoopt_arsinh_rule = torch_rule(Arsinh, arrays(shape=(4,), min_value=-1000.0, max_value=1000.0),
                                name="geoopt_arsinh_rule")


# =====================================================================================================
# entmax  entmax/activations.py:17-166 (helpers 17-142, SparsemaxFunction 145-166; classmethods; a second, integer output)
#   grad_input[output == 0] = 0; v_hat = sum / supp_size; where(output != 0, grad_input - v_hat, grad_input)
# sparsemax over the last dim (dim=-1, k=None: full sort).  Domain: any real matrix.
# =====================================================================================================
def _make_ix_like(X, dim):
    d = X.size(dim)
    rho = torch.arange(1, d + 1, device=X.device, dtype=X.dtype)
    view = [1] * X.dim()
    view[0] = -1
    return rho.view(view).transpose(0, dim)


def _roll_last(X, dim):
    if dim == -1:
        return X
    elif dim < 0:
        dim = X.dim() - dim

    perm = [i for i in range(X.dim()) if i != dim] + [dim]
    return X.permute(perm)


def _sparsemax_threshold_and_support(X, dim=-1, k=None):
    if k is None or k >= X.shape[dim]:  # do full sort
        topk, _ = torch.sort(X, dim=dim, descending=True)
    else:
        topk, _ = torch.topk(X, k=k, dim=dim)

    topk_cumsum = topk.cumsum(dim) - 1
    rhos = _make_ix_like(topk, dim)
    support = rhos * topk > topk_cumsum

    support_size = support.sum(dim=dim).unsqueeze(dim)
    tau = topk_cumsum.gather(dim, support_size - 1)
    tau /= support_size.to(X.dtype)

    if k is not None and k < X.shape[dim]:
        unsolved = (support_size == k).squeeze(dim)

        if torch.any(unsolved):
            in_ = _roll_last(X, dim)[unsolved]
            tau_, ss_ = _sparsemax_threshold_and_support(in_, dim=-1, k=2 * k)
            _roll_last(tau, dim)[unsolved] = tau_
            _roll_last(support_size, dim)[unsolved] = ss_

    return tau, support_size


def _entmax_threshold_and_support(X, dim=-1, k=None):
    if k is None or k >= X.shape[dim]:  # do full sort
        Xsrt, _ = torch.sort(X, dim=dim, descending=True)
    else:
        Xsrt, _ = torch.topk(X, k=k, dim=dim)

    rho = _make_ix_like(Xsrt, dim)
    mean = Xsrt.cumsum(dim) / rho
    mean_sq = (Xsrt ** 2).cumsum(dim) / rho
    ss = rho * (mean_sq - mean ** 2)
    delta = (1 - ss) / rho

    delta_nz = torch.clamp(delta, 0)
    tau = mean - torch.sqrt(delta_nz)

    support_size = (tau <= Xsrt).sum(dim).unsqueeze(dim)
    tau_star = tau.gather(dim, support_size - 1)

    if k is not None and k < X.shape[dim]:
        unsolved = (support_size == k).squeeze(dim)

        if torch.any(unsolved):
            X_ = _roll_last(X, dim)[unsolved]
            tau_, ss_ = _entmax_threshold_and_support(X_, dim=-1, k=2 * k)
            _roll_last(tau_star, dim)[unsolved] = tau_
            _roll_last(support_size, dim)[unsolved] = ss_

    return tau_star, support_size


class SparsemaxFunction(Function):
    @classmethod
    def forward(cls, ctx, X, dim=-1, k=None):
        ctx.dim = dim
        max_val, _ = X.max(dim=dim, keepdim=True)
        X = X - max_val  # same numerical stability trick as softmax
        tau, supp_size = _sparsemax_threshold_and_support(X, dim=dim, k=k)
        output = torch.clamp(X - tau, min=0)
        ctx.save_for_backward(supp_size, output)
        return output, supp_size

    @classmethod
    def backward(cls, ctx, grad_output, supp):
        supp_size, output = ctx.saved_tensors
        dim = ctx.dim
        grad_input = grad_output.clone()
        grad_input[output == 0] = 0

        v_hat = grad_input.sum(dim=dim) / supp_size.to(output.dtype).squeeze(dim)
        v_hat = v_hat.unsqueeze(dim)
        grad_input = torch.where(output != 0, grad_input - v_hat, grad_input)
        return grad_input, None, None, None


entmax_sparsemax_rule = torch_rule(SparsemaxFunction, arrays(shape=(2, 4), min_value=-3.0, max_value=3.0),
                                   constant(-1), constant(None), name="entmax_sparsemax_rule")


# =====================================================================================================
# entmax  entmax/activations.py:169-192  (Entmax15Function)
#   gppr = Y.sqrt(); dX = dY * gppr; q = dX.sum(dim) / gppr.sum(dim); dX -= q * gppr
# 1.5-entmax over the last dim (dim=-1, k=None).  Domain: any real matrix.
# =====================================================================================================
class Entmax15Function(Function):
    @classmethod
    def forward(cls, ctx, X, dim=0, k=None):
        ctx.dim = dim

        max_val, _ = X.max(dim=dim, keepdim=True)
        X = X - max_val  # same numerical stability trick as for softmax
        X = X / 2  # divide by 2 to solve actual Entmax

        tau_star, supp_size = _entmax_threshold_and_support(X, dim=dim, k=k)

        Y = torch.clamp(X - tau_star, min=0) ** 2
        ctx.save_for_backward(Y)
        return Y, supp_size

    @classmethod
    def backward(cls, ctx, dY, supp):
        Y, = ctx.saved_tensors
        gppr = Y.sqrt()  # = 1 / g'' (Y)
        dX = dY * gppr
        q = dX.sum(ctx.dim) / gppr.sum(ctx.dim)
        q = q.unsqueeze(ctx.dim)
        dX -= q * gppr
        return dX, None, None, None


entmax_entmax15_rule = torch_rule(Entmax15Function, arrays(shape=(2, 4), min_value=-3.0, max_value=3.0),
                                  constant(-1), constant(None), name="entmax_entmax15_rule")


# =====================================================================================================
# entmax  entmax/root_finding.py:16-103  (EntmaxBisectFunction; alpha differentiable)
#   gppr = where(Y > 0, Y ** (2 - alpha), 0); dX = dY*gppr - q*gppr
#   d_alpha = dY (Y - Y_skewed) / (alpha-1)^2 - dY (S - Y_skewed ent) / (alpha-1), summed over dim
# alpha-entmax by 50 bisection steps.  Domain: X any real matrix, alpha > 1 (drawn in [1.2, 3]),
# one alpha per row (shape (2, 1), as the forward expands it); dim=-1, n_iter=50, ensure_sum_one=True.
# =====================================================================================================
class EntmaxBisectFunction(Function):
    @classmethod
    def _gp(cls, x, alpha):
        return x ** (alpha - 1)

    @classmethod
    def _gp_inv(cls, y, alpha):
        return y ** (1 / (alpha - 1))

    @classmethod
    def _p(cls, X, alpha):
        return cls._gp_inv(torch.clamp(X, min=0), alpha)

    @classmethod
    def forward(cls, ctx, X, alpha=1.5, dim=-1, n_iter=50, ensure_sum_one=True):

        if not isinstance(alpha, torch.Tensor):
            alpha = torch.tensor(alpha, dtype=X.dtype, device=X.device)

        alpha_shape = list(X.shape)
        alpha_shape[dim] = 1
        alpha = alpha.expand(*alpha_shape)

        ctx.alpha = alpha
        ctx.dim = dim
        d = X.shape[dim]

        max_val, _ = X.max(dim=dim, keepdim=True)
        X = X * (alpha - 1)
        max_val = max_val * (alpha - 1)

        tau_lo = max_val - cls._gp(1, alpha)
        tau_hi = max_val - cls._gp(1 / d, alpha)

        dm = tau_hi - tau_lo

        for it in range(n_iter):

            dm /= 2
            tau_m = tau_lo + dm
            p_m = cls._p(X - tau_m, alpha)
            f_m = p_m.sum(dim) - 1

            mask = (f_m >= 0).unsqueeze(dim)
            tau_lo = torch.where(mask, tau_m, tau_lo)

        if ensure_sum_one:
            p_m /= p_m.sum(dim=dim).unsqueeze(dim=dim)

        ctx.save_for_backward(p_m)

        return p_m

    @classmethod
    def backward(cls, ctx, dY):
        Y, = ctx.saved_tensors

        gppr = torch.where(Y > 0, Y ** (2 - ctx.alpha), Y.new_zeros(1))

        dX = dY * gppr
        q = dX.sum(ctx.dim) / gppr.sum(ctx.dim)
        q = q.unsqueeze(ctx.dim)
        dX -= q * gppr

        d_alpha = None
        if ctx.needs_input_grad[1]:

            S = torch.where(Y > 0, Y * torch.log(Y), Y.new_zeros(1))
            ent = S.sum(ctx.dim).unsqueeze(ctx.dim)
            Y_skewed = gppr / gppr.sum(ctx.dim).unsqueeze(ctx.dim)

            d_alpha = dY * (Y - Y_skewed) / ((ctx.alpha - 1) ** 2)
            d_alpha -= dY * (S - Y_skewed * ent) / (ctx.alpha - 1)
            d_alpha = d_alpha.sum(ctx.dim).unsqueeze(ctx.dim)

        return dX, d_alpha, None, None, None


entmax_bisect_rule = torch_rule(EntmaxBisectFunction, arrays(shape=(2, 4), min_value=-3.0, max_value=3.0),
                                arrays(shape=(2, 1), min_value=1.2, max_value=3.0), constant(-1), constant(50),
                                constant(True), name="entmax_bisect_rule")


# =====================================================================================================
# PennyLane  pennylane/math/fidelity.py:186-345 (with pennylane/math/quantum.py:941-963, sqrt_matrix)
#   grad_dm0 = sqrt_dm1 @ u0 @ (1 / sqrt(evs0)[..., None] * u0^H) @ sqrt_dm1, times sum(sqrt(evs0)) (transposed
#   outside torch and tensorflow), evs0 the eigenvalues of sqrt_dm1 @ dm0 @ sqrt_dm1 floored at 1e-15
# The fidelity of two density matrices, F = (tr sqrt(sqrt(dm0) dm1 sqrt(dm0)))**2, and its custom rules for
# autograd (fidelity.py:265-291, written here as an rrule), JAX (296-318) and PyTorch (324-345). PennyLane's
# `qml.math` dispatches through autoray; `_qml_math` below does the same for the calls these functions make (the
# only adaptation). Domain: real symmetric positive semi-definite 3x3 matrices.
# =====================================================================================================
def _interface(x):
    if isinstance(x, torch.Tensor):
        return torch
    if isinstance(x, (jax.Array, jax.core.Tracer)):
        return jnp
    return np


class _qml_math:  # noqa: N801 - stands for pennylane.math
    @staticmethod
    def eigh(a):
        return _interface(a).linalg.eigh(a)

    @staticmethod
    def eigvalsh(a):
        return _interface(a).linalg.eigvalsh(a)

    @staticmethod
    def where(condition, a, b):
        lib = _interface(condition)
        if lib is torch:
            a, b = (v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=torch.float64) for v in (a, b))
        return lib.where(condition, a, b)

    @staticmethod
    def cast_like(a, like):
        lib = _interface(like)
        if lib is torch:
            return torch.as_tensor(a, dtype=like.dtype)
        return lib.asarray(a, dtype=like.dtype)

    @staticmethod
    def sqrt(x):
        return _interface(x).sqrt(x)

    @staticmethod
    def diag(x):
        return _interface(x).diag(x)

    @staticmethod
    def transpose_conj(x):
        lib = _interface(x)
        return torch.conj(x.transpose(-1, -2)) if lib is torch else lib.conj(lib.swapaxes(x, -1, -2))

    @staticmethod
    def real(x):
        return _interface(x).real(x)


def _sqrt_matrix(density_matrix):  # quantum.py:941-963 (one matrix, not a batch)
    evs, vecs = _qml_math.eigh(density_matrix)
    evs = _qml_math.real(evs)
    evs = _qml_math.where(evs > 0.0, evs, 0.0)
    evs = _qml_math.cast_like(evs, vecs)
    return vecs @ _qml_math.diag(_qml_math.sqrt(evs)) @ _qml_math.transpose_conj(vecs)


def _compute_fidelity_vanilla(density_matrix0, density_matrix1):  # fidelity.py:186-213
    sqrt_mat = _sqrt_matrix(density_matrix0)
    sqrt_mat_sqrt = sqrt_mat @ density_matrix1 @ sqrt_mat
    evs = _qml_math.real(_qml_math.eigvalsh(sqrt_mat_sqrt))
    evs = _qml_math.where(evs > 0.0, evs, 0)
    return (_interface(evs).sum(_qml_math.sqrt(evs), -1)) ** 2


def _compute_fidelity_vjp0(dm0, dm1, grad_out):  # fidelity.py:216-248 (one matrix each)
    sqrt_dm1 = _sqrt_matrix(dm1)
    evs0, u0 = _qml_math.eigh(sqrt_dm1 @ dm0 @ sqrt_dm1)
    evs0 = _qml_math.real(evs0)
    evs0 = _qml_math.where(evs0 > 1e-15, evs0, 1e-15)
    evs0 = _qml_math.cast_like(evs0, sqrt_dm1)
    u0_dag = _qml_math.transpose_conj(u0)
    grad_dm0 = sqrt_dm1 @ u0 @ (1 / _qml_math.sqrt(evs0)[..., None] * u0_dag) @ sqrt_dm1
    lib = _interface(dm0)
    if lib is torch:
        grad_dm0 = torch.sum(torch.sqrt(evs0), -1) * grad_dm0
    else:
        grad_dm0 = lib.sum(lib.sqrt(evs0), -1) * lib.swapaxes(grad_dm0, -1, -2)
    return grad_dm0 * _qml_math.cast_like(grad_out, grad_dm0)


def _compute_fidelity_grad(dm0, dm1, grad_out):  # fidelity.py:251-262
    return _compute_fidelity_vjp0(dm0, dm1, grad_out), _compute_fidelity_vjp0(dm1, dm0, grad_out)


_DENSITY = arrays(shape=(3, 3), structure="psd")


@rrule(_compute_fidelity_vanilla, _DENSITY, _DENSITY, name="pennylane_fidelity_autograd_rrule")
def pennylane_fidelity_autograd_rrule(dm0, dm1):  # fidelity.py:265-291: autograd's defvjp of the two VJPs
    return (_compute_fidelity_vanilla(dm0, dm1),
            lambda g: (_compute_fidelity_vjp0(dm0, dm1, g), _compute_fidelity_vjp0(dm1, dm0, g)))


@jax.custom_vjp
def _compute_fidelity_jax(dm0, dm1):  # fidelity.py:296-318
    return _compute_fidelity_vanilla(dm0, dm1)


def _compute_fidelity_jax_fwd(dm0, dm1):
    return _compute_fidelity_jax(dm0, dm1), (dm0, dm1)


def _compute_fidelity_jax_bwd(res, grad_out):
    dm0, dm1 = res
    return _compute_fidelity_grad(dm0, dm1, grad_out)


_compute_fidelity_jax.defvjp(_compute_fidelity_jax_fwd, _compute_fidelity_jax_bwd)
pennylane_fidelity_jax_rule = jax_rule(_compute_fidelity_jax, _DENSITY, _DENSITY, name="pennylane_fidelity_jax_rule")


class _TorchFidelity(Function):  # fidelity.py:324-345
    @staticmethod
    def forward(ctx, dm0, dm1):
        fid = _compute_fidelity_vanilla(dm0, dm1)
        ctx.save_for_backward(dm0, dm1)
        return fid

    @staticmethod
    def backward(ctx, grad_out):
        dm0, dm1 = ctx.saved_tensors
        return _compute_fidelity_grad(dm0, dm1, grad_out)


pennylane_fidelity_torch_rule = torch_rule(_TorchFidelity, _DENSITY, _DENSITY, name="pennylane_fidelity_torch_rule")


# =====================================================================================================
# memcnn  memcnn/models/revop.py:11-131 (the custom_fwd shim and InvertibleCheckpointFunction), memcnn/models/
# additive.py:8-91 (AdditiveCoupling, its default implementation; the deprecated implementations 0 and 1 left out)
#   backward: gradients = torch.autograd.grad(temp_output, detached_inputs + ctx.weights, grad_outputs);
#             element.grad = element_grad for each input ("mimic backwards"); return (None,) * 6 + gradients
# An invertible block that frees or keeps its input and recomputes the forward in backward, as memcnn's
# InvertibleModuleWrapper(AdditiveCoupling(Fm, Gm), keep_input=True) calls it (get_device_states and
# set_device_states are torch.utils.checkpoint's, which memcnn copies). Fm and Gm: tiny seeded float64 Linear(2, 2)
# + tanh without parameters (their weights as buffers: the Function's *inputs_and_weights is the input alone).
# =====================================================================================================
try:
    import torch.amp
    def _memcnn_custom_fwd(fwd=None, *, cast_inputs=None, device_type='cuda'):
        if fwd is None:
            return functools.partial(_memcnn_custom_fwd, cast_inputs=cast_inputs, device_type=device_type)
        return torch.amp.custom_fwd(fwd, cast_inputs=cast_inputs, device_type=device_type)
    def _memcnn_custom_bwd(bwd, device_type='cuda'):
        return torch.amp.custom_bwd(bwd, device_type=device_type)

except ModuleNotFoundError:
    def _memcnn_custom_fwd(fwd=None, *, cast_inputs=None, device_type='cuda'):
        if fwd is None:
            return functools.partial(_memcnn_custom_fwd, cast_inputs=cast_inputs, device_type=device_type)
        return functools.partial(fwd)

    def _memcnn_custom_bwd(bwd, device_type='cuda'):
        return functools.partial(bwd, device_type=device_type)


class InvertibleCheckpointFunction(torch.autograd.Function):
    @staticmethod
    @_memcnn_custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, fn, fn_inverse, keep_input, num_bwd_passes, preserve_rng_state, num_inputs, *inputs_and_weights):
        # store in context
        ctx.fn = fn
        ctx.fn_inverse = fn_inverse
        ctx.keep_input = keep_input
        ctx.weights = inputs_and_weights[num_inputs:]
        ctx.num_bwd_passes = num_bwd_passes
        ctx.preserve_rng_state = preserve_rng_state
        ctx.num_inputs = num_inputs
        inputs = inputs_and_weights[:num_inputs]

        if preserve_rng_state:
            ctx.fwd_cpu_state = torch.get_rng_state()
            # Don't eagerly initialize the cuda context by accident.
            # (If the user intends that the context is initialized later, within their
            # run_function, we SHOULD actually stash the cuda state here.  Unfortunately,
            # we have no way to anticipate this will happen before we run the function.)
            ctx.had_cuda_in_fwd = False
            if torch.cuda._initialized:
                ctx.had_cuda_in_fwd = True
                ctx.fwd_gpu_devices, ctx.fwd_gpu_states = get_device_states(*inputs)

        ctx.input_requires_grad = [element.requires_grad for element in inputs]

        with torch.no_grad():
            # Makes a detached copy which shares the storage
            x = [element.detach() for element in inputs]
            outputs = ctx.fn(*x)

        if not isinstance(outputs, tuple):
            outputs = (outputs,)

        # Detaches y in-place (inbetween computations can now be discarded)
        detached_outputs = tuple([element.detach_() for element in outputs])

        # clear memory from inputs
        if not ctx.keep_input:
            # PyTorch 1.0+ way to clear storage
            for element in inputs:
                element.storage().resize_(0)

        # store these tensor nodes for backward pass
        ctx.inputs = [inputs] * num_bwd_passes
        ctx.outputs = [detached_outputs] * num_bwd_passes

        return detached_outputs

    @staticmethod
    @_memcnn_custom_bwd
    def backward(ctx, *grad_outputs):  # pragma: no cover
        if not torch.autograd._is_checkpoint_valid():
            raise RuntimeError("InvertibleCheckpointFunction is not compatible with .grad(), please use .backward() if possible")
        # retrieve input and output tensor nodes
        if len(ctx.outputs) == 0:
            raise RuntimeError("Trying to perform backward on the InvertibleCheckpointFunction for more than "
                               "{} times! Try raising `num_bwd_passes` by one.".format(ctx.num_bwd_passes))
        inputs = ctx.inputs.pop()
        outputs = ctx.outputs.pop()

        # recompute input if necessary
        if not ctx.keep_input:
            # Stash the surrounding rng state, and mimic the state that was
            # present at this time during forward.  Restore the surrounding state
            # when we're done.
            rng_devices = []
            if ctx.preserve_rng_state and ctx.had_cuda_in_fwd:
                rng_devices = ctx.fwd_gpu_devices
            with torch.random.fork_rng(devices=rng_devices, enabled=ctx.preserve_rng_state):
                if ctx.preserve_rng_state:
                    torch.set_rng_state(ctx.fwd_cpu_state)
                    if ctx.had_cuda_in_fwd:
                        set_device_states(ctx.fwd_gpu_devices, ctx.fwd_gpu_states)
                # recompute input
                with torch.no_grad():
                    inputs_inverted = ctx.fn_inverse(*outputs)
                    if not isinstance(inputs_inverted, tuple):
                        inputs_inverted = (inputs_inverted,)
                    for element_original, element_inverted in zip(inputs, inputs_inverted):
                        element_original.storage().resize_(int(np.prod(element_original.size())))
                        element_original.set_(element_inverted)

        # compute gradients
        with torch.set_grad_enabled(True):
            detached_inputs = tuple([element.detach().requires_grad_() for element in inputs])
            temp_output = ctx.fn(*detached_inputs)
        if not isinstance(temp_output, tuple):
            temp_output = (temp_output,)

        gradients = torch.autograd.grad(outputs=temp_output, inputs=detached_inputs + ctx.weights, grad_outputs=grad_outputs)

        # Setting the gradients manually on the inputs and outputs (mimic backwards)
        for element, element_grad in zip(inputs, gradients[:ctx.num_inputs]):
            element.grad = element_grad

        for element, element_grad in zip(outputs, grad_outputs):
            element.grad = element_grad

        return (None, None, None, None, None, None) + gradients


class _MemcnnAdditiveCoupling(torch.nn.Module):  # additive.py:8-91, implementation -1
    def __init__(self, Fm, Gm, split_dim=1):
        super().__init__()
        self.Gm = Gm
        self.Fm = Fm
        self.split_dim = split_dim

    def forward(self, x):
        x1, x2 = torch.chunk(x, 2, dim=self.split_dim)
        x1, x2 = x1.contiguous(), x2.contiguous()
        fmd = self.Fm.forward(x2)
        y1 = x1 + fmd
        gmd = self.Gm.forward(y1)
        y2 = x2 + gmd
        out = torch.cat([y1, y2], dim=self.split_dim)
        return out

    def inverse(self, y):
        y1, y2 = torch.chunk(y, 2, dim=self.split_dim)
        y1, y2 = y1.contiguous(), y2.contiguous()
        gmd = self.Gm.forward(y1)
        x2 = y2 - gmd
        fmd = self.Fm.forward(x2)
        x1 = y1 - fmd
        x = torch.cat([x1, x2], dim=self.split_dim)
        return x


class _FixedLinearTanh(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("W", 0.8 * torch.randn(2, 2, generator=g, dtype=torch.float64))
        self.register_buffer("b", 0.3 * torch.randn(2, generator=g, dtype=torch.float64))

    def forward(self, x):
        return torch.tanh(x @ self.W.t() + self.b)


_coupling = _MemcnnAdditiveCoupling(_FixedLinearTanh(13), _FixedLinearTanh(14))
memcnn_invertible_checkpoint_rule = torch_rule(
    InvertibleCheckpointFunction, constant(_coupling.forward), constant(_coupling.inverse), constant(True), constant(1),
    constant(False), constant(1), arrays(shape=(2, 4), min_value=-2.0, max_value=2.0),
    name="memcnn_invertible_checkpoint_rule")


# =====================================================================================================
# flash-attention  flash_attn/bert_padding.py:67-92  (IndexFirstAxisResidual)
#   grad_input = grad_residual
#   indices = indices.reshape(indices.shape[0], *((1,) * (grad_output.ndim - 1)))
#   indices = indices.expand_as(grad_output)
#   grad_input.scatter_add_(0, indices, grad_output)
# Gathers the rows `indices` of its input and returns the input itself beside them (the residual); backward adds the
# rows' gradient into the residual's gradient in place.
# =====================================================================================================
class IndexFirstAxisResidual(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, indices):
        ctx.save_for_backward(indices)
        assert input.ndim >= 2
        ctx.first_axis_dim, other_shape = input.shape[0], input.shape[1:]
        second_dim = other_shape.numel()
        # TD [2022-03-04] For some reason torch.gather is a bit faster than indexing.
        output = input[indices]
        # We don't want to reshape input (b ... -> b (...)) since it could change the channel_last
        # memory format to channel_first. In other words, input might not be contiguous.
        # If we don't detach, Pytorch complains about output being a view and is being modified inplace
        return output, input.detach()

    @staticmethod
    def backward(ctx, grad_output, grad_residual):
        (indices,) = ctx.saved_tensors
        assert grad_output.ndim >= 2
        other_shape = grad_output.shape[1:]
        assert grad_residual.shape[1:] == other_shape
        grad_input = grad_residual
        # grad_input[indices] += grad_output
        indices = indices.reshape(indices.shape[0], *((1,) * (grad_output.ndim - 1)))
        indices = indices.expand_as(grad_output)
        grad_input.scatter_add_(0, indices, grad_output)
        return grad_input.reshape(ctx.first_axis_dim, *other_shape), None


# unpad_input's indices: the tokens an attention mask keeps, here 4 of 6
flash_attn_index_first_axis_residual_rule = torch_rule(
    IndexFirstAxisResidual, arrays(shape=(6, 2, 3)), constant(np.array([0, 2, 3, 5])),
    name="flash_attn_index_first_axis_residual_rule")


# =====================================================================================================
# icefall  egs/librispeech/ASR/zipformer/scaling.py:369-422  BiasNormFunction
#   x = x.detach(); x.requires_grad = True; bias.requires_grad = True; log_scale.requires_grad = True
#   with torch.enable_grad(): ...; ans.backward(gradient=ans_grad)
#   return x.grad, bias.grad.flatten(), log_scale.grad, None, None
# Zipformer's LayerNorm replacement: x * mean((x - bias)^2)^-0.5 * exp(log_scale) over the channel axis. Backward
# recomputes the forward on the saved tensors with requires_grad set on them, and returns their .grad: a second
# backward through the same graph accumulates into the same saved tensors.
# =====================================================================================================
class BiasNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, log_scale, channel_dim, store_output_for_backprop):
        assert bias.ndim == 1
        if channel_dim < 0:
            channel_dim = channel_dim + x.ndim
        ctx.store_output_for_backprop = store_output_for_backprop
        ctx.channel_dim = channel_dim
        for _ in range(channel_dim + 1, x.ndim):
            bias = bias.unsqueeze(-1)
        scales = (torch.mean((x - bias) ** 2, dim=channel_dim, keepdim=True) ** -0.5) * log_scale.exp()
        ans = x * scales
        ctx.save_for_backward(
            ans.detach() if store_output_for_backprop else x,
            scales.detach(),
            bias.detach(),
            log_scale.detach(),
        )
        return ans

    @staticmethod
    def backward(ctx, ans_grad):
        ans_or_x, scales, bias, log_scale = ctx.saved_tensors
        if ctx.store_output_for_backprop:
            x = ans_or_x / scales
        else:
            x = ans_or_x
        x = x.detach()
        x.requires_grad = True
        bias.requires_grad = True
        log_scale.requires_grad = True
        with torch.enable_grad():
            scales = (torch.mean((x - bias) ** 2, dim=ctx.channel_dim, keepdim=True) ** -0.5) * log_scale.exp()
            ans = x * scales
            ans.backward(gradient=ans_grad)
        return x.grad, bias.grad.flatten(), log_scale.grad, None, None


# zipformer's layout (seq, batch, channels), channel_dim -1, the output stored for backprop (its default)
icefall_bias_norm_rule = torch_rule(
    BiasNormFunction, arrays(shape=(3, 2, 4), min_value=-5.0, max_value=5.0),
    arrays(shape=(4,), min_value=-1.0, max_value=1.0), arrays(shape=(), min_value=-2.0, max_value=2.0),
    constant(-1), constant(True), name="icefall_bias_norm_rule")


# =====================================================================================================
# icefall  egs/librispeech/ASR/zipformer/scaling.py:1305-1322  MulForDropout3
#   ans = x * y * alpha; ctx.save_for_backward(ans)
#   x_grad = ctx.alpha * ans_grad * (ans != 0)
# Dropout with a mask y shared over an axis, saving only the output: the mask is read back as ans != 0, which is
# also 0 where x itself is 0 and the mask keeps it.
# =====================================================================================================
class MulForDropout3(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x, y, alpha):
        assert not y.requires_grad
        ans = x * y * alpha
        ctx.save_for_backward(ans)
        ctx.alpha = alpha
        return ans

    @staticmethod
    @custom_bwd
    def backward(ctx, ans_grad):
        (ans,) = ctx.saved_tensors
        x_grad = ctx.alpha * ans_grad * (ans != 0)
        return x_grad, None, None


# the mask of dropout_p = 0.1 shared over the batch axis, as ActivationDropoutAndLinear draws it
icefall_mul_for_dropout3_rule = torch_rule(
    MulForDropout3, arrays(shape=(3, 2, 4), min_value=-5.0, max_value=5.0),
    arrays(shape=(3, 1, 4), elements=st.sampled_from([0.0, 1.0])), constant(1.0 / 0.9), nondiff=(1,),
    name="icefall_mul_for_dropout3_rule")


# =====================================================================================================
# icefall  egs/librispeech/ASR/zipformer/scaling.py:1513-1585  ActivationDropoutAndLinearFunction
#   y, func_deriv = func(x); weight_deriv = torch.matmul(g.t(), y.reshape(-1, in_channels))
#   y_deriv = torch.matmul(ans_grad, weight); bias_deriv = None if bias is None else g.sum(dim=0)
#   x_deriv = y_deriv * func_deriv
# SwooshR then a linear layer, fused. k2's C++/CUDA kernels swoosh_r_forward(_and_deriv) are written as their closed
# forms, logaddexp(0, x - 1) - 0.08 x - 0.313261687 and sigmoid(x - 1) - 0.08.
# =====================================================================================================
def _swoosh_r_forward(x):
    zero = torch.tensor(0.0, dtype=x.dtype, device=x.device)
    return torch.logaddexp(zero, x - 1.0) - 0.08 * x - 0.313261687


def _swoosh_r_forward_and_deriv(x):
    return _swoosh_r_forward(x), torch.sigmoid(x - 1.0) - 0.08


class ActivationDropoutAndLinearFunction(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x, weight, bias, activation, dropout_p, dropout_shared_dim):
        if dropout_p != 0.0:
            dropout_shape = list(x.shape)
            if dropout_shared_dim is not None:
                dropout_shape[dropout_shared_dim] = 1
            dropout_mask = (1.0 / (1.0 - dropout_p)) * (
                torch.rand(*dropout_shape, device=x.device, dtype=x.dtype) > dropout_p)
        else:
            dropout_mask = None
        ctx.save_for_backward(x, weight, bias, dropout_mask)
        ctx.activation = activation
        forward_activation_dict = {"SwooshR": _swoosh_r_forward}
        activation_func = forward_activation_dict[activation]
        x = activation_func(x)
        if dropout_mask is not None:
            x = x * dropout_mask
        x = torch.nn.functional.linear(x, weight, bias)
        return x

    @staticmethod
    @custom_bwd
    def backward(ctx, ans_grad):
        saved = ctx.saved_tensors
        (x, weight, bias, dropout_mask) = saved
        forward_and_deriv_activation_dict = {"SwooshR": _swoosh_r_forward_and_deriv}
        func = forward_and_deriv_activation_dict[ctx.activation]
        y, func_deriv = func(x)
        if dropout_mask is not None:
            y = y * dropout_mask
        (out_channels, in_channels) = weight.shape
        in_channels = y.shape[-1]
        g = ans_grad.reshape(-1, out_channels)
        weight_deriv = torch.matmul(g.t(), y.reshape(-1, in_channels))
        y_deriv = torch.matmul(ans_grad, weight)
        bias_deriv = None if bias is None else g.sum(dim=0)
        x_deriv = y_deriv * func_deriv
        if dropout_mask is not None:
            x_deriv = x_deriv * dropout_mask
        return x_deriv, weight_deriv, bias_deriv, None, None, None


# the feed-forward output layer: 4 channels in, 5 out, with bias; dropout_p 0 (inference, and a deterministic forward)
icefall_activation_dropout_linear_rule = torch_rule(
    ActivationDropoutAndLinearFunction, arrays(shape=(3, 2, 4), min_value=-8.0, max_value=8.0),
    arrays(shape=(5, 4)), arrays(shape=(5,)), constant("SwooshR"), constant(0.0), constant(-1),
    name="icefall_activation_dropout_linear_rule")


LABELS = {
    "icefall_bias_norm_rule": {"source": f"{ICEFALL} egs/librispeech/ASR/zipformer/scaling.py:369-422"},
    "icefall_mul_for_dropout3_rule": {"source": f"{ICEFALL} egs/librispeech/ASR/zipformer/scaling.py:1305-1322"},
    "icefall_activation_dropout_linear_rule": {"source": f"{ICEFALL} egs/librispeech/ASR/zipformer/scaling.py:1513-1585"},
    "flash_attn_index_first_axis_residual_rule": {"source": f"{FLASH_ATTN} flash_attn/bert_padding.py:67-92"},
    "nerfstudio_trunc_exp_rule": {"source": f"{NERFSTUDIO} nerfstudio/field_components/activations.py:28-41"},
    "gpytorch_log_normal_cdf_rule": {"source": f"{GPYTORCH} gpytorch/functions/_log_normal_cdf.py:12-117"},
    "gpytorch_matern25_rule": {"source": f"{GPYTORCH} gpytorch/functions/matern_covariance.py:8-56"},
    "gpytorch_matern15_rule": {"source": f"{GPYTORCH} gpytorch/functions/matern_covariance.py:8-56"},
    "gpytorch_rbf_rule": {"source": f"{GPYTORCH} gpytorch/functions/rbf_covariance.py:6-29"},
    "pyro_safe_log_rule": {"source": f"{PYRO} pyro/ops/special.py:15-32"},
    "e3nn_soft_unit_step_rule": {"source": f"{E3NN} e3nn/math/_soft_unit_step.py:4-24"},
    "geoopt_artanh_rule": {"source": f"{GEOOPT} geoopt/manifolds/poincare/math.py:23-56"},
    "geoopt_arsinh_rule": {"source": f"{GEOOPT} geoopt/manifolds/poincare/math.py:23-56"},
    "entmax_sparsemax_rule": {"source": f"{ENTMAX} entmax/activations.py:17-166"},
    "entmax_entmax15_rule": {"source": f"{ENTMAX} entmax/activations.py:169-192"},
    "entmax_bisect_rule": {"source": f"{ENTMAX} entmax/root_finding.py:16-103"},
    "pennylane_fidelity_autograd_rrule": {"source": f"{PENNYLANE} pennylane/math/fidelity.py:186-291"},
    "pennylane_fidelity_jax_rule": {"source": f"{PENNYLANE} pennylane/math/fidelity.py:186-262, 296-318"},
    "pennylane_fidelity_torch_rule": {"source": f"{PENNYLANE} pennylane/math/fidelity.py:186-262, 324-345"},
    "memcnn_invertible_checkpoint_rule": {"source": f"{MEMCNN} memcnn/models/revop.py:11-131, memcnn/models/additive.py:8-91"},
}

UPSTREAM_FLAWS = {
    "icefall_bias_norm_rule": (
        {"GG403"},
        "icefall's BiasNormFunction sets requires_grad on its saved bias and log_scale and returns their .grad: a second "
        "backward through the same graph accumulates into them (plain PyTorch, retain_graph=True: the bias gradient "
        "0.78948 on the first call, as plain autograd gives, 1.57896 on the second; log_scale 8.878 then 17.756), and "
        "the tensor the first call returned is changed in place by the second; the x gradient is right",
    ),
    "icefall_mul_for_dropout3_rule": (
        {"GG201", "GG501"},
        "icefall's MulForDropout3 reads the dropout mask back from its output (ans != 0): where x is exactly 0 and the "
        "mask keeps it, the gradient is 0 where it is alpha (plain PyTorch: [0.0, 1.111] where [1.111, 1.111] is "
        "right; gradguard at x = 0: expected 3.22826 = 1.111 x 2.905, got 0)",
    ),
    "flash_attn_index_first_axis_residual_rule": (
        {"GG303", "GG707"},
        "flash-attention's IndexFirstAxisResidual adds the gathered rows' gradient into the residual's gradient in "
        "place (grad_residual.scatter_add_): the gradient PyTorch hands backward is changed (GG303), and where the "
        "residual's gradient is expanded, as after residual.sum() or residual.sum(0), PyTorch raises 'unsupported "
        "operation: more than one element of the written-to tensor refers to a single memory location' (GG707; "
        "reproduced with plain torch.autograd on the upstream code, and a contiguous gradient of the same values "
        "gives the right gradient)",
    ),
    "memcnn_invertible_checkpoint_rule": (
        {"GG403", "GG703", "GG705", "GG706"},
        "memcnn's InvertibleCheckpointFunction sets each input's .grad in backward and returns the same gradient: on a "
        "leaf input .backward() leaves 2.0x plain autograd's gradient in .grad (GG706; keep_input True or False, on "
        "memcnn's own code). It keeps its inputs as ctx attributes: changing the input in place between forward and "
        "backward moves the gradient by up to 0.657 with no error (GG703). Its backward takes torch.autograd.grad "
        "without create_graph: with .backward(create_graph=True) the input's gradient carries no graph, where plain "
        "autograd's does (GG705). A second backward raises 'Try raising num_bwd_passes' (GG403: loud, documented)",
    ),
    "pennylane_fidelity_jax_rule": (
        {"GG204"},
        "PennyLane's fidelity bwd calls eigh, whose derivative JAX computes as NaN where eigenvalues repeat: at dm0 = "
        "dm1 = I (the maximally mixed state, scaled) JAX's jvp of the vjp, and so jax.hessian, is NaN, while the "
        "pullback moves smoothly (central differences 2.99999975 and 2.9999999975 at steps 1e-3 and 1e-4 along "
        "u = e_33 in dm1, w = ones); at a matrix with distinct eigenvalues JAX's second order agrees with finite "
        "differences",
    ),
    "pennylane_fidelity_torch_rule": (
        {"GG705"},
        "the PyTorch twin of pennylane_fidelity_jax_rule's flaw: torch.linalg.eigh's derivative is NaN where "
        "eigenvalues repeat, so the double backward at dm0 = dm1 = I is NaN where central differences of the gradient "
        "give 2.99999975, 2.9999999975 and 2.99999999989 at steps 1e-3, 1e-4 and 1e-5; at a positive definite matrix "
        "with distinct eigenvalues the double backward gives 9.1875172, finite differences 9.1875172",
    ),
    "gpytorch_rbf_rule": (
        {"GG705"},
        "gpytorch's RBFCovariance saves d_output_d_input computed in forward, without a graph, and its backward "
        "is grad_output * d_output_d_input: no second derivative in the lengthscale (gradgradcheck at lengthscale "
        "0.7: numerical 0.6680, analytical 0). Found in the nineteenth pass, once GG705's kink test stopped "
        "raising on the callable constant sq_dist_func and reading that as a kink",
    ),
    "gpytorch_matern25_rule": (
        {"GG705"},
        "gpytorch's MaternCovariance keeps the same kind of graph-free derivative: gradgradcheck in the "
        "lengthscale at 0.7 gives numerical 1.0463, analytical 0 (nu = 2.5); found as gpytorch_rbf_rule's",
    ),
    "gpytorch_matern15_rule": (
        {"GG705"},
        "gpytorch's MaternCovariance at nu = 1.5: no second derivative in the lengthscale (gradgradcheck at 0.7 on "
        "other points: numerical -0.7519, analytical 0), as gpytorch_matern25_rule",
    ),
    "gpytorch_log_normal_cdf_rule": (
        {"GG201", "GG501", "GG705"},
        "gpytorch's LogNormalCDF approximates log Phi(z) for z < -1 by a rational function and its backward reads "
        "that approximation's numerator and denominator, saved without a graph: the double backward at z = -2 "
        "gives 0 for d2 log Phi (mpmath: -0.8857; PyTorch's total -1.90986 against finite differences' "
        "-2.79523), and the first derivative there is 2.373329 against mpmath's phi/Phi 2.373216 (its forward is "
        "off by 4.8e-5 too), which a program's gradient (GG501) shows as well",
    ),
    "e3nn_soft_unit_step_rule": (
        {"GG206", "GG301", "GG501", "GG705"},
        "e3nn's soft unit step backward computes exp(-1/x) / (x * x) for x > 0: below about 2.2e-162 x * x "
        "underflows to 0 and the tangent is NaN (0 / 0 at x = 2.5e-175) where the derivative is 0. GG501 (seed 12, "
        "`called-twice`, x = 1.6352e-163): the same NaN in a program's gradient. GG705 (seed 20, x = (0, 0, 0, "
        "4.7e-161)): PyTorch's derivative of that backward is NaN where finite differences of the gradient give 0",
        (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 20),
    ),
    "geoopt_artanh_rule": (
        {"GG705"},
        "geoopt's Artanh backward reads the clamped input saved from forward, which carries no graph: its double "
        "backward is 0 where d2/dx2 artanh(0.5) = 1.7778 (torch.autograd.functional.hessian returns 0 silently)",
    ),
    "entmax_entmax15_rule": (
        {"GG705"},
        "entmax's Entmax15 backward takes Y.sqrt(), which has no derivative at Y = 0: its double backward is NaN on "
        "a sparse output row ([0, 0, 0, 2]) where finite differences give 0",
    ),
    "entmax_bisect_rule": (
        {"GG703", "GG705"},
        "entmax's EntmaxBisect keeps ctx.alpha as a view of its input: changing alpha in place between forward "
        "and backward changes grad X (-0.1004 to -0.2802) and PyTorch raises nothing (GG703); its double backward "
        "with respect to alpha is -0.0702 where finite differences give 0.5580 (GG705)",
    ),
}
