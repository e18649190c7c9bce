"""Test the tester: GG203 uses JAX's reference only where it is the primal's own function around the input
(issue 12, class 2), and never lets it overrule finite differences of the primal."""

import re

import jax
import numpy as np
import pytest

from gradguard.checker import arrays, check, jax_rule, rrule

from _pools import COUPLED_TIES, pool_rule

pytest.importorskip("jax")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def top_eig(a):
    """The largest eigenvalue of the symmetric matrix whose lower triangle is a's: np.linalg.eigvalsh reads one
    triangle, while jnp.linalg.eigvalsh (what JAX traces for this primal) symmetrises its argument."""
    return np.linalg.eigvalsh(a)[-1]


SYMMETRIC = arrays(shape=(3, 3)).map(lambda a: ((a + a.T) / 2,))


def _top(a):
    w, v = np.linalg.eigh(a)
    return w[-1], v[:, -1]


@rrule(top_eig, args=SYMMETRIC)
def top_eig_lower(a):
    y, u = _top(a)

    def pullback(g):
        full = g * np.outer(u, u)
        return (np.tril(2 * full) - np.diag(np.diag(full)),)  # the derivative of the lower-triangle reading

    return y, pullback


@rrule(top_eig, args=SYMMETRIC)
def top_eig_symmetric(a):
    y, u = _top(a)
    return y, lambda g: (g * np.outer(u, u),)  # jnp's derivative, not this primal's: the upper triangle counts


NOT_THE_SAME = (
    "JAX's reference is not the same function as the primal around this input: their values differ at a point "
    "0.001 away, so its derivative is no evidence about the primal's; finite differences of the primal (GG201) "
    "judge this input"
)


def test_a_reference_that_is_another_function_is_not_used():
    result = check(top_eig_lower, ignore=["GG5", "GG6"]).rules[0]
    assert result.findings == [] and result.verdict == "pass"
    assert "GG203" not in result.checks_run
    assert {"id": "GG203", "reason": NOT_THE_SAME} in result.checks_skipped


def test_the_primal_itself_still_judges_the_rule():
    (f,) = [f for f in check(top_eig_symmetric, select=["GG201", "GG203"]).findings]
    assert f.check_id == "GG201"
    assert re.fullmatch(
        r"the pullback of top_eig_symmetric disagrees with finite differences of the primal: cotangent for argument 0 "
        r"\(a\) at \[\d, \d\]: expected (-?[0-9.e+-]+) \(finite differences\), got (-?[0-9.e+-]+) \(dot-product test: "
        r"<ybar, J v> = (-?[0-9.e+-]+) by finite differences, <pullback\(ybar\), v> = (-?[0-9.e+-]+), \S+ apart where the tolerance allows \S+\)\.",
        f.message,
    ), f.message


def square_sum(a):
    return np.sum(a * a)


@rrule(square_sum, arrays(shape=(3,)))
def square_sum_rrule(a):
    return square_sum(a), lambda g: (2 * g * a,)


def test_a_faithful_reference_is_still_used():
    result = check(square_sum_rrule, select=["GG203"]).rules[0]
    assert result.checks_run == ["GG203"] and result.findings == []


def stair(x):
    return np.floor(x * 1e8) / 1e8  # x to 8 decimals: slope 1 at every scale above 1e-8, while JAX's is 0


@rrule(stair, arrays(shape=(3,), min_value=1.0, max_value=2.0))
def stair_half(x):
    return stair(x), lambda g: (0.5 * g,)


@rrule(stair, arrays(shape=(3,), min_value=1.0, max_value=2.0))
def stair_one(x):
    return stair(x), lambda g: (1.0 * g,)


def test_the_reference_never_overrules_finite_differences_of_the_primal():
    """JAX's derivative of the primal's code (0: floor) is contradicted by finite differences of the primal
    (1): GG203 makes no claim from it; GG201 judges the rule against the primal."""
    (f,) = check(stair_half, select=["GG201", "GG203"]).findings
    assert f.check_id == "GG201" and f.expected == "1" and f.actual == "0.5"
    result = check(stair_one, select=["GG201", "GG203"]).rules[0]
    assert result.findings == [] and result.checks_run == ["GG201", "GG203"]


# -- a small difference at a point where JAX's derivative of the primal is wrong (jax-ml/jax dd023e2) ----------
def xlogy_where(x, y):
    """xlogy as jax.scipy.special had it: JAX differentiates the where to 0 in x at x == 0, not log(y)."""
    x_ok = x != 0.0
    return np.where(x_ok, np.where(x_ok, x, 1.0) * np.log(np.where(x_ok, y, 1.0)), np.zeros_like(x))


ZERO_X = arrays(shape=(2,), min_value=0.0, max_value=0.0)
NEAR_ONE = arrays(shape=(2,), min_value=1.00001, max_value=1.0001)  # log(y) ~ 1e-5: a small true derivative


@rrule(xlogy_where, ZERO_X, NEAR_ONE)
def xlogy_right_at_zero(x, y):
    return xlogy_where(x, y), lambda g: (None, None) if g is None else (g * np.log(y), g * x / y)


@rrule(xlogy_where, arrays(shape=(2,), min_value=0.5, max_value=2.0), NEAR_ONE)
def xlogy_off_by_1e4(x, y):
    # BUG: 1e-4 too much in x, away from 0 (where JAX's reference is right)
    return xlogy_where(x, y), lambda g: (None, None) if g is None else (g * (np.log(y) + 1e-4), g * x / y)


def test_a_small_difference_where_finite_differences_side_with_the_rule_is_no_gg203_finding():
    """Finite differences arbitrate along the direction in which rule and reference differ, scaled to a largest
    element of 1: unscaled, a 1e-5 difference moves the primal too little for them to tell the two apart."""
    result = check(xlogy_right_at_zero, select=["GG201", "GG203"]).rules[0]
    assert result.findings == [] and "GG203" in result.checks_run


def test_a_small_wrong_tangent_is_still_a_gg203_finding():
    (f,) = [f for f in check(xlogy_off_by_1e4, select=["GG203"]).findings]
    assert re.fullmatch(
        r"the pullback of xlogy_off_by_1e4 disagrees with the JAX reference gradient \(jax.vjp of the primal, its "
        r"NumPy calls run as jax.numpy\): cotangent for argument 0 \(x\) at \[\d\]: expected \S+ \(JAX\), got \S+\. "
        r"Finite differences of the primal along the difference of the two agree with JAX\.",
        f.message,
    ), f.message


# -- a primal declared with kwargs= still gets a JAX reference -------------------------------------------------------
# The keyword arguments were bound by a wrapper whose globals are gradguard's, so the numpy-as-jax.numpy copy of the
# primal found no `np` to replace and GG203 skipped every input ("not traceable"); a primal with a default argument
# was checked. (MyGrad's softmax, logsoftmax, batchnorm translated as rrules with kwargs=.)
def softmax_axis(x, *, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


@rrule(softmax_axis, arrays(shape=(2, 3)), kwargs={"axis": 1})
def softmax_axis_rrule(x, *, axis):
    y = softmax_axis(x, axis=axis)
    return y, lambda g: (y * (g - np.sum(g * y, axis=axis, keepdims=True)),)


@rrule(softmax_axis, arrays(shape=(2, 3)), kwargs={"axis": 1})
def softmax_axis_missing_term_rrule(x, *, axis):
    y = softmax_axis(x, axis=axis)
    return y, lambda g: (y * g,)  # BUG: drops the -y * sum(g * y) term


def test_a_primal_declared_with_kwargs_gets_the_jax_reference():
    result = check(softmax_axis_rrule, select="GG203").rules[0]
    assert result.checks_run == ["GG203"], result.checks_skipped
    assert result.verdict == "pass"
    broken = check(softmax_axis_missing_term_rrule, select="GG203").rules[0]
    assert [f.check_id for f in broken.findings] == ["GG203"]
    assert broken.findings[0].message.startswith(
        "the pullback of softmax_axis_missing_term_rrule disagrees with the JAX reference gradient (jax.vjp of the "
        "primal, its NumPy calls run as jax.numpy): cotangent for argument 0 (x) at "
    ), broken.findings[0].message


# -- the points around an input, compared in one run -----------------------------------------------


def _runs_of_the_mapped_reference(monkeypatch):
    """The NumPy-only runs GG203 asks of `run_traced` (its batch of points), as they end: "ran" or the error."""
    from gradguard.engines import jax_engine

    runs = []
    real = jax_engine.run_traced

    def counted(*args, **kwargs):
        if kwargs.get("xla", True):
            return real(*args, **kwargs)
        try:
            out = real(*args, **kwargs)
        except Exception as exc:
            runs.append(type(exc).__name__)
            raise
        runs.append("ran")
        return out

    monkeypatch.setattr(jax_engine, "run_traced", counted)
    return runs


def test_the_points_around_each_input_are_compared_with_the_reference_in_one_run(monkeypatch):
    runs = _runs_of_the_mapped_reference(monkeypatch)
    result = check(square_sum_rrule, select=["GG203"]).rules[0]
    assert result.checks_run == ["GG203"] and result.findings == []
    assert runs == ["ran"] * result.examples


def sorted_weights(x):
    return np.sum(np.sort(x) * np.arange(1.0, 4.0))


@rrule(sorted_weights, arrays(shape=(3,)))
def sorted_weights_rrule(x):
    order = np.argsort(x)

    def pullback(g):
        t = np.zeros_like(x)
        t[order] = g * np.arange(1.0, 4.0)
        return (t,)

    return sorted_weights(x), pullback


@rrule(sorted_weights, arrays(shape=(3,)))
def sorted_weights_reversed(x):
    order = np.argsort(x)

    def pullback(g):
        t = np.zeros_like(x)
        t[order] = g * np.arange(3.0, 0.0, -1.0)  # the weights in the wrong order
        return (t,)

    return sorted_weights(x), pullback


def test_a_reference_numpy_cannot_run_as_a_batch_is_compared_point_by_point_and_still_judges(monkeypatch):
    """jnp.sort is run here only by XLA: the batch is refused once (nothing compiled for it), then the reference
    runs at each point as before, and GG203 still tells the right rule from the wrong one."""
    runs = _runs_of_the_mapped_reference(monkeypatch)
    right = check(sorted_weights_rrule, select=["GG203"]).rules[0]
    assert right.checks_run == ["GG203"] and right.findings == []
    assert runs == ["NotByNumpy"]
    (wrong,) = check(sorted_weights_reversed, select=["GG203"]).findings
    assert wrong.check_id == "GG203"


def _case(rule, x):
    from gradguard.checker.case import Case, ReplayDraws

    return Case(rule, (np.asarray(x, dtype=float),), ReplayDraws([]))


class _Reference:
    """A reference for `same_function_around`: the primal's values, off by 1 at the points listed in ``wrong``
    (counted from 0, in the order of the comparisons), and raising at those in ``raises`` where run alone;
    ``batched`` False: it has no batch to offer."""

    def __init__(self, wrong=(), raises=(), batched=True, refuse=False):
        self.wrong, self.raises, self.refuse, self.calls = set(wrong), set(raises), refuse, []
        if batched:
            self.batch = self._batch

    def _value(self, k, x):
        return square_sum(np.asarray(x)) + (1.0 if k in self.wrong else 0.0)

    def __call__(self, x):
        k = len([c for c in self.calls if c == "point"])
        self.calls.append("point")
        if k in self.raises:
            raise FloatingPointError("outside its domain")
        return self._value(k, x)

    def _batch(self, points):
        self.calls.append("batch")
        return None if self.refuse else [self._value(k, p[0]) for k, p in enumerate(points)]


@pytest.mark.parametrize("batched", [True, False])
def test_one_run_for_every_point_reaches_the_verdicts_of_one_point_at_a_time(batched):
    from gradguard.checker.checks._reference import same_function_around
    from gradguard.checker.problems import Skip

    case = _case(square_sum_rrule, [0.5, -1.0, 2.0])
    fine = _Reference(batched=batched)
    same_function_around(case, fine)  # agrees everywhere: no Skip
    assert fine.calls == (["batch"] if batched else ["point"] * 4)  # two random directions, both ways
    with pytest.raises(Skip) as differs:
        same_function_around(case, _Reference(wrong={2}, batched=batched))
    assert str(differs.value) == NOT_THE_SAME.replace("0.001", "0.002")  # h = 1e-3 times the largest element, 2


def test_where_the_batch_is_refused_each_point_is_run_alone_and_a_raising_point_is_named():
    from gradguard.checker.checks._reference import same_function_around
    from gradguard.checker.problems import Skip

    case = _case(square_sum_rrule, [0.5, -1.0, 2.0])
    refused = _Reference(raises={1}, refuse=True)
    with pytest.raises(Skip) as raised:
        same_function_around(case, refused)
    assert str(raised.value) == (
        "JAX's reference is not the same function as the primal around this input: it raised FloatingPointError "
        "at a point 0.002 away, where the primal did not")
    assert refused.calls == ["batch", "point", "point"]


# -- a difference that reaches across a kink ---------------------------------------------------------


def leaky_relu(x):
    return np.where(x > 0, x, 0.1 * x)


@rrule(leaky_relu, arrays(shape=(4,)))
def leaky_relu_slope_one(x):  # the slope below zero taken as 1
    return leaky_relu(x), lambda ybar: (np.where(x > 0, ybar, ybar),)


@rrule(leaky_relu, arrays(shape=(4,)))
def leaky_relu_right(x):
    return leaky_relu(x), lambda ybar: (np.where(x > 0, ybar, 0.1 * ybar),)


def test_a_difference_at_kinks_and_away_from_them_is_judged_away_from_them():
    """At x = [0, 0, 0, -1] the rule and JAX differ at the three kinks (where the rule's 1 is a valid one-sided
    slope) and at -1. Finite differences along the whole difference cross the kinks and contradicted JAX, so the
    input was not judged, and Hypothesis, which favours zeros, drew no input without one at seed 0 of the corpus."""
    from gradguard.checker.reproducer import replay

    x = (np.array([0.0, 0.0, 0.0, -1.0]),)
    with pytest.raises(AssertionError, match=re.escape(
            "GG203 pullback disagrees with the JAX reference gradient: the pullback of leaky_relu_slope_one disagrees "
            "with the JAX reference gradient (jax.vjp of the primal, its NumPy calls run as jax.numpy): cotangent for "
            "argument 0 (x) at [3]: expected 0.1 (JAX), got 1.0. Finite differences of the primal along the difference "
            "of the two agree with JAX.")):
        replay(leaky_relu_slope_one, "GG203", x, [np.ones(4)])
    assert replay(leaky_relu_right, "GG203", x, [np.ones(4)]) == []


def test_each_differing_element_is_probed_for_a_kink_once(monkeypatch):
    """The retry away from kinks and the element-by-element judgement after it ask about the same differing elements;
    each one's kink probe (a table of one-sided derivatives) runs once."""
    from gradguard.checker.checks import numeric_jax
    from gradguard.checker.reproducer import replay

    probed = []
    real = numeric_jax._at_kink_element

    def counted(case, ybar, i, idx, got, want):
        probed.append((i, tuple(idx)))
        return real(case, ybar, i, idx, got, want)

    monkeypatch.setattr(numeric_jax, "_at_kink_element", counted)
    with pytest.raises(AssertionError):
        replay(leaky_relu_slope_one, "GG203", (np.array([0.0, 0.0, 0.0, -1.0]),), [np.ones(4)])
    assert sorted(probed) == [(0, (0,)), (0, (1,)), (0, (2,)), (0, (3,))]


# -- float16: JAX's reference rounds too ----------------------------------------------------------------------------
# The float16 probe of the real-world corpus: MyGrad's sigmoid drew "expected 0.0 (JAX), got 0.00270844" at
# x = -5.906, where JAX's float16 derivative of 1 / (1 + exp(-x)) is 0 ((1 + e^5.906)**2 = 1.35e5 overflows float16)
# and mpmath gives 0.0027076, the rule's value; float16 finite differences (0.0027 +- 0.016) agree with both.
def sigmoid(x):
    return 1 / (1 + np.exp(-1.0 * x))


def _sigmoid_spec():
    from hypothesis import strategies as st

    return st.just(np.array([0.0, -5.906, 27.27, -2.842], np.float16))


@rrule(sigmoid, _sigmoid_spec())
def sigmoid_f16_rrule(x):  # MyGrad's: s * (1 - s)
    s = sigmoid(x)
    return s, lambda g: (g * s * (1.0 - s),)


@rrule(sigmoid, _sigmoid_spec())
def sigmoid_f16_off_rrule(x):
    s = sigmoid(x)
    # BUG: a branch for small s (a series, say) twice the derivative: only the element at -5.9 differs, where float16 finite
    # differences agree with both it and JAX's float16 0
    return s, lambda g: (g * s * (1.0 - s) * np.where(s < 0.01, np.float16(2.0), np.float16(1.0)),)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_float16_reference_that_rounds_away_is_taken_again_in_float64(seed):
    assert check(sigmoid_f16_rrule, seed=seed, select=["GG203"]).rules[0].findings == []


def test_a_float16_rule_the_float64_reference_refutes_still_fails_gg203():
    [finding] = check(sigmoid_f16_off_rrule, seed=2, select=["GG203"]).rules[0].findings
    assert finding.message == (
        "the pullback of sigmoid_f16_off_rrule disagrees with the JAX reference gradient (jax.vjp of the primal, its "
        "NumPy calls run as jax.numpy, on float64 copies of its narrower float arguments): cotangent for argument 0 "
        "(x) at [1]: expected 0.00270761 (JAX), got 0.00541687.")


# The same probe: chainer's softplus, written fmax(bx, 0) + log1p(exp(-fabs(bx))), drew "expected -0.5 (JAX), got 0.5"
# at x = 0 in float16. JAX differentiates that code to -0.5 there in float64 too (the derivative is 0.5), and float16
# finite differences, charged with the rounding of every output element, agree with both.
def fabs_softplus(x, beta=2.0):
    bx = beta * x
    return np.asarray((np.fmax(bx, 0) + np.log1p(np.exp(-np.fabs(bx)))) * (1.0 / beta), x.dtype)


def _zeros_spec():
    from hypothesis import strategies as st

    return st.just(np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 6.0]], np.float16))


@rrule(fabs_softplus, _zeros_spec())
def fabs_softplus_f16_rrule(x, beta=2.0):  # chainer's SoftplusGrad
    return fabs_softplus(x, beta), lambda gy: (np.asarray((1 - 1 / (1 + np.exp(beta * x))) * gy, x.dtype),)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_float64_reference_that_float64_finite_differences_refute_judges_nothing(seed):
    assert check(fabs_softplus_f16_rrule, seed=seed, select=["GG203"]).rules[0].findings == []


# The same probe: MyGrad's overlapping max pool at an all-zero float16 input. The rule gives each window's cotangent
# to its first maximum, JAX shares it among the ties: both subgradients. Float16's central differences across the
# kink (steps of 0.099) fell within their error of JAX's value along the difference, "confirming" it; on float64
# copies they contradict JAX, as they do for the float64 rule.
@pytest.mark.parametrize("seed", [0, 1])
def test_a_float16_subgradient_at_ties_that_float64_differences_do_not_refute_is_no_finding(seed):
    for dtype in ("float64", "float16"):
        zeros = np.zeros((3, 3), dtype)
        assert check(pool_rule(zeros, f"pool_{dtype}"), seed=seed, select=["GG203"]).rules[0].findings == []


def test_a_float16_rule_that_float64_differences_do_not_clear_still_fails_gg203():
    from hypothesis import strategies as st

    @rrule(sigmoid, st.just(np.array([0.5, -1.25, 2.0, 0.75], np.float16)))
    def sigmoid_f16_scaled_rrule(x):
        s = sigmoid(x)
        return s, lambda g: (np.float16(1.5) * g * s * (1.0 - s),)  # BUG: 1.5 times the derivative

    [finding] = check(sigmoid_f16_scaled_rrule, seed=0, select=["GG203"]).rules[0].findings
    assert finding.message.startswith(
        "the pullback of sigmoid_f16_scaled_rrule disagrees with the JAX reference gradient (jax.vjp of the primal, its "
        "NumPy calls run as jax.numpy): cotangent for argument 0 (x) at [")


# The same rule in float64 at ties that couple two windows (MyGrad's max pool drew it in float16, where 0 and -0 tie
# often; float64 draws it too): entry (1, 0) ties with -0 at (0, 1) in window (0, 0) and with (2, 0) in window (1, 0).
# The rule gives it window (1, 0)'s cotangent alone, a piece no move of that entry alone reaches, and JAX shares each
# window's among its ties; element by element its one-sided derivatives do not hold the rule's value, and central
# differences along the difference of the two read the average of the sides, JAX's value: "expected 0.13224 (JAX), got
# -2.59476 ... Finite differences of the primal along the difference of the two agree with JAX."
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_subgradient_at_ties_that_couple_windows_is_no_gg203_finding(seed):
    assert check(pool_rule(COUPLED_TIES, "pool_coupled"), seed=seed, select=["GG203"]).rules[0].findings == []


def test_a_float16_subgradient_at_ties_that_couple_windows_is_no_gg203_finding():
    # float16's differences along the difference agree with both answers there, and its kinks round back onto the
    # ties: the element-by-element kinks are asked on float64 copies
    x = np.array([[-0.4106, -10.0, -0.0, 2.004], [-4.67, -0.0, -6.41, -0.0], [0.0, -7.652, -9.484, 0.875],
                  [0.0, -3.838, -0.0, -0.0]], np.float16)  # the float16 run's draw, MyGrad's second channel
    for seed in (0, 1):
        assert check(pool_rule(x, "pool_coupled_f16"), seed=seed, select=["GG203"]).rules[0].findings == []


def test_ties_each_given_the_whole_cotangent_still_fail_gg203():
    found = check(pool_rule(COUPLED_TIES, "pool_every_tie", every_tie=True), seed=0, select=["GG203"]).rules[0].findings
    assert [f.check_id for f in found] == ["GG203"]


# JAXtronomy's EPL hyp2f1 evaluation, a custom_jvp: at f = 0 exactly (a circular lens, where the library sets z = 0)
# its primal is ones_like(z), elsewhere a series whose z-derivative at 0 is 1/3, which the jvp gives. Along z alone,
# at f = 0, the primal is flat (JAX's 0); along every direction that moves f it is not: no derivative at the point,
# and GG201 passes the rule. GG203 had no finite differences at all (fd could not take a 0-d complex output) and
# reported "expected 0j (JAX), got (0.333333+0j)".
def test_a_custom_jvp_whose_branch_holds_on_a_measure_zero_set_is_no_gg203_finding():
    import jax
    import jax.numpy as jnp
    from hypothesis import strategies as st

    from gradguard.checker import jax_rule

    @jax.custom_jvp
    def branch_at_zero(f, z):
        return jnp.where(f == 0, jnp.ones_like(z), 1 + z / 3 + f * z)

    @branch_at_zero.defjvp
    def _jvp(primals, tangents):
        (f, z), (df, dz) = primals, tangents
        return branch_at_zero(f, z), dz / 3 + df * z + f * dz

    rule = jax_rule(branch_at_zero, args=st.just((np.float64(0.0), np.complex128(0j))), name="branch_at_zero_rule")
    for seed in (0, 1):
        assert [f.message for f in check(rule, seed=seed, select=["GG203"]).findings] == []


@jax.custom_vjp
def _square_off(z):
    return z**2


_square_off.defvjp(lambda z: (z**2, z), lambda z, g: (2.1 * z * g,))


def test_a_complex_cotangent_under_jaxs_convention_is_shown_as_the_pullback_got_it():
    """The values a finding quotes are the pullback's for conj(ybar) under JAX's convention, and the counterexample
    showed only ybar: JAXtronomy's hyp2f1 read as a sign error. The cotangent the pullback got is now shown too."""
    rule = jax_rule(_square_off, arrays(shape=(2,), dtype="complex128", min_value=-1.0, max_value=1.0),
                    name="square_off")
    (f,) = [f for f in check(rule, seed=0, select=["GG203"]).findings if f.check_id == "GG203"]
    draws = f.counterexample["draws"]
    shown = draws["cotangent the pullback was called with (the drawn one conjugated: JAX's convention)"]
    drawn = np.array(eval(draws["cotangent"].replace("array", "")))  # noqa: S307 - our own repr of an array
    np.testing.assert_array_equal(np.array(eval(shown.replace("array", ""))), np.conj(drawn))  # noqa: S307


# jaxoplanet's s0s1s2 on the line b + r = 1: its code takes a where(b + r == 1, ...) branch there alone, whose formula
# JAX differentiates (0.0615 for the b-tangent) while the function's derivative all around is the rule's 0.0912503,
# and central differences, which converge only as sqrt(h) there, could not tell the two apart: a false GG203 error.
# The same shape in one variable: x + 20 sign(x - 1) |x - 1|**1.5, whose code takes 0.7 x + 0.3 at x = 1 exactly.
def _contact_rule(slope_at_1):
    import jax.numpy as jnp
    from hypothesis import strategies as st

    @jax.custom_vjp
    def contact(x):
        return jnp.where(x == 1.0, 0.7 * x + 0.3, x + 20 * jnp.sign(x - 1) * jnp.abs(x - 1) ** 1.5)

    contact.defvjp(lambda x: (contact(x), x), lambda x, g: (g * (slope_at_1 + 30 * jnp.sqrt(jnp.abs(x - 1))),))
    return jax_rule(contact, st.just(np.array([1.0, 1.0 + 2**-6, 0.5])), name="contact")


ISOLATED = (
    "JAX's derivative of the primal at this input is not the one it has all around it: its code takes a branch here "
    "alone (a jnp.where on an equality), whose formula JAX differentiates, and at nearby points on every side the "
    "reference is the pullback's value here; finite differences of the primal did not tell the two apart, so there "
    "is no reference to judge by (GG201 judges the rule against the primal)"
)


def test_a_reference_that_takes_a_branch_at_the_input_alone_is_no_gg203_finding():
    result = check(_contact_rule(1.0), seed=0, select=["GG203"]).rules[0]
    assert result.findings == []
    assert [p["reason"] for p in result.checks_partial if p["id"] == "GG203"] == [ISOLATED]


def test_a_rule_wrong_around_an_isolated_branch_still_fails_gg203():
    (finding,) = check(_contact_rule(1.2), seed=0, select=["GG203"]).findings
    assert finding.message == (
        "the pullback of contact disagrees with the JAX reference gradient (jax.vjp of the function underneath the "
        "custom_vjp): cotangent for argument 0 (x) at [0]: expected 0.7 (JAX), got 1.2."
    )


def test_a_skip_reason_keeps_a_value_printed_over_several_lines_whole():
    """diffcp's GG203 skip reason ended mid-array: JAX's error printed a tracer holding a matrix over two lines."""
    from gradguard.checker.checks._jax import first_line

    exc = ValueError("unrecognized csc_matrix constructor input: GradTracer(primal=[[-1.1 -0.3]\n [ 0.2  0.5]], "
                     "tangent=T)\n\nSee the documentation for more.")
    assert first_line(exc) == ("ValueError: unrecognized csc_matrix constructor input: GradTracer(primal=[[-1.1 -0.3] "
                               "[ 0.2 0.5]], tangent=T)")
    assert first_line(TypeError("one line\nthe next")) == "TypeError: one line"
    long = first_line(ValueError("open (" + "x " * 400 + "\n" + "y " * 400 + ")"))
    assert len(long) == len("ValueError: ") + 300 and long.endswith("...")
