"""Test the tester: `jax.custom_jvp` rules through jax_rule.

Forward checks (GG207 jvp against forward finite differences, GG208 linearity in the tangent) fail broken
jvps with their exact messages and pass the correct twin; reverse mode (JAX's transpose of the jvp), jit,
vmap and second order apply as for custom_vjp rules; nondiff_argnums, defaults and keyword arguments are
declarable."""

import re
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradguard.checker import arrays, check, constant, jax_rule
from gradguard.checker.errors import SpecError

NUM = r"(-?[0-9.e+-]+|nan|inf)"


def findings(rule, *ids):
    report = check(rule, select=list(ids))
    assert report.rules[0].verdict != "error", report.rules[0].error
    return [f for f in report.findings if f.check_id in ids]


def softplus_with(derivative, name):
    @jax.custom_jvp
    def softplus(x):
        return jnp.logaddexp(0.0, x)

    @softplus.defjvp
    def softplus_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return softplus(x), derivative(x, t)

    return jax_rule(softplus, arrays(shape=(4,), min_value=-20.0, max_value=20.0), name=name)


correct = softplus_with(lambda x, t: t * jax.nn.sigmoid(x), "softplus_right")
slipped = softplus_with(lambda x, t: t * jax.nn.sigmoid(-x), "softplus_slip")
offset = softplus_with(lambda x, t: t * jax.nn.sigmoid(x) + 1e-3, "softplus_offset")
stopped = softplus_with(lambda x, t: t * jax.nn.sigmoid(jax.lax.stop_gradient(x)), "softplus_stopped")


def test_correct_jvp_passes_forward_reverse_and_composition_checks() -> None:
    assert findings(correct, "GG201", "GG202", "GG204", "GG207", "GG208", "GG601", "GG602") == []


def test_wrong_jvp_fails_gg207_with_its_message() -> None:
    (found,) = findings(slipped, "GG207")
    m = re.fullmatch(
        rf"the jvp of softplus_slip disagrees with finite differences: along a random direction u, "
        rf"<w, jvp\(x; u\)> = {NUM}, but d/dt <w, softplus_slip\(x \+ t u\)> = {NUM} by finite differences of "
        rf"the primal, {NUM} apart where the tolerance allows {NUM}\.", found.message)
    assert m, found.message
    got, want, apart, allowed = (float(g) for g in m.groups())
    assert apart == pytest.approx(abs(got - want), rel=0.02) and 0 < allowed < apart


def relu_with_jvp(tangent, name, spec):
    """A custom_jvp relu whose jvp returns ``tangent(x, t)``."""
    @jax.custom_jvp
    def relu(x):
        return jnp.maximum(x, 0.0)

    @relu.defjvp
    def relu_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return relu(x), tangent(x, t)

    return jax_rule(relu, spec, name=name)


def relu_with(at_zero, name, spec):
    """A custom_jvp relu whose jvp gives ``at_zero`` at 0 (any value in [0, 1] is a subgradient there)."""
    return relu_with_jvp(lambda x, t: jnp.where(x > 0, t, jnp.where(x == 0, at_zero * t, 0.0)), name, spec)


@pytest.mark.parametrize("spec", [arrays(shape=(4,), min_value=0.0, max_value=0.0),
                                  arrays(shape=(4,), min_value=-1e-4, max_value=1e-4)], ids=["at-the-kink", "beside-it"])
def test_jax_own_relu_passes_gg207_at_and_beside_its_kink(spec) -> None:
    """`jax.nn.relu` is a custom_jvp whose jvp gives 0 at 0, where relu has no derivative; central finite
    differences there give the mean of the two sides, and a kink 1e-4 away lies within their steps. GG207
    judged both as wrong jvps (a false error on the library's own relu, at seed 0). A value between the
    one-sided derivatives is a valid one, as GG201 holds of a pullback."""
    for rule in (jax_rule(jax.nn.relu, spec, name="relu"), relu_with(1.0, "relu_one_at_zero", spec)):
        for seed in range(3):
            report = check(rule, select=["GG207", "GG208"], seed=seed)
            assert report.rules[0].verdict == "pass", (rule.name, seed, [f.message for f in report.findings])


def jax_library_rules():
    """JAX's own custom_jvp rules, on their domains: kinks (relu, relu6), edges of a domain (logit, log1mexp),
    two arguments with zeros (xlogy), several outputs (sici)."""
    import jax.scipy.special as jss

    return [
        jax_rule(jax.nn.relu, arrays(shape=(4,)), name="relu"),
        jax_rule(jax.nn.relu6, arrays(shape=(4,)), name="relu6"),
        jax_rule(jax.nn.log1mexp, arrays(shape=(3,), min_value=0.01, max_value=20.0), name="log1mexp"),
        jax_rule(jss.logit, arrays(shape=(3,), min_value=0.01, max_value=0.99), name="logit"),
        jax_rule(jss.xlogy, arrays(shape=(3,), min_value=-5.0, max_value=5.0),
                 arrays(shape=(3,), min_value=0.01, max_value=10.0), name="xlogy"),
        jax_rule(jss.sici, arrays(shape=(3,), min_value=0.1, max_value=10.0), name="sici"),
    ]


def test_jax_own_custom_jvp_rules_get_no_error_finding() -> None:
    """Real rules, used by every JAX program that calls them: every check at seed 0 finds no error (relu and
    relu6 drew GG207 false errors at their kinks before the jvp was judged against one-sided derivatives)."""
    report = check(jax_library_rules(), seed=0, jobs=1)
    assert {r.name: [f.message for f in r.findings if f.severity == "error"] for r in report.rules if r.verdict != "pass"} == {}


def test_a_jvp_outside_the_one_sided_derivatives_at_a_kink_fails_gg207() -> None:
    rule = relu_with(2.0, "relu_two_at_zero", arrays(shape=(4,), min_value=0.0, max_value=0.0))
    (f,) = findings(rule, "GG207")
    # At the kink d/dt has no value (central differences give 2.0, the sides' average): the message gives the sides.
    assert f.message == (
        "the jvp of relu_two_at_zero disagrees with finite differences: along a random direction u, "
        "<w, jvp(x; u)> = 8.0, outside the one-sided derivatives of <w, relu_two_at_zero(x + t u)> at t = 0, 0.0 "
        "(from below) and 4.0 (from above) by finite differences of the primal, which has a kink there: no "
        "(sub)gradient gives this value."
    ), f.message
    assert f.expected == "a value between 0.0 and 4.0"


# neural-tangents' _sqrt (stax/elementwise.py): sqrt(max(x, tol)) with the jvp x_dot / (2 sqrt(x)) where x > 1e-30. At
# x = 6.4e-16 sqrt is differentiable (2e7), but every step float64 can difference it at crosses the kink at 0 and the
# vertical tangent beside it: the one-sided slopes of the steps (0.77 and 1052) bounded nothing, and GG207 called the
# right jvp "no (sub)gradient". Where an element's quotients grow at every step there is no verdict; along a direction
# that moves no such element (the search finds one at seed 0) the wrong sign is still found.
NEAR_SQRT_KINK = np.array([1.175494e-38, 0.5, 78.26, 6.356712e-16])


def nt_sqrt_with(sign, name):
    @partial(jax.custom_jvp, nondiff_argnums=(1,))
    def _sqrt(x, tol=0.0):
        return jnp.sqrt(jnp.maximum(x, tol))

    @_sqrt.defjvp
    def _sqrt_jvp(tol, primals, tangents):
        (x,), (x_dot,) = primals, tangents
        safe_tol = max(tol, 1e-30)
        return _sqrt(x, tol), jnp.where(x > safe_tol, sign * x_dot / (2 * _sqrt(x, safe_tol)), 0.0)

    from hypothesis import strategies as st

    return jax_rule(_sqrt, st.just(NEAR_SQRT_KINK), name=name)


def test_a_right_jvp_a_hair_from_a_kink_passes_gg207() -> None:
    for seed in range(3):
        assert findings(nt_sqrt_with(1.0, "nt_sqrt"), "GG207", "GG201") == [], seed


def test_a_jvp_of_the_wrong_sign_a_hair_from_a_kink_fails_gg207() -> None:
    found = findings(nt_sqrt_with(-1.0, "nt_sqrt_negated"), "GG207")
    assert [f.check_id for f in found] == ["GG207"]
    assert re.fullmatch(r"the jvp of nt_sqrt_negated disagrees with finite differences: along a random direction u, "
                        rf"<w, jvp\(x; u\)> = {NUM}, .*", found[0].message), found[0].message


# jax-fem's phase-field split of a strain (applications/phase_field_fracture/eigen.py, deepmodeling/jax-fem 912632b):
# sum_i f(lambda_i) v_i v_i^T with f(x) = 2 mu (g(d) <x>+ + <x>-), kinked at 0, and Miehe's jvp. Three inputs drew
# false GG207s: a strain of 0 (every eigenvalue on the kink; the jvp takes JAX's side of |x| at 0, the derivative on
# positive definite strains, which along u no one-sided derivative bounds), a strain of 1e-167 beside zeros (every
# step sees the cone the tiny eigenvalues make from afar) and a strain whose eigenvalue of 9e-5 crosses 0 1e-4 along u
# (the central differences' steps straddle it: 1408.18 against the jvp's 1504.297).
PHASE_FIELD_POINTS = {
    "zero": np.zeros((2, 2)),
    "tiny": np.array([[0.0, 0.0, 0.0], [0.0, 5.048508e-305, -1.806986e-167], [0.0, -1.806986e-167, 0.0]]),
    "near-kink": np.array([[-0.0762094517354226, 0.04708774494071018, 1.9782477385021647e-91],
                           [0.04708774494071018, -0.09464612642655093, 0.002428906187514221],
                           [1.9782477385021647e-91, 0.002428906187514221, 5.4571667414910486e-300]]),
}


def phase_field_split(term2_sign, name, point):
    from hypothesis import strategies as st

    mu, g = 210.0 / 2.6, (1 - 0.3) ** 2
    fn = lambda x: 2 * mu * (g * 0.5 * (x + jnp.abs(x)) + 0.5 * (x - jnp.abs(x)))  # noqa: E731
    fn_vmap, grad_fn_vmap = jax.vmap(fn), jax.vmap(jax.grad(fn))

    @jax.custom_jvp
    def eigen_f(x):
        evals, evecs = jnp.linalg.eigh(x)
        M = jnp.einsum("bi,bj->bij", evecs.T, evecs.T)
        return jnp.sum(M * fn_vmap(evals)[:, None, None], axis=0)

    @eigen_f.defjvp
    def f_jvp(primals, tangents):
        (x,), (v,) = primals, tangents
        evals, evecs = jnp.linalg.eigh(x)
        fvals, grads = fn_vmap(evals), grad_fn_vmap(evals)
        M = jnp.einsum("bi,bj->bij", evecs.T, evecs.T)
        term1 = jnp.sum(jnp.einsum("bij,bkl->bijkl", M, M) * grads[:, None, None, None, None], axis=0)
        G = jnp.einsum("aik,bjl->abijkl", M, M) + jnp.einsum("ail,bjk->abijkl", M, M)
        diff_evals = evals[:, None] - evals[None, :]
        theta = jnp.where(diff_evals == 0.0, grads[:, None], (fvals[:, None] - fvals[None, :]) / diff_evals)
        tmp = G * theta[:, :, None, None, None, None]
        term2 = term2_sign * 0.5 * (jnp.sum(tmp, axis=(0, 1)) - jnp.einsum("aa...->...", tmp))
        return eigen_f(x), jnp.einsum("ijkl,kl", term1 + term2, v)

    return jax_rule(eigen_f, st.just(PHASE_FIELD_POINTS[point]), name=name)


@pytest.mark.parametrize("point", sorted(PHASE_FIELD_POINTS))
def test_a_spectral_function_at_and_near_its_kinks_passes_gg207(point) -> None:
    for seed in range(3):
        report = check(phase_field_split(1.0, "phase_field_split", point), select=["GG207"], seed=seed)
        assert report.findings == [], (point, seed, [f.message for f in report.findings])


@pytest.mark.parametrize("point", sorted(PHASE_FIELD_POINTS))
def test_a_spectral_function_with_a_wrong_jvp_fails_gg207_at_and_near_its_kinks(point) -> None:
    (found,) = findings(phase_field_split(-1.0, "phase_field_split_flipped", point), "GG207")
    assert found.message.startswith("the jvp of phase_field_split_flipped disagrees with finite differences"), found.message


def expi_with(derivative, name):
    @jax.custom_jvp
    def expi(x):
        return jax.scipy.special.expi(x)

    @expi.defjvp
    def expi_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return expi(x), derivative(x) * t

    return jax_rule(expi, arrays(shape=(4,), dtype="float32", min_value=0.01, max_value=50.0), name=name)


# JAX's own expi rule (jax/_src/scipy/special.py) on float32 drew a false GG207 at this input: the first table's
# steps (0.17) cross expi's logarithmic singularity at 0, and the exemptions read one-sided slopes at steps near
# 0.0117 as a kink ("outside the one-sided derivatives ... 44.3656 (from below) and 89.7039 (from above)").
NEAR_ITS_SINGULARITY = (np.array([0.011719, 1.0, 1.0, 1.0], dtype=np.float32),)
ONES_DRAWS = [(np.ones(4, dtype=np.float32),), np.ones(4, dtype=np.float32)]


def test_a_right_jvp_near_a_singularity_closer_than_the_first_steps_passes_gg207() -> None:
    from gradguard.checker.reproducer import replay

    replay(expi_with(lambda x: jnp.exp(x) / x, "expi_rule"), "GG207", NEAR_ITS_SINGULARITY, ONES_DRAWS)


def test_a_wrong_jvp_near_a_singularity_closer_than_the_first_steps_fails_gg207() -> None:
    from gradguard.checker.reproducer import replay

    with pytest.raises(AssertionError) as failed:
        replay(expi_with(lambda x: 2 * jnp.exp(x) / x, "expi_doubled_rule"), "GG207", NEAR_ITS_SINGULARITY, ONES_DRAWS)
    # the derivative the confirming tables resolve, and no kink: the sides' gap shrinks at a finer step
    assert str(failed.value) == (
        "GG207 jvp disagrees with forward finite differences (custom_jvp): the jvp of expi_doubled_rule disagrees "
        "with finite differences: along a random direction u, <w, jvp(x; u)> = 188.984, but d/dt <w, "
        "expi_doubled_rule(x + t u)> = 94.4926 by finite differences of the primal, 94 apart where the tolerance "
        "allows 0.74.")


def test_wrong_jvp_shows_in_reverse_mode_through_the_transpose() -> None:
    assert [f.check_id for f in findings(slipped, "GG201")] == ["GG201"]


def test_the_jax_reference_finding_names_the_custom_jvp() -> None:
    """GG203's message said "the function underneath the custom_vjp" for a custom_jvp rule too."""
    (found,) = findings(slipped, "GG203")
    assert found.message.startswith("the pullback of softplus_slip disagrees with the JAX reference gradient "
                                    "(jax.vjp of the function underneath the custom_jvp): "), found.message


def test_offset_in_the_tangent_fails_forward_checks_and_passes_reverse_mode() -> None:
    assert findings(offset, "GG201", "GG202", "GG301") == []  # the transpose drops the offset
    (lin,) = findings(offset, "GG208")
    assert re.fullmatch(
        rf"the jvp of softplus_offset is not linear in the tangent: jvp\(x; a u1 \+ b u2\) should equal "
        rf"a jvp\(x; u1\) \+ b jvp\(x; u2\) \(a = {NUM}, b = {NUM}\), but the output tangent at \[\d\] is {NUM} "
        rf"instead of {NUM}\.", lin.message), lin.message
    assert [f.check_id for f in findings(offset, "GG207")] == ["GG207"]


def test_stopped_gradient_in_the_jvp_fails_second_order_only() -> None:
    assert findings(stopped, "GG201", "GG207", "GG208") == []
    (found,) = findings(stopped, "GG204")
    assert found.message.startswith("the second order of softplus_stopped is wrong"), found.message
    # A custom_jvp has no fwd and bwd: the message and the fix name the jvp rule, which JAX differentiates again.
    assert "(jvp of vjp, through the jvp rule, which JAX differentiates again)" in found.message, found.message
    assert "fwd" not in found.message and "bwd" not in found.fix and "residual" not in found.fix, found.fix
    assert found.fix.startswith("JAX differentiates the jvp rule again to get second derivatives"), found.fix


def _regularised_abs(stop: bool):
    """mujoco MJX's collision_sdf regularises the derivative of |x| near 0: x / (|x| + [|x| ~ 0] 1e-12)."""

    @jax.custom_jvp
    def abs_reg(x):
        return jnp.abs(x) * x if stop else jnp.abs(x)

    @abs_reg.defjvp
    def abs_reg_jvp(primals, tangents):
        (x,), (xd,) = primals, tangents
        slope = x / (jnp.abs(x) + jnp.allclose(jnp.abs(x), 0) * 1e-12)
        if stop:  # x |x|: the derivative 2 |x|, written with a residual cut off from x
            return abs_reg(x), 2 * jax.lax.stop_gradient(slope * x) * xd
        return abs_reg(x), slope * xd

    return jax_rule(abs_reg, arrays(shape=(1,), min_value=-2.0, max_value=2.0),
                    name="abs_stopped" if stop else "abs_regularised")


def test_a_derivative_regularised_at_a_kink_is_no_second_order_error() -> None:
    """At x = 0 (the first input drawn) JAX's second derivative of the regularised |x| is 1e12, exact for the rule;
    finite differences see a jump at every step but the finest, whose quotients reach 9.99928e11: GG204 called it
    wrong (128.015 by the first table). A residual cut off from x still fails where the function is smooth."""
    assert findings(_regularised_abs(False), "GG204") == []
    (found,) = findings(_regularised_abs(True), "GG204")
    assert found.message.startswith("the second order of abs_stopped is wrong"), found.message


def test_forward_checks_skip_custom_vjp_rules() -> None:
    @jax.custom_vjp
    def f(x):
        return jnp.sin(x)

    f.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda c, g: (g * c,))
    report = check(jax_rule(f, arrays(shape=(2,))), select=["GG207", "GG208"])
    reasons = {s["id"]: s["reason"] for s in report.rules[0].checks_skipped}
    said = "the rule is a jax.custom_vjp, which has no jvp (JAX's forward mode refuses a custom_vjp)"
    assert reasons == {"GG207": said, "GG208": said}
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):  # what the reason says of JAX
        jax.jvp(f, (jnp.ones(2),), (jnp.ones(2),))


def test_python_branch_on_a_value_fails_under_jit_and_vmap() -> None:
    rule = relu_with_jvp(lambda x, t: (1.0 if float(x) > 0 else 0.0) * t,  # a value read at trace time
                         "relu_branch", arrays(shape=(), min_value=0.5, max_value=2.0))
    ids = sorted({f.check_id for f in findings(rule, "GG601", "GG602")})
    assert ids == ["GG601", "GG602"]


# -- declaring signatures --------------------------------------------------------------------------
@partial(jax.custom_jvp, nondiff_argnums=(1,))
def power(x, n):
    return x**n


@power.defjvp
def _power_jvp(n, primals, tangents):
    (x,), (t,) = primals, tangents
    return x**n, n * x ** (n - 1) * t


@jax.custom_jvp
def scaled_tanh(x, scale=2.0):
    return scale * jnp.tanh(x / scale)


@scaled_tanh.defjvp
def _scaled_tanh_jvp(primals, tangents):
    (x, scale), (tx, ts) = primals, tangents
    th = jnp.tanh(x / scale)
    return scale * th, (1.0 - th * th) * tx + (th - x / scale * (1.0 - th * th)) * ts


def test_nondiff_argnums_are_constants_without_tangent() -> None:
    rule = jax_rule(power, arrays(shape=(3,)), constant(3))
    assert rule.nondiff == frozenset({1})
    y, pb = rule.rrule(np.array([1.0, 2.0, 3.0]), 3)
    np.testing.assert_allclose(y, [1.0, 8.0, 27.0])
    xbar, nbar = pb(np.ones(3))
    np.testing.assert_allclose(xbar, [3.0, 12.0, 27.0])
    assert nbar is None
    assert findings(rule, "GG201", "GG207", "GG208", "GG601") == []


@pytest.mark.parametrize("kwargs,scale", [(None, 2.0), ({"scale": 0.5}, 0.5)], ids=["default", "kwargs"])
def test_defaults_and_keyword_arguments(kwargs, scale) -> None:
    rule = jax_rule(scaled_tanh, arrays(shape=(2,)), kwargs=kwargs)
    x = np.array([0.3, -1.0])
    y, pb = rule.rrule(x)  # the declared kwargs are bound
    np.testing.assert_allclose(y, scale * np.tanh(x / scale))
    (xbar,) = pb(np.ones(2))
    np.testing.assert_allclose(xbar, 1 - np.tanh(x / scale) ** 2)
    assert findings(rule, "GG201", "GG207", "GG208") == []


def test_a_custom_jvp_without_its_rule_is_a_spec_error() -> None:
    @jax.custom_jvp
    def bare(x):
        return x

    with pytest.raises(SpecError, match=r"custom_jvp bare has no rule yet: call bare\.defjvp\(jvp\)"):
        jax_rule(bare, arrays(shape=(2,)))


def test_a_plain_function_is_a_spec_error_naming_both_decorators() -> None:
    with pytest.raises(SpecError, match=r"jax_rule takes a jax\.custom_vjp or jax\.custom_jvp function"):
        jax_rule(jnp.sin, arrays(shape=(2,)))


# -- the example module ----------------------------------------------------------------------------
EXAMPLES = {
    "softplus": [],
    "power": [],
    "softplus_slip": ["GG201", "GG203", "GG207"],
    "softplus_offset": ["GG207", "GG208"],
    "softplus_stopped": ["GG204"],
}


@pytest.mark.slow
def test_examples_fail_the_checks_they_illustrate() -> None:
    from pathlib import Path

    from gradguard.checker.loader import load_module, rules_in

    path = Path(__file__).resolve().parents[2] / "examples" / "jax_jvp_rules.py"
    rules = {r.name: r for r in rules_in(load_module(path))}
    assert set(rules) == set(EXAMPLES)
    for name, ids in EXAMPLES.items():
        got = {f.check_id for f in check(rules[name], ignore=["GG5"], max_examples=10).findings}
        assert got == set(ids), (name, got)


def test_jvp_of_compiles_once_per_shape_and_gives_eager_jaxs_values():
    from gradguard.engines.jax_engine import _from_jvp

    @partial(jax.custom_jvp, nondiff_argnums=(1,))
    def scaled_softplus(x, k):
        return jnp.logaddexp(0.0, k * x)

    @scaled_softplus.defjvp
    def scaled_softplus_jvp(k, primals, tangents):
        (x,), (t,) = primals, tangents
        return scaled_softplus(x, k), k * t * jax.nn.sigmoid(k * x)

    rng = np.random.default_rng(0)
    for _ in range(3):
        x, t = rng.standard_normal(4), rng.standard_normal(4)
        y, ty = _from_jvp.jvp_of(scaled_softplus, (x, 2), (t, None))
        want_y, want_t = jax.jvp(lambda v: scaled_softplus(v, 2), (jnp.asarray(x),), (jnp.asarray(t),))
        np.testing.assert_allclose(y, want_y, rtol=1e-14)
        np.testing.assert_allclose(ty, want_t, rtol=1e-14)
    _from_jvp.jvp_of(scaled_softplus, (rng.standard_normal(5), 2), (rng.standard_normal(5), None))
    compiled = _from_jvp._compiled_jvp(scaled_softplus)
    assert len(compiled._state.verified) == 2 and not compiled.eager_keys  # one key per shape, both compiled


def test_a_jvp_jit_cannot_run_runs_eagerly_and_is_remembered():
    from gradguard.engines.jax_engine import _from_jvp

    @jax.custom_jvp
    def branchy(x):
        return jnp.sin(x)

    @branchy.defjvp
    def branchy_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        scale = 1.0 if float(x[0]) > -10.0 else 0.0  # a Python branch on a value: eager only
        return branchy(x), scale * jnp.cos(x) * t

    x, t = np.array([0.3, 1.0]), np.array([1.0, -2.0])
    for _ in range(2):
        _, ty = _from_jvp.jvp_of(branchy, (x,), (t,))
        np.testing.assert_allclose(ty, np.cos(x) * t, rtol=1e-14)
    (reason,) = _from_jvp._compiled_jvp(branchy).eager_keys.values()
    assert "ConcretizationTypeError" in reason or "TracerBoolConversionError" in reason


def _two_norm_of_tree(scale: float):
    """lineax's two-norm (lineax/_norm.py): a custom_jvp on a pytree, here a dict of two arrays; ``scale`` != 1
    makes its jvp wrong."""

    def dot(a, b):
        return sum(jnp.vdot(x.reshape(-1), y.reshape(-1)) for x, y in zip(jax.tree_util.tree_leaves(a),
                                                                            jax.tree_util.tree_leaves(b)))

    @jax.custom_jvp
    def two_norm(x):
        return jnp.sqrt(dot(x, x).real)

    @two_norm.defjvp
    def two_norm_jvp(primals, tangents):
        (x,), (tx,) = primals, tangents
        out = two_norm(x)
        denominator = jnp.where(out == 0, 1.0, out)
        t_out = jnp.where(out == 0, 0.0, dot(jax.tree_util.tree_map(lambda leaf: leaf / denominator, x), tx).real)
        return out, scale * t_out

    from hypothesis import strategies as st

    tree = st.fixed_dictionaries({"a": arrays(shape=(2,)), "b": arrays(shape=(3,))})
    return jax_rule(two_norm, tree, name=f"two_norm_of_tree_{scale:g}")


def test_a_custom_jvp_of_a_pytree_argument_is_differentiated() -> None:
    """The pullback JAX transposes from the jvp carries a tangent for a dict argument: the adapter took only arrays
    and floats as differentiable, and a correct two-norm of a dict got GG201, GG203 and GG204 against a pullback
    that returned None for every leaf."""
    report = check(_two_norm_of_tree(1.0), seed=0)
    assert report.rules[0].verdict == "pass", [(f.check_id, f.message) for f in report.findings]
    assert {"GG201", "GG203", "GG204", "GG207"} <= set(report.rules[0].checks_run)
    broken = check(_two_norm_of_tree(2.0), seed=0, select=["GG201", "GG207"])
    assert {f.check_id for f in broken.findings} == {"GG201", "GG207"}


class _NegativeBinomialNP(NamedTuple):
    """efax's natural parameters of a negative binomial: a float leaf and an integer count beside it."""

    log_not_p: Any
    failures: Any


def _count_weighted_exp(scale: float, name: str) -> Any:
    from hypothesis import strategies as st

    @jax.custom_jvp
    def f(p):
        return p.failures * jnp.exp(p.log_not_p)

    @f.defjvp
    def f_jvp(primals, tangents):
        (p,), (p_dot,) = primals, tangents
        return f(p), scale * p_dot.log_not_p * p.failures * jnp.exp(p.log_not_p)

    spec = st.builds(_NegativeBinomialNP, arrays(shape=(3,), min_value=-1.0, max_value=1.0), st.just(np.array([1, 3, 7])))
    return jax_rule(f, spec, name=name)


def test_a_custom_jvp_of_a_pytree_with_an_integer_leaf_is_differentiated_in_its_float_leaves() -> None:
    """efax's log-normalizers take a NamedTuple with an integer count beside the float parameters: the adapter took
    the whole argument as non-differentiable (every leaf had to be a float), its pullback gave 0 where jax.vjp gives
    n exp(x), and a correct rule got GG201, GG203, GG204 and GG501. The integer leaf's float0 cotangent is None."""
    report = check(_count_weighted_exp(1.0, "count_weighted_exp"), seed=0)
    assert report.rules[0].verdict == "pass", [(f.check_id, f.message) for f in report.findings]
    assert {"GG201", "GG203", "GG204", "GG207"} <= set(report.rules[0].checks_run)
    broken = check(_count_weighted_exp(2.0, "count_weighted_exp_doubled"), seed=0, select=["GG201", "GG207"])
    assert {f.check_id for f in broken.findings} == {"GG201", "GG207"}


def scaled_sin_with(factor, name):
    """sin(a x) with ``a`` an ordinary argument (not a nondiff_argnum) that the spec makes constant(...)."""

    @jax.custom_jvp
    def scaled_sin(a, x):
        return jnp.sin(a * x)

    @scaled_sin.defjvp
    def scaled_sin_jvp(primals, tangents):
        (a, x), (_, xt) = primals, tangents
        return jnp.sin(a * x), factor * a * jnp.cos(a * x) * xt

    return jax_rule(scaled_sin, constant(1.5), arrays(shape=(3,)), name=name)


def test_a_constant_argument_of_a_custom_jvp_gets_no_tangent_from_the_adapter():
    """JAX's transpose of a jvp hands back zeros for every argument it was not told is nondiff, and the rule has
    no way to say None there: constant(...) must tell the adapter, as nondiff= does (TFP's Bessel functions,
    whose order v gets no tangent by design, drew GG106 at every seed)."""
    report = check(scaled_sin_with(1.0, "scaled_sin"))
    assert report.rules[0].verdict == "pass", [f.message for f in report.findings]
    assert "GG106" in report.rules[0].checks_run
    broken = findings(scaled_sin_with(2.0, "scaled_sin_doubled"), "GG106", "GG201", "GG207")
    assert {f.check_id for f in broken} == {"GG201", "GG207"}


def _attach_straight_through(fn):
    """aqt's helper: one straight-through jvp, defined here, attached to each function it is given."""

    def ste(primals, tangents):
        return fn(primals[0]), tangents[0]

    fn.defjvp(ste)


@jax.custom_jvp
def floor_ste(x):
    return jnp.floor(x)


_attach_straight_through(floor_ste)


@jax.custom_jvp
def round_ste(x):
    return jnp.round(x)


_attach_straight_through(round_ste)


def test_rules_whose_jvp_a_helper_attaches_point_at_their_own_definitions() -> None:
    """The span ran from the helper's jvp to the primal: every rule of the module had the helper's line."""
    lines = Path(__file__).read_text().splitlines()
    for fn in (floor_ste, round_ste):
        first, last = jax_rule(fn, arrays(shape=(2,))).source_lines
        assert lines[first - 1] == "@jax.custom_jvp" and lines[first].startswith(f"def {fn.__name__}(x):")
        assert last == first + 2


class _WithEmptySlot(NamedTuple):
    a: jax.Array
    b: Any = None


def _sum_sq_with_empty_slot(factor: float):
    @jax.custom_jvp
    def f(x):
        return jnp.sum(x**2), _WithEmptySlot(a=x, b=None)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), (factor * jnp.sum(x * t), _WithEmptySlot(a=t, b=None))

    return jax_rule(f, arrays(shape=(3,)), name=f"sum_sq_empty_slot_{factor:g}")


def test_an_output_with_an_empty_slot_is_checked_like_any_other() -> None:
    """ferminet's loss returns AuxiliaryLossData(local_energy_mat=None), which JAX reads as an empty subtree: GG102
    and the forward checks took the None for an array (an internal error, exit 3), and GG602's batched call
    stacked it into an object array JAX refused (a false GG602). Now every check runs, and a wrong jvp fails."""
    report = check(_sum_sq_with_empty_slot(2.0), max_examples=5)
    result = report.rules[0]
    assert result.error is None and result.verdict == "pass", (result.error, [f.message for f in result.findings])
    assert {"GG102", "GG201", "GG207", "GG208", "GG601", "GG602"} <= set(result.checks_run)
    wrong = check(_sum_sq_with_empty_slot(3.0), select=["GG201", "GG207"], max_examples=5)
    assert wrong.rules[0].error is None and {f.check_id for f in wrong.findings} == {"GG201", "GG207"}


# cuthbert's tria (state-space-models/cuthbert 89bf190, cuthbertlib/linalg/tria.py: R lower triangular with R R^T = A A^T,
# by QR) at A = 0. A probe took GG207's finding there for a false one, because tria has no derivative at 0 (t tria(U)
# along every line, no linear function of U). It is true: tria's upper triangle is 0 everywhere, and the jvp at 0,
# dA Q with pinv(0) = 0, gives it nonzero tangents. An exemption for derivatives not linear in the direction excused
# that and jaxopt's isotonic-regression flaw, and was withdrawn.
def test_tria_jvp_at_zero_gives_the_upper_triangle_a_tangent_and_fails_gg207():
    @jax.custom_jvp
    def tria(A):
        _, R_qr = jnp.linalg.qr(jnp.swapaxes(A, -1, -2), mode="reduced")
        return jnp.swapaxes(R_qr, -1, -2)

    @tria.defjvp
    def tria_jvp(primals, tangents):
        (A,), (dA,) = primals, tangents
        Q, R_qr = jnp.linalg.qr(jnp.swapaxes(A, -1, -2), mode="reduced")
        R = jnp.swapaxes(R_qr, -1, -2)
        R_pinv = jnp.linalg.pinv(R)
        K = R_pinv @ dA @ Q
        dM = jnp.tril(K + jnp.swapaxes(K, -1, -2)) - K * jnp.eye(K.shape[-1], dtype=K.dtype)
        dR_null = (jnp.eye(R.shape[-2], dtype=R.dtype) - R @ R_pinv) @ dA @ Q
        return R, R @ dM + dR_null

    _, tangent = jax.jvp(tria, (jnp.zeros((3, 3)),), (jnp.ones((3, 3)),))
    assert np.abs(np.triu(np.asarray(tangent), 1)).max() > 0.5  # the output's upper triangle never moves
    rule = jax_rule(tria, arrays(shape=(3, 3), min_value=0.0, max_value=0.0), name="tria_square")
    for seed in (0, 1):
        found = check(rule, select=["GG207"], seed=seed).findings
        assert [f.check_id for f in found] == ["GG207"] and found[0].severity == "error", seed
        assert found[0].message.startswith("the jvp of tria_square disagrees with finite differences"), found[0].message


@jax.custom_jvp
def _sin_through_its_tangent(x):
    return jnp.sin(x)


@_sin_through_its_tangent.defjvp
def _sin_through_its_tangent_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    # the primal output computed from the tangent too (morphomatics' logm takes both blocks of one logm of [[m, t],
    # [0, m]]): forward mode works, reverse mode cannot linearize it
    return jnp.sin(x + 0.0 * t), jnp.cos(x) * t


def test_a_jvp_reverse_mode_cannot_linearize_is_named_as_such_not_as_the_function_raising() -> None:
    rule = jax_rule(_sin_through_its_tangent, arrays(shape=(3,)), name="sin_through_its_tangent_rule")
    (f,) = [f for f in check(rule, select=["GG101"]).findings if f.check_id == "GG101"]
    assert f.message.startswith(
        "the forward of sin_through_its_tangent_rule raised ReverseModeError: reverse mode through custom_jvp "
        "_sin_through_its_tangent failed (jax.vjp linearizes its jvp rule to transpose it; the function itself runs "
        "at this input): ValueError: Linearization failed"), f.message


# A jvp that applies a custom_vjp to its tangent (nufftax's jvp variants call its own custom_vjp NUFFTs there): linear,
# but JAX has no transpose rule for the custom_vjp call, and GG103 said the jvp "must be linear in the tangents".
@jax.custom_vjp
def _twice_linear(t):
    return 2.0 * t


_twice_linear.defvjp(lambda t: (2.0 * t, None), lambda _, g: (2.0 * g,))


@jax.custom_jvp
def _doubled(x):
    return 2.0 * x


@_doubled.defjvp
def _doubled_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _doubled(x), _twice_linear(t)


def test_gg103_names_the_operation_on_the_tangents_jax_cannot_transpose() -> None:
    (found,) = findings(jax_rule(_doubled, arrays(shape=(3,)), name="doubled_via_vjp"), "GG103")
    assert ("(it transposes the jvp rule, and JAX has no transpose rule for the custom_vjp_call operation the jvp "
            "applies to the tangents: a custom_vjp or a host callback applied to a tangent cannot be transposed, even "
            "where the jvp is linear in them)") in found.message, found.message


# Where reverse mode cannot run through a custom_jvp, its jvp (what forward mode, jax.jvp and jax.jacfwd run) is still
# judged: GG207 and GG208 were skipped with every other check once GG103 or GG101 failed, and a wrong jvp passed.
@jax.custom_jvp
def _doubled_off(x):
    return 2.0 * x


@_doubled_off.defjvp
def _doubled_off_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _doubled_off(x), 1.5 * _twice_linear(t)  # 3 t: not the derivative of 2 x


@jax.custom_jvp
def _sin_off_through_its_tangent(x):
    return jnp.sin(x)


@_sin_off_through_its_tangent.defjvp
def _sin_off_through_its_tangent_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return jnp.sin(x + 0.0 * t), 1.1 * jnp.cos(x) * t


def test_the_jvp_is_judged_where_reverse_mode_cannot_transpose_it() -> None:
    good = check(jax_rule(_doubled, arrays(shape=(3,)), name="doubled_via_vjp"), seed=0).rules[0]
    assert {f.check_id for f in good.findings} == {"GG103"}
    assert {"GG207", "GG208"} <= set(good.checks_run), good.checks_skipped
    bad = check(jax_rule(_doubled_off, arrays(shape=(3,)), name="doubled_off"), seed=0).rules[0]
    assert {f.check_id for f in bad.findings} == {"GG103", "GG207"}
    (found,) = [f for f in bad.findings if f.check_id == "GG207"]
    assert found.message.startswith("the jvp of doubled_off disagrees with finite differences: along a random direction "
                                    "u, <w, jvp(x; u)> = "), found.message
    # the checks that need the pullback stay skipped, with the gate's reason
    skipped = {s["id"]: s["reason"] for s in bad.checks_skipped}
    assert skipped["GG201"].startswith("skipped because GG103 failed"), skipped


def test_the_jvp_is_judged_where_reverse_mode_cannot_linearize_it() -> None:
    rule = jax_rule(_sin_off_through_its_tangent, arrays(shape=(3,)), name="sin_off_rule")
    result = check(rule, seed=0).rules[0]
    assert {f.check_id for f in result.findings} == {"GG101", "GG207"}, [f.message for f in result.findings]
    # a forward that raises for another reason than reverse mode still stops every check
    plain = check(jax_rule(_always_raises, arrays(shape=(3,)), name="raises_rule"), seed=0).rules[0]
    assert {f.check_id for f in plain.findings} == {"GG101"}
    assert "GG207" in {s["id"] for s in plain.checks_skipped}


@jax.custom_jvp
def _always_raises(x):
    raise ValueError("no value here")


@_always_raises.defjvp
def _always_raises_jvp(primals, tangents):
    raise ValueError("no value here")


# JAXtronomy's hyp2f1: the jvp rule returns a primal output from a 100-term series where the function sums up to 500
# terms; GG102's fix spoke of an rrule's training flags, which a custom_jvp has not.
@jax.custom_jvp
def _sin_by_its_series(x):
    return jnp.sin(x)


@_sin_by_its_series.defjvp
def _sin_by_its_series_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return x - x**3 / 6, jnp.cos(x) * t  # primal_out from a two-term series


@jax.custom_vjp
def _sin_fwd_by_its_series(x):
    return jnp.sin(x)


_sin_fwd_by_its_series.defvjp(lambda x: (x - x**3 / 6, x), lambda x, g: (g * jnp.cos(x),))


def test_gg102_fix_speaks_of_the_jvp_rules_primal_output_and_of_fwd() -> None:
    spec = arrays(shape=(3,), min_value=0.5, max_value=1.0)
    (jvp,) = findings(jax_rule(_sin_by_its_series, spec, name="sin_by_its_series"), "GG102")
    assert jvp.fix.startswith("Make the jvp rule's primal output the function's own value: return what the function "
                              "computes (call it, or compute it by the same formula) at the input itself, as "
                              "primal_out"), jvp.fix
    (vjp,) = findings(jax_rule(_sin_fwd_by_its_series, spec, name="sin_fwd_by_its_series"), "GG102")
    assert vjp.fix.startswith("Make fwd return the function's own value as its output"), vjp.fix


@jax.custom_jvp
def _norm_of_a_safe_input(x):
    return jnp.linalg.norm(x)


@_norm_of_a_safe_input.defjvp
def _norm_of_a_safe_input_jvp(primals, tangents):
    # ott's norm: a double-where's safe input, and the primal taken there too (at ones where x = 0)
    (x,), (t,) = primals, tangents
    zero = jnp.all(x == 0)
    clean = jnp.where(zero, jnp.ones_like(x), x)
    y, dy = jax.jvp(jnp.linalg.norm, (clean,), (t,))
    return y, jnp.where(zero, 0.0, dy)


def test_gg102_names_a_primal_output_taken_at_a_substituted_safe_input() -> None:
    (jvp,) = findings(jax_rule(_norm_of_a_safe_input, arrays(shape=(4,), min_value=0.0, max_value=0.0),
                               name="norm_of_a_safe_input"), "GG102")
    assert "at a substituted input (the safe x of a double-where)" in jvp.fix, jvp.fix
    assert jax.value_and_grad(_norm_of_a_safe_input)(jnp.zeros(4))[0] == 2.0  # what users see: norm(0) reported as 2


# quadax's jvp returns JAX's float0 zero for its integer step count: GG207 and GG208 crashed testing it for
# finiteness, and the rule's every other check was lost.
def _sum_and_count(sign):
    @jax.custom_jvp
    def sum_and_count(x):
        return jnp.sum(jnp.sin(x)), jnp.sum(x > 0)

    @sum_and_count.defjvp
    def _jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        y, n = sum_and_count(x)
        return (y, n), (jnp.sum(sign * jnp.cos(x) * t), np.zeros(np.shape(n), dtype=jax.dtypes.float0))

    return sum_and_count


sum_and_count = _sum_and_count(1.0)
sum_and_count_slip = _sum_and_count(-1.0)  # BUG: d sin = cos


def test_a_float0_tangent_of_an_integer_output_is_no_tangent():
    spec = arrays(shape=(3,), min_value=-2.0, max_value=2.0)
    ok = check(jax_rule(sum_and_count, spec, name="sum_and_count"), select=["GG207", "GG208"]).rules[0]
    assert ok.error is None and ok.findings == [] and {"GG207", "GG208"} <= set(ok.checks_run), (ok.error, ok.findings)
    slip = check(jax_rule(sum_and_count_slip, spec, name="sum_and_count_slip"), select=["GG207"]).rules[0]
    assert slip.error is None and [f.check_id for f in slip.findings] == ["GG207"], slip.error
