"""Test the tester at kinks: entries that meet at a kink are judged along a direction as a whole (GG201,
GG203), and a NaN tangent where the primal has no derivative is not called a bug (GG206)."""

import re

import numpy as np
import pytest
from hypothesis import strategies as st

from gradguard.checker import arrays, check, rrule

NUM = r"(-?[0-9.e+-]+)"
WHOLE_PROGRAM = ["GG5", "GG6"]

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def findings(rule, check_id, **kwargs):
    report = check(rule, select=[check_id], **kwargs)
    return [f for f in report.findings if f.check_id == check_id]


def assert_passes_every_isolation_check(rule, seeds=(0, 1)):
    for seed in seeds:
        report = check(rule, ignore=WHOLE_PROGRAM, seed=seed)
        assert report.passed, [(f.check_id, f.message) for f in report.findings]


# -- ties at a kink (issue 12, class 6) --------------------------------------------------------------
def amax(x):
    return np.max(x)


TIES = arrays(shape=(4,), elements=st.sampled_from([0.0, 1.0, -2.0]))


@rrule(amax, TIES)
def amax_every_tie_gets_all(x):
    ans = np.max(x)
    return ans, lambda g: (np.full(x.shape, g) * (x == ans),)


@rrule(amax, TIES)
def amax_ties_share(x):
    ans = np.max(x)
    mask = x == ans
    return ans, lambda g: (np.full(x.shape, g) * mask / np.sum(mask),)


KINK_MESSAGE = (
    r"the pullback of {name} disagrees with finite differences of the primal at a kink that couples entries \(along "
    r"u its one-sided derivatives are not the sums of each entry's own\): with the cotangent \|ybar\| and the positive direction u = (array\(\[[^]]*\]\)), the one-sided derivatives of <\|ybar\|, primal\(x \+ t u\)> "
    rf"at t = 0 are {NUM} \(t < 0\) and {NUM} \(t > 0\) by finite differences, but <pullback\(\|ybar\|\), u> = {NUM} "
    r"lies outside them\. Each tangent element alone lies within its own one-sided derivatives; taken together "
    r"along u they do not\."
)


@pytest.mark.parametrize("check_id", ["GG201", "GG203"])
def test_every_tied_entry_given_the_whole_cotangent_fails(check_id):
    (f,) = findings(amax_every_tie_gets_all, check_id)
    message = KINK_MESSAGE.format(name="amax_every_tie_gets_all")
    if check_id == "GG203":  # the rule differs from JAX's reference only at kinks, and GG203 says so first
        message = message.replace(
            r"disagrees with finite differences", r"differs from the JAX reference gradient only at kinks of the "
            r"primal, where any value between an element's one-sided derivatives is valid; judged there as a whole, it "
            r"disagrees with finite differences")
    match = re.fullmatch(message, f.message)
    assert match, f.message
    u, (left, right, got) = match.group(1), (float(v) for v in match.groups()[1:])
    assert got > max(left, right)  # several tied entries, each with the whole rate: the sum overshoots
    assert f.severity == "error" and f.actual == match.group(4)
    direction = np.array([float(v) for v in u[len("array(["):-len("])")].split(",")])
    assert direction.shape == (4,) and np.all((0.5 <= direction) & (direction <= 2.0))
    assert f.expected.startswith("between ") and "divide by the number of ties" in f.fix


def test_ties_that_share_the_cotangent_pass():
    assert findings(amax_ties_share, "GG201") == [] and findings(amax_ties_share, "GG203") == []
    assert_passes_every_isolation_check(amax_ties_share)


def row_max(x):
    return np.max(x, axis=1)


@rrule(row_max, arrays(shape=(2, 3), elements=st.sampled_from([0.0, 1.0])))
def row_max_ties_share(x):
    ans = np.max(x, axis=1, keepdims=True)
    mask = x == ans
    return ans[:, 0], lambda g: (g[:, None] * mask / np.sum(mask, axis=1, keepdims=True),)


def clip(x):
    return np.clip(x, -1.0, 1.0)


@rrule(clip, arrays(shape=(4,), elements=st.sampled_from([-1.0, 1.0, 0.5])))
def clip_both_bounds(x):
    # At x == -1 the rule takes the right-hand slope, at x == 1 the left-hand one: a valid (sub)gradient of a
    # separable kink, which a whole-direction test along (1, 1, ...) would wrongly reject.
    return clip(x), lambda g: (g * ((x >= -1.0) & (x <= 1.0)),)


def sort_(x):
    return np.sort(x)


def _stable_sort(x):
    # Tied entries take the cotangents of their places in a stable order: a (sub)gradient, although a sort of
    # ties under unsorted cotangents is neither convex nor concave (no whole-direction bound holds there).
    order = np.argsort(x, kind="stable")

    def pullback(g):
        t = np.zeros_like(x)
        t[order] = g
        return (t,)

    return x[order], pullback


sort_ties = rrule(sort_, arrays(shape=(4,), elements=st.sampled_from([0.0, 1.0])), name="sort_ties")(_stable_sort)


sort_ties_32 = rrule(sort_, arrays(shape=(32,), elements=st.sampled_from([0.0, 1.0])), name="sort_ties_32")(_stable_sort)


@rrule(clip, arrays(shape=(4, 8), elements=st.sampled_from([-1.0, 1.0, 0.5])))
def clip_both_bounds_32(x):
    return clip(x), lambda g: (g * ((x >= -1.0) & (x <= 1.0)),)


@pytest.mark.parametrize("rule", [row_max_ties_share, clip_both_bounds, sort_ties, sort_ties_32, clip_both_bounds_32],
                         ids=["row-max", "clip", "sort", "sort-32", "clip-32"])
def test_kinks_judged_as_a_whole_only_where_entries_meet(rule):
    assert_passes_every_isolation_check(rule)


# A 2x2 max pool (stride 2) over a (4, 4, 2) image: 32 elements, beyond the 16 the whole-direction test once stopped
# at. Giving every tied maximum the whole cotangent (a from-scratch CNN's pool) passed GG201 there: the excuses found
# the rule's value between the one-sided derivatives along v, and only the whole direction tells the sum overshoots.
def max_pool(x):
    h, w, c = x.shape
    return x.reshape(h // 2, 2, w // 2, 2, c).max(axis=(1, 3))


POOL_TIES = arrays(shape=(4, 4, 2), elements=st.sampled_from([0.0, 1.0]))


def _pool_pullback(x, share):
    h, w, c = x.shape
    cells = x.reshape(h // 2, 2, w // 2, 2, c).transpose(0, 2, 4, 1, 3).reshape(h // 2, w // 2, c, 4)
    if share:  # the first tied maximum of each window takes the whole cotangent: a valid subgradient
        mask = np.eye(4, dtype=bool)[np.argmax(cells, axis=-1)]
    else:
        mask = cells == cells.max(axis=-1, keepdims=True)

    def pullback(g):
        t = (mask * g[..., None]).reshape(h // 2, w // 2, c, 2, 2).transpose(0, 3, 1, 4, 2)
        return (t.reshape(x.shape),)

    return pullback


@rrule(max_pool, POOL_TIES)
def max_pool_every_tie(x):
    return max_pool(x), _pool_pullback(x, share=False)


@rrule(max_pool, POOL_TIES)
def max_pool_first_tie(x):
    return max_pool(x), _pool_pullback(x, share=True)


def test_a_max_pool_of_32_elements_giving_every_tie_the_whole_cotangent_fails_gg201():
    (f,) = findings(max_pool_every_tie, "GG201")
    # NumPy 2 ends the repr of an array longer than its print threshold with its shape
    nested = KINK_MESSAGE.replace(r"(array\(\[[^]]*\]\))", r"(array\(\[\[\[.*\]\]\](?:, shape=\(4, 4, 2\))?\))")
    match = re.fullmatch(nested.format(name="max_pool_every_tie"), f.message)
    assert match, f.message
    left, right, got = (float(v) for v in match.groups()[1:])
    assert got > max(left, right) and f.severity == "error"


def test_a_max_pool_of_32_elements_giving_one_tie_the_cotangent_passes():
    assert_passes_every_isolation_check(max_pool_first_tie)


# -- NaN where the primal has no derivative (issue 12, class 3) ----------------------------------------
def norm(x):
    return np.sqrt(np.sum(x * x))


ZEROS_FIRST = arrays(shape=(3,), elements=st.sampled_from([0.0, 1.0, -2.0]))


@rrule(norm, ZEROS_FIRST)
def norm_nan_at_zero(x):
    n = norm(x)
    return n, lambda g: (g * x / n,)  # 0/0 at x == 0, a cone point: no derivative there


@rrule(norm, ZEROS_FIRST)
def norm_subgradient_at_zero(x):
    n = norm(x)
    return n, lambda g: (g * np.where(n == 0, 0.0, x / np.where(n == 0, 1.0, n)),)


def row_std(x):
    return np.std(x, axis=1)


@rrule(row_std, arrays(shape=(2, 3), elements=st.sampled_from([0.0, 1.0])))
def row_std_nan_on_constant_rows(x):
    s = row_std(x)
    return s, lambda g: ((g / s)[:, None] * (x - x.mean(axis=1, keepdims=True)) / x.shape[1],)


NO_DERIVATIVE = (
    r"the pullback of {name} returned nan in the tangent for argument 0 \(x\) at \[[\d, ]+\], where the primal is finite "
    r"but has no derivative along this element that finite differences resolve: the one-sided derivatives of "
    rf"(the output|the output at \[\d\]) are {NUM} \(from below\) and {NUM} \(from above\) at steps 6e-06 and "
    r"6e-09; \d+ element\(s\) of this tangent are not finite\."
)


@pytest.mark.parametrize("rule", [norm_nan_at_zero, row_std_nan_on_constant_rows], ids=["norm", "std"])
def test_nan_at_a_cone_point_is_a_warning_that_suggests_a_subgradient(rule):
    result = check(rule, select=["GG206"]).rules[0]
    (f,) = result.findings
    match = re.fullmatch(NO_DERIVATIVE.format(name=rule.name), f.message)
    assert match, f.message
    left, right = (float(v) for v in match.groups()[1:])
    assert left < right  # a cone: the slope jumps up across the point
    assert f.severity == "warning" and result.verdict == "pass"
    assert "return a subgradient there" in f.fix and f.expected.startswith("a finite subgradient between ")


def test_a_subgradient_at_the_cone_point_passes():
    assert_passes_every_isolation_check(norm_subgradient_at_zero)


def xabs(x):
    return x * np.abs(x)


@rrule(xabs, arrays(shape=(2,), elements=st.sampled_from([0.0, 1.0])))
def xabs_nan_but_norm_ok(x):
    # Both a cone-free NaN (x * |x| is smooth at 0) and nothing else: the error must win over any warning.
    return xabs(x), lambda g: (2 * x * x / np.abs(x) * g,)


def test_nan_where_the_derivative_exists_stays_an_error():
    (f,) = findings(xabs_nan_but_norm_ok, "GG206")
    assert f.severity == "error" and "has a derivative along this element" in f.message


def test_nan_at_a_cone_point_for_a_zero_cotangent_is_a_warning():
    """GG301 at a point without a derivative: the NaN reaches a program that ignores the output, so it is said,
    but as a warning that suggests a subgradient, as GG206's finding there."""
    result = check(norm_nan_at_zero, select=["GG301"]).rules[0]
    (f,) = result.findings
    match = re.fullmatch(
        r"the pullback of norm_nan_at_zero must return zero tangents for a zero cotangent, but the tangent for "
        rf"argument 0 \(x\) at \[0\] is nan, at a point where the primal has no derivative finite differences resolve "
        rf"along this element: the one-sided derivatives of the output are {NUM} \(from below\) and {NUM} \(from "
        r"above\) at steps 6e-06 and 6e-09\. A program that does not use the output still gets this value in its "
        r"gradient\.",
        f.message,
    )
    assert match, f.message
    assert float(match[1]) < float(match[2])
    assert f.severity == "warning" and result.verdict == "pass" and "subgradient" in f.fix


# A cone point reached by cancellation: a Kullback-Leibler spread of positive scales about 1, sqrt(sum(x - log x) - n)
# (yetanotherspdnet's KL standard deviation of SPD matrices, sqrt(trace - logdet - n), in miniature). Its sides are
# +-0.7071 at steps 6e-6 and 6e-7, but at 6e-9 the sum's rounding (4e-16) is its whole value (t**2 / 2 = 1.8e-17): the
# 1000-fold finer step read no cone, and GG301 called the NaN at the cone an error where the norm's warns.
def kl_spread(x):
    return np.sqrt(np.maximum(np.sum(x - np.log(x)) - x.size, 0.0))


@rrule(kl_spread, arrays(shape=(3,), elements=st.just(1.0)))
def kl_spread_nan_at_one(x):
    s = kl_spread(x)
    return s, lambda g: (g * (1 - 1 / x) / (2 * s),)  # 0/0 at x == 1, the cone point


def kl_divergence(x):
    return np.maximum(np.sum(x - np.log(x)) - x.size, 0.0)


@rrule(kl_divergence, arrays(shape=(3,), elements=st.just(1.0)))
def kl_divergence_nan_at_one(x):
    d = kl_divergence(x)
    return d, lambda g: (g * (1 - 1 / x) * (d / d),)  # BUG: 0/0 at x == 1, where the derivative is 0


CANCELLED_CONE = (
    rf"the one-sided derivatives of the output are {NUM} \(from below\) and {NUM} \(from above\) at steps 6e-06 and "
    r"6e-07"
)


def test_a_cone_point_whose_primal_cancels_to_rounding_at_fine_steps_is_a_warning():
    result = check(kl_spread_nan_at_one, select=["GG206", "GG301"]).rules[0]
    gg206, gg301 = sorted(result.findings, key=lambda f: f.check_id)
    assert re.fullmatch(
        r"the pullback of kl_spread_nan_at_one returned nan in the tangent for argument 0 \(x\) at \[0\], where the "
        rf"primal is finite but has no derivative along this element that finite differences resolve: {CANCELLED_CONE}; "
        r"3 element\(s\) of this tangent are not finite\.", gg206.message), gg206.message
    match = re.fullmatch(
        r"the pullback of kl_spread_nan_at_one must return zero tangents for a zero cotangent, but the tangent for "
        r"argument 0 \(x\) at \[0\] is nan, at a point where the primal has no derivative finite differences resolve "
        rf"along this element: {CANCELLED_CONE}\. A program that does not use the output still gets this value in its "
        r"gradient\.", gg301.message)
    assert match, gg301.message
    assert float(match[1]) == pytest.approx(-0.7071, abs=1e-4) and float(match[2]) == pytest.approx(0.7071, abs=1e-4)
    assert gg206.severity == gg301.severity == "warning" and result.verdict == "pass"


def test_a_nan_where_a_cancelling_primal_is_smooth_stays_an_error():
    result = check(kl_divergence_nan_at_one, select=["GG206", "GG301"]).rules[0]
    gg206, gg301 = sorted(result.findings, key=lambda f: f.check_id)
    assert gg206.severity == gg301.severity == "error"
    assert gg206.message == (
        "the pullback of kl_divergence_nan_at_one returned nan in the tangent for argument 0 (x) at [0], where the "
        "primal is finite and has a derivative along this element (its one-sided derivatives agree; finite "
        "differences give 0.0); 3 element(s) of this tangent are not finite.")
    assert gg301.message == ("the pullback of kl_divergence_nan_at_one must return zero tangents for a zero cotangent, "
                             "but the tangent for argument 0 (x) at [0] is nan.")


# A point where the primal is smooth along the NaN's element and has no derivative all the same: the eigenvectors of
# eig at a = 0 (JAX issue 2748's eig custom_jvp met it). Along a[0, 0] they stay the identity's columns; along a
# direction that mixes the repeated eigenvalue's space they jump. GG206 warned there (its test along directions through
# x); GG301 called the same NaN an error.
def eig(a):
    return tuple(np.linalg.eig(a))


@rrule(eig, arrays(shape=(3, 3), elements=st.just(0.0), structure="symmetric"))
def eig_nan_at_a_repeated_eigenvalue(a):
    w, v = eig(a)

    def pullback(g):
        wbar, vbar = g
        eye = np.eye(len(w))
        F = 1 / (w[None, :] - w[:, None] + eye) - eye  # 1/0 between repeated eigenvalues: 0 * inf = NaN
        return (v @ (np.diag(wbar) + F * (v.T @ vbar)) @ v.T,)

    return (w, v), pullback


def eigvalsh(a):
    return np.linalg.eigvalsh(a)


@rrule(eigvalsh, st.just(np.diag([1.0, 2.0, 3.0])))  # eigvalsh reads the lower triangle: smooth at distinct eigenvalues
def eigvalsh_nan_for_a_zero_cotangent(a):
    w, v = np.linalg.eigh(a)
    # BUG: 0/0 for a zero cotangent, also where the eigenvalues are distinct and have a derivative
    return w, lambda wbar: (v @ np.diag(wbar) @ v.T * (np.sum(wbar * wbar) / np.sum(wbar * wbar)),)


def test_nan_for_a_zero_cotangent_where_only_directions_through_x_show_no_derivative_is_a_warning():
    result = check(eig_nan_at_a_repeated_eigenvalue, select=["GG301"]).rules[0]
    (f,) = result.findings
    assert f.severity == "warning" and result.verdict == "pass"
    assert f.message == (
        "the pullback of eig_nan_at_a_repeated_eigenvalue must return zero tangents for a zero cotangent, but the "
        "tangent for argument 0 (a) at [0, 0] is nan, at a point where the primal has no derivative finite differences "
        "resolve: along directions through it, the one-sided derivatives of <c, primal(x)> (c a cotangent from a fixed "
        "seed) differ, or its directional derivative is not linear in the direction, by finite differences. A program "
        "that does not use the output still gets this value in its gradient.")
    assert f.expected == "0 (or None)" and "subgradient" in f.fix


def test_nan_for_a_zero_cotangent_where_distinct_eigenvalues_have_a_derivative_stays_an_error():
    (f,) = findings(eigvalsh_nan_for_a_zero_cotangent, "GG301")
    assert f.severity == "error"
    assert f.message == ("the pullback of eigvalsh_nan_for_a_zero_cotangent must return zero tangents for a zero "
                         "cotangent, but the tangent for argument 0 (a) at [0, 0] is nan.")


def floor_plus(x, y):
    return np.floor(x) + y


@rrule(floor_plus, arrays(shape=(1,), elements=st.just(0.0)), arrays(shape=(1,), elements=st.just(2.0)))
def floor_plus_nan_at_integers(x, y):
    # ChainRules' mod rule in miniature: NaN for both partials where x is an integer, where floor jumps in x (no
    # derivative: the NaN in x is excusable) and the partial in y is 1 (the NaN in y is the error).
    nan = np.where(x == np.round(x), np.nan, 0.0)
    return floor_plus(x, y), lambda g: (g * nan, g * (1.0 + nan))


def test_a_zero_cotangent_error_names_the_element_where_the_derivative_exists():
    result = check(floor_plus_nan_at_integers, select=["GG301"]).rules[0]
    (f,) = result.findings
    assert f.severity == "error" and f.location == "argument 1 at [0]"
    assert f.message == (
        "the pullback of floor_plus_nan_at_integers must return zero tangents for a zero cotangent, but the tangent "
        "for argument 1 (y) at [0] is nan."
    )


def test_nan_for_a_zero_cotangent_where_the_derivative_exists_stays_an_error():
    (f,) = findings(xabs_nan_but_norm_ok, "GG301")
    assert f.severity == "error"
    assert f.message == ("the pullback of xabs_nan_but_norm_ok must return zero tangents for a zero cotangent, but "
                         "the tangent for argument 0 (x) at [0] is nan.")


@rrule(norm, arrays(shape=(3,), elements=st.just(0.0)))
def norm_inf_at_zero(x):
    n = norm(x)
    return n, lambda g: (g / n * np.where(n == 0, 1.0, x),)  # +-inf at the cone point, with the sign of g


@pytest.mark.parametrize("seed", [0, 1])
def test_inf_against_nan_at_a_cone_point_is_not_called_nonlinear(seed):
    """pullback(a ybar1 + ybar2) = inf, a pullback(ybar1) + pullback(ybar2) = inf - inf = nan: neither is a number
    to compare (GG206 judges non-finite tangents), so GG202 says nothing."""
    assert findings(norm_inf_at_zero, "GG202", seed=seed) == []


# -- kinks the rule's answers show but the primal has not (the where-based xlogy of jax-ml/jax dd023e2) -------
def mul(x, y):
    return x * y


POSITIVE = arrays(shape=(3,), min_value=0.1, max_value=5.0)


@rrule(mul, arrays(shape=(3,)), POSITIVE)
def mul_zero_at_origin(x, y):
    return x * y, lambda g: (np.where(x == 0, 0.0, g * y), g * x)  # BUG: x * y is smooth at x == 0


@rrule(mul, arrays(shape=(3,)), POSITIVE)
def mul_ok(x, y):
    return x * y, lambda g: (g * y, g * x)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_jump_of_the_rule_alone_is_no_kink(seed):
    """The buggy pullback jumps around x == 0, so its answers around x look like pieces of a kink; the primal's own
    one-sided derivatives agree there, and the input is judged."""
    (f,) = findings(mul_zero_at_origin, "GG201", seed=seed)
    assert re.fullmatch(
        rf"the pullback of mul_zero_at_origin disagrees with finite differences of the primal: cotangent for "
        rf"argument 0 \(x\) at \[\d\]: expected {NUM} \(finite differences\), got 0\.0 \(dot-product test moving "
        rf"argument 0 \(x\) alone: <ybar, J v> = "
        rf"{NUM} by finite differences, <pullback\(ybar\), v> = {NUM}, {NUM} apart where the tolerance allows {NUM}\)\.",
        f.message,
    ), f.message
    assert float(f.actual) == 0 and float(f.expected) != 0


@pytest.mark.parametrize("seed", [0, 1])
def test_the_smooth_twin_passes(seed):
    assert findings(mul_ok, "GG201", seed=seed) == []


# -- smooth along each element, yet no derivative at the point (eigenvectors at a repeated eigenvalue) --------
def middle(x):
    return np.sort(x)[1]


@rrule(middle, arrays(shape=(3,), elements=st.just(0.0)))
def middle_nan_at_ties(x):
    # Moving one of three tied zeros leaves the middle at 0 from both sides, but the middle of the three is no
    # linear function of the direction: the primal has no derivative at x.
    return middle(x), lambda g: (np.full(x.shape, np.nan) * g,)


def test_nan_where_the_primal_is_smooth_along_the_element_but_not_differentiable_is_a_warning():
    result = check(middle_nan_at_ties, select=["GG206"]).rules[0]
    (f,) = result.findings
    assert f.message == (
        "the pullback of middle_nan_at_ties returned nan in the tangent for argument 0 (x) at [0], where the primal is "
        "finite but has no derivative at this input that finite differences resolve: along directions through it, "
        "the one-sided derivatives of <ybar, primal(x)> differ, or its directional derivative is not linear in the "
        "direction, by finite differences; 3 element(s) of this tangent are not finite."
    )
    assert f.severity == "warning" and result.verdict == "pass" and f.expected == "a finite subgradient"


# -- the shifted points every kink test and GG203's same-function test evaluate ----------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_shifted_points_are_x_plus_t_v_to_the_bit(dtype):
    """`shifted` makes ``x + t v`` in a wide dtype with one array instead of four; the values must be exactly
    those of the plain expression (findings quote them and replays depend on them), scalars keep their type,
    and a None direction leaves its argument unmoved (a copy)."""
    from gradguard.checker.kinks import shifted

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5)).astype(dtype)
    v = rng.standard_normal((4, 5)).astype(dtype)
    wide = np.complex128 if np.iscomplexobj(x) else np.float64
    for t in (1e-3, -7.5, 0.0):
        moved, scalar, fixed, generic = shifted((x, 2.0, x, np.float32(1.5)), (v, 0.25, None, np.float32(2.0)), t)
        want = (x.astype(wide) + t * v.astype(wide)).astype(dtype)
        assert moved.dtype == dtype and moved.tobytes() == want.tobytes()
        assert type(scalar) is float and scalar == 2.0 + t * 0.25
        assert fixed is not x and fixed.tobytes() == x.tobytes()
        assert type(generic) is np.float32 and generic == np.float32(np.float64(1.5) + t * 2.0)
