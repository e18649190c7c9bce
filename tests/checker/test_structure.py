"""Structured domains (issue: rules on symmetric, positive definite, triangular or diagonal matrices).

Test the tester: correct rules from public code that follow a projection convention pass; a wrong rule
fails with GG201; without ``structure=`` the same correct rule gets a false GG201, which is why the option
exists."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import solve_triangular

from gradguard.checker import arrays, check, rrule
from gradguard.checker.errors import SpecError
from gradguard.checker.structure import make_structured, project, project_tangent


def _T(x):
    return np.swapaxes(x, -1, -2)


def _phi(X):
    return np.tril(X) / (1.0 + np.eye(X.shape[-1]))


def _conjugate_solve(L, X):
    return solve_triangular(L, _T(solve_triangular(L, _T(X), trans="T", lower=True)), trans="T", lower=True)


def cholesky(a):
    return np.linalg.cholesky(a)


def _cholesky_rule(halve_diagonal: bool = True, lower_convention: bool = False):
    # autograd's grad_cholesky (autograd/numpy/linalg.py, after Murray 2016, arXiv:1602.07527)
    def rule(a):
        L = np.linalg.cholesky(a)

        def pullback(g):
            inner = np.einsum("...ki,...kj->...ij", L, g)
            S = _conjugate_solve(L, _phi(inner) if halve_diagonal else np.tril(inner))
            G = 0.5 * (S + _T(S))
            return (np.tril(2 * G) - np.diag(np.diag(G)),) if lower_convention else (G,)

        return L, pullback

    return rule


def _select(**kw):
    return check(kw.pop("rule"), select=["GG1", "GG2"], max_examples=10, **kw)


def test_cholesky_on_positive_definite_matrices_passes_in_either_convention():
    for lower in (False, True):
        rule = rrule(cholesky, arrays(shape=(3, 3), structure="psd"))(_cholesky_rule(lower_convention=lower))
        report = _select(rule=rule)
        assert report.passed, [f.message for f in report.findings]


def test_a_wrong_cholesky_rule_still_fails_gg201():
    rule = rrule(cholesky, arrays(shape=(3, 3), structure="psd"))(_cholesky_rule(halve_diagonal=False))
    report = _select(rule=rule)
    assert "GG201" in {f.check_id for f in report.findings}


def test_without_structure_the_correct_rule_gets_a_false_gg201():
    """Inputs drawn positive definite by hand, directions generic: NumPy's cholesky reads one triangle, so
    along a generic direction the symmetric gradient (autograd's convention) looks like a bug."""
    psd = arrays(shape=(3, 3)).map(lambda a: make_structured("psd", a))
    rule = rrule(cholesky, psd)(_cholesky_rule())
    report = _select(rule=rule)
    assert "GG201" in {f.check_id for f in report.findings}


def eigvalsh(a):
    return np.linalg.eigvalsh(a)  # reads the lower triangle only


@rrule(eigvalsh, arrays(shape=(4, 4), structure="symmetric"))
def eigvalsh_rrule(a):
    # autograd's grad_eigh for the eigenvalues: V diag(wbar) V^T
    w, v = np.linalg.eigh(a)
    return w, lambda wbar: ((v * wbar[..., None, :]) @ _T(v),)


def test_eigvalsh_on_symmetric_matrices_passes():
    report = _select(rule=eigvalsh_rrule)
    assert report.passed, [f.message for f in report.findings]


def trisolve(L, b):
    return solve_triangular(L, b, lower=True)


@rrule(trisolve, arrays(shape=(3, 3), structure="lower", min_value=1.0, max_value=3.0), arrays(shape=(3,)))
def trisolve_rrule(L, b):
    x = solve_triangular(L, b, lower=True)

    def pullback(xbar):
        bbar = solve_triangular(L, xbar, lower=True, trans="T")
        return -np.tril(np.outer(bbar, x)), bbar

    return x, pullback


def test_triangular_solve_with_a_lower_triangular_matrix_passes():
    report = _select(rule=trisolve_rrule)
    assert report.passed, [f.message for f in report.findings]


def test_projection_keeps_structured_arrays_as_the_same_object():
    a = make_structured("symmetric", np.arange(9.0).reshape(3, 3))
    assert project("symmetric", a) is a
    b = np.arange(9.0).reshape(3, 3)
    assert np.array_equal(project("symmetric", b), (b + b.T) / 2)
    assert np.array_equal(project("diagonal", b), np.diag(np.diag(b)))
    assert np.all(np.linalg.eigvalsh(make_structured("psd", b)) >= 1 - 1e-12)


@pytest.mark.parametrize("kwargs, message", [
    ({"shape": (3,), "structure": "symmetric"}, "needs square matrices"),
    ({"shape": (2, 3), "structure": "lower"}, "needs square matrices"),
    ({"shape": (3, 3), "structure": "hermitian-ish"}, "use one of 'symmetric', 'psd'"),
    ({"shape": (1,), "structure": "unit"}, "a last axis of at least 2 elements"),
    ({"shape": (), "structure": "unit"}, "a last axis of at least 2 elements"),
    ({"shape": (4,), "dtype": "complex128", "structure": "unit"}, "unit vectors are real here"),
])
def test_bad_structures_are_refused_at_declaration(kwargs, message):
    with pytest.raises(SpecError, match=message):
        arrays(**kwargs)


def jnp_eigvalsh(a):
    import jax.numpy as jnp

    return jnp.linalg.eigvalsh(a)


def test_the_jax_reference_reads_the_primal_on_the_structure_too():
    rule = rrule(jnp_eigvalsh, arrays(shape=(3, 3), structure="symmetric"))(eigvalsh_rrule.rrule.__wrapped__)
    report = check(rule, select=["GG203"], max_examples=5)
    assert report.rules[0].checks_run == ["GG203"] and report.passed, report.rules[0].checks_skipped


# -- rotations: a curved domain -----------------------------------------------------------------------------------

A_ROT = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5], [-2.0, 1.0, 0.75]])


def trace_a(r):
    return np.trace(A_ROT @ r, axis1=-2, axis2=-1)


def _skew(m):
    return (m - _T(m)) / 2


def _trace_a_rule(tangent, name, structure="rotation"):
    @rrule(trace_a, arrays(shape=(3, 3), min_value=-2.0, max_value=2.0, structure=structure), name=name)
    def trace_a_rrule(r):
        return trace_a(r), lambda ybar: (ybar * tangent(r),)

    return trace_a_rrule


def _riemannian(r):  # the tangent-space gradient a Lie-group library returns: R skew(R^T A^T)
    return r @ _skew(_T(r) @ A_ROT.T)


def test_a_riemannian_gradient_on_rotations_passes_and_a_wrong_one_fails():
    """theseus' SO(3) Log returns R hat(w), the gradient in the tangent space of SO(3): without a way to declare
    rotations, finite differences stepped off SO(3) and the right backward drew GG201 and GG501 at every seed."""
    riemannian = check(_trace_a_rule(_riemannian, "trace_a_riemannian")).rules[0]
    assert riemannian.verdict == "pass", [f.message for f in riemannian.findings]
    euclidean = check(_trace_a_rule(lambda r: A_ROT.T + 0 * r, "trace_a_euclidean")).rules[0]
    assert euclidean.verdict == "pass", [f.message for f in euclidean.findings]  # judged by its tangent part
    normal = check(_trace_a_rule(lambda r: _riemannian(r) + r @ (A_ROT + A_ROT.T), "trace_a_plus_normal")).rules[0]
    assert normal.verdict == "pass", [f.message for f in normal.findings]  # r S, S symmetric: normal to SO(3)
    doubled = check(_trace_a_rule(lambda r: 2 * _riemannian(r), "trace_a_doubled"), select=["GG201"]).findings
    assert [f.check_id for f in doubled] == ["GG201"]
    assert doubled[0].message.startswith("the pullback of trace_a_doubled disagrees with finite differences of the "
                                         "primal: cotangent for argument 0 (r) at ")
    unstructured = check(_trace_a_rule(_riemannian, "trace_a_anywhere", structure=None), select=["GG201"])
    assert "GG201" in {f.check_id for f in unstructured.findings}  # off SO(3) the tangent-space gradient is wrong


def test_rotations_are_drawn_in_so_n_and_handed_over_as_drawn():
    eye = make_structured("rotation", np.zeros((3, 3)))
    assert np.array_equal(eye, np.eye(3))
    rng = np.random.default_rng(0)
    r = make_structured("rotation", rng.uniform(-10, 10, size=(4, 5, 5)))
    assert np.allclose(_T(r) @ r, np.eye(5), atol=1e-13) and np.allclose(np.linalg.det(r), 1.0)
    assert project("rotation", r) is r  # orthogonal to rounding: the very same array, identity checks hold
    off = r + 1e-3 * rng.standard_normal(r.shape)
    step = project("rotation", off)  # the Newton-Schulz step: back to SO(n) to second order
    assert np.max(np.abs(_T(step) @ step - np.eye(5))) < 1e-4 < np.max(np.abs(_T(off) @ off - np.eye(5)))
    with pytest.raises(SpecError, match="rotations are real"):
        arrays(shape=(3, 3), dtype="complex128", structure="rotation")


def test_gg705_differentiates_the_backward_as_declared_not_the_structures_projection():
    """PyTorch's double backward differentiates the Function's own backward; its finite differences must too.
    Through a rotation's projection, which depends on the point, they saw a curvature term PyTorch cannot."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install 'gradguard[torch]'")
    from gradguard.checker import torch_rule

    a = torch.tensor(A_ROT)

    class TraceA(torch.autograd.Function):
        @staticmethod
        def forward(ctx, r):
            ctx.save_for_backward(r)
            return torch.einsum("ij,ji->", a, r)

        @staticmethod
        def backward(ctx, grad):
            (r,) = ctx.saved_tensors
            m = r.T @ a.T
            return grad * (r @ (m - m.T) / 2)  # the tangent-space gradient, differentiable in r

    report = check(torch_rule(TraceA, arrays(shape=(3, 3), min_value=-2.0, max_value=2.0, structure="rotation")))
    assert report.rules[0].verdict == "pass", [f.message for f in report.findings]
    assert "GG705" in report.rules[0].checks_run


def _matsq_jax(twice_left: bool):
    import jax

    @jax.custom_vjp
    def matsq(x):
        return x @ x

    def bwd(x, g):  # the exact VJP of X -> X @ X is g X^T + X^T g
        return (2 * g @ x.T,) if twice_left else (g @ x.T + x.T @ g,)

    matsq.defvjp(lambda x: (x @ x, x), bwd)
    return matsq


@pytest.mark.parametrize("structure", ["symmetric", "psd"])
def test_jax_derivatives_read_a_jax_rule_on_the_structure_too(structure):
    """JAX's own derivatives of a jax_rule (GG204's jvp of the vjp, the safety matrix's jax column, GG601/GG602)
    ran the custom_vjp off the structure while finite differences moved inside it: the exact VJP of X @ X on
    symmetric or positive definite matrices drew GG204 and GG501 (the jax column wrong in 7 contexts of 9), and
    so did ott-jax's matrix square root. A bwd that is wrong on the structure still fails."""
    from gradguard.checker import jax_rule

    spec = arrays(shape=(3, 3), min_value=-2.0, max_value=2.0, structure=structure)
    right = check(jax_rule(_matsq_jax(False), spec, name="matsq"), max_examples=5).rules[0]
    assert right.verdict == "pass", [(f.check_id, f.message) for f in right.findings]
    assert {"GG204", "GG501", "GG601", "GG602"} <= set(right.checks_run)
    assert {c["status"] for c in right.safety_matrix["cells"] if c["engine"] == "jax"} == {"right"}
    wrong = check(jax_rule(_matsq_jax(True), spec, name="matsq_left"), select=["GG201", "GG501"], max_examples=5).findings
    assert {f.check_id for f in wrong} == {"GG201", "GG501"}


# -- GG204: the tape's second order of a NumPy rule, on the structure ------------------------------------------------

W_Q = np.array([[1.0, 2.0, -1.0], [0.5, -0.5, 3.0], [2.0, 1.0, 0.25]])


def weighted_square(a):
    return np.sum(W_Q * (a @ a))


def _weighted_square_rule(kind, detached=False):
    @rrule(weighted_square, arrays(shape=(3, 3), min_value=-2.0, max_value=2.0, structure=kind),
           name=f"weighted_square_{kind}" + ("_detached" if detached else ""))
    def weighted_square_rrule(a):
        g = W_Q @ a.T + a.T @ W_Q  # the Euclidean gradient: judged by its part on the structure
        if detached:
            g = np.array(g)  # the stored derivative, copied out of the trace
        return weighted_square(a), lambda ybar: (ybar * g,)

    return weighted_square_rrule


@pytest.mark.parametrize("kind", ["symmetric", "psd", "lower", "upper", "diagonal", "rotation"])
def test_the_tapes_second_order_reads_a_numpy_rule_on_the_structure_too(kind):
    """GG204 differentiates a NumPy rule on the tape against finite differences of its pullback, which move inside
    the structure; the tape ran the rule without the structure's projection (it passed traced arrays through), so
    every structured rule the tape can trace drew a false GG204 (the weighted square at seed 0: 26.9955 by the tape,
    32.21 by finite differences on symmetric matrices). A residual copied out of the trace still fails."""
    right = check(_weighted_square_rule(kind), select=["GG204"]).rules[0]
    assert right.checks_run == ["GG204"] and right.verdict == "pass", [f.message for f in right.findings]
    wrong = check(_weighted_square_rule(kind, detached=True), select=["GG204"]).findings
    assert [f.check_id for f in wrong] == ["GG204"]
    assert wrong[0].message.startswith(f"the second order of weighted_square_{kind}_detached is wrong with respect to "
                                       "the input: along a random direction u, d/dt <w, pullback at (x + t u)(ybar)> = ")


# -- unit vectors: the sphere ---------------------------------------------------------------------------------------

B_UNIT = np.array([0.5, -1.5, 2.0, 0.25])


def quartic(q):  # a function of a unit quaternion: (b . q)^2 q_0
    return np.dot(q, B_UNIT) ** 2 * q[0]


def _euclidean_quartic(q):
    e0 = np.eye(4)[0]
    return 2 * np.dot(q, B_UNIT) * q[0] * B_UNIT + np.dot(q, B_UNIT) ** 2 * e0


def _quartic_rule(tangent, name, structure="unit"):
    @rrule(quartic, arrays(shape=(4,), min_value=-2.0, max_value=2.0, structure=structure), name=name)
    def quartic_rrule(q):
        return quartic(q), lambda ybar: (ybar * tangent(q),)

    return quartic_rrule


def _on_sphere(q):  # what jax-md's quaternion rotation returns: the gradient projected on the tangent space
    g = _euclidean_quartic(q)
    return g - np.dot(q, g) * q


def test_a_gradient_on_the_tangent_space_of_the_sphere_passes_and_a_wrong_one_fails():
    """jax-md's quaternion rotation returns dq - (q . dq) q, the gradient in the tangent space of the unit sphere:
    without a way to declare unit vectors, finite differences stepped off the sphere and the right rule drew
    GG201 at every seed. The Euclidean gradient is judged by its tangent part; a wrong one still fails."""
    projected = check(_quartic_rule(_on_sphere, "quartic_tangent")).rules[0]
    assert projected.verdict == "pass", [f.message for f in projected.findings]
    euclidean = check(_quartic_rule(_euclidean_quartic, "quartic_euclidean")).rules[0]
    assert euclidean.verdict == "pass", [f.message for f in euclidean.findings]
    normal = check(_quartic_rule(lambda q: _on_sphere(q) + 3.0 * q, "quartic_plus_normal")).rules[0]
    assert normal.verdict == "pass", [f.message for f in normal.findings]  # a multiple of q is normal to the sphere
    doubled = check(_quartic_rule(lambda q: 2 * _on_sphere(q), "quartic_doubled"), select=["GG201"]).findings
    assert [f.check_id for f in doubled] == ["GG201"]
    assert doubled[0].message.startswith("the pullback of quartic_doubled disagrees with finite differences of the "
                                         "primal: cotangent for argument 0 (q) at ")
    unstructured = check(_quartic_rule(_on_sphere, "quartic_anywhere", structure=None), select=["GG201"])
    assert "GG201" in {f.check_id for f in unstructured.findings}  # off the sphere the projected gradient is wrong
    detached = check(_quartic_rule(lambda q: np.array(_on_sphere(q)), "quartic_detached"), select=["GG204"]).findings
    assert [f.check_id for f in detached] == ["GG204"]  # GG204 ran on the sphere (the first rule passed it) and fails


def test_unit_vectors_are_drawn_on_the_sphere_and_handed_over_as_drawn():
    first = make_structured("unit", np.zeros((2, 4)))
    assert np.array_equal(first, np.tile(np.eye(4)[0], (2, 1)))
    rng = np.random.default_rng(0)
    q = make_structured("unit", rng.uniform(-10, 10, size=(5, 4)))
    assert np.allclose(np.linalg.norm(q, axis=-1), 1.0, atol=1e-15)
    assert project("unit", q) is q  # of norm 1 to rounding: the very same array, identity checks hold
    tiny = make_structured("unit", np.array([3e-310, -4e-310]))  # its squares underflow: scaled first
    assert np.allclose(tiny, [0.6, -0.8])
    off = q + 1e-3 * rng.standard_normal(q.shape)
    step = project("unit", off)  # back to the sphere to second order
    assert np.max(np.abs(np.linalg.norm(step, axis=-1) - 1)) < 1e-5 < np.max(np.abs(np.linalg.norm(off, axis=-1) - 1))
    g = rng.standard_normal(q.shape)
    pulled = project_tangent("unit", g, q)
    assert np.allclose(np.sum(pulled * q, axis=-1), 0.0, atol=1e-14)  # in the tangent space at q
    assert np.allclose(pulled, g - np.sum(q * g, axis=-1, keepdims=True) * q, atol=1e-14)


def test_a_jax_rule_on_unit_quaternions_passes_every_check():
    """jax-md's quaternion rotation (rigid_body.py), whose bwd projects dq on the sphere's tangent space, through
    every JAX derivative of the checks; the same bwd read on unrestricted arrays fails GG201."""
    import jax
    import jax.numpy as jnp
    from gradguard.checker import jax_rule

    def rotate_raw(q, v):
        w, u = q[0], q[1:]
        return v + 2 * w * jnp.cross(u, v) + 2 * jnp.cross(u, jnp.cross(u, v))

    @jax.custom_vjp
    def rotate(q, v):
        return rotate_raw(q, v)

    def bwd(res, g):
        q, v = res
        dq, dv = jax.vjp(rotate_raw, q, v)[1](g)
        return dq - (q @ dq) * q, dv

    rotate.defvjp(lambda q, v: (rotate_raw(q, v), (q, v)), bwd)
    unit = check(jax_rule(rotate, arrays(shape=(4,), structure="unit"), arrays(shape=(3,)), name="rotate"),
                 max_examples=5).rules[0]
    assert unit.verdict == "pass", [(f.check_id, f.message) for f in unit.findings]
    assert {"GG201", "GG203", "GG204", "GG501", "GG601", "GG602"} <= set(unit.checks_run)
    anywhere = check(jax_rule(rotate, arrays(shape=(4,)), arrays(shape=(3,)), name="rotate_anywhere"),
                     select=["GG201"], max_examples=5).findings
    assert {f.check_id for f in anywhere} == {"GG201"}


def test_gg705_reads_a_torch_function_on_unit_vectors_as_declared():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install 'gradguard[torch]'")
    from gradguard.checker import torch_rule

    b = torch.tensor(B_UNIT)

    class Quartic(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q):
            ctx.save_for_backward(q)
            return (q @ b) ** 2 * q[0]

        @staticmethod
        def backward(ctx, grad):
            (q,) = ctx.saved_tensors
            g = 2 * (q @ b) * q[0] * b + (q @ b) ** 2 * torch.eye(4, dtype=q.dtype)[0]
            return grad * (g - (q @ g) * q)  # the tangent-space gradient, differentiable in q

    report = check(torch_rule(Quartic, arrays(shape=(4,), min_value=-2.0, max_value=2.0, structure="unit")))
    assert report.rules[0].verdict == "pass", [f.message for f in report.findings]
    assert "GG705" in report.rules[0].checks_run


def test_the_torch_column_reads_a_torch_rule_on_its_structure():
    """The safety matrix's torch column ran a torch rule's Function on the program's tensors as they were, so its
    gradient was compared raw with finite differences that move inside the structure: k-diffusion's matrix square
    root by eigendecomposition (psd), whose gradient is right on symmetric matrices but not symmetric itself, drew
    GG501 in every context. The Function now gets P(x), and autograd pulls its gradient back through P."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install 'gradguard[torch]'")
    from gradguard.checker import torch_rule

    class SymIdentity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.clone()

        @staticmethod
        def backward(ctx, g):
            return g.transpose(-2, -1)  # its symmetric part is the gradient's: right on symmetric matrices

    class SymIdentityDoubled(SymIdentity):
        @staticmethod
        def backward(ctx, g):
            return 2 * g.transpose(-2, -1)

    spec = arrays(shape=(3, 3), structure="symmetric")
    right = check(torch_rule(SymIdentity, spec, name="sym_identity")).rules[0]
    assert right.verdict == "pass", [(f.check_id, f.message) for f in right.findings]
    assert {c["status"] for c in right.safety_matrix["cells"] if c["engine"] == "torch"} <= {"right", "skipped"}
    assert any(c["status"] == "right" for c in right.safety_matrix["cells"] if c["engine"] == "torch")
    wrong = check(torch_rule(SymIdentityDoubled, spec, name="sym_identity_doubled"), select=["GG201", "GG501"])
    assert {f.check_id for f in wrong.findings} == {"GG201", "GG501"}


def test_a_structure_under_map_is_a_spec_error_at_declaration_that_says_what_to_do():
    """arrays(structure="psd").map(lambda m: m + I) drew matrices the checks then read as unstructured: they moved
    them along non-symmetric directions, and a Cholesky solve, which reads one triangle, got a false GG201."""

    def trace(m):
        return np.trace(m)

    with pytest.raises(SpecError) as err:
        rrule(trace, arrays(shape=(3, 3), structure="psd").map(lambda m: m + np.eye(3)))
    assert str(err.value).startswith(
        "Got the spec of argument 0: arrays(..., structure='psd') under .map(...). gradguard cannot know that the "
        "mapped values keep the structure")
    rrule(trace, arrays(shape=(3, 3)).map(lambda m: m + np.eye(3)))  # no structure declared: nothing lost


# A structure beside fixed keyword arguments: the structure's wrappers took positional arguments only, so kwargs=
# reached them as an unexpected keyword and every check failed with GG101 ("the forward of quad_rrule raised
# TypeError: quad_rrule() got an unexpected keyword argument 'scale'"), the rule never checked. qpax's QP solver
# (a symmetric Q, its tolerances as keyword arguments) met it.
def _quad(S, x, scale=1.0):
    return scale * x @ S @ x


def _quad_rule(broken: bool):
    def rule(S, x, scale=1.0):
        factor = 1.0 if broken else scale  # BUG (broken): the scale left out of the pullback

        def pullback(g):
            return g * factor * np.outer(x, x), g * factor * (S + S.T) @ x

        return _quad(S, x, scale), pullback

    return rule


@pytest.mark.parametrize("structure", ["symmetric", "psd"])
def test_a_structured_rule_with_fixed_keyword_arguments_is_checked_with_them(structure):
    specs = (arrays(shape=(2, 2), structure=structure), arrays(shape=(2,), min_value=-3.0, max_value=3.0))
    correct = rrule(_quad, *specs, kwargs={"scale": 3.0}, name="quad_rrule")(_quad_rule(broken=False))
    assert check(correct, seed=0).findings == []
    broken = rrule(_quad, *specs, kwargs={"scale": 3.0}, name="quad_unscaled_rrule")(_quad_rule(broken=True))
    found = check(broken, seed=0, select=["GG201"]).findings
    assert found and {f.check_id for f in found} == {"GG201"}
    assert all("(finite differences), got" in f.message for f in found), [f.message for f in found]


def test_a_structured_jax_rule_with_fixed_keyword_arguments_is_checked_with_them():
    import jax
    import jax.numpy as jnp

    from gradguard import jax_rule

    @jax.custom_vjp
    def quad(S, x, scale=1.0):
        return scale * x @ S @ x

    def quad_fwd(S, x, scale=1.0):
        return quad(S, x, scale), (S, x, scale)

    def quad_bwd(res, g):
        S, x, scale = res
        return g * scale * jnp.outer(x, x), g * scale * (S + S.T) @ x, None

    quad.defvjp(quad_fwd, quad_bwd)
    rule = jax_rule(quad, arrays(shape=(2, 2), structure="psd"), arrays(shape=(2,), min_value=-3.0, max_value=3.0),
                    kwargs={"scale": 3.0}, name="quad_rule")
    assert check(rule, seed=0).findings == []
