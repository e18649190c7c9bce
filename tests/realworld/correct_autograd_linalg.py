"""Real-world corpus: correct autograd VJPs for linear algebra, special functions and distributions.

Source: https://github.com/HIPS/autograd at commit bff107b8d71a444a1160deade3e1cbd0b92f4fa6:
autograd/numpy/linalg.py, autograd/scipy/special.py and autograd/scipy/stats/norm.py (the comment above
each rule quotes the ``defvjp`` line or names the function). The vjp makers are copied as autograd has
them (``anp`` written ``np``, autograd's wrapped scipy functions called directly); ``_defvjp`` calls them
as autograd does. Specs are each function's real domain: positive definite matrices (``structure="psd"``)
where the function needs them, symmetric ones for ``eigh`` (it reads one triangle, and autograd returns
its gradient in that triangle's convention), well-conditioned square matrices for solve and inv.
Longer than most modules because it is a corpus: one short rule per autograd primitive.
"""

import numpy as np
import scipy.special
import scipy.stats

from gradguard import arrays, constant, rrule

AUTOGRAD = "HIPS/autograd@bff107b8d71a444a1160deade3e1cbd0b92f4fa6"


def _defvjp(fun, args, *makers, kwargs=None):
    """``(ans, pullback)`` for autograd's ``defvjp(fun, *makers)`` (see correct_autograd.py)."""
    kwargs = kwargs or {}
    ans = fun(*args, **kwargs)
    vjps = [None if m is None else m(ans, *args, **kwargs) for m in makers]
    return ans, lambda g: tuple(None if v is None else v(g) for v in vjps)


def unbroadcast_f(target, f):  # autograd/numpy/numpy_vjps.py
    target_shape, target_ndim = np.shape(target), np.ndim(target)

    def unbroadcast(x):
        while np.ndim(x) > target_ndim:
            x = np.sum(x, axis=0)
        for axis, size in enumerate(target_shape):
            if size == 1:
                x = np.sum(x, axis=axis, keepdims=True)
        return x

    return lambda g: unbroadcast(f(g))


# ----- autograd/numpy/linalg.py -------------------------------------------------------------------------------


def T(x):
    return np.swapaxes(x, -1, -2)


def _dot(a, b):
    return np.einsum("...ij,...jk->...ik", a, b)


def add2d(x):
    return np.reshape(x, np.shape(x) + (1, 1))


inv = np.linalg.inv
solve = np.linalg.solve
svd = np.linalg.svd

# square matrices away from singular ones: a random part plus a dominant diagonal
_square3 = arrays(shape=(3, 3), min_value=-1.0, max_value=1.0).map(lambda a: a + 4.0 * np.eye(3))


def det(x):
    return np.linalg.det(x)


# defvjp(det, lambda ans, x: lambda g: add2d(g) * add2d(ans) * T(inv(x)))
@rrule(det, _square3)
def det_rrule(x):
    return _defvjp(np.linalg.det, (x,), lambda ans, x: lambda g: add2d(g) * add2d(ans) * T(inv(x)))


def slogdet(x):
    return np.linalg.slogdet(x)


# defvjp(slogdet, lambda ans, x: lambda g: add2d(g[1]) * T(inv(x))): the output is a NamedTuple (sign, logabsdet)
@rrule(slogdet, arrays(shape=(2, 3, 3), structure="psd"))
def slogdet_rrule(x):
    return _defvjp(np.linalg.slogdet, (x,), lambda ans, x: lambda g: add2d(g[1]) * T(inv(x)))


def grad_inv(ans, x):
    return lambda g: -_dot(_dot(T(ans), g), T(ans))


def matrix_inv(x):
    return np.linalg.inv(x)


# defvjp(inv, grad_inv)
@rrule(matrix_inv, _square3)
def inv_rrule(x):
    return _defvjp(np.linalg.inv, (x,), grad_inv)


def grad_pinv(ans, x):
    return lambda g: T(
        -_dot(_dot(ans, T(g)), ans)
        + _dot(_dot(_dot(ans, T(ans)), g), np.eye(x.shape[-2]) - _dot(x, ans))
        + _dot(_dot(_dot(np.eye(ans.shape[-2]) - _dot(ans, x), g), T(ans)), ans)
    )


def pinv(x):
    return np.linalg.pinv(x)


# defvjp(pinv, grad_pinv): full column rank 4x2 matrices (pinv is smooth only at constant rank)
@rrule(pinv, arrays(shape=(4, 2), min_value=-1.0, max_value=1.0).map(lambda a: a + 3.0 * np.eye(4, 2)))
def pinv_rrule(x):
    return _defvjp(np.linalg.pinv, (x,), grad_pinv)


def grad_solve(argnum, ans, a, b):
    updim = lambda x: x if x.ndim == a.ndim else x[..., None]  # noqa: E731 (autograd's code)
    if argnum == 0:
        return lambda g: -_dot(updim(solve(T(a), g)), T(updim(ans)))
    else:
        return lambda g: solve(T(a), g)


def linsolve(a, b):
    return np.linalg.solve(a, b)


# defvjp(solve, partial(grad_solve, 0), partial(grad_solve, 1)), matrix right-hand side
@rrule(linsolve, _square3, arrays(shape=(3, 2)))
def solve_rrule(a, b):
    return _defvjp(np.linalg.solve, (a, b), lambda *r: grad_solve(0, *r), lambda *r: grad_solve(1, *r))


def norm_vjp(ans, x, ord=None, axis=None, **kwargs):
    """autograd's norm_vjp for the vector norms (ord None, 2 or p > 1); the nuclear-norm branch is left out."""
    if axis is None:
        expand = lambda a: a  # noqa: E731
    else:
        expand = lambda a: np.expand_dims(a, axis=axis)  # noqa: E731

    def vjp(g):
        if ord in (None, 2, "fro"):
            return expand(g / ans) * np.conj(x)
        else:
            return expand(g / ans ** (ord - 1)) * np.conj(x) * np.abs(x) ** (ord - 2)

    return vjp


def norm(x, ord=None, axis=None):
    return np.linalg.norm(x, ord=ord, axis=axis)


# defvjp(_primitive_norm, norm_vjp), the 2-norm of a vector: its zero is a cone point (no derivative)
@rrule(norm, arrays(shape=(3,)))
def norm2_rrule(x, ord=None, axis=None):
    return _defvjp(np.linalg.norm, (x,), norm_vjp, kwargs={"ord": ord, "axis": axis})


# the p-norm branch, ord=3 along axis 1
@rrule(norm, arrays(shape=(2, 3), min_value=0.5, max_value=5.0), kwargs={"ord": 3, "axis": 1})
def norm3_axis_rrule(x, ord=None, axis=None):
    return _defvjp(np.linalg.norm, (x,), norm_vjp, kwargs={"ord": ord, "axis": axis})


def grad_eigh(ans, x, UPLO="L"):
    """Gradient for eigenvalues and vectors of a symmetric matrix."""
    N = x.shape[-1]
    w, v = ans  # Eigenvalues, eigenvectors.
    vc = np.conj(v)

    def vjp(g):
        wg, vg = g  # Gradient w.r.t. eigenvalues, eigenvectors.
        w_repeated = np.repeat(w[..., np.newaxis], N, axis=-1)
        vjp_temp = _dot(vc * wg[..., np.newaxis, :], T(v))
        if np.any(vg):
            off_diag = np.ones((N, N)) - np.eye(N)
            F = off_diag / (T(w_repeated) - w_repeated + np.eye(N))
            vjp_temp += _dot(_dot(vc, F * _dot(T(v), vg)), T(v))
        reps = np.array(x.shape)
        reps[-2:] = 1
        if UPLO == "L":
            tri = np.tile(np.tril(np.ones(N), -1), reps)
        elif UPLO == "U":
            tri = np.tile(np.triu(np.ones(N), 1), reps)
        return np.real(vjp_temp) * np.eye(vjp_temp.shape[-1]) + (vjp_temp + np.conj(T(vjp_temp))) * tri

    return vjp


def eigh(x):
    return np.linalg.eigh(x)


# defvjp(eigh, grad_eigh): the NamedTuple (eigenvalues, eigenvectors) of a symmetric matrix, whose
# eigenvalues are kept apart (F divides by their differences) and eigenvectors fixed in sign by LAPACK
@rrule(eigh, arrays(shape=(3, 3), structure="symmetric"))
def eigh_rrule(x):
    return _defvjp(np.linalg.eigh, (x,), grad_eigh)


def grad_cholesky(L, A):
    solve_trans = lambda a, b: solve(T(a), b)  # noqa: E731
    phi = lambda X: np.tril(X) / (1.0 + np.eye(X.shape[-1]))  # noqa: E731

    def conjugate_solve(L, X):
        return solve_trans(L, T(solve_trans(L, T(X))))

    def vjp(g):
        S = conjugate_solve(L, phi(np.einsum("...ki,...kj->...ij", L, g)))
        return (S + T(S)) / 2.0

    return vjp


def cholesky(x):
    return np.linalg.cholesky(x)


# defvjp(cholesky, grad_cholesky), positive definite input
@rrule(cholesky, arrays(shape=(3, 3), structure="psd"))
def cholesky_rrule(x):
    return _defvjp(np.linalg.cholesky, (x,), grad_cholesky)


def grad_svd_values(usv_, a, full_matrices=True, compute_uv=True):
    """grad_svd's ``compute_uv=False`` branch (singular values only)."""

    def vjp(g):
        usv = svd(a, full_matrices=False)
        u = usv[0]
        v = np.conj(T(usv[2]))
        return _dot(np.conj(u) * g[..., np.newaxis, :], T(v))

    return vjp


def singular_values(a):
    return np.linalg.svd(a, compute_uv=False)


# defvjp(svd, grad_svd) with compute_uv=False; full rank 3x2 matrices with distinct singular values
@rrule(singular_values, arrays(shape=(3, 2), min_value=-1.0, max_value=1.0).map(lambda a: a + np.array([[4.0, 0], [0, 2.0], [0, 0]])))
def svd_values_rrule(a):
    ans = np.linalg.svd(a, compute_uv=False)
    vjp = grad_svd_values(ans, a, full_matrices=True, compute_uv=False)
    return ans, lambda g: (vjp(g),)


# ----- autograd/scipy/special.py -----------------------------------------------------------------------------

psi = scipy.special.psi
polygamma = scipy.special.polygamma
gamma_fn = scipy.special.gamma


def gammaln(x):
    return scipy.special.gammaln(x)


# defvjp(gammaln, lambda ans, x: lambda g: g * psi(x))
@rrule(gammaln, arrays(shape=(3,), min_value=0.05, max_value=20.0))
def gammaln_rrule(x):
    return _defvjp(scipy.special.gammaln, (x,), lambda ans, x: lambda g: g * psi(x))


def digamma(x):
    return scipy.special.digamma(x)


# defvjp(digamma, lambda ans, x: lambda g: g * polygamma(1, x))
@rrule(digamma, arrays(shape=(3,), min_value=0.05, max_value=20.0))
def digamma_rrule(x):
    return _defvjp(scipy.special.digamma, (x,), lambda ans, x: lambda g: g * polygamma(1, x))


def gamma(x):
    return scipy.special.gamma(x)


# defvjp(gamma, lambda ans, x: lambda g: g * ans * psi(x))
@rrule(gamma, arrays(shape=(3,), min_value=0.1, max_value=8.0))
def gamma_rrule(x):
    return _defvjp(scipy.special.gamma, (x,), lambda ans, x: lambda g: g * ans * psi(x))


def beta(a, b):
    return scipy.special.beta(a, b)


# defvjp(beta, ... g * ans * (psi(a) - psi(a + b)), ... g * ans * (psi(b) - psi(a + b))), broadcasting
@rrule(beta, arrays(shape=(2, 3), min_value=0.2, max_value=5.0), arrays(shape=(3,), min_value=0.2, max_value=5.0))
def beta_rrule(a, b):
    return _defvjp(
        scipy.special.beta, (a, b),
        lambda ans, a, b: unbroadcast_f(a, lambda g: g * ans * (psi(a) - psi(a + b))),
        lambda ans, a, b: unbroadcast_f(b, lambda g: g * ans * (psi(b) - psi(a + b))),
    )


def betainc(a, b, x):
    return scipy.special.betainc(a, b, x)


# defvjp(betainc, ... g * np.power(x, a - 1) * np.power(1 - x, b - 1) / beta(a, b), argnums=[2])
@rrule(betainc, constant(2.5), constant(1.5), arrays(shape=(3,), min_value=0.01, max_value=0.99))
def betainc_rrule(a, b, x):
    ans = scipy.special.betainc(a, b, x)
    vjp = unbroadcast_f(x, lambda g: g * np.power(x, a - 1) * np.power(1 - x, b - 1) / scipy.special.beta(a, b))
    return ans, lambda g: (None, None, vjp(g))


def gammainc(a, x):
    return scipy.special.gammainc(a, x)


# make_gammainc_vjp_arg1(1): coeffs = sign * np.exp(-x) * np.power(x, a - 1) / gamma(a); argnums=[1]
@rrule(gammainc, constant(2.0), arrays(shape=(3,), min_value=0.01, max_value=10.0))
def gammainc_rrule(a, x):
    ans = scipy.special.gammainc(a, x)
    coeffs = 1 * np.exp(-x) * np.power(x, a - 1) / gamma_fn(a)
    vjp = unbroadcast_f(x, lambda g: g * coeffs)
    return ans, lambda g: (None, vjp(g))


def erfinv(x):
    return scipy.special.erfinv(x)


root_pi = 1.7724538509055159


# defvjp(erfinv, lambda ans, x: lambda g: g * root_pi / 2 * np.exp(erfinv(x) ** 2))
@rrule(erfinv, arrays(shape=(3,), min_value=-0.95, max_value=0.95))
def erfinv_rrule(x):
    return _defvjp(scipy.special.erfinv, (x,), lambda ans, x: lambda g: g * root_pi / 2 * np.exp(scipy.special.erfinv(x) ** 2))


def logit(x):
    return scipy.special.logit(x)


# defvjp(logit, lambda ans, x: lambda g: g / (x * (1 - x)))
@rrule(logit, arrays(shape=(3,), min_value=0.01, max_value=0.99))
def logit_rrule(x):
    return _defvjp(scipy.special.logit, (x,), lambda ans, x: lambda g: g / (x * (1 - x)))


def j1(x):
    return scipy.special.j1(x)


# defvjp(j1, lambda ans, x: lambda g: g * (j0(x) - jn(2, x)) / 2.0)
@rrule(j1, arrays(shape=(3,)))
def j1_rrule(x):
    return _defvjp(scipy.special.j1, (x,), lambda ans, x: lambda g: g * (scipy.special.j0(x) - scipy.special.jn(2, x)) / 2.0)


def ive(n, x):
    return scipy.special.ive(n, x)


# defvjp(ive, None, lambda ans, n, x: lambda g: g * (ans * (n / x - np.sign(x)) + ive(n + 1, x))); x > 0
@rrule(ive, constant(1.0), arrays(shape=(3,), min_value=0.05, max_value=20.0))
def ive_rrule(n, x):
    return _defvjp(
        scipy.special.ive, (n, x),
        None, lambda ans, n, x: lambda g: g * (ans * (n / x - np.sign(x)) + scipy.special.ive(n + 1, x)),
    )


def multigammaln(a, d):
    return scipy.special.multigammaln(a, d)


# defvjp(multigammaln, lambda ans, a, d: lambda g: g * np.sum(digamma(np.expand_dims(a, -1) - np.arange(d) / 2.0), -1), None)
@rrule(multigammaln, arrays(shape=(3,), min_value=1.6, max_value=10.0), constant(3))
def multigammaln_rrule(a, d):
    return _defvjp(
        scipy.special.multigammaln, (a, d),
        lambda ans, a, d: lambda g: g * np.sum(scipy.special.digamma(np.expand_dims(a, -1) - np.arange(d) / 2.0), -1),
        None,
    )


def repeat_to_match_shape(g, shape, dtype, axis, keepdims):  # autograd/numpy/numpy_vjps.py
    if shape == ():
        return g, 1
    axis = list(axis) if isinstance(axis, tuple) else axis
    new_shape = np.array(shape)
    new_shape[axis] = 1
    num_reps = np.prod(np.array(shape)[axis])
    return np.reshape(g, new_shape) + np.zeros(shape, dtype=dtype), num_reps


def make_grad_logsumexp(ans, x, axis=None, b=1.0, keepdims=False):
    shape, dtype = np.shape(x), np.result_type(x)

    def vjp(g):
        g_repeated, _ = repeat_to_match_shape(g, shape, dtype, axis, keepdims)
        ans_repeated, _ = repeat_to_match_shape(ans, shape, dtype, axis, keepdims)
        return g_repeated * b * np.exp(x - ans_repeated)

    return vjp


def logsumexp(x, axis=None, keepdims=False):
    return scipy.special.logsumexp(x, axis=axis, keepdims=keepdims)


# defvjp(logsumexp, make_grad_logsumexp), over axis 0
@rrule(logsumexp, arrays(shape=(3, 2), min_value=-50.0, max_value=50.0), kwargs={"axis": 0})
def logsumexp_rrule(x, axis=None, keepdims=False):
    return _defvjp(scipy.special.logsumexp, (x,), make_grad_logsumexp, kwargs={"axis": axis, "keepdims": keepdims})


# ----- autograd/scipy/stats/norm.py --------------------------------------------------------------------------

norm_logpdf_fn = scipy.stats.norm.logpdf
norm_pdf_fn = scipy.stats.norm.pdf


def norm_logpdf(x, loc, scale):
    return scipy.stats.norm.logpdf(x, loc, scale)


# defvjp(logpdf, ... -g * (x - loc) / scale**2, ... g * (x - loc) / scale**2, ... g * (-1.0 / scale + (x - loc) ** 2 / scale**3))
@rrule(norm_logpdf, arrays(shape=(2, 3)), arrays(shape=(3,)), arrays(shape=(1,), min_value=0.2, max_value=5.0))
def norm_logpdf_rrule(x, loc, scale):
    return _defvjp(
        norm_logpdf_fn, (x, loc, scale),
        lambda ans, x, loc=0.0, scale=1.0: unbroadcast_f(x, lambda g: -g * (x - loc) / scale**2),
        lambda ans, x, loc=0.0, scale=1.0: unbroadcast_f(loc, lambda g: g * (x - loc) / scale**2),
        lambda ans, x, loc=0.0, scale=1.0: unbroadcast_f(scale, lambda g: g * (-1.0 / scale + (x - loc) ** 2 / scale**3)),
    )


def norm_cdf(x, loc, scale):
    return scipy.stats.norm.cdf(x, loc, scale)


# defvjp(cdf, ... g * pdf(x, loc, scale), ... -g * pdf(x, loc, scale), ... -g * pdf(x, loc, scale) * (x - loc) / scale)
@rrule(norm_cdf, arrays(shape=(3,)), arrays(shape=(3,)), arrays(shape=(3,), min_value=0.2, max_value=5.0))
def norm_cdf_rrule(x, loc, scale):
    return _defvjp(
        scipy.stats.norm.cdf, (x, loc, scale),
        lambda ans, x, loc=0.0, scale=1.0: unbroadcast_f(x, lambda g: g * norm_pdf_fn(x, loc, scale)),
        lambda ans, x, loc=0.0, scale=1.0: unbroadcast_f(loc, lambda g: -g * norm_pdf_fn(x, loc, scale)),
        lambda ans, x, loc=0.0, scale=1.0: unbroadcast_f(scale, lambda g: -g * norm_pdf_fn(x, loc, scale) * (x - loc) / scale),
    )


_LINALG, _SPECIAL, _NORM = "autograd/numpy/linalg.py", "autograd/scipy/special.py", "autograd/scipy/stats/norm.py"
LABELS = {
    **{n: {"source": f"{AUTOGRAD} {_LINALG}"} for n in [
        "det_rrule", "slogdet_rrule", "inv_rrule", "pinv_rrule", "solve_rrule", "norm2_rrule", "norm3_axis_rrule",
        "eigh_rrule", "cholesky_rrule", "svd_values_rrule"]},
    **{n: {"source": f"{AUTOGRAD} {_SPECIAL}"} for n in [
        "gammaln_rrule", "digamma_rrule", "gamma_rrule", "beta_rrule", "betainc_rrule", "gammainc_rrule",
        "erfinv_rrule", "logit_rrule", "j1_rrule", "ive_rrule", "multigammaln_rrule", "logsumexp_rrule"]},
    **{n: {"source": f"{AUTOGRAD} {_NORM}"} for n in ["norm_logpdf_rrule", "norm_cdf_rrule"]},
}
