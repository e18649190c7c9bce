"""Real-world corpus: `torch.autograd.Function`s of public PyTorch libraries, declared with `torch_rule`.

Each Function is copied from upstream as it stands (forward, backward, ``setup_context``, ``ctx`` flags,
``@once_differentiable``), with the library's own helpers written out where the Function calls them:

  TIMM     huggingface/pytorch-image-models@aa4b5850c1543fa488abf260f18390eda46cf85d  timm/layers/activations_me.py
  ROMA     naver/roma@8ce9ed98f6bd3a137be144a4588dbc0e350cff52  roma/mappings.py, with roma/internal.py's
           ``_pseudo_inverse`` and ``autocast_disabled`` (``custom_fwd`` is ``torch.amp.custom_fwd``, as roma
           takes it on PyTorch >= 2.4)
  THESEUS  facebookresearch/theseus@c8583de41824613fb135ee9bad0e930ded6be404
           theseus/third_party/lml.py, theseus/utils/sparse_matrix_utils.py
  FAIRSEQ  facebookresearch/fairseq@3d262bb25690e4eb2e7d3c1309b1e9c406ca4b99
           fairseq/modules/scalar_bias.py, examples/translation_moe/translation_moe_src/logsumexp_moe.py
  LINOP    cornellius-gp/linear_operator@386cff780e1fc17317d3c1ce19604b5637736ca5
           linear_operator/functions/_dsmm.py, linear_operator/utils/sparse.py (bdsmm)
  HF       huggingface/transformers@000824f17f924a8b520edf04c597c461fc83356a
           src/transformers/models/reformer/modeling_reformer.py (ReverseSort)

Each copy was checked against PyTorch's autograd through a plain forward (the same formulas, ``linalg.svd`` for
roma, dense products for the sparse ones, pad/gather/logsumexp for fairseq and transformers, ``F.hardswish`` and
friends for timm; ``gradcheck`` for LML) on 3 random inputs: vector-Jacobian products equal to 1e-15 relative (timm's
hard sigmoid to 3.7e-9: PyTorch's own ``hardsigmoid`` backward uses a float32 1/6). Four Functions drew false errors
or crashed the checker until gradguard was fixed (INDEX.md): roma's Procrustes marks US and V non-differentiable, and
gradguard differenced them (GG201, GG501); fairseq's LogSumExpMoE takes softmax(logp) beside logp, and `called-twice`
paired the second draw's logp with the first draw's posterior (GG501); timm's hard mish drew GG705 at a kink beside a
second kink; linear_operator's DSMM takes a sparse tensor, which GG401 and the safety matrix could not convert.
``LABELS`` maps each rule to its source; ``UPSTREAM_FLAWS`` lists the error findings that are real flaws, with
evidence.
"""

import numpy as np
import hypothesis.strategies as st
import torch
import torch.nn.functional as F
from torch.autograd import Function

from gradguard import arrays, constant, torch_rule

TIMM = "huggingface/pytorch-image-models@aa4b585"
ROMA = "naver/roma@8ce9ed9"
THESEUS = "facebookresearch/theseus@c8583de"
FAIRSEQ = "facebookresearch/fairseq@3d262bb"
LINOP = "cornellius-gp/linear_operator@386cff7"
HF = "huggingface/transformers@000824f"


# =====================================================================================================
# timm  timm/layers/activations_me.py:17-207 (verbatim)
# =====================================================================================================
def swish_fwd(x):
    return x.mul(torch.sigmoid(x))


def swish_bwd(x, grad_output):
    x_sigmoid = torch.sigmoid(x)
    return grad_output * (x_sigmoid * (1 + x * (1 - x_sigmoid)))


class SwishAutoFn(torch.autograd.Function):
    """ optimised Swish w/ memory-efficient checkpoint"""
    @staticmethod
    def symbolic(g, x):
        return g.op("Mul", x, g.op("Sigmoid", x))

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return swish_fwd(x)

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors[0]
        return swish_bwd(x, grad_output)


def mish_fwd(x):
    return x.mul(torch.tanh(F.softplus(x)))


def mish_bwd(x, grad_output):
    x_sigmoid = torch.sigmoid(x)
    x_tanh_sp = F.softplus(x).tanh()
    return grad_output.mul(x_tanh_sp + x * x_sigmoid * (1 - x_tanh_sp * x_tanh_sp))


class MishAutoFn(torch.autograd.Function):
    """ Mish: A Self Regularized Non-Monotonic Neural Activation Function - https://arxiv.org/abs/1908.08681
    A memory efficient variant of Mish
    """
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return mish_fwd(x)

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors[0]
        return mish_bwd(x, grad_output)


def hard_sigmoid_fwd(x, inplace: bool = False):
    return (x + 3).clamp(min=0, max=6).div(6.)


def hard_sigmoid_bwd(x, grad_output):
    m = torch.ones_like(x) * ((x >= -3.) & (x <= 3.)) / 6.
    return grad_output * m


class HardSigmoidAutoFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return hard_sigmoid_fwd(x)

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors[0]
        return hard_sigmoid_bwd(x, grad_output)


def hard_swish_fwd(x):
    return x * (x + 3).clamp(min=0, max=6).div(6.)


def hard_swish_bwd(x, grad_output):
    m = torch.ones_like(x) * (x >= 3.)
    m = torch.where((x >= -3.) & (x <= 3.),  x / 3. + .5, m)
    return grad_output * m


class HardSwishAutoFn(torch.autograd.Function):
    """A memory efficient HardSwish activation"""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return hard_swish_fwd(x)

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors[0]
        return hard_swish_bwd(x, grad_output)

    @staticmethod
    def symbolic(g, self):
        input = g.op("Add", self, g.op('Constant', value_t=torch.tensor(3, dtype=torch.float)))
        hardtanh_ = g.op("Clip", input, g.op('Constant', value_t=torch.tensor(0, dtype=torch.float)), g.op('Constant', value_t=torch.tensor(6, dtype=torch.float)))
        hardtanh_ = g.op("Div", hardtanh_, g.op('Constant', value_t=torch.tensor(6, dtype=torch.float)))
        return g.op("Mul", self, hardtanh_)


def hard_mish_fwd(x):
    return 0.5 * x * (x + 2).clamp(min=0, max=2)


def hard_mish_bwd(x, grad_output):
    m = torch.ones_like(x) * (x >= -2.)
    m = torch.where((x >= -2.) & (x <= 0.), x + 1., m)
    return grad_output * m


class HardMishAutoFn(torch.autograd.Function):
    """ A memory efficient variant of Hard Mish"""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return hard_mish_fwd(x)

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors[0]
        return hard_mish_bwd(x, grad_output)


_act = arrays(shape=(6,), min_value=-8.0, max_value=8.0)
timm_swish_rule = torch_rule(SwishAutoFn, _act, name="timm_swish_rule")
timm_mish_rule = torch_rule(MishAutoFn, _act, name="timm_mish_rule")
timm_hard_sigmoid_rule = torch_rule(HardSigmoidAutoFn, _act, name="timm_hard_sigmoid_rule")
timm_hard_swish_rule = torch_rule(HardSwishAutoFn, _act, name="timm_hard_swish_rule")
timm_hard_mish_rule = torch_rule(HardMishAutoFn, _act, name="timm_hard_mish_rule")


# =====================================================================================================
# roma  roma/mappings.py:12-98  _ProcrustesManualDerivatives (setup_context style, 4 outputs, US and V marked
# non-differentiable). Domain: a batch of 3x3 real matrices (generic: distinct, nonzero singular values),
# force_rotation False / True, regularization 0 (the default), gradient_eps 1e-5 (the default).
# =====================================================================================================
_mat3 = arrays(shape=(2, 3, 3), min_value=-3.0, max_value=3.0)
# roma/internal.py:31-36 and its autocast helper (CPU: autocast off), as the Function below calls them.
def _pseudo_inverse(x, eps):
    return torch.where(torch.abs(x) < eps, torch.zeros_like(x), 1.0 / x)


def _autocast_disabled(device_type):
    return torch.autocast(device_type=device_type, enabled=False)


class _ProcrustesManualDerivatives(torch.autograd.Function):  # roma/mappings.py:12-98
    generate_vmap_rule = True

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(M, force_rotation, regularization, gradient_eps):
        assert M.dim() == 3 and M.shape[1] == M.shape[2], "Input should be a BxDxD batch of matrices."
        U, D, Vt = torch.linalg.svd(M)
        V = Vt.transpose(-2, -1)
        if force_rotation:
            with torch.no_grad():
                flip = torch.det(U) * torch.det(V) < 0
                sign = 1.0 - 2.0 * flip.to(U.dtype)
                flip_matrix = torch.cat((torch.ones_like(D[:, :-1]), sign[:, None]), dim=-1)
            DS = D * flip_matrix
            del D
            US = U * flip_matrix[:, None, :]
            del U
        else:
            DS = D
            US = U
        R = US @ V.transpose(-1, -2)
        return R, DS, US, V

    @staticmethod
    def setup_context(ctx, inputs, output):
        M, force_rotation, regularization, gradient_eps = inputs
        R, DS, US, V = output
        ctx.save_for_backward(US, DS, V, M, R)
        ctx.save_for_forward(US, DS, V)
        ctx.mark_non_differentiable(US, V)
        ctx.gradient_eps = gradient_eps
        ctx.regularization = regularization

    @staticmethod
    def backward(ctx, grad_R, grad_DS, grad_US, grad_V):
        US, DS, V, M, R = ctx.saved_tensors
        gradient_eps = ctx.gradient_eps
        with _autocast_disabled(US.device.type):
            USik_Vjl = torch.einsum("bik,bjl -> bklij", US, V)
            USil_Vjk = USik_Vjl.transpose(1, 2)
            DSl = DS[:, None, :, None, None]
            DSk = DS[:, :, None, None, None]
            Omega_klij = (USik_Vjl - USil_Vjk) * _pseudo_inverse(DSk + DSl, gradient_eps)
            grad_M = torch.einsum("bnm, bnk, bklij, bml -> bij", grad_R, US, Omega_klij, V)
            grad_M = grad_M + (US * grad_DS[:, None, :]) @ V.transpose(-1, -2)
            if ctx.regularization != 0.0:
                grad_M = grad_M + ctx.regularization * (M - R)
        return grad_M, None, None, None


roma_procrustes_rule = torch_rule(_ProcrustesManualDerivatives, _mat3, constant(False), constant(0.0),
                                  constant(1e-5), name="roma_procrustes_rule")
roma_procrustes_rotation_rule = torch_rule(_ProcrustesManualDerivatives, _mat3, constant(True), constant(0.0),
                                           constant(1e-5), name="roma_procrustes_rotation_rule")


# =====================================================================================================
# theseus  theseus/third_party/lml.py:33-174  LML_Function (limited multi-label projection; bisection on nu,
# implicit-function backward). old_torch is False on torch 2.x. Domain: x of shape (n_batch, nx) with nx > N;
# N = 2; eps = 1e-12 (a user argument), n_iter = 100, branch = None, verbose = 0. At the default eps = 1e-4 nu is
# 1e-4 off the solution and the forward's values climb in stairs about that wide, which finite differences at finer
# steps read as slopes: at seed 1 GG201, called-twice and GG705 reported those slopes against the right implicit
# gradient of locuslab/lml's original (cf8251e, the same code) until the forty-fourth pass; the two rules at 1e-4 below.
# =====================================================================================================
old_torch = False


def bdot(x, y):
    return torch.bmm(x.unsqueeze(1), y.unsqueeze(2)).squeeze()


class LML_Function(Function):
    @staticmethod
    def forward(ctx, x, N, eps, n_iter, branch, verbose):
        ctx.N = N
        ctx.eps = eps
        ctx.n_iter = n_iter
        ctx.branch = branch
        ctx.verbose = verbose

        branch = ctx.branch
        if branch is None:
            if not x.is_cuda:
                branch = 10
            else:
                branch = 100

        single = x.ndimension() == 1
        orig_x = x
        if single:
            x = x.unsqueeze(0)
        assert x.ndimension() == 2

        n_batch, nx = x.shape
        if nx <= ctx.N:
            y = (1.0 - 1e-5) * torch.ones(n_batch, nx).type_as(x)
            if single:
                y = y.squeeze(0)
            if old_torch:
                ctx.save_for_backward(orig_x)
                ctx.y = y
                ctx.nu = torch.Tensor()
            else:
                ctx.save_for_backward(orig_x, y, torch.Tensor())
            return y

        x_sorted, _ = torch.sort(x, dim=1, descending=True)

        # The sigmoid saturates the interval [-7, 7]
        nu_lower = -x_sorted[:, ctx.N - 1] - 7.0
        nu_upper = -x_sorted[:, ctx.N] + 7.0

        ls = torch.linspace(0, 1, branch).type_as(x)

        for i in range(ctx.n_iter):
            r = nu_upper - nu_lower
            I = r > ctx.eps  # noqa: E741
            n_update = I.sum()
            if n_update == 0:
                break

            Ix = I.unsqueeze(1).expand_as(x) if old_torch else I

            nus = r[I].unsqueeze(1) * ls + nu_lower[I].unsqueeze(1)
            _xs = x[Ix].view(n_update, 1, nx) + nus.unsqueeze(2)
            fs = torch.sigmoid(_xs).sum(dim=2) - ctx.N
            # assert torch.all(fs[:,0] < 0) and torch.all(fs[:,-1] > 0)

            i_lower = ((fs < 0).sum(dim=1) - 1).long()
            J = i_lower < 0
            if J.sum() > 0:
                print("LML Warning: An example has all positive iterates.")
                i_lower[J] = 0

            i_upper = i_lower + 1

            nu_lower[I] = nus.gather(1, i_lower.unsqueeze(1)).squeeze()
            nu_upper[I] = nus.gather(1, i_upper.unsqueeze(1)).squeeze()

            if J.sum() > 0:
                nu_lower[J] -= 7.0

        if ctx.verbose >= 0 and np.any(I.cpu().numpy()):
            print("LML Warning: Did not converge.")
            # import ipdb; ipdb.set_trace()

        nu = nu_lower + r / 2.0
        y = torch.sigmoid(x + nu.unsqueeze(1))
        if single:
            y = y.squeeze(0)

        if old_torch:
            # Storing these in the object may cause memory leaks.
            ctx.save_for_backward(orig_x)
            ctx.y = y
            ctx.nu = nu
        else:
            ctx.save_for_backward(orig_x, y, nu)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        if old_torch:
            (x,) = ctx.saved_tensors
            y = ctx.y
            nu = ctx.nu
        else:
            x, y, nu = ctx.saved_tensors

        single = x.ndimension() == 1
        if single:
            x = x.unsqueeze(0)
            y = y.unsqueeze(0)
            grad_output = grad_output.unsqueeze(0)

        assert x.ndimension() == 2
        assert y.ndimension() == 2
        assert grad_output.ndimension() == 2

        n_batch, nx = x.shape
        if nx <= ctx.N:
            dx = torch.zeros_like(x)
            if single:
                dx = dx.squeeze()
            grads = tuple([dx] + [None] * 5)
            return grads

        Hinv = 1.0 / (1.0 / y + 1.0 / (1.0 - y))
        dnu = bdot(Hinv, grad_output) / Hinv.sum(dim=1)
        dx = -Hinv * (-grad_output + dnu.unsqueeze(1))

        if single:
            dx = dx.squeeze()

        grads = tuple([dx] + [None] * 5)
        return grads


theseus_lml_rule = torch_rule(LML_Function, arrays(shape=(2, 5), min_value=-3.0, max_value=3.0), constant(2),
                              constant(1e-12), constant(100), constant(None), constant(0), name="theseus_lml_rule")
# LML(N) at its default eps, as smooth-topk calls it; and k = 5 of 10 classes (two calls move 40 logits: more than the
# context probes took one by one)
theseus_lml_default_eps_rule = torch_rule(
    LML_Function, arrays(shape=(2, 6), min_value=-5.0, max_value=5.0), constant(2), constant(1e-4), constant(100),
    constant(None), constant(0), name="theseus_lml_default_eps_rule")
theseus_lml_top5_rule = torch_rule(
    LML_Function, arrays(shape=(2, 10), min_value=-10.0, max_value=10.0), constant(5), constant(1e-4), constant(100),
    constant(None), constant(0), name="theseus_lml_top5_rule")


# =====================================================================================================
# theseus  theseus/utils/sparse_matrix_utils.py:14-163  _SparseMvPAutograd / _SparseMtvPAutograd (CPU path:
# scipy csr/csc products; backward loops over rows; once_differentiable). Domain: a fixed 3x4 CSR sparsity
# pattern (int64 row_ptr / col_ind, non-differentiable), batched values A_val (2, nnz) and v (2, 4) [mv] or
# (2, 3) [mtv], float64 (the CPU path always returns float64).
# =====================================================================================================
from scipy.sparse import csc_matrix, csr_matrix  # noqa: E402


def _mat_vec_cpu(batch_size, num_cols, A_row_ptr, A_col_ind, A_val, v):
    assert batch_size == A_val.shape[0]
    num_rows = len(A_row_ptr) - 1
    retv_data = np.array(
        [
            csr_matrix((A_val[i].numpy(), A_col_ind, A_row_ptr), (num_rows, num_cols))
            * v[i]
            for i in range(batch_size)
        ],
        dtype=np.float64,
    )
    return torch.tensor(retv_data, dtype=torch.float64)


def mat_vec(batch_size, num_cols, A_row_ptr, A_col_ind, A_val, v):
    if A_row_ptr.device.type == "cuda":
        raise RuntimeError("cuda path not copied")
    else:
        return _mat_vec_cpu(batch_size, num_cols, A_row_ptr, A_col_ind, A_val, v)


def _tmat_vec_cpu(batch_size, num_cols, A_row_ptr, A_col_ind, A_val, v):
    assert batch_size == A_val.shape[0]
    num_rows = len(A_row_ptr) - 1
    retv_data = np.array(
        [
            csc_matrix((A_val[i].numpy(), A_col_ind, A_row_ptr), (num_cols, num_rows))
            * v[i]
            for i in range(batch_size)
        ],
        dtype=np.float64,
    )
    return torch.tensor(retv_data, dtype=torch.float64)


def tmat_vec(batch_size, num_cols, A_row_ptr, A_col_ind, A_val, v):
    if A_row_ptr.device.type == "cuda":
        raise RuntimeError("cuda path not copied")
    else:
        return _tmat_vec_cpu(batch_size, num_cols, A_row_ptr, A_col_ind, A_val, v)


def _sparse_mat_vec_fwd_backend(ctx, num_cols, A_row_ptr, A_col_ind, A_val, v, op):
    assert A_row_ptr.ndim == 1
    assert A_col_ind.ndim == 1
    assert A_val.ndim == 2
    assert v.ndim == 2
    ctx.save_for_backward(A_val, A_row_ptr, A_col_ind, v)
    ctx.num_cols = num_cols
    return op(A_val.shape[0], num_cols, A_row_ptr, A_col_ind, A_val, v)


def _sparse_mat_vec_bwd_backend(ctx, grad_output, is_tmat):
    A_val, A_row_ptr, A_col_ind, v = ctx.saved_tensors
    num_rows = len(A_row_ptr) - 1
    A_grad = torch.zeros_like(A_val)  # (batch_size, nnz)
    v_grad = torch.zeros_like(v)  # (batch_size, num_cols)
    for row in range(num_rows):
        start = A_row_ptr[row]
        end = A_row_ptr[row + 1]
        columns = A_col_ind[start:end].long()
        if is_tmat:
            A_grad[:, start:end] = v[:, row].view(-1, 1) * grad_output[:, columns]
            v_grad[:, row] = (grad_output[:, columns] * A_val[:, start:end]).sum(dim=1)
        else:
            A_grad[:, start:end] = v[:, columns] * grad_output[:, row].view(-1, 1)
            v_grad[:, columns] += grad_output[:, row].view(-1, 1) * A_val[:, start:end]
    return A_grad, v_grad


class _SparseMvPAutograd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, num_cols, A_row_ptr, A_col_ind, A_val, v):
        return _sparse_mat_vec_fwd_backend(
            ctx, num_cols, A_row_ptr, A_col_ind, A_val, v, mat_vec
        )

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        A_grad, v_grad = _sparse_mat_vec_bwd_backend(ctx, grad_output, False)
        return None, None, None, A_grad, v_grad


class _SparseMtvPAutograd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, num_cols, A_row_ptr, A_col_ind, A_val, v):
        return _sparse_mat_vec_fwd_backend(
            ctx, num_cols, A_row_ptr, A_col_ind, A_val, v, tmat_vec
        )

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        A_grad, v_grad = _sparse_mat_vec_bwd_backend(ctx, grad_output, True)
        return None, None, None, A_grad, v_grad


# 3x4 pattern: row0 {0, 2}, row1 {1, 2, 3}, row2 {0, 3}
_ROW_PTR = np.array([0, 2, 5, 7], dtype=np.int64)
_COL_IND = np.array([0, 2, 1, 2, 3, 0, 3], dtype=np.int64)
theseus_sparse_mv_rule = torch_rule(_SparseMvPAutograd, constant(4), constant(_ROW_PTR), constant(_COL_IND),
                                    arrays(shape=(2, 7)), arrays(shape=(2, 4)), name="theseus_sparse_mv_rule")
theseus_sparse_mtv_rule = torch_rule(_SparseMtvPAutograd, constant(4), constant(_ROW_PTR), constant(_COL_IND),
                                     arrays(shape=(2, 7)), arrays(shape=(2, 3)), name="theseus_sparse_mtv_rule")


# =====================================================================================================
# fairseq  fairseq/modules/scalar_bias.py:10-27 (verbatim). Domain: input (2, 3, 4), dim 1, bias_init 0
# (scalar_bias's default) -- the self-attention use pads dim 1.
# =====================================================================================================
class ScalarBias(torch.autograd.Function):
    """
    Adds a vector of scalars, used in self-attention mechanism to allow
    the model to optionally attend to this vector instead of the past
    """

    @staticmethod
    def forward(ctx, input, dim, bias_init):
        size = list(input.size())
        size[dim] += 1
        output = input.new(*size).fill_(bias_init)
        output.narrow(dim, 1, size[dim] - 1).copy_(input)
        ctx.dim = dim
        return output

    @staticmethod
    def backward(ctx, grad):
        return grad.narrow(ctx.dim, 1, grad.size(ctx.dim) - 1), None, None


fairseq_scalar_bias_rule = torch_rule(ScalarBias, arrays(shape=(2, 3, 4)), constant(1), constant(0),
                                      name="fairseq_scalar_bias_rule")


# =====================================================================================================
# fairseq  examples/translation_moe/translation_moe_src/logsumexp_moe.py:9-25 (verbatim).
# "Standard LogSumExp forward pass, but use *posterior* for the backward": translation_moe.py:195-204 calls it
# as LogSumExpMoE.apply(lprob_yz, prob_z_xy, 1) with prob_z_xy = softmax(lprob_yz, dim=1) computed without grad.
# Domain: that one -- logp (3, 4) log-probabilities, posterior its softmax over dim 1 (non-differentiable).
# =====================================================================================================
class LogSumExpMoE(torch.autograd.Function):
    """Standard LogSumExp forward pass, but use *posterior* for the backward."""

    @staticmethod
    def forward(ctx, logp, posterior, dim=-1):
        ctx.save_for_backward(posterior)
        ctx.dim = dim
        return torch.logsumexp(logp, dim=dim)

    @staticmethod
    def backward(ctx, grad_output):
        (posterior,) = ctx.saved_tensors
        grad_logp = grad_output.unsqueeze(ctx.dim) * posterior
        return grad_logp, None, None


def _softmax_np(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


fairseq_logsumexp_moe_rule = torch_rule(
    LogSumExpMoE,
    args=arrays(shape=(3, 4), min_value=-8.0, max_value=0.0).map(lambda lp: (lp, _softmax_np(lp, 1), 1)),
    nondiff=(1, 2), name="fairseq_logsumexp_moe_rule")


# =====================================================================================================
# linear_operator  linear_operator/functions/_dsmm.py:9-18 (verbatim) with bdsmm from
# linear_operator/utils/sparse.py:70-128 (the 2-D sparse branches). Domain: a fixed 3x4 sparse COO matrix
# (non-differentiable), dense (4, 2) and a batch of dense (2, 4, 2).
# =====================================================================================================
def bdsmm(sparse, dense):
    """
    Batch dense-sparse matrix multiply
    """
    # Make the batch sparse matrix into a block-diagonal matrix
    if sparse.ndimension() > 2:
        raise NotImplementedError("batched sparse branch not copied")

    elif dense.dim() > 2:
        *batch_shape, num_rows, num_cols = dense.size()
        batch_size = torch.Size(batch_shape).numel()
        dense = dense.view(batch_size, num_rows, num_cols)
        res = torch.mm(sparse, dense.transpose(0, 1).reshape(-1, batch_size * num_cols))
        res = res.view(-1, batch_size, num_cols)
        res = res.transpose(0, 1).reshape(*batch_shape, -1, num_cols)
        return res

    else:
        return torch.sparse.mm(sparse, dense)


class DSMM(Function):
    @staticmethod
    def forward(ctx, sparse, dense):
        ctx.sparse = sparse
        return bdsmm(ctx.sparse, dense)

    @staticmethod
    def backward(ctx, grad_output):
        return None, bdsmm(ctx.sparse.mT, grad_output)


_SPARSE = torch.sparse_coo_tensor(torch.tensor([[0, 0, 1, 2, 2], [1, 3, 2, 0, 3]]),
                                  torch.tensor([1.5, -2.0, 0.5, 3.0, -1.0], dtype=torch.float64), (3, 4),
                                  check_invariants=True).coalesce()
linop_dsmm_rule = torch_rule(DSMM, constant(_SPARSE), arrays(shape=(4, 2)), name="linop_dsmm_rule")
linop_dsmm_batch_rule = torch_rule(DSMM, constant(_SPARSE), arrays(shape=(2, 4, 2)), name="linop_dsmm_batch_rule")


# =====================================================================================================
# transformers  src/transformers/models/reformer/modeling_reformer.py  ReverseSort (huggingface/transformers
# @000824f17f924a8b520edf04c597c461fc83356a, verbatim). Undoes the LSH bucket sort; backward re-applies the sort.
# Domain: out_vectors (B, H, L, D) = (1, 2, 5, 3), logits (1, 2, 5); sorted_bucket_idx a permutation of range(L)
# per (batch, head) and undo_sorted_bucket_idx its inverse (as LSHSelfAttention computes them), non-differentiable.
# =====================================================================================================
class ReverseSort(Function):
    """
    After chunked attention is applied which sorted clusters, original ordering has to be restored. Since customized
    backward function is used for Reformer, the gradients of the output vectors have to be explicitly sorted here.
    """

    @staticmethod
    def forward(ctx, out_vectors, logits, sorted_bucket_idx, undo_sorted_bucket_idx):
        # save sorted_bucket_idx for backprop
        with torch.no_grad():
            ctx.sorted_bucket_idx = sorted_bucket_idx

            # undo sort to have correct order for next layer
            expanded_undo_sort_indices = undo_sorted_bucket_idx.unsqueeze(-1).expand(out_vectors.shape)
            out_vectors = torch.gather(out_vectors, 2, expanded_undo_sort_indices)
            logits = torch.gather(logits, 2, undo_sorted_bucket_idx)
        return out_vectors, logits

    @staticmethod
    def backward(ctx, grad_out_vectors, grad_logits):
        # get parameters saved in ctx
        sorted_bucket_idx = ctx.sorted_bucket_idx

        expanded_sort_indices = sorted_bucket_idx.unsqueeze(-1).expand(grad_out_vectors.shape)
        # reverse sort of forward
        grad_out_vectors = torch.gather(grad_out_vectors, 2, expanded_sort_indices)
        grad_logits = torch.gather(grad_logits, 2, sorted_bucket_idx)

        # return grad and `None` fillers for last 2 forward args
        return grad_out_vectors, grad_logits, None, None


_SORTED = np.array([[[3, 0, 4, 1, 2], [1, 4, 0, 2, 3]]], dtype=np.int64)
_UNDO = np.argsort(_SORTED, axis=-1)
transformers_reverse_sort_rule = torch_rule(ReverseSort, arrays(shape=(1, 2, 5, 3)), arrays(shape=(1, 2, 5)),
                                            constant(_SORTED), constant(_UNDO), name="transformers_reverse_sort_rule")


LABELS = {
    "timm_swish_rule": {"source": f"{TIMM} timm/layers/activations_me.py:17-43"},
    "timm_mish_rule": {"source": f"{TIMM} timm/layers/activations_me.py:58-80"},
    "timm_hard_sigmoid_rule": {"source": f"{TIMM} timm/layers/activations_me.py:95-113"},
    "timm_hard_swish_rule": {"source": f"{TIMM} timm/layers/activations_me.py:128-155"},
    "timm_hard_mish_rule": {"source": f"{TIMM} timm/layers/activations_me.py:170-193"},
    "roma_procrustes_rule": {"source": f"{ROMA} roma/mappings.py:12-98"},
    "roma_procrustes_rotation_rule": {"source": f"{ROMA} roma/mappings.py:12-98"},
    "theseus_lml_rule": {"source": f"{THESEUS} theseus/third_party/lml.py:34-174"},
    "theseus_lml_default_eps_rule": {"source": f"{THESEUS} theseus/third_party/lml.py:34-174"},
    "theseus_lml_top5_rule": {"source": f"{THESEUS} theseus/third_party/lml.py:34-174"},
    "theseus_sparse_mv_rule": {"source": f"{THESEUS} theseus/utils/sparse_matrix_utils.py:14-187"},
    "theseus_sparse_mtv_rule": {"source": f"{THESEUS} theseus/utils/sparse_matrix_utils.py:14-187"},
    "fairseq_scalar_bias_rule": {"source": f"{FAIRSEQ} fairseq/modules/scalar_bias.py:10-27"},
    "fairseq_logsumexp_moe_rule": {"source": f"{FAIRSEQ} examples/translation_moe/translation_moe_src/logsumexp_moe.py:9-25"},
    "linop_dsmm_rule": {"source": f"{LINOP} linear_operator/functions/_dsmm.py:9-18, linear_operator/utils/sparse.py:70-128"},
    "linop_dsmm_batch_rule": {"source": f"{LINOP} linear_operator/functions/_dsmm.py:9-18, linear_operator/utils/sparse.py:70-128"},
    "transformers_reverse_sort_rule": {"source": f"{HF} src/transformers/models/reformer/modeling_reformer.py (ReverseSort)"},
}

_ROMA_FLAW = (
    {"GG705"},
    "roma's backward saves US and V, which setup_context marks non-differentiable, so create_graph=True treats them as "
    "constants and the double backward misses their dependence on M: on 3 random inputs roma's double backward gives "
    "0.0615, -0.0640 and 0.0039 where finite differences of its gradient give 0.0664, -0.0289 and -0.0562 (plain "
    "autograd through linalg.svd agrees with finite differences to 1e-10); at M = 0 it gives NaN",
)
_SPARSE_FLAW = (
    {"GG705"},
    "the backward is declared @once_differentiable: for a cotangent that carries no graph the gradients carry none, so "
    "a program that differentiates the gradient (a Hessian-vector product in the matrix values and v) silently misses "
    "the terms through these products, whose mixed second derivative is not zero (28 by finite differences at "
    "seed 0's input); PyTorch raises only where the cotangent carries a graph",
)
UPSTREAM_FLAWS = {
    "roma_procrustes_rule": _ROMA_FLAW,
    "roma_procrustes_rotation_rule": _ROMA_FLAW,
    "theseus_sparse_mv_rule": _SPARSE_FLAW,
    "theseus_sparse_mtv_rule": _SPARSE_FLAW,
}
