"""The tree helpers: the real inner product the checks compare tangents with."""

import tracemalloc

import numpy as np
import pytest

from gradguard.checker.trees import inner


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_inner_of_real_arrays_is_the_complex_formula_exactly(dtype) -> None:
    rng = np.random.default_rng(0)
    for shape in [(7,), (3, 5), (1000, 3), (4, 1, 6)]:
        a = (rng.standard_normal(shape) * 100).astype(dtype)
        b = rng.standard_normal(shape)
        want = float(np.sum(np.real(np.conj(np.asarray(a, dtype=np.complex128)) * np.asarray(b, dtype=np.complex128))))
        assert inner(a, b) == want
        assert inner((a.T, None), (b.T, a.T)) == float(np.sum(np.real(np.asarray(a.T, dtype=np.complex128) * b.T)))


def test_inner_of_real_arrays_makes_no_complex_copies() -> None:
    a, b = np.random.default_rng(0).uniform(-1, 1, (2, 10**5))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        inner(a, b)
        peak = (tracemalloc.get_traced_memory()[1] - before) / a.nbytes
    finally:
        tracemalloc.stop()
    assert peak < 1.5, peak  # the products only; complex128 copies of both arrays would be 4 copies


def test_inner_with_a_complex_side_conjugates_the_first() -> None:
    a, b = np.array([1 + 2j, 3 - 1j]), np.array([2 - 1j, 1 + 1j])
    assert inner(a, b) == float(np.sum(np.real(np.conj(a) * b)))
    assert inner(np.array([1.0, 2.0]), b) == 4.0


def test_narrow_floats_are_the_floats_below_float64_and_complex128():
    from gradguard.checker.trees import is_narrow_float

    narrow = [np.zeros(2, np.float16), np.float32(1.0), np.zeros(2, np.complex64)]
    wide = [np.zeros(2), np.complex128(1j), np.zeros(2, np.int32), 1.0, None, [np.float32(1.0)]]
    assert [is_narrow_float(x) for x in narrow] == [True] * 3
    assert [is_narrow_float(x) for x in wide] == [False] * 6


def test_widened_makes_floats_float64_and_leaves_the_rest():
    from gradguard.checker.trees import widened

    assert widened(np.array([1.5], np.float16)).dtype == np.float64
    assert widened(np.complex64(1j)).dtype == np.complex128
    ints = np.arange(3)
    assert widened(ints) is ints and widened(None) is None and widened("eq") == "eq"
