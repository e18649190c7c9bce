"""Finite differences against analytic derivatives: values, error estimates, cost, argument errors."""

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gradguard.engines import fd
from gradguard.engines.fd import Derivative, complex_step, derivative, directional, inner

points = st.floats(-3, 3, allow_nan=False)
seeds = st.integers(0, 2**32 - 1)

SMOOTH = {
    "sin": (np.sin, np.cos),
    "exp": (np.exp, np.exp),
    "poly": (lambda x: 3 * x**5 - 2 * x**3 + x - 7, lambda x: 15 * x**4 - 6 * x**2 + 1),
    "x_exp": (lambda x: x * np.exp(x), lambda x: (1 + x) * np.exp(x)),
}
# What a function's value is computed from, where that is much larger than the value: the polynomial is a
# difference of terms as large as this, and rounds like it, while the error estimate prices a function's
# rounding at eps |f(x)| (it cannot see inside f). At x = 1.2698249531780474, scale 0.1, the true error
# (6.5e-13) was twice the estimate (3.3e-13).
TERMS = {"poly": lambda x: 3 * abs(x) ** 5 + 2 * abs(x) ** 3 + abs(x) + 7}


def assert_within_estimate(result: Derivative, truth, factor: float = 1.0) -> None:
    """The reported error bounds the true error (and is a finite, non-negative number)."""
    assert 0 <= result.error < math.inf
    assert np.max(np.abs(np.asarray(result.value) - truth)) <= factor * result.error


def test_exports():
    assert sorted(fd.__all__) == sorted(["Derivative", "StepsExhausted", "LARGE_INPUT", "NOT_GIVEN", "budget", "computed_eps", "confirmed",
                                         "first_step", "derivative", "complex_step", "directional", "inner", "quick"])


def test_computed_eps_tells_float32_values_in_a_float64_array():
    """A float64 function computed in float32 (a gradient returned with .float() and cast back) rounds at float32's
    1e-7: the error bound of its finite differences must say so."""
    values = np.array([2000.00268, -3.14159, 0.1]).astype(np.float32).astype(np.float64)
    assert fd.computed_eps(values) == np.finfo(np.float32).eps
    assert fd.computed_eps(np.array([2000.00268, -3.14159, 0.1])) == np.finfo(np.float64).eps
    assert fd.computed_eps(np.array([2.0, 0.375, -1.5, 0.0])) == np.finfo(np.float64).eps  # simple: any precision
    assert fd.computed_eps(np.float32(0.1)) == np.finfo(np.float32).eps
    assert fd.computed_eps(np.array([np.nan, np.inf])) == np.finfo(np.float64).eps


def test_computed_eps_of_a_complex_scalar():
    # a 0-d complex128 cannot be viewed as float64 in place: the ValueError made every finite difference of a
    # function with a complex scalar output "fail" (JAXtronomy's hyp2f1 at z = 0j, whose GG203 then had no evidence)
    assert fd.computed_eps(np.complex128(1 / 3)) == np.finfo(np.float64).eps
    assert fd.computed_eps(np.asarray(np.complex128(0.1 + 0.2j))) == np.finfo(np.float64).eps
    assert fd.computed_eps(np.complex128(np.float32(0.1) + 1j * np.float32(0.3))) == np.finfo(np.float32).eps


def test_first_step_is_the_first_tables_step():
    x, v = np.array([0.3, -1.2]), np.array([1.0, 0.5])
    d = fd.directional(lambda a: np.sum(np.sin(a)), (x,), (v,), complex_step=False)
    assert fd.first_step((x,), (v,)) == pytest.approx(np.finfo(np.float64).eps ** (1 / 9))
    assert d.step <= fd.first_step((x,), (v,))  # the table starts there and only shrinks
    assert fd.first_step((x.astype(np.float32),), (v,)) == pytest.approx(np.finfo(np.float32).eps ** (1 / 9))


def test_budget_is_shallower_only_for_large_inputs_and_stays_accurate():
    small = (np.ones(10), np.ones((fd.LARGE_INPUT // 2,)))
    assert fd.budget(small) == {}
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, size=fd.LARGE_INPUT + 1)
    v = rng.standard_normal(x.size)
    opts = fd.budget((x, None))
    assert opts == {"levels": 3, "complex_step": False}
    d = fd.directional(lambda a: np.sum(np.sin(a)), (x,), (v,), **opts)
    exact = float(np.dot(np.cos(x), v))
    assert d.evaluations < fd.directional(lambda a: np.sum(np.sin(a)), (x,), (v,)).evaluations
    assert abs(d.value - exact) <= max(d.error, 1e-9 * abs(exact))
    assert abs(d.value - exact) <= 1e-7 * np.sum(np.abs(v))


# ---------------------------------------------------------------- derivative


@pytest.mark.parametrize("name", SMOOTH)
@given(x=points, scale=st.sampled_from([0.1, 1.0, 5.0]))
@settings(max_examples=30, deadline=None)
@example(x=1.2698249531780474, scale=0.1)
def test_derivative_of_smooth_functions_is_near_machine_precision(name, x, scale):
    f, df = SMOOTH[name]
    result = derivative(lambda t: f(x + scale * t))
    truth = scale * df(x)
    assert abs(result.value - truth) <= 1e-10 * max(1.0, abs(truth))
    # Beyond the estimate: the rounding it cannot see, one ulp of the terms (instead of eps |f|) differenced over
    # the table's finest step.
    finest = result.step / 2 ** 3
    unseen = np.finfo(float).eps * TERMS[name](abs(x) + scale * result.step) / finest if name in TERMS else 0.0
    assert 0 <= result.error < math.inf
    assert abs(result.value - truth) <= result.error + unseen
    assert result.error <= 1e-9 * max(1.0, abs(truth))  # the estimate is tight enough to be useful
    assert (result.method, result.evaluations) == ("richardson", 8)


@pytest.mark.parametrize("order", [2, 3, 4, 6])
def test_every_order_bounds_its_error(order):
    result = derivative(lambda t: np.arctan(0.7 + t), order=order)
    assert_within_estimate(result, 1 / (1 + 0.7**2))
    assert result.evaluations == 2 * order


def test_order_one_is_a_plain_central_difference_with_no_error_estimate():
    result = derivative(lambda t: np.sin(1 + t), order=1)
    assert abs(result.value - np.cos(1)) < 1e-9
    assert result.error == math.inf and result.evaluations == 2


def test_array_valued_g_gives_elementwise_derivatives_and_max_error():
    x = np.linspace(-2, 2, 7)
    result = derivative(lambda t: np.sin(x + t) * np.exp(t))
    truth = np.cos(x) + np.sin(x)
    assert result.value.shape == x.shape
    np.testing.assert_allclose(result.value, truth, rtol=0, atol=1e-11)
    assert_within_estimate(result, truth)


@given(x0=st.floats(1e-6, 1e-2))
@settings(max_examples=30, deadline=None)
def test_max_step_keeps_log_inside_its_domain(x0):
    seen = []

    def g(t):
        seen.append(t)
        return math.log(x0 + t)  # raises for x0 + t <= 0

    result = derivative(g, max_step=x0 / 10)
    assert max(abs(t) for t in seen) <= x0 / 10
    assert result.evaluations == len(seen) == 8
    assert abs(result.value - 1 / x0) <= 1e-9 / x0
    assert_within_estimate(result, 1 / x0)


def test_step_shrinks_when_g_fails_near_the_domain_edge():
    result = derivative(lambda t: np.log(1e-3 + t))  # default step 1.8e-2 leaves the domain
    assert result.step < 1e-3 and result.evaluations > 8
    assert abs(result.value - 1e3) <= 1e-6 * 1e3
    assert_within_estimate(result, 1e3)


def test_g_that_always_fails_gives_a_clear_error():
    with pytest.raises(ValueError, match="even after shrinking the step.*max_step"):
        derivative(lambda t: math.sqrt(t))


def test_float32_function_gets_a_float32_sized_error():
    result = derivative(lambda t: np.sin(np.float32(1.0) + np.float32(t)))
    assert 1e-9 < result.error < 1e-3
    assert_within_estimate(result, np.cos(1.0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"step": 0.0}, r"Got step=0.0, but step must be a finite number > 0"),
        ({"max_step": -1e-3}, r"Got max_step=-0.001, but max_step must be"),
        ({"max_step": math.nan}, r"Got max_step=nan"),
        ({"order": 0}, r"Got order=0, but order must be an int >= 1"),
        ({"order": 2.5}, r"Got order=2.5"),
    ],
)
def test_derivative_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        derivative(np.sin, **kwargs)


# ---------------------------------------------------------------- complex step


@pytest.mark.parametrize("name", SMOOTH)
@given(x=points)
@settings(max_examples=30, deadline=None)
def test_complex_step_is_exact_on_analytic_functions(name, x):
    f, df = SMOOTH[name]
    result = complex_step(lambda t: f(x + t))
    assert abs(result.value - df(x)) <= 4e-15 * max(1.0, abs(df(x)))
    assert_within_estimate(result, df(x), factor=2)
    assert (result.method, result.evaluations, result.step) == ("complex-step", 1, 1e-20)


def test_complex_step_with_a_large_step_estimates_its_truncation():
    result = complex_step(lambda t: np.exp(1 + t), step=1e-3)
    assert result.evaluations == 2
    assert_within_estimate(result, np.e)


def test_complex_step_rejects_functions_without_complex_input():
    with pytest.raises(TypeError, match="complex t=1e-20j.*Use derivative"):
        complex_step(lambda t: math.sin(1 + t))


def test_complex_step_rejects_functions_that_drop_the_imaginary_part():
    with pytest.raises(ValueError, match="returned the real value.*dropped the imaginary part"):
        complex_step(lambda t: np.abs(1 + t))


# ---------------------------------------------------------------- inner


def test_inner_is_the_real_inner_product_over_pytrees_with_none_as_zero():
    a = (np.array([1 + 2j, 3.0]), [2.0, None])
    b = (np.array([2 - 1j, 1.0]), [np.float32(3.0), np.ones(4)])
    # Re(conj(1+2j) * (2-1j)) = Re((1-2j)(2-1j)) = 2 - 2 = 0
    assert inner(a, b) == pytest.approx(0 + 3 + 6)
    assert inner(None, b) == 0.0


def test_inner_names_the_mismatched_leaf():
    with pytest.raises(ValueError, match=r"shapes differ at \[1\]\[0\]: \(2,\) vs \(3,\)"):
        inner((1.0, [np.ones(2)]), (1.0, [np.ones(3)]))
    with pytest.raises(ValueError, match=r"pytrees differ at the root"):
        inner((1.0, 2.0), (1.0,))


def _bits(x) -> bytes:
    return np.asarray(x, dtype=np.float64).tobytes()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=6), seeds)
def test_inner_of_two_plain_arrays_has_the_bits_of_the_tree_walk(values, seed):
    """Plain real arrays skip the walk over leaves; the product, its sum and the walk's start at 0 (which turns
    a -0.0 into 0.0) stay what the walk computes, so every finite-difference table keeps its bits."""
    a = np.array(values)
    b = np.random.default_rng(seed).normal(size=a.shape) * np.float32(3)
    for x, y in ((a, b), (a, b.astype(np.float32)), (np.array([-0.0]), np.array([1.0]))):
        assert _bits(inner(x, y)) == _bits(inner([x], [y]))
        assert _bits(fd._abs_inner(x, y)) == _bits(fd._abs_inner([x], [y]))
    assert math.copysign(1.0, inner(np.array([-0.0]), np.array([1.0]))) == 1.0


@settings(max_examples=60, deadline=None)
@given(seeds, st.integers(1, 6), st.floats(1e-4, 1.0), st.sampled_from([0.0, 1e-17, np.float64(3e-15)]))
def test_a_table_of_plain_floats_has_the_bits_of_the_table_of_numpy_values(seed, order, h0, input_noise):
    """`_richardson` computes a contraction's table (plain floats) without NumPy scalars; a table of the same
    values handed over as 0-d arrays takes NumPy's path. Both give the same value and error, bit for bit."""
    rng = np.random.default_rng(seed)
    c = rng.normal(size=4)

    def g(t):
        y = np.sin(3 * t + c) * np.exp(t) + rng.normal() * 1e-9  # a different wobble at every probe
        return float(y.sum()), float(1e-16 * np.abs(y).sum())

    probes = {}

    def plain(t):
        probes.setdefault(t, g(t))
        return probes[t]

    as_plain = fd._richardson(plain, h0, order, input_noise)
    as_numpy = fd._richardson(lambda t: tuple(np.asarray(v) for v in plain(t)), h0, order, input_noise)
    assert (_bits(as_plain[0]), _bits(as_plain[1])) == (_bits(as_numpy[0]), _bits(as_numpy[1]))


def test_the_rounding_probes_signs_are_a_fresh_generators_and_are_handed_out_as_copies():
    shapes = ((3,), (), (2, 2))
    rng = np.random.default_rng(0)
    fresh = [[rng.choice([-1.0, 1.0], size=shape) for shape in shapes] for _ in range(2)]
    for _ in range(2):  # made once, then kept
        got = list(fd._sign_patterns(shapes))
        assert [[a.tolist() for a in r] for r in got] == [[a.tolist() for a in r] for r in fresh]
        got[0][0][...] = 7.0  # `_signed` writes into them
    big = ((fd.LARGE_INPUT + 1,),)
    rng = np.random.default_rng(0)
    assert [r[0].tolist() for r in fd._sign_patterns(big)] == [rng.choice([-1.0, 1.0], size=big[0]).tolist() for _ in range(2)]
    assert big not in fd._SIGNS


# ---------------------------------------------------------------- directional


def random_problem(seed, n, dtype=np.float64):
    rng = np.random.default_rng(seed)
    A, x, v, c = rng.normal(size=(n, n)), rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    return rng, A.astype(dtype), x.astype(dtype), v.astype(dtype), c


@given(seed=seeds, n=st.integers(1, 30), complex_step=st.sampled_from(["auto", False]))
@settings(max_examples=30, deadline=None)
def test_directional_matrix_vector_product(seed, n, complex_step):
    _, A, x, v, c = random_problem(seed, n)
    dA = np.random.default_rng(seed + 1).normal(size=A.shape)
    result = directional(lambda A, x: A @ x, [A, x], [dA, v], c, complex_step=complex_step)
    truth = c @ (dA @ x + A @ v)
    assert abs(result.value - truth) <= 1e-10 * (np.abs(c) @ (np.abs(dA) @ np.abs(x) + np.abs(A) @ np.abs(v)))
    assert_within_estimate(result, truth)


@given(seed=seeds, n=st.integers(1, 30))
@settings(max_examples=30, deadline=None)
def test_directional_elementwise_nonlinearity(seed, n):
    _, A, x, v, c = random_problem(seed, n)
    y = np.tanh(A @ x)
    truth = c @ ((1 - y**2) * (A @ v))
    result = directional(lambda A, x: np.tanh(A @ x), [A, x], [None, v], c, complex_step=False)
    assert abs(result.value - truth) <= 1e-9 * (np.abs(c) @ np.abs(A @ v))
    assert_within_estimate(result, truth)


def test_directional_without_cotangent_returns_j_v_itself():
    _, A, x, v, _ = random_problem(3, 5)
    result = directional(lambda x: np.sin(A @ x), [x], [v])
    truth = np.cos(A @ x) * (A @ v)
    assert result.value.shape == (5,)
    np.testing.assert_allclose(result.value, truth, rtol=1e-12, atol=1e-12)
    assert_within_estimate(result, truth)


@given(seed=seeds)
@settings(max_examples=20, deadline=None)
def test_directional_tuple_output_with_python_float_and_constant_args(seed):
    rng, _, x, v, _ = random_problem(seed, 4)
    s, ds = float(rng.normal()), float(rng.normal())
    c = (rng.normal(size=4), [float(rng.normal()), None])

    def f(x, s, label):
        assert label == "constant"
        return x * s, [np.sum(x**2), np.zeros(3)]

    result = directional(f, [x, s, "constant"], [v, ds, None], c)
    truth = c[0] @ (v * s + x * ds) + c[1][0] * 2 * (x @ v)
    assert abs(result.value - truth) <= 1e-12 * max(1.0, abs(truth))
    assert_within_estimate(result, truth)


@given(seed=seeds, n=st.integers(1, 20))
@settings(max_examples=30, deadline=None)
def test_directional_on_complex_arrays(seed, n):
    rng = np.random.default_rng(seed)
    z, v, c = (rng.normal(size=n) + 1j * rng.normal(size=n) for _ in range(3))
    result = directional(lambda z: z * np.exp(z), [z], [v], c)
    truth = inner(c, (1 + z) * np.exp(z) * v)
    assert result.method == "richardson"  # the complex step needs real arguments
    assert abs(result.value - truth) <= 1e-10 * (np.abs(c) @ np.abs((1 + z) * np.exp(z) * v))
    assert_within_estimate(result, truth)


def test_mutating_f_sees_fresh_copies_and_leaves_the_caller_arrays_alone():
    x, w = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    x_before, w_before = x.copy(), w.copy()
    v = np.array([0.3, -0.2, 0.1])

    def addone_then_square(x, w):
        x += 1  # mutates its argument, as an in-place rule would
        w *= 2  # and mutates a constant one
        return np.sum(w * x**2)

    result = directional(addone_then_square, [x, w], [v, None])
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_array_equal(w, w_before)
    truth = np.sum(2 * w * 2 * (x + 1) * v)  # each call started again from the caller's values
    assert abs(result.value - truth) <= 1e-12 * abs(truth)


def test_evaluation_count_does_not_depend_on_input_size():
    counts = {}
    for n in (10, 10**5):
        rng = np.random.default_rng(n)
        x, v, c = (rng.normal(size=n) for _ in range(3))
        calls = []

        def f(x):
            calls.append(1)
            return np.sin(x)

        result = directional(f, [x], [v], c)
        assert result.evaluations == len(calls)
        assert abs(result.value - c @ (np.cos(x) * v)) <= 1e-10 * (np.abs(c) @ np.abs(v))
        counts[n] = result.evaluations
    assert counts[10] == counts[10**5] <= 16


@given(seed=seeds, n=st.integers(1, 40))
@settings(max_examples=30, deadline=None)
def test_float32_function_error_estimate_covers_the_true_derivative(seed, n):
    _, A, x, v, c = random_problem(seed, n, np.float32)
    A64, x64, v64 = (a.astype(np.float64) for a in (A, x, v))
    y = np.tanh(A64 @ x64)
    truth = c @ ((1 - y**2) * (A64 @ v64))
    for mode in ("auto", False):
        result = directional(lambda A, x: np.tanh(A @ x), [A, x], [None, v], c, complex_step=mode)
        assert_within_estimate(result, truth)
        assert result.error <= 1e-2 * (np.abs(c) @ np.abs(A64 @ v64))  # still a useful estimate


@pytest.mark.parametrize(("seed", "n"), [(195, 36), (230, 31), (258, 19), (303, 24), (306, 27), (318, 39)])
def test_float32_table_entries_that_agree_by_coincidence_are_not_trusted(seed, n):
    # Found by search: with a coarse step, two unconverged entries of the table agree
    # closely; only comparing each entry with its neighbours at adjacent steps reveals it.
    _, A, x, v, c = random_problem(seed, n, np.float32)
    A64, x64, v64 = (a.astype(np.float64) for a in (A, x, v))
    truth = c @ ((1 - np.tanh(A64 @ x64) ** 2) * (A64 @ v64))
    result = directional(lambda A, x: np.tanh(A @ x), [A, x], [None, v], c, complex_step=False)
    assert_within_estimate(result, truth)


@given(seed=seeds)
@settings(max_examples=30, deadline=None)
def test_rounding_of_large_inputs_is_priced_into_the_error(seed):
    # x + t v rounds to ulp(1e6) ~ 1e-10, which moves sin by far more than its own rounding.
    rng = np.random.default_rng(seed)
    x, v, c = 1e6 + rng.normal(size=5), rng.normal(size=5), rng.normal(size=5)
    truth = c @ (np.cos(x) * v)
    result = directional(np.sin, [x], [v], c, complex_step=False)
    assert_within_estimate(result, truth)
    assert result.error < 1e-4 * (np.abs(c) @ np.abs(v))
    exact = directional(np.sin, [x], [v], c)  # the complex step does not round x at all
    assert exact.method == "complex-step" and abs(exact.value - truth) <= 1e-12 * (np.abs(c) @ np.abs(v))


def test_auto_complex_step_is_used_for_analytic_functions():
    _, A, x, v, c = random_problem(1, 8)
    result = directional(lambda x: np.exp(A @ x / 4), [x], [v], c)
    truth = c @ (np.exp(A @ x / 4) * (A @ v) / 4)
    assert result.method == "complex-step"
    assert abs(result.value - truth) <= 1e-14 * (np.abs(c) @ np.abs(np.exp(A @ x / 4) * (A @ v) / 4))
    assert_within_estimate(result, truth)


@pytest.mark.parametrize(
    ("f", "df"),
    [
        (np.abs, np.sign),  # real output for complex input: no complex step possible
        (lambda x: x * np.abs(x), lambda x: 2 * np.abs(x)),  # complex output, but a wrong complex step
    ],
)
def test_auto_complex_step_is_not_used_on_non_analytic_functions(f, df):
    _, _, x, v, c = random_problem(2, 6)
    result = directional(f, [x], [v], c)
    truth = c @ (df(x) * v)
    assert result.method == "richardson"
    assert abs(result.value - truth) <= 1e-10 * (np.abs(c) @ np.abs(df(x) * v))
    assert_within_estimate(result, truth)


def test_auto_complex_step_through_maximum_is_right_whichever_method_wins():
    # np.maximum orders complex numbers by real part first, so away from the kink the
    # complex step follows the active branch; at the kink the two methods disagree.
    x, v, c = np.array([-1.0, 0.5, 0.0, 2.0]), np.array([0.3, -0.7, 1.0, 1.1]), np.ones(4)
    away = directional(lambda x: np.maximum(x[[0, 1, 3]], 0.0) ** 2, [x], [v], c[:3])
    assert abs(away.value - 2 * (0.5 * -0.7 + 2.0 * 1.1)) <= max(away.error, 1e-12)
    forced = directional(lambda x: np.maximum(x, 0.0), [x], [v], c, complex_step=True)
    auto = directional(lambda x: np.maximum(x, 0.0), [x], [v], c)
    central = -0.7 + 1.0 / 2 + 1.1  # the kink at x[2] = 0 contributes the mean of both slopes
    assert abs(forced.value - central) > 0.4  # the complex step picks one branch at the kink
    assert auto.method == "richardson" and abs(auto.value - central) <= 1e-10


def test_x_times_abs_x_rejects_the_wrong_complex_step():
    x, v = np.array([-1.5, 0.5, 2.0]), np.array([1.0, 1.0, 1.0])
    forced = directional(lambda x: x * np.abs(x), [x], [v], np.ones(3), complex_step=True)
    auto = directional(lambda x: x * np.abs(x), [x], [v], np.ones(3))
    truth = np.sum(2 * np.abs(x))
    assert abs(forced.value - truth) > 1  # the complex step alone is silently wrong here
    assert auto.method == "richardson" and abs(auto.value - truth) <= 1e-10


def test_forced_complex_step_errors_when_impossible():
    x, v = np.array([1.0, 2.0]), np.array([1.0, -1.0])
    with pytest.raises(ValueError, match="complex_step=True is impossible: f returned real output"):
        directional(np.abs, [x], [v], complex_step=True)
    with pytest.raises(TypeError, match="complex_step=True is impossible: f raised"):
        directional(lambda x: math.sin(x), [1.0], [1.0], complex_step=True)
    with pytest.raises(ValueError, match="moving argument is complex"):
        directional(np.sin, [x + 0j], [v + 0j], complex_step=True)
    with pytest.raises(ValueError, match="complex output for real input"):
        directional(lambda x: np.exp(1j * x), [x], [v], complex_step=True)


def test_real_to_complex_functions_use_richardson():
    x, v = np.array([0.3, -1.2]), np.array([1.0, 0.5])
    result = directional(lambda x: np.exp(1j * x), [x], [v])
    truth = 1j * np.exp(1j * x) * v
    assert result.method == "richardson"
    np.testing.assert_allclose(result.value, truth, rtol=0, atol=1e-12)
    assert_within_estimate(result, truth)


def test_directional_max_step_bounds_the_probe_points():
    x, v = np.array([1e-4, 2e-4]), np.array([1.0, 1.0])
    seen = []

    def f(x):
        seen.append(x.copy())
        return np.log(x)

    result = directional(f, [x], [v], np.ones(2), max_step=5e-5, complex_step=False)
    assert max(np.max(np.abs(p - x)) for p in seen) <= 5e-5 * (1 + 1e-12)
    assert abs(result.value - np.sum(v / x)) <= 1e-9 * np.sum(v / x)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: directional(np.sin, [np.ones(2)], [np.ones(2), None]), ValueError, "Got 1 args but 2 directions"),
        (lambda: directional(np.sin, [np.ones(2)], [np.ones(3)]), ValueError, r"directions\[0\] of shape \(3,\)"),
        (lambda: directional(np.sin, [np.ones(2)], [None]), ValueError, "all None"),
        (lambda: directional(np.sin, [np.ones(2)], [np.ones(2)], max_step=0), ValueError, "Got max_step=0, but max_step must be"),
        (lambda: directional(np.sin, [np.ones(2)], [np.ones(2)], complex_step="yes"), ValueError, "Got complex_step='yes'"),
        (lambda: directional(np.sin, [np.arange(2)], [np.ones(2)]), ValueError, r"args\[0\] of dtype int64, which cannot move"),
        (lambda: directional(np.sin, [np.ones(2)], [np.ones(2) * 1j]), ValueError, r"complex directions\[0\] for the real"),
        (lambda: directional(np.sin, np.ones(2), [np.ones(2)]), TypeError, "args must be a tuple or list"),
        (lambda: directional(lambda x: (x, x), [np.ones(2)], [np.ones(2)]), ValueError, "pass a cotangent"),
        (lambda: directional(np.sin, [np.ones(2)], [np.ones(2)], np.ones(3)), ValueError, "cotangent does not match"),
    ],
)
def test_directional_rejects_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_arguments_keep_their_own_type_and_precision_inside_f():
    seen = []

    def f(x, s, y):
        seen.append((x.dtype, type(s), type(y)))
        return np.sum(x * s) + y

    x = np.array([1.0, 2.0], dtype=np.float32)
    directions = [np.ones(2, np.float32), np.float32(1.0), 2.0]
    result = directional(f, [x, np.float32(3.0), 0.5], directions, 1.0, complex_step=False)
    assert set(seen) == {(np.dtype(np.float32), np.float32, float)}
    assert 1e-9 < result.error < 1e-2  # float32 arguments: a float32-sized error
    assert_within_estimate(result, 3.0 * 2 + 3.0 + 2.0)


def test_fewer_levels_cost_fewer_evaluations_and_stay_accurate():
    """`levels` trades evaluations for accuracy on expensive functions (the checker uses 3 on large inputs)."""
    x = np.linspace(-1.0, 1.0, 50)
    v = np.cos(np.arange(50.0))
    deep = directional(np.sin, [x], [v], np.ones(50), complex_step=False)
    shallow = directional(np.sin, [x], [v], np.ones(50), complex_step=False, levels=3)
    truth = float(np.sum(np.cos(x) * v))
    assert shallow.evaluations == deep.evaluations - 6
    assert abs(shallow.value - truth) <= shallow.error
    assert abs(shallow.value - truth) < 1e-8 * abs(truth)
    with pytest.raises(ValueError, match="Got levels=1, but levels must be an int >= 2"):
        directional(np.sin, [x], [v], levels=1)


# -- confirmed: a second table at a finer scale ------------------------------------------------------------
def _sin_of_self_power(x):
    y = x**x  # about 4e4 near x = 6: sin(y) turns every 5e-5 in x, far below the first table's steps
    return np.sum(y + np.sin(y) / 2)


def _sin_of_self_power_slope(x, v):
    y = x**x
    return float(np.dot((1 + np.cos(y) / 2) * y * (np.log(x) + 1), v))


@pytest.mark.parametrize("seed", range(4))
def test_confirmed_error_bounds_the_true_error_where_one_table_is_fooled(seed):
    rng = np.random.default_rng(seed)
    x, v = rng.uniform(4.5, 6.0, size=3), rng.uniform(-1, 1, size=3)
    truth = _sin_of_self_power_slope(x, v)
    result = fd.confirmed(_sin_of_self_power, (x,), (v,), complex_step=False)
    assert_within_estimate(result, truth)
    assert result.error < 1e-6 * abs(truth)  # and the finer steps resolve the function: a usable value


def test_one_table_can_be_fooled_where_confirmed_is_not():
    x, v = np.array([3.00803383, 4.9236441, 5.96518055]), np.array([0.3, -0.7, 0.5])
    truth = _sin_of_self_power_slope(x, v)
    one = directional(_sin_of_self_power, (x,), (v,), complex_step=False)
    assert abs(one.value - truth) > 100 * one.error
    assert_within_estimate(fd.confirmed(_sin_of_self_power, (x,), (v,), complex_step=False), truth)


@pytest.mark.parametrize("name", sorted(SMOOTH))
def test_confirmed_costs_one_more_table_on_a_function_the_first_resolves(name):
    f, df = SMOOTH[name]
    x, v = np.array([0.3, -0.7]), np.array([1.0, 0.5])
    one = directional(lambda a: np.sum(f(a)), (x,), (v,), complex_step=False)
    sure = fd.confirmed(lambda a: np.sum(f(a)), (x,), (v,), complex_step=False)
    assert sure.evaluations == 2 * one.evaluations
    assert (sure.value, sure.error) == (one.value, one.error)
    assert_within_estimate(sure, float(np.dot(df(x), v)))


def test_confirmed_given_its_first_table_gives_the_same_answer_without_computing_it_again():
    x, v = np.array([3.00803383, 4.9236441, 5.96518055]), np.array([0.3, -0.7, 0.5])
    calls = []

    def f(a):
        calls.append(1)
        return _sin_of_self_power(a)

    one = directional(f, (x,), (v,), complex_step=False)
    calls.clear()
    alone = fd.confirmed(f, (x,), (v,), complex_step=False)
    everything = len(calls)
    calls.clear()
    given = fd.confirmed(f, (x,), (v,), complex_step=False, first=one)
    assert (given.value, given.error, given.step) == (alone.value, alone.error, alone.step)
    assert len(calls) == everything - one.evaluations == given.evaluations == alone.evaluations - one.evaluations


def _cubic_rounded_to_float32(x):
    return np.sum((x * x * x - 2.0 * x).astype(np.float32).astype(np.float64))  # float64 in and out, float32's noise


def test_a_finer_table_within_a_few_of_its_own_errors_does_not_widen_the_confirmed_error(monkeypatch):
    """A float64 function that rounds at float32 (a backward computing silu' through x.float()): at the finer tables'
    steps rounding dominates, and a table's error estimate, the spread of its entries, is a sample of that noise that
    another table exceeds by a few times. Such a table does not contradict the coarse pair's value, which bounds
    the truth; read as a contradiction (beyond one of its errors), it widened the error to 6 times the value."""
    rng = np.random.default_rng(1)
    x, v = rng.uniform(-2, 2, 4), rng.uniform(-1, 1, 4)
    truth = float(np.dot(3 * x * x - 2.0, v))
    sure = fd.confirmed(_cubic_rounded_to_float32, (x,), (v,), complex_step=False)
    assert_within_estimate(sure, truth)
    assert sure.error < 1e-3 * abs(truth)
    monkeypatch.setattr(fd, "_CONTRADICTS", 1.0)  # one error estimate: the noise reads as a contradiction
    assert fd.confirmed(_cubic_rounded_to_float32, (x,), (v,), complex_step=False).error > abs(truth)


def test_confirmed_keeps_a_complex_step_and_refuses_bad_refinements():
    result = fd.confirmed(lambda a: np.sum(np.sin(a)), (np.array([0.5]),), (np.array([1.0]),))
    assert result.method == "complex-step" and result.evaluations == directional(
        lambda a: np.sum(np.sin(a)), (np.array([0.5]),), (np.array([1.0]),)).evaluations
    with pytest.raises(ValueError, match="Got refinements=-1, but refinements must be an int >= 0"):
        fd.confirmed(np.sin, (1.0,), (1.0,), refinements=-1)


# -- memory on large arguments: each probe point is one new array, f's base output is not kept -------------
def _peak_copies(fn, like):
    """Peak memory NumPy allocated while ``fn`` ran, in copies of the array ``like``."""
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fn()
        return (tracemalloc.get_traced_memory()[1] - before) / like.nbytes
    finally:
        tracemalloc.stop()


def test_a_probe_point_on_a_float64_argument_is_one_new_array_with_the_same_values():
    x = np.random.default_rng(0).uniform(-1, 1, 10**5)
    v = np.random.default_rng(1).uniform(-1, 1, 10**5)
    assert _peak_copies(lambda: fd._moved(x, v, 0.125), x) < 1.5
    assert np.array_equal(fd._moved(x, v, 0.125), (x.astype(np.float64) + 0.125 * v.astype(np.float64)).astype(np.float64))


def test_directional_keeps_no_copy_of_fs_output_at_the_base_point():
    """A probe point, f's output there and the contraction's product are what a probe needs; f's output at
    the base point is read once (its contraction) and let go."""
    x = np.random.default_rng(0).uniform(-1, 1, 10**5)
    u, w = np.ones_like(x), np.random.default_rng(1).uniform(-1, 1, 10**5)
    peak = _peak_copies(lambda: fd.directional(lambda a: 2.0 * a, (x,), (u,), w, levels=3, complex_step=False), x)
    assert peak < 4.5, peak


def _recording(f, seen):
    def g(x):
        seen.append(np.copy(x))
        return f(x)

    return g


def test_a_given_base_value_saves_the_call_at_the_base_point_and_changes_nothing_else():
    rng = np.random.default_rng(4)
    x, v, c = rng.uniform(-2, 2, 50), rng.standard_normal(50), rng.standard_normal(50)
    called, again = [], []
    plain = directional(_recording(np.sin, called), (x,), (v,), c)
    given = directional(_recording(np.sin, again), (x,), (v,), c, base=np.sin(x))
    assert (given.value, given.error, given.step, given.method) == (plain.value, plain.error, plain.step, plain.method)
    assert given.evaluations == plain.evaluations - 1 == len(again)
    assert any(np.array_equal(p, x) for p in called) and not any(np.array_equal(p, x) for p in again)


def test_a_given_base_value_is_not_used_where_the_base_point_has_other_bits():
    # -0.0 + 0 * v is +0.0: the call at the base point does not receive the argument's bits, so f is called there
    # (a base value made from -0.0 would be f's value at another input for f = 1 / x).
    x, v = np.array([-0.0, 1.0, 2.0]), np.array([1.0, 1.0, 1.0])
    seen = []
    plain = directional(np.sin, (x,), (v,), np.ones(3))
    result = directional(_recording(np.sin, seen), (x,), (v,), np.ones(3), base=np.full(3, np.nan))
    assert any(np.array_equal(p, np.array([0.0, 1.0, 2.0])) and not np.signbit(p[0]) for p in seen)
    assert result == plain  # the NaN handed in was never read


# -- float16 inputs at steps below their spacing -------------------------------------------------------------------
# The float16 probe of the real-world corpus: TensorFlow's ndtri in `fan-out` drew "34.5 where the program's gradient
# is 0". A deeper table's steps (2.3e-4) move float16 inputs near 1 (spacing 4.9e-4) by nothing once rounded, and the
# probe that prices the inputs' rounding rounded back onto them too and read 0: a flat table claimed a slope of 0 with
# an error of 3e-10. The probe now moves narrow-float inputs by a few spacings.
F16_X = np.array([0.456, 0.804, 0.9937, 0.955, 0.3806, 0.5913], dtype=np.float16)
F16_V = np.array([-0.438, 0.383, -0.525, 0.338, 0.811, 0.043])


def _square_sum_in_float64(a):
    return float(np.sum(np.asarray(a).astype(np.float64) ** 2))  # float64 arithmetic: only the inputs round


def test_a_table_below_float16_inputs_spacing_does_not_claim_its_flat_slope():
    truth = float(np.sum(2 * F16_X.astype(np.float64) * F16_V))  # 0.487
    d = directional(_square_sum_in_float64, (F16_X,), (F16_V,), max_step=2.3e-4, complex_step=False)
    assert abs(d.value - truth) <= d.error
    assert d.error > abs(truth)  # it resolves nothing at those steps, and says so


def test_a_float16_table_at_steps_that_move_its_inputs_still_resolves_the_slope():
    truth = float(np.sum(2 * F16_X.astype(np.float64) * F16_V))
    d = directional(_square_sum_in_float64, (F16_X,), (F16_V,), complex_step=False)
    assert abs(d.value - truth) <= d.error < 0.25 * abs(truth)  # 0.4856 +- 0.055 against 0.4870
