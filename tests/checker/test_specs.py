"""Rule specs fail eagerly, at decoration time, quoting the bad value."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradguard.checker import SpecError, arrays, constant, floats, rrule
from gradguard.checker.specs import RuleSpec


def square(x):
    return x * x


def mul(a, b):
    return a * b


def test_rrule_returns_a_callable_spec():
    @rrule(square, arrays(shape=(3,)), name="sq", rtol=1e-3)
    def sq(x):
        return x * x, lambda ybar: (2 * x * ybar,)

    assert isinstance(sq, RuleSpec)
    assert sq.name == "sq" and sq.rtol == 1e-3 and sq.nargs == 1
    y, pb = sq(np.array([1.0, 2.0, 3.0]))
    assert np.array_equal(y, [1.0, 4.0, 9.0])
    assert sq.source_file.endswith("test_specs.py") and sq.source_lines[1] > sq.source_lines[0]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mutates": (3,)}, "Got mutates=(3,), but the rule takes 1 argument(s), so position 3 does not exist."),
        ({"mutates": "0"}, "Got mutates='0', but mutates must be a tuple of argument positions, e.g. mutates=(0,)."),
        ({"nondiff": (-1,)}, "Got nondiff=(-1,), but -1 is not a non-negative argument position."),
        ({"rtol": -1.0}, "Got rtol=-1.0, but rtol must be a finite number >= 0."),
        ({"atol": float("nan")}, "Got atol=nan, but atol must be a finite number >= 0."),
        ({"name": ""}, "Got name='', but name must be a non-empty string."),
    ],
)
def test_bad_options_fail_at_decoration_time(kwargs, message):
    with pytest.raises(SpecError) as err:
        rrule(square, arrays(shape=(3,)), **kwargs)
    assert str(err.value) == message


def test_spec_count_must_match_the_primal():
    with pytest.raises(SpecError, match=r"The primal mul takes 2 required argument\(s\), but 1 spec\(s\) were given"):
        rrule(mul, arrays(shape=(3,)))


def test_specs_must_be_strategies():
    with pytest.raises(SpecError, match=r"Got 3 as the spec of argument 0, but specs must be Hypothesis strategies"):
        rrule(square, 3)


def test_either_per_argument_specs_or_args():
    with pytest.raises(SpecError, match="not both"):
        rrule(square, arrays(), args=st.tuples(arrays()))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dtype": "int32"}, "Got dtype='int32', but differentiable arrays must be float or complex."),
        ({"dtype": "nonsense"}, "Got dtype='nonsense', which NumPy does not know."),
        ({"shape": (2, -1)}, "Got shape=(2, -1), but a shape must be a tuple of non-negative ints."),
        ({"min_value": 2.0, "max_value": 1.0}, "Got min_value=2.0 > max_value=1.0; swap them."),
    ],
)
def test_bad_array_specs(kwargs, message):
    with pytest.raises(SpecError) as err:
        arrays(**kwargs)
    assert str(err.value).startswith(message)


def test_constant_positions_are_nondiff():
    spec = rrule(pow, arrays(shape=(2,)), constant(3))(lambda x, n: (x**n, lambda g: (n * x ** (n - 1) * g, None)))
    assert spec.nondiff == frozenset({1})


@settings(max_examples=30, database=None)
@given(arrays(shape=st.sampled_from([(2,), (3, 2)]), dtype="float32", min_value=-1.0, max_value=2.0))
def test_arrays_respect_shape_dtype_and_bounds(x):
    assert x.shape in [(2,), (3, 2)] and x.dtype == np.float32
    assert np.all(x >= -1.0) and np.all(x <= 2.0)


@settings(max_examples=5, database=None)
@given(arrays(shape=(1000,), min_value=0.5, max_value=1.5))
def test_large_arrays_are_filled_from_a_seed_and_vary(x):
    assert x.shape == (1000,) and np.all((x >= 0.5) & (x <= 1.5))
    assert np.unique(x).size > 900  # not a constant fill


@settings(max_examples=20, database=None)
@given(arrays(shape=(3,), dtype="complex128", min_value=-1, max_value=1), floats(-2.0, 2.0))
def test_complex_arrays_and_floats(z, f):
    assert z.dtype == np.complex128 and np.all(np.abs(z.real) <= 1) and np.all(np.abs(z.imag) <= 1)
    assert isinstance(f, float) and -2 <= f <= 2


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_float32_bounds_that_float32_cannot_hold_exactly_draw_the_float32_values_inside_them(data):
    # Hypothesis refuses a float32 bound it cannot represent (1e-4 is not a float32); the spec takes the float32
    # values inside the declared range instead of failing at the first draw.
    x = data.draw(arrays(shape=(4,), dtype="float32", min_value=-1e-4, max_value=1e-4))
    assert x.dtype == np.float32
    assert np.all(x >= -1e-4) and np.all(x <= 1e-4)


def test_a_float32_range_that_holds_no_float32_value_fails_at_declaration():
    with pytest.raises(SpecError, match=r"^Got min_value=1e-46, max_value=1\.1e-46 for float32 elements, but no finite "
                                        r"float32 value lies between them; widen the bounds or use float64\.$"):
        arrays(dtype="float32", min_value=1e-46, max_value=1.1e-46)


def test_an_array_spec_builds_the_strategy_of_each_drawn_shape_once(monkeypatch):
    """Each draw asks for the strategy of the shape drawn: building and validating it anew every time cost as much
    as drawing a small array's elements."""
    from gradguard.checker import specs

    built = []
    real = specs.hnp.arrays
    monkeypatch.setattr(specs.hnp, "arrays", lambda dtype, shape, **kw: built.append(shape) or real(dtype, shape, **kw))
    spec = arrays(shape=st.sampled_from([(2,), (3,)]))
    shapes = set()

    @settings(max_examples=40, database=None, deadline=None)
    @given(spec)
    def draw(a):
        assert a.shape in ((2,), (3,)) and np.all(np.abs(a) <= 10)
        shapes.add(a.shape)

    draw()
    assert shapes == {(2,), (3,)}
    assert sorted(built) == [(2,), (3,)]


# -- a spec's own function raising while an input is drawn ----------------------------------------------------------
# The real-world corpus's inverse rule filters its draws with np.linalg.inv, which refuses float16 matrices: the
# TypeError came out of the search as "internal error in the checks", a bug of gradguard's, where the spec raised.
def _invertible(a):
    np.linalg.inv(a)  # TypeError for a float16 matrix: NumPy's linalg takes no float16
    return True


def _inv(a):
    return np.linalg.inv(a)


@rrule(_inv, arrays(shape=(2, 2), dtype="float16").filter(_invertible))
def inv_f16_rrule(a):
    ainv = np.linalg.inv(a.astype(np.float32)).astype(a.dtype)
    return ainv, lambda g: (-ainv.T @ g @ ainv.T,)


def test_a_spec_that_raises_while_drawing_is_a_spec_error_naming_its_function():
    from gradguard.checker import check

    result = check(inv_f16_rrule, seed=0).rules[0]
    assert result.verdict == "error" and result.error["type"] == "SpecError", result.error
    assert result.error["message"] == (
        "could not draw inputs for inv_f16_rrule: its argument specs raised TypeError: array type float16 is "
        f"unsupported in linalg (in _invertible (test_specs.py:{_invertible.__code__.co_firstlineno + 1})). Fix the "
        "function the specs call (a .filter, .map or .flatmap), or the spec whose values it cannot take."
    )


def test_a_check_that_raises_is_still_an_internal_error(monkeypatch):
    """The twin: the same exception raised by a check on a drawn input is gradguard's own bug, and says so."""
    from dataclasses import replace

    from gradguard.checker import check
    from gradguard.checker import checks as registry

    def broken(case):
        raise TypeError("array type float16 is unsupported in linalg")

    monkeypatch.setitem(registry.CHECKS, "GG101", replace(registry.CHECKS["GG101"], fn=broken))
    result = check(square_f32_rrule, seed=0, select=["GG101"]).rules[0]
    assert result.verdict == "error" and result.error["type"] == "InternalError", result.error
    assert result.error["message"] == ("internal error in check GG101 on rule square_f32_rrule: TypeError: array type "
                                       "float16 is unsupported in linalg")


@rrule(square, arrays(shape=(2,), dtype="float32"))
def square_f32_rrule(x):
    return x * x, lambda g: (2 * x * g,)
