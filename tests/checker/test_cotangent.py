"""Test the tester: each cotangent check (GG301, GG302, GG303) fails a broken rule with its exact message and
passes the correct twin."""

import re

import numpy as np
import pytest

from gradguard.checker import arrays, check, rrule

# Broken rules divide by zero on purpose; their warnings are noise here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def findings(rule, check_id, **kwargs):
    report = check(rule, select=[check_id], **kwargs)
    return [f for f in report.findings if f.check_id == check_id]


def assert_passes_every_isolation_check(rule):
    report = check(rule, ignore=["GG5", "GG6"])  # the whole-program families have their own tests
    assert report.passed, [(f.check_id, f.message) for f in report.findings]


def addone_(a):
    a += 1
    return a.sum()


def square(x):
    return x * x


def double(x):
    return 2 * x


def sincos(x):
    return np.sin(x), np.cos(x)


def plus_one(x):
    return x + 1


# -- GG301 -----------------------------------------------------------------------------------------
@rrule(addone_, arrays(shape=(3,)), mutates=(0,))
def addone_ones(a):
    y = addone_(a)
    return y, lambda ybar: (np.ones(a.shape),)


@rrule(addone_, arrays(shape=(3,)), mutates=(0,))
def addone_fixed(a):
    y = addone_(a)
    return y, lambda ybar: (None,) if ybar is None else (np.full(a.shape, ybar),)


@rrule(square, arrays(shape=(3,)))
def square_offset(x):
    return x * x, lambda ybar: (None,) if ybar is None else (2 * x * ybar + 0.5,)


def test_gg301_ones_for_a_zero_cotangent():
    (f,) = findings(addone_ones, "GG301")
    assert f.message == (
        "the pullback of addone_ones must return zero tangents for a zero cotangent, "
        "but the tangent for argument 0 at [0] is 1.0."
    )
    assert f.location == "argument 0 at [0]"
    assert "np.full(x.shape, ybar)" in f.fix


def test_gg301_constant_term():
    (f,) = findings(square_offset, "GG301")
    assert f.message.endswith("but the tangent for argument 0 at [0] is 0.5.")


def test_gg301_correct_twin_passes():
    assert findings(addone_fixed, "GG301") == []
    assert_passes_every_isolation_check(addone_fixed)


# -- GG302 -----------------------------------------------------------------------------------------
@rrule(square, arrays(shape=(3,)))
def square_no_none(x):
    return x * x, lambda ybar: (2 * x * ybar,)


@rrule(square, arrays(shape=(3,)))
def square_ok(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        return (2 * x * ybar,)

    return x * x, pullback


def test_gg302_pullback_raises_on_none():
    (f,) = findings(square_no_none, "GG302")
    assert re.fullmatch(
        r"the pullback of square_no_none must accept None as the cotangent \(an unused output\), but it raised "
        r"TypeError: unsupported operand type\(s\) for \*: '\w+' and 'NoneType'\.",
        f.message,
    ), f.message
    assert f.fix == (
        "Treat None as a zero cotangent (ChainRules' NoTangent, Zygote's nothing): start the pullback with "
        "`if ybar is None: return (None,)`."
    )
    assert f.severity == "warning"


def test_gg302_ones_for_none():
    (f,) = findings(addone_ones, "GG302")
    assert f.message == (
        "the pullback of addone_ones must return zero or None tangents for None as the cotangent, "
        "but the tangent for argument 0 at [0] is 1.0."
    )


@rrule(sincos, arrays(shape=(3,)))
def sincos_no_none(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        s, c = ybar
        return (s * np.cos(x) - c * np.sin(x),)

    return sincos(x), pullback


@rrule(sincos, arrays(shape=(3,)))
def sincos_ok(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        s, c = ybar
        total = np.zeros_like(x)
        if s is not None:
            total = total + s * np.cos(x)
        if c is not None:
            total = total - c * np.sin(x)
        return (total,)

    return sincos(x), pullback


def test_gg302_none_for_one_output_of_a_tuple():
    (f,) = findings(sincos_no_none, "GG302")
    assert re.fullmatch(
        r"the pullback of sincos_no_none must accept None as the cotangent of output 0 \(an unused output\), "
        r"but it raised TypeError: unsupported operand type\(s\) for \*: 'NoneType' and 'float'\.",
        f.message,
    ), f.message


def test_gg302_correct_twins_pass():
    assert findings(square_ok, "GG302") == []
    assert findings(sincos_ok, "GG302") == []
    assert_passes_every_isolation_check(square_ok)
    assert_passes_every_isolation_check(sincos_ok)


# -- GG303 -----------------------------------------------------------------------------------------
@rrule(double, arrays(shape=(3,)))
def double_in_place(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        ybar *= 2
        return (ybar,)

    return 2 * x, pullback


@rrule(double, arrays(shape=(3,)))
def double_ok(x):
    return 2 * x, lambda ybar: (None,) if ybar is None else (2 * ybar,)


@rrule(plus_one, arrays(shape=(3,)))
def plus_one_returns_ybar(x):
    return x + 1, lambda ybar: (ybar,)  # aliasing the cotangent is fine; writing into it is not


def test_gg303_pullback_writes_into_ybar():
    (f,) = findings(double_in_place, "GG303")
    m = re.fullmatch(
        r"the pullback of double_in_place modified the cotangent it was given: the cotangent at \[(\d)\] was "
        r"(\S+) before the call and (\S+) after\.",
        f.message,
    )
    assert m, f.message
    assert float(m[3]) == pytest.approx(2 * float(m[2]))
    assert f.fix.startswith("Treat ybar as read-only")


def test_gg303_correct_twins_pass():
    assert findings(double_ok, "GG303") == []
    assert findings(plus_one_returns_ybar, "GG303") == []
    assert_passes_every_isolation_check(double_ok)


def test_gg303_skips_scalar_cotangents():
    report = check(addone_fixed, select=["GG303"])
    assert report.rules[0].checks_skipped == [{"id": "GG303", "reason": "the cotangent is a scalar, which a pullback cannot modify"}]
