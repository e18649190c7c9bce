"""The one comparison module: where two values first differ (first_mismatch), and how a place is named in
a message (where / at); and the helpers built on it that walk trees (state's first_change, GG6xx's
first_difference, the numeric checks' tangent_pairs)."""

from types import SimpleNamespace

import numpy as np
import pytest

from gradguard.checker.compare import (
    Mismatch,
    at,
    close_at_leaf_scale,
    close_elementwise,
    close_to_reference,
    exact,
    first_index,
    first_mismatch,
    mismatches,
    where,
    worst_index,
)
from gradguard.checker.tolerances import Tolerance

TOL = Tolerance(rtol=1e-6, atol=1e-9)
NAN, INF = float("nan"), float("inf")


# -- naming the place -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "what, index, text",
    [
        (1, (2, 0), "argument 1 at [2, 0]"),
        (0, (), "argument 0"),  # a scalar argument: no index
        (0, None, "argument 0"),
        (np.int64(3), (np.int64(1),), "argument 3 at [1]"),  # NumPy integers print as plain ones
        ("output", (0, 1, 2), "output at [0, 1, 2]"),
        ("the cotangent", (), "the cotangent"),
        ("x (leaf 1)", (4,), "x (leaf 1) at [4]"),
    ],
)
def test_where_names_an_argument_or_a_value_and_its_element(what, index, text):
    assert where(what, index) == text


def test_at_is_the_suffix_alone():
    assert at((2, 0)) == " at [2, 0]"
    assert at(()) == "" and at(None) == ""
    assert at(np.array([1, 2])) == " at [1, 2]"  # an index from np.argwhere


# -- the search -------------------------------------------------------------------------------------
def test_first_index_in_c_order_and_for_0d():
    bad = np.zeros((2, 3), dtype=bool)
    bad[1, 0] = bad[0, 2] = True
    assert first_index(bad) == (0, 2)
    assert first_index(np.zeros(4, dtype=bool)) is None
    assert first_index(np.array(True)) == ()
    assert first_index(np.array(False)) is None
    assert all(type(j) is int for j in first_index(bad))


def test_worst_index_is_the_largest_excess():
    assert worst_index(np.array([[0.0, 3.0], [5.0, -1.0]])) == (1, 0)
    assert worst_index(np.float64(2.0)) == ()


def test_first_mismatch_returns_key_index_and_both_values():
    got = np.array([[1.0, 2.0], [3.0, 4.0]])
    want = got.copy()
    want[1, 1] = 5.0
    found = first_mismatch([("a", got, got), ("b", got, want)], exact)
    assert found == Mismatch("b", (1, 1), 4.0, 5.0)
    key, index, g, w = found  # unpacks as the tuples it replaces
    assert (key, index, g, w) == ("b", (1, 1), 4.0, 5.0)
    assert type(g) is float  # Python scalars by default ...
    raw = first_mismatch([("b", got, want)], exact, as_python=False)
    assert isinstance(raw.got, np.float64) and raw.got == 4.0  # ... NumPy scalars on request


def test_first_mismatch_none_when_everything_agrees():
    x = np.arange(6.0).reshape(2, 3)
    assert first_mismatch([(0, x, x.copy()), (1, x[0], x[0].copy())], exact) is None
    assert list(mismatches([], exact)) == []


def test_scalars_and_0d_arrays_have_the_empty_index():
    assert first_mismatch([(0, 1.0, 2.0)], exact) == Mismatch(0, (), 1.0, 2.0)
    assert first_mismatch([(0, np.array(1.0), np.array(2.0))], exact) == Mismatch(0, (), 1.0, 2.0)
    assert first_mismatch([(0, np.float32(1.5), np.float32(1.5))], exact) is None


def test_complex_elements_compare_as_complex():
    got = np.array([1 + 1j, 2 + 0j])
    want = np.array([1 + 1j, 2 + 1e-3j])
    found = first_mismatch([(0, got, want)], exact)
    assert found == Mismatch(0, (1,), 2 + 0j, 2 + 1e-3j)
    assert first_mismatch([(0, got, want)], close_elementwise(Tolerance(rtol=1e-2, atol=0.0))) is None


def test_mismatches_lists_every_one_in_order_and_reads_pairs_lazily():
    def pairs():
        yield 0, np.array([1.0, 0.0, 1.0]), np.zeros(3)
        raise AssertionError("a pair after the first mismatch was prepared")

    assert first_mismatch(pairs(), exact) == Mismatch(0, (0,), 1.0, 0.0)
    assert [m.index for m in mismatches([(0, np.array([1.0, 0.0, 1.0]), np.zeros(3))], exact)] == [(0,), (2,)]


# -- what agrees: NaN and infinities as each check reads them today ----------------------------------
def test_exact_nan_equals_nan_and_any_other_change_counts():
    a = np.array([NAN, 1.0, INF, 0.0])
    b = np.array([NAN, 1.0, INF, -0.0])
    assert first_mismatch([(0, a, b)], exact) is None  # NaN == NaN, inf == inf, 0.0 == -0.0
    found = first_mismatch([(0, np.array([NAN]), np.array([1.0]))], exact)
    assert found.index == (0,) and np.isnan(found.got) and found.want == 1.0
    assert first_mismatch([(0, np.array([1.0]), np.array([1.0 + 1e-15]))], exact) is not None
    assert first_mismatch([(0, np.array([1, 2]), np.array([1, 3]))], exact) == Mismatch(0, (1,), 2, 3)  # integers


def test_close_elementwise_scales_by_the_larger_element():
    agree = close_elementwise(TOL)
    assert first_mismatch([(0, np.array([1e6, 1.0]), np.array([1e6 + 0.5, 1.0]))], agree) is None
    assert first_mismatch([(0, np.array([1e6, 1.0]), np.array([1e6, 1.0 + 1e-3]))], agree).index == (1,)
    assert first_mismatch([(0, np.array([NAN]), np.array([NAN]))], agree) is None


def test_close_to_reference_scales_by_the_reference_element():
    agree = close_to_reference(Tolerance(rtol=0.1, atol=0.0))
    assert first_mismatch([(0, np.array([1.05]), np.array([1.0]))], agree) is None
    assert first_mismatch([(0, np.array([1.0]), np.array([1.15]))], agree) is not None
    assert first_mismatch([(0, np.array([INF, NAN]), np.array([INF, NAN]))], agree) is None


def test_close_to_reference_on_real_arrays_is_the_complex_arithmetic_to_the_bit():
    """Real arrays skip the complex copies; the verdicts are those of the complex formula on every dtype
    mix, at the values where the two could part: NaN, infinities, signed zeros, subnormals, huge integers."""
    tol = Tolerance(rtol=1e-3, atol=1e-9)
    agree = close_to_reference(tol)

    def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            diff = np.abs(a.astype(np.complex128) - b.astype(np.complex128))
            return (diff <= tol.atol + tol.rtol * np.abs(b)) | (a == b) | (np.isnan(a) & np.isnan(b))

    rng = np.random.default_rng(0)
    special = np.array([0.0, -0.0, NAN, INF, -INF, 5e-324, -5e-324, 1e308, -1e308, 1.0, 1.0 + 1e-4, 1.0 + 1e-2])
    for dtypes in [(np.float64, np.float64), (np.float32, np.float32), (np.float32, np.float64), (np.float16, np.float64),
                   (np.int64, np.float64), (np.int64, np.int64), (np.bool_, np.float64), (np.uint8, np.float32)]:
        for _ in range(20):
            with np.errstate(all="ignore"):
                a = rng.choice(special, 64).astype(dtypes[0])
                b = (rng.choice(special, 64) * rng.choice([1.0, -1.0, 1.0 + 1e-5], 64)).astype(dtypes[1])
                a[::3] = b[::3].astype(dtypes[0]) if np.dtype(dtypes[0]).kind == "f" else a[::3]
            assert np.array_equal(agree(a, b), reference(a, b)), dtypes
    big = np.array([2**62 + 1, -(2**63)], dtype=np.int64)
    assert np.array_equal(agree(big, big - 1), reference(big, big - 1))


def test_close_at_leaf_scale_forgives_cancellation_against_the_largest_element():
    agree = close_at_leaf_scale(TOL)
    got, want = np.array([1e6, 1e-4]), np.array([1e6, 2e-4])  # 1e-4 off, within 1e-6 * 1e6
    assert first_mismatch([(0, got, want)], agree) is None
    assert first_mismatch([(0, got, want)], close_elementwise(TOL)) is not None


@pytest.mark.parametrize(
    "got, want, agree_mode, nan_mode",
    [
        (NAN, NAN, True, True),
        (INF, INF, True, True),  # equal values agree, infinite ones too
        (INF, NAN, True, False),  # "nan": only two NaNs agree among non-finite pairs
        (INF, -INF, True, False),
        (NAN, 1.0, False, False),
        (1.0, INF, False, False),
    ],
)
def test_close_at_leaf_scale_nonfinite_readings(got, want, agree_mode, nan_mode):
    pair = [(0, np.array([got]), np.array([want]))]
    assert (first_mismatch(pair, close_at_leaf_scale(TOL)) is None) is agree_mode
    assert (first_mismatch(pair, close_at_leaf_scale(TOL, nonfinite="nan")) is None) is nan_mode


def test_close_at_leaf_scale_nan_reading_takes_its_scale_from_the_finite_elements():
    """A NaN or an infinity elsewhere in the leaf must neither make equal finite elements disagree (a false
    GG601 "differs under jit: 0.0 under jit, 0.0 without it") nor make different ones agree."""
    agree = close_at_leaf_scale(TOL, nonfinite="nan")
    assert first_mismatch([(0, np.array([NAN, 1.0]), np.array([NAN, 1.0]))], agree) is None
    assert first_mismatch([(0, np.array([-INF, 1.0]), np.array([-INF, 1.0]))], agree) is None
    assert first_mismatch([(0, np.array([INF, 1.0]), np.array([INF, 5.0]))], agree) == Mismatch(0, (1,), 1.0, 5.0)
    assert first_mismatch([(0, np.array([NAN, 1.0]), np.array([NAN, 5.0]))], agree) == Mismatch(0, (1,), 1.0, 5.0)
    assert first_mismatch([(0, np.array([-INF, 1.0]), np.array([INF, 1.0]))], agree).index == (0,)


def test_close_at_leaf_scale_one_nan_does_not_widen_every_bound_in_agree_mode():
    got, want = np.array([NAN, 1.0]), np.array([NAN, 2.0])
    assert first_mismatch([(0, got, want)], close_at_leaf_scale(TOL)) == Mismatch(0, (1,), 1.0, 2.0)


def test_close_at_leaf_scale_rejects_an_unknown_reading():
    with pytest.raises(ValueError, match="nonfinite"):
        close_at_leaf_scale(TOL, nonfinite="ignore")


# -- the tree walkers built on it ------------------------------------------------------------------
def test_state_first_change_names_the_leaf_and_element_of_nested_tuples():
    from gradguard.checker.checks._state import first_change

    before = (np.zeros(2), (np.zeros((2, 2)), 1.0))
    after = (np.zeros(2), (np.array([[0.0, 0.0], [3.0, 0.0]]), 1.0))
    change = first_change(before, after)
    assert (change.where, change.before, change.after) == (" (leaf 1) at [1, 0]", "0", "3")
    # NumPy scalars are shown as the state checks always have: to 6 significant digits (a Python float's
    # short repr would be shown in full).
    assert first_change(np.array([1.2345678]), np.array([2.0])).before == "1.23457"
    assert first_change(np.array([NAN, 1.0]), np.array([NAN, 1.0])) is None  # exact: NaN is unchanged
    assert first_change(np.array([1.0]), np.array([1.0 + 1e-12]), TOL) is None  # within the tolerance
    assert first_change(np.array([1.0]), np.array([1.0 + 1e-12])).where == " at [0]"
    assert first_change(np.array(1.0), np.array(2.0)).where == ""  # 0-d: no index
    assert first_change((1.0,), (1.0, 2.0)).where == ""  # a different structure


def test_gg6xx_first_difference_walks_nested_tuples_by_path():
    from gradguard.checker.checks.compose import first_difference

    case = SimpleNamespace(tol=TOL)
    got = (np.zeros(2), (np.zeros(3), None))
    want = (np.zeros(2), (np.array([0.0, 0.0, 1.0]), None))
    assert first_difference(got, want, case) == ("[1][0]", (2,), 0.0, 1.0)
    assert first_difference(got, got, case) is None
    assert first_difference((None,), (np.array([0.0, 2.0]),), case) == ("[0]", (1,), 0.0, 2.0)  # None counts as zero
    assert first_difference((np.zeros(2),), (np.zeros(3),), case) == ("[0]", (), "shape (2,)", "shape (3,)")


def test_tangent_pairs_read_none_as_zeros_and_skip_non_numbers():
    from gradguard.checker.checks._vjp import tangent_pairs

    case = SimpleNamespace(args=(np.ones((2, 2)), 3.0, np.ones(2)), diff_positions=(0, 2))
    pairs = list(tangent_pairs(case, (None, None, np.array([1.0, 2.0])), (np.eye(2), None, 1.0)))
    assert [i for i, _, _ in pairs] == [0, 2]
    assert np.array_equal(pairs[0][1], np.zeros((2, 2))) and np.array_equal(pairs[1][2], np.ones(2))  # broadcast
    assert first_mismatch(pairs, exact) == Mismatch(0, (0, 0), 0.0, 1.0)
    assert list(tangent_pairs(case, (np.array(["a", "b"]), None, None), (None, None, None))) == []
