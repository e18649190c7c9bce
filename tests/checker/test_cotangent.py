"""Test the tester: each cotangent check (GG301, GG302, GG303) fails a broken rule with its exact message and
passes the correct twin."""

import importlib.util
import re

import numpy as np
import pytest
from hypothesis import strategies as st

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
        "but the tangent for argument 0 (a) at [0] is 1.0."
    )
    assert f.location == "argument 0 at [0]"
    assert "np.full(x.shape, ybar)" in f.fix


def test_gg301_constant_term():
    (f,) = findings(square_offset, "GG301")
    assert f.message.endswith("but the tangent for argument 0 (x) at [0] is 0.5.")


def test_gg301_correct_twin_passes():
    assert findings(addone_fixed, "GG301") == []
    assert_passes_every_isolation_check(addone_fixed)


# -- GG302 -----------------------------------------------------------------------------------------
# Rules written for engines that pass None to an unused output's pullback declare unused_cotangent="none".
@rrule(square, arrays(shape=(3,)), unused_cotangent="none")
def square_no_none(x):
    return x * x, lambda ybar: (2 * x * ybar,)


@rrule(square, arrays(shape=(3,)), unused_cotangent="none")
def square_ok(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        return (2 * x * ybar,)

    return x * x, pullback


# The same pullback as square_no_none, written for engines that pass zeros (the default for NumPy rules).
@rrule(square, arrays(shape=(3,)))
def square_plain(x):
    return x * x, lambda ybar: (2 * x * ybar,)


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
    assert f.severity == "error"
    assert not check(square_no_none, select=["GG302"]).passed


def test_gg302_ones_for_none():
    (f,) = findings(addone_ones, "GG302", unused_cotangent="none")
    assert f.message == (
        "the pullback of addone_ones must return zero or None tangents for None as the cotangent, "
        "but the tangent for argument 0 (a) at [0] is 1.0."
    )


SKIPPED_UNDER_ZEROS = (
    "{name} is checked under unused_cotangent='zeros': the engines it is written for pass zeros to an unused "
    "output's pullback (GG301 checks those), never None. Declare unused_cotangent=\"none\" on the rule (or "
    "--unused-cotangent none for the project) when it must accept None"
)


def test_gg302_does_not_run_where_none_cannot_arrive():
    """A normally written NumPy rule is checked under the default convention, "zeros": GG302 is listed among
    the skipped checks with the reason, and the rule passes."""
    result = check(square_plain, ignore=["GG5", "GG6"]).rules[0]
    assert result.findings == [] and result.verdict == "pass"
    assert {"id": "GG302", "reason": SKIPPED_UNDER_ZEROS.format(name="square_plain")} in result.checks_skipped
    assert "GG302" not in result.checks_run


def test_gg302_project_default_none_applies_to_undeclared_rules_only():
    (f,) = findings(square_plain, "GG302", unused_cotangent="none")
    assert f.severity == "error" and f.message.startswith("the pullback of square_plain must accept None")
    report = check(square_plain, select=["GG302"], unused_cotangent="none")
    assert report.settings["unused_cotangent"] == "none"

    @rrule(square, arrays(shape=(3,)), unused_cotangent="zeros")
    def square_declared_zeros(x):
        return x * x, lambda ybar: (2 * x * ybar,)

    # The rule's own declaration wins over the project's default.
    assert findings(square_declared_zeros, "GG302", unused_cotangent="none") == []


def test_unused_cotangent_is_validated_eagerly():
    from gradguard.checker.errors import SpecError, UsageError

    with pytest.raises(SpecError, match=r"Got unused_cotangent='zero', but unused_cotangent must be 'zeros'"):
        rrule(square, arrays(shape=(3,)), unused_cotangent="zero")
    with pytest.raises(UsageError, match=r"Got unused_cotangent='nothing'"):
        check(square_plain, unused_cotangent="nothing")


def test_jax_rules_default_to_zeros():
    import jax

    from gradguard.checker import jax_rule
    from gradguard.checker.contexts._matrix import engines_for

    @jax.custom_vjp
    def twice(x):
        return 2.0 * x

    twice.defvjp(lambda x: (2.0 * x, None), lambda _, g: (2.0 * g,))
    rule = jax_rule(twice, arrays(shape=(3,)))
    assert rule.unused_cotangent == "zeros" and "tape[none]" not in engines_for(rule)
    assert jax_rule(twice, arrays(shape=(3,)), unused_cotangent="none").unused_cotangent == "none"


def test_cli_unused_cotangent_option(tmp_path):
    from click.testing import CliRunner

    from gradguard.checker.cli import main

    module = tmp_path / "plain.py"
    module.write_text(
        "from gradguard import arrays, rrule\n\n"
        "def square(x):\n    return x * x\n\n"
        "@rrule(square, arrays(shape=(3,)))\n"
        "def square_rrule(x):\n    return x * x, lambda ybar: (2 * x * ybar,)\n"
    )
    run = CliRunner().invoke
    assert run(main, ["check", str(module), "--select", "GG302"]).exit_code == 0
    failed = run(main, ["check", str(module), "--select", "GG302", "--unused-cotangent", "none"])
    assert failed.exit_code == 1 and "GG302" in failed.output
    assert run(main, ["check", str(module), "--unused-cotangent", "nothing"]).exit_code == 2


def test_the_safety_matrix_follows_the_convention():
    from gradguard.checker.contexts import safety_matrix

    torch = ["torch"] if importlib.util.find_spec("torch") else []  # a column where PyTorch is installed
    engines = safety_matrix(square_plain, contexts=["output-unused"])["engines"]
    assert engines == ["tape[zero]", "tape[skip]", "jax", *torch]
    m = safety_matrix(square_no_none, contexts=["output-unused"])
    assert m["engines"] == ["tape[zero]", "tape[none]", "tape[skip]", "jax", *torch]
    cell = next(c for c in m["cells"] if c["engine"] == "tape[none]")
    assert cell["status"] == "raised" and "NoneType" in cell["message"]


@rrule(sincos, arrays(shape=(3,)), unused_cotangent="none")
def sincos_no_none(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        s, c = ybar
        return (s * np.cos(x) - c * np.sin(x),)

    return sincos(x), pullback


@rrule(sincos, arrays(shape=(3,)), unused_cotangent="none")
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


@rrule(sincos, arrays(shape=(3,), elements=st.just(0.0)), unused_cotangent="none")
def sincos_nan_for_zeros(x):
    # The None path skips the cosine's term; the zeros path multiplies it by 1/x, inf at 0: 0 * inf = NaN.
    def pullback(ybar):
        if ybar is None:
            return (None,)
        s, c = ybar
        total = np.zeros_like(x) if s is None else s * np.cos(x)
        if c is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                total = total - c * (np.sin(x) / x) * x
        return (total,)

    return sincos(x), pullback


def test_gg302_a_finite_none_against_non_finite_zeros_says_only_that_they_differ():
    """GG302 establishes that None and zeros give different tangents; where the zeros' tangent is NaN and the
    None's a number, the message does not present NaN as the expected value."""
    (f,) = findings(sincos_nan_for_zeros, "GG302")
    assert f.message == (
        "the pullback of sincos_nan_for_zeros must give the same tangents for None as the cotangent of output 1 as "
        "for zeros there, but the tangent for argument 0 (x) at [0] is 1.0 with None and nan with zeros."
    )
    assert f.expected == "the same tangent for None and for zeros"
    assert f.actual == "1.0 with None, nan with zeros"
    assert f.severity == "error"


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


def mean(x):
    return np.mean(x)


@rrule(mean, arrays(shape=(3,)))
def mean_divides_its_cotangent(x):
    def pullback(dout):
        dout *= 1 / x.size  # a textbook's time-averaged loss: harmless on a float, not on a 0-d array
        return (np.full(x.shape, dout),)

    return mean(x), pullback


@rrule(mean, arrays(shape=(3,)))
def mean_ok(x):
    return mean(x), lambda dout: (np.full(x.shape, dout / x.size),)


def test_gg303_judges_a_scalar_cotangent_as_engines_hand_it_over_a_0d_array():
    (f,) = findings(mean_divides_its_cotangent, "GG303")
    m = re.fullmatch(
        r"the pullback of mean_divides_its_cotangent modified the cotangent it was given: the cotangent was (\S+) "
        r"before the call and (\S+) after\. The output is a scalar, and engines hand its cotangent over as a 0-d "
        r"array \(PyTorch's 0-d tensor, through \.numpy\(\)\), which this pullback writes into\.",
        f.message,
    )
    assert m, f.message
    assert float(m[2]) == pytest.approx(float(m[1]) / 3, rel=1e-5)
    for twin in (mean_ok, addone_fixed):
        report = check(twin, select=["GG303"])
        assert report.rules[0].checks_run == ["GG303"] and not report.findings
