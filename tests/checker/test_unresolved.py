"""No verdict where finite differences cannot establish a derivative: a jump, or a singularity nearer to the
input than any step float64 can take (`gradguard.checker.kinks.unresolved`).

Found on JAX's own `slogdet` at a matrix whose determinant is about 1e-261: its tangents (about 1e259) are
the true derivative of log|det| there, which finite differences at steps of 1e-15 and up cannot see, and
GG201, GG207, GG204 and the safety matrix called them wrong. Such an input is recognised by the function
itself: its one-sided slopes grow at every step, where a smooth function's agree and a kink's keep two
values. A wrong rule at an ordinary input is still reported."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import strategies as st

from gradguard.checker import arrays, check, jax_rule, rrule
from gradguard.checker.kinks import unresolved

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

NEAR_SINGULAR = np.array([[1.0, 0.0], [0.0, 1e-200]])  # det 1e-200 with entries of size 1: a pole 1e-200 away


def _scalar(f):
    return lambda args: (float(f(*args)), abs(float(f(*args))))


@pytest.mark.parametrize("f, x, expected", [
    (lambda a: np.log(abs(np.linalg.det(a))), NEAR_SINGULAR, True),  # a pole nearer than any step
    (lambda x: np.sum(np.sign(x)), np.zeros(3), True),  # a jump at x
    (lambda a: np.log(abs(np.linalg.det(a))), np.eye(2) + 0.5, False),  # the same function where it is smooth
    (lambda x: np.sum(np.maximum(x, 0.0)), np.zeros(3), False),  # a kink: two slopes, neither growing
    (lambda x: 1e6 + np.sum(x), np.ones(3), False),  # smooth, with a value whose rounding is large
], ids=["pole", "jump", "smooth", "kink", "large-value"])
def test_unresolved_tells_jumps_and_near_poles_from_kinks_and_smooth_functions(f, x, expected):
    assert unresolved(_scalar(f), (x,), (np.ones_like(x),)) is expected


def logabs(x):
    return np.log(np.abs(x))


@rrule(logabs, arrays(shape=(3,), min_value=1e-300, max_value=1e-300))
def logabs_tiny_rrule(x):
    return logabs(x), lambda g: (g / x,)


@rrule(logabs, arrays(shape=(3,), min_value=0.5, max_value=4.0))
def logabs_doubled_rrule(x):
    return logabs(x), lambda g: (2 * g / x,)


@jax.custom_jvp
def jlogdet2(a):
    return jnp.log(jnp.abs(a[0, 0] * a[1, 1] - a[0, 1] * a[1, 0]))


@jlogdet2.defjvp
def _jlogdet2_jvp(primals, tangents):
    (a,), (t,) = primals, tangents
    d = a[0, 0] * a[1, 1] - a[0, 1] * a[1, 0]
    return jlogdet2(a), (a[1, 1] * t[0, 0] + a[0, 0] * t[1, 1] - a[1, 0] * t[0, 1] - a[0, 1] * t[1, 0]) / d


def test_a_correct_rule_at_a_pole_nearer_than_any_step_gets_no_verdict_not_an_error():
    """log|x| at x = 1e-300 (its derivative 1e300, right) and a custom_jvp log|det| at a 2x2 matrix with
    determinant 1e-200: GG201 and the safety matrix, and GG207, called them wrong before."""
    report = check([logabs_tiny_rrule, jax_rule(jlogdet2, st.just(NEAR_SINGULAR), name="jlogdet2")], seed=0)
    assert {r.name: [f.message for f in r.findings if f.severity == "error"] for r in report.rules} == {
        "logabs_tiny_rrule": [], "jlogdet2": []}


def test_a_pole_near_the_input_is_judged_at_finer_steps():
    """At a 2x2 matrix with determinant 1e-5 the pole lies 1e-5 away: finite differences' first tables step
    across it, while one-sided steps from 6e-6 down see the derivative (1e5) and the second order (1e10) the
    rule gives. GG207 and GG204 called the custom_jvp log|det| wrong at every seed before."""
    rule = jax_rule(jlogdet2, st.just(np.array([[1.0, 0.0], [0.0, 1e-5]])), name="jlogdet2")
    for seed in range(3):
        assert check(rule, seed=seed).rules[0].verdict == "pass", seed


def test_a_wrong_rule_at_an_ordinary_input_is_still_reported():
    ids = {f.check_id for f in check(logabs_doubled_rrule, seed=0).findings if f.severity == "error"}
    assert {"GG201", "GG501"} <= ids, ids


# -- no step of finite differences both clears a pole and resolves the slope above rounding ----------------------------
# jax-md's safe_sqrt, seed 7 of the real-world corpus: at x = [83.9, 6e-8, 5.5e-43, 1.2e-38] the contracted pullback
# is 5.1e18 (the element at 1.2e-38), so any step fine enough to stay clear of the pole of the element at 6e-8
# (whose curvature gives JAX's -5.40076e11) changes it by less than its rounding, and the coarse steps reach across
# the pole: finite differences gave 0.0 and GG204 called JAX's true second derivative wrong.
@jax.custom_jvp
def safe_sqrt(x):
    return jnp.sqrt(x)


@safe_sqrt.defjvp
def _safe_sqrt_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    y = safe_sqrt(x)
    return y, 0.5 * dx / jnp.where(x > 0, y, jnp.inf)


@jax.custom_jvp
def stopped_sqrt(x):
    return jnp.sqrt(x)


@stopped_sqrt.defjvp
def _stopped_sqrt_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    y = stopped_sqrt(x)
    return y, 0.5 * dx / jax.lax.stop_gradient(y)  # BUG: the second order loses d(1/sqrt(x))


SQRT_DOMAIN = arrays(shape=(4,), min_value=0.0, max_value=100.0)
safe_sqrt_rule = jax_rule(safe_sqrt, SQRT_DOMAIN)
stopped_sqrt_rule = jax_rule(stopped_sqrt, SQRT_DOMAIN)


def test_a_pole_finite_differences_cannot_both_clear_and_resolve_gets_no_verdict():
    from gradguard.checker import checks  # noqa: F401 - registers the checks
    from gradguard.checker.case import Case
    from gradguard.checker.checks.registry import CHECKS
    from gradguard.checker.reproducer import ReplayDraws

    x = np.array([8.386760e01, 5.960464e-08, 5.536997e-43, 1.175494e-38])
    draws = [np.array([0.0, 3.438485, 0.0, 0.842411]), (np.array([0.0, 3.751258, 1.1, 0.0]),),
             (np.array([3.272302, 2.437198, 0.0, 1.313828]),)]
    with np.errstate(all="ignore"):
        assert list(CHECKS["GG204"].fn(Case(safe_sqrt_rule, (x,), ReplayDraws(draws))) or ()) == []


def test_a_wrong_second_order_of_the_same_rule_is_still_reported():
    result = check(stopped_sqrt_rule, select="GG204", seed=0).rules[0]
    assert [f.check_id for f in result.findings] == ["GG204"], result.checks_skipped
    assert result.findings[0].message.startswith(
        "the second order of stopped_sqrt is wrong: along a random direction u, d/dt <w, pullback at (x + t u)(ybar)> = ")


# -- a kink beside a pole: the second-order one-sided derivative reaches what first-order quotients only approach ------
# jax-md's safe_acos clips its argument at 1 - 1e-7; drawn exactly there (seed 9 of the real-world corpus), its
# pullback is flat on one side and 1e-7 from a pole on the other. JAX's second order, 1.24834e11 along the check's
# direction, is the inner one-sided derivative; the first-order quotients give 1.16955e11 at step 6e-9 and
# 1.24825e11 at 6e-12, and the finest step rounding allows never came within the tolerance.
EPS = 1e-7


@jax.custom_jvp
def safe_acos(x):
    return jnp.arccos(x)


@safe_acos.defjvp
def _safe_acos_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    clipped = jnp.clip(x, -1 + EPS, 1 - EPS)
    return safe_acos(x), -dx / jnp.sqrt(1 - clipped**2)


safe_acos_rule = jax_rule(safe_acos, arrays(shape=(4,), min_value=-1 + EPS, max_value=1 - EPS))
AT_CLIP = np.array([-9.999999e-01, 1.797557e-175, 8.482594e-01, 9.999999e-01])
CLIP_DRAWS = (np.array([0.0, 0.0, -1.91642, -3.428783]), (np.array([-3.578343, 0.0, 0.0, -1.508025]),),
              (np.array([0.0, 0.0, 0.0, -2.159387]),))


def _clip_pullback():
    from gradguard.checker.case import Case
    from gradguard.checker.checks.second_order import pullback_at
    from gradguard.checker.kinks import contracted
    from gradguard.checker.reproducer import ReplayDraws

    ybar, u, w = CLIP_DRAWS
    case = Case(safe_acos_rule, (AT_CLIP,), ReplayDraws(list(CLIP_DRAWS)))
    return contracted(pullback_at(case, ybar), w), u, case.tol


def test_the_inner_one_sided_derivative_beside_a_pole_is_admitted():
    from gradguard.checker.kinks import finer_steps_admit

    g, u, tol = _clip_pullback()
    with np.errstate(all="ignore"):
        assert finer_steps_admit(g, (AT_CLIP,), u, 1.24834e11, tol, 1.25e11)


def test_a_second_order_off_by_a_few_percent_there_is_not_admitted():
    from gradguard.checker.kinks import finer_steps_admit

    g, u, tol = _clip_pullback()
    with np.errstate(all="ignore"):
        assert not finer_steps_admit(g, (AT_CLIP,), u, 1.30e11, tol, 1.30e11)


# -- a pole beside the input is no kink where entries meet ---------------------------------------------
BESIDE_POLE = np.array([-1e-15, 2.0])  # 1/x has its pole 1e-15 away: every step straddles it


def reciprocal(x):
    return 1.0 / x


@rrule(reciprocal, st.just(BESIDE_POLE))
def reciprocal_rrule(x):  # Chainer's reciprocal backward, -gy / x**2: -1e30 at -1e-15, the true derivative
    return 1.0 / x, lambda g: (-g / x**2,)


@rrule(reciprocal, st.sampled_from([BESIDE_POLE, np.array([0.5, 2.0])]))
def reciprocal_sign_slip_rrule(x):
    return 1.0 / x, lambda g: (g / x**2,)  # BUG: the sign


def test_a_pole_beside_the_input_is_not_called_a_kink_where_entries_meet():
    # Found on Chainer's digamma, 6e-16 from its pole at 0: GG201 took the one-sided "derivatives" of steps that
    # straddle the pole (-2.5e20 and 2.5e20) for a coupled kink and called the true -1.27e30 outside them.
    assert check(reciprocal_rrule, select=["GG201"]).findings == []


def test_a_wrong_reciprocal_is_still_reported_where_its_derivative_can_be_resolved():
    [finding] = check(reciprocal_sign_slip_rrule, select=["GG201"]).findings
    assert finding.severity == "error" and "kink" not in finding.message, finding.message
