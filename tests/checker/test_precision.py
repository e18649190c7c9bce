"""Test the tester on the shapes real-world rules take (issue: verdict precision on real-world rules).

For each defect class a rule that must pass and a rule that must fail, each with the exact finding or its
absence. Rules here are written as public projects write them: outputs that are NamedTuples or nested
tuples, NumPy scalar types, 0-d arrays.
"""

import numpy as np
import pytest

from gradguard.checker import arrays, check, rrule
from gradguard.checker.contexts import safety_matrix


def errors(report):
    return [f for f in report.findings if f.severity == "error"]


# -- exotic outputs: NamedTuples, nested tuples, NumPy scalars, 0-d arrays ----------------------------
WELL_CONDITIONED = arrays(shape=(3, 3), min_value=-1.0, max_value=1.0).map(lambda a: a + 4.0 * np.eye(3))


def slogdet(a):
    return np.linalg.slogdet(a)  # a NamedTuple (sign, logabsdet)


@rrule(slogdet, WELL_CONDITIONED)
def slogdet_ok(a):
    def pullback(ybar):
        _, lbar = ybar
        return (lbar * np.linalg.inv(a).T,)

    return np.linalg.slogdet(a), pullback


@rrule(slogdet, WELL_CONDITIONED)
def slogdet_untransposed(a):
    def pullback(ybar):
        _, lbar = ybar
        return (lbar * np.linalg.inv(a),)  # the transpose is missing

    return np.linalg.slogdet(a), pullback


def nested(x):
    return x * 2.0, (x**2, np.sum(x))


@rrule(nested, arrays(shape=(3,)))
def nested_ok(x):
    def pullback(ybar):
        a, (b, c) = ybar
        return (2.0 * a + 2.0 * x * b + c,)

    return nested(x), pullback


@rrule(nested, arrays(shape=(3,)))
def nested_unscaled(x):
    def pullback(ybar):
        a, (b, c) = ybar
        return (2.0 * a + 2.0 * x * b + 1.0,)  # the scalar output's cotangent is dropped

    return nested(x), pullback


def sumsq_numpy_scalar(x):
    return np.float64(np.sum(x**2))


@rrule(sumsq_numpy_scalar, arrays(shape=(3,)))
def numpy_scalar_ok(x):
    return sumsq_numpy_scalar(x), lambda ybar: (2.0 * x * ybar,)


def sumsq_0d(x):
    return np.array(np.sum(x**2))


@rrule(sumsq_0d, arrays(shape=(3,)))
def zero_d_ok(x):
    return sumsq_0d(x), lambda ybar: (2.0 * x * ybar,)


@rrule(sumsq_0d, arrays(shape=(3,)))
def zero_d_wrong(x):
    return sumsq_0d(x), lambda ybar: (x * ybar,)  # a factor 2 is missing


@pytest.mark.parametrize("rule", [slogdet_ok, nested_ok, numpy_scalar_ok, zero_d_ok], ids=lambda r: r.name)
def test_exotic_outputs_get_a_verdict_and_right_rules_pass(rule):
    report = check(rule, seed=0)  # every check, GG302's None variants of each output included
    (result,) = report.rules
    assert result.error is None, result.error
    assert result.verdict == "pass", errors(report)
    matrix = safety_matrix(rule, seed=0)
    # tape[none] hands None to an unused output's pullback: these rules do not take None (GG302's business)
    wrong = [c for c in matrix["cells"] if c["status"] not in ("right", "skipped") and c["engine"] != "tape[none]"]
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("rule", "location"),
    [(slogdet_untransposed, "argument 0"), (nested_unscaled, "argument 0"), (zero_d_wrong, "argument 0")],
    ids=lambda r: getattr(r, "name", r),
)
def test_wrong_rules_with_exotic_outputs_fail_gg201(rule, location):
    report = check(rule, seed=0, select=["GG201"])
    (result,) = report.rules
    assert result.error is None, result.error
    (f,) = report.findings
    assert f.check_id == "GG201"
    assert f.message.startswith(f"the pullback of {rule.name} disagrees with finite differences of the primal")
    assert f.location.startswith(location)


def test_equal_infinite_outputs_are_the_same_value():
    def logabsdet(a):
        return np.linalg.slogdet(a)[1]

    @rrule(logabsdet, arrays(shape=(2, 2), min_value=0.0, max_value=0.0))  # singular: log|det| = -inf
    def logabsdet_rule(a):
        return logabsdet(a), lambda ybar: (np.zeros_like(a),)

    assert check(logabsdet_rule, seed=0, select=["GG102"]).findings == []


# -- every signature jax.custom_vjp accepts is declarable: defaults, nondiff_argnums, keyword arguments -----
def _jax():
    return pytest.importorskip("jax")


def _logsumexp_rule(wrong: bool):
    jax = _jax()
    import jax.numpy as jnp

    def lse(a, axis=None):
        return jax.scipy.special.logsumexp(a, axis=axis)

    lse = jax.custom_vjp(lse, nondiff_argnums=(1,))

    def fwd(a, axis=None):
        y = lse(a, axis)
        return y, (a, y)

    def bwd(axis, res, g):
        a, y = res
        if axis is not None:
            y, g = jnp.expand_dims(y, axis), jnp.expand_dims(g, axis)
        return (g * jnp.exp(a - y) * (2.0 if wrong else 1.0),)

    lse.defvjp(fwd, bwd)
    return lse


def test_custom_vjp_with_a_defaulted_nondiff_argument_is_declarable_three_ways():
    from gradguard.checker import constant, jax_rule

    lse = _logsumexp_rule(wrong=False)
    rules = [
        jax_rule(lse, arrays(shape=(3,)), name="lse_default"),  # axis left to its default
        jax_rule(lse, arrays(shape=(2, 3)), constant(1), name="lse_positional"),
        jax_rule(lse, arrays(shape=(2, 3)), kwargs={"axis": 0}, name="lse_keyword"),
    ]
    assert rules[0].nondiff == frozenset() and rules[1].nondiff == {1}
    report = check(rules, seed=0, ignore=["GG302"])
    assert [(r.name, r.verdict, r.error) for r in report.rules] == [
        ("lse_default", "pass", None), ("lse_positional", "pass", None), ("lse_keyword", "pass", None)]


def test_custom_vjp_with_a_defaulted_argument_still_finds_a_wrong_bwd():
    from gradguard.checker import jax_rule

    rule = jax_rule(_logsumexp_rule(wrong=True), arrays(shape=(2, 3)), kwargs={"axis": 1}, name="lse_doubled")
    report = check(rule, seed=0, select=["GG201"])
    (f,) = report.findings
    assert f.message.startswith("the pullback of lse_doubled disagrees with finite differences of the primal")


def test_custom_vjp_returning_a_namedtuple_gets_its_cotangent_as_a_namedtuple():
    jax = _jax()
    import typing

    import jax.numpy as jnp

    from gradguard.checker import jax_rule

    class SinCos(typing.NamedTuple):
        s: typing.Any
        c: typing.Any

    @jax.custom_vjp
    def sincos(x):
        return SinCos(jnp.sin(x), jnp.cos(x))

    sincos.defvjp(lambda x: (sincos(x), x), lambda x, g: (g.s * jnp.cos(x) - g.c * jnp.sin(x),))
    report = check(jax_rule(sincos, arrays(shape=(3,))), seed=0)
    assert report.rules[0].verdict == "pass", (report.rules[0].error, errors(report))


def power_kw(x, *, p=2.0):
    return x**p


@rrule(power_kw, arrays(shape=(3,), min_value=0.5, max_value=2.0), kwargs={"p": 3.0})
def power_kw_ok(x, *, p=2.0):
    return x**p, lambda ybar: (p * x ** (p - 1) * ybar,)


@rrule(power_kw, arrays(shape=(3,), min_value=0.5, max_value=2.0), kwargs={"p": 3.0})
def power_kw_default_in_pullback(x, *, p=2.0):
    return x**p, lambda ybar: (2.0 * x * ybar,)  # the derivative for the default p, not the one given


def test_keyword_only_arguments_are_fixed_by_kwargs():
    assert check(power_kw_ok, seed=0, ignore=["GG302"]).passed
    report = check(power_kw_default_in_pullback, seed=0, select=["GG201"])
    (f,) = report.findings
    assert f.message.startswith("the pullback of power_kw_default_in_pullback disagrees with finite differences")


def test_specs_that_cannot_call_the_primal_are_refused_with_the_reason():
    from gradguard.checker.errors import SpecError

    with pytest.raises(SpecError, match=r"The primal power_kw\(x, \*, p=2.0\) cannot be called with 1 spec\(s\) "
                                        r"and kwargs=\['q'\]: got an unexpected keyword argument 'q'"):
        rrule(power_kw, arrays(shape=(3,)), kwargs={"q": 1.0})
    with pytest.raises(SpecError, match=r"Got kwargs=\[1\], but kwargs must be a dict of keyword arguments"):
        rrule(power_kw, arrays(shape=(3,)), kwargs=[1])

    def with_default(x, axis=None):
        return x

    with pytest.raises(SpecError, match=r"The primal with_default takes 1 to 2 positional argument\(s\) \(1 required\), "
                                        r"but 3 spec\(s\) were given"):
        rrule(with_default, arrays(shape=(3,)), arrays(shape=(3,)), arrays(shape=(3,)))


def test_an_output_gradguard_cannot_read_is_an_error_for_that_rule_only():
    def stats(x):
        return np.mean(x), "mean"  # a label among the outputs: nothing to differentiate through

    @rrule(stats, arrays(shape=(3,)))
    def stats_rule(x):
        return stats(x), lambda ybar: (np.full(x.shape, ybar[0] / 3),)

    report = check([stats_rule, zero_d_ok], seed=0, select=["GG1", "GG2"])
    assert [r.verdict for r in report.rules] == ["error", "pass"]
    assert report.rules[0].error["type"] == "UnsupportedOutput"
    assert report.rules[0].error["message"].startswith(
        "the output of stats_rule holds str 'mean'; gradguard checks outputs that are arrays, Python or NumPy "
        "numbers, None, and tuples, lists, NamedTuples or dicts of them (nested)."
    )


def test_a_dict_output_is_checked_like_a_tuple_of_its_values():
    def stats(x):
        return {"sum": np.sum(x), "mean": np.mean(x)}

    @rrule(stats, arrays(shape=(3,)))
    def stats_rule(x):
        return stats(x), lambda ybar: (np.full(x.shape, ybar["mean"] / 3 + ybar["sum"]),)

    @rrule(stats, arrays(shape=(3,)))
    def stats_swapped(x):  # the two cotangents read from each other's keys
        return stats(x), lambda ybar: (np.full(x.shape, ybar["sum"] / 3 + ybar["mean"]),)

    report = check([stats_rule, stats_swapped], seed=0, select=["GG1", "GG2"])
    assert [r.verdict for r in report.rules] == ["pass", "fail"], [r.error for r in report.rules]
    assert {f.check_id for f in report.rules[1].findings} >= {"GG201"}
