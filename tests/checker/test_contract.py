"""Test the tester: for each contract check, a broken rule fails it with its exact message and a correct twin passes."""

import re

import numpy as np
import pytest

from gradguard.checker import arrays, check, constant, rrule


def square(x):
    return x * x


def mul(a, b):
    return a * b


def power(x, n):
    return x**n


@rrule(square, arrays(shape=(3,)))
def square_ok(x):
    return x * x, lambda ybar: (2 * x * ybar,)


@rrule(mul, arrays(shape=(3,)), arrays(shape=(3,)))
def mul_ok(a, b):
    return a * b, lambda ybar: (ybar * b, ybar * a)


@rrule(power, arrays(shape=(3,)), constant(2))
def power_ok(x, n):
    return x**n, lambda ybar: (n * x ** (n - 1) * ybar, None)


@rrule(square, arrays(shape=(3,), dtype="float32"))
def square32_ok(x):
    return x * x, lambda ybar: ((2 * x * ybar).astype(x.dtype),)


def findings(rule, check_id):
    report = check(rule, select=[check_id], seed=0)
    return [f for f in report.findings if f.check_id == check_id]


@pytest.mark.parametrize("rule", [square_ok, mul_ok, power_ok, square32_ok], ids=lambda r: r.name)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correct_twins_pass_every_contract_check(rule, seed):
    report = check(rule, select=["GG1"], seed=seed)
    assert report.passed, report.findings
    assert report.rules[0].checks_run == ["GG101", "GG102", "GG103", "GG104", "GG105", "GG106"]


def test_gg101_output_without_pullback():
    @rrule(square, arrays(shape=(3,)))
    def bad(x):
        return x * x

    (f,) = findings(bad, "GG101")
    assert f.message == "the rrule bad must return a pair (output, pullback), but returned float64 array of shape (3,)."
    assert f.fix.startswith("Return a tuple (y, pullback)")


def test_gg101_pullback_not_callable():
    @rrule(square, arrays(shape=(3,)))
    def bad(x):
        return x * x, 2 * x

    (f,) = findings(bad, "GG101")
    assert f.actual == "(output, float64 array of shape (3,))"


def test_gg101_forward_raising_is_reported_with_the_exception():
    @rrule(square, arrays(shape=(3,)))
    def bad(x):
        if np.any(x < 0):
            raise ValueError("negative input")
        return x * x, lambda ybar: (2 * x * ybar,)

    (f,) = findings(bad, "GG101")
    assert f.message == "the forward of bad raised ValueError: negative input"
    # Shrunk to the smallest failing input: one negative element, the others zero.
    assert "-" in f.counterexample["call"]


class TracerLeak(Exception):
    """An exception whose message runs over several lines and ends with a link, as JAX's errors do."""


def test_gg101_actual_is_the_exceptions_first_line_not_its_last():
    @rrule(square, arrays(shape=(3,)))
    def bad(x):
        raise TracerLeak("Encountered an unexpected tracer.\n\nSee https://example.org/errors#tracer")

    (f,) = findings(bad, "GG101")
    assert f.actual == f"{__name__}.TracerLeak: Encountered an unexpected tracer.", f.actual


def test_gg101_gates_the_other_checks():
    @rrule(square, arrays(shape=(3,)))
    def bad(x):
        return x * x

    report = check(bad, select=["GG1"])
    skipped = {s["id"]: s["reason"] for s in report.rules[0].checks_skipped}
    assert skipped["GG102"] == ("skipped because GG101 failed: the other checks need the forward and the pullback to "
                                "run and to return what they must; fix that first")
    assert [f.check_id for f in report.findings] == ["GG101"]


def test_gg102_forward_branching_on_a_flag():
    TRAINING = True

    def dropout_eval(x):
        return x

    @rrule(dropout_eval, arrays(shape=(4,)))
    def bad(x):
        y = x * 0.5 if TRAINING else x
        return y, lambda ybar: (ybar * 0.5,)

    (f,) = findings(bad, "GG102")
    assert f.message.startswith("the rrule's forward output differs from primal(*args) at [")
    assert f.message.endswith("The rule computes a different function from the one it claims to differentiate.")
    # Smallest counterexample: a single nonzero element.
    x = np.array(eval(f.counterexample["args"][0].replace("array", "")))
    assert np.count_nonzero(x) == 1


def test_gg102_only_for_negative_inputs_is_found_and_shrunk():
    @rrule(square, arrays(shape=(3,)))
    def bad(x):
        return x * np.abs(x), lambda ybar: (2 * x * ybar,)

    (f,) = findings(bad, "GG102")
    assert f.counterexample["call"].startswith("square(x=array(")
    assert "-" in f.counterexample["call"]


def test_gg103_missing_tangent():
    @rrule(mul, arrays(shape=(3,)), arrays(shape=(3,)))
    def bad(a, b):
        return a * b, lambda ybar: (ybar * b,)

    (f,) = findings(bad, "GG103")
    assert f.message == "the pullback of bad must return one tangent per argument (2), but returned 1."
    assert f.fix == "Return a tuple with one entry per argument; use None for non-differentiable ones."


def test_gg103_bare_array_instead_of_tuple():
    @rrule(square, arrays(shape=(3,)))
    def bad(x):
        return x * x, lambda ybar: 2 * x * ybar

    (f,) = findings(bad, "GG103")
    assert f.message == (
        "the pullback of bad must return one tangent per argument (1), "
        "but returned a float64 array of shape (3,) instead of a tuple."
    )


def test_a_pullback_crash_naming_a_fresh_object_is_reported_once():
    """TensorSlow's gradient walk raises KeyError(<matmul object at 0x...>) with a new object on every call: the
    address differs between the checks' calls, the crash is the same, and it is one finding (GG103's), not one
    per check under titles (GG104's "a tangent's shape differs") it did not establish."""

    class Node:
        pass

    @rrule(square, arrays(shape=(3,)))
    def bad(x):
        def pullback(ybar):
            raise KeyError(Node())

        return x * x, pullback

    report = check(bad, select=["GG1"])
    assert [f.check_id for f in report.findings] == ["GG103"]
    assert re.fullmatch(r"the pullback of bad raised KeyError: <.*Node object at 0x[0-9a-f]+>", report.findings[0].message)


def test_gg104_flattened_tangent():
    def total(x):
        return x.sum()

    @rrule(total, arrays(shape=(2, 3)))
    def bad(x):
        return x.sum(), lambda ybar: (np.full(x.size, ybar),)

    (f,) = findings(bad, "GG104")
    assert f.message == "the tangent for argument 0 (x) has shape (6,), but the argument has shape (2, 3)."
    assert f.location == "argument 0"


def test_gg104_only_for_non_square_shapes():
    def transpose(x):
        return x.T

    @rrule(transpose, arrays(shape=(2, 3)))
    def bad(x):
        return x.T, lambda ybar: (ybar,)  # right only when x is square

    (f,) = findings(bad, "GG104")
    assert "has shape (3, 2), but the argument has shape (2, 3)" in f.message


def test_gg105_float64_tangent_for_float32_argument():
    @rrule(square, arrays(shape=(3,), dtype="float32"))
    def bad(x):
        return x * x, lambda ybar: ((2 * x * ybar).astype("float64"),)

    (f,) = findings(bad, "GG105")
    assert f.message == "the tangent for argument 0 (x) has dtype float64, but the argument has dtype float32."


def test_gg106_tangent_for_a_constant():
    @rrule(power, arrays(shape=(3,)), constant(2))
    def bad(x, n):
        return x**n, lambda ybar: (n * x ** (n - 1) * ybar, 0.0)

    (f,) = findings(bad, "GG106")
    assert f.message == "argument 1 (n) is declared nondiff, so its tangent must be None, but the pullback returned 0.0."


def test_gg106_integer_argument_inferred_nondiff_with_args_strategy():
    from hypothesis import strategies as st

    @rrule(power, args=st.tuples(arrays(shape=(2,)), st.just(3)))
    def bad(x, n):
        return x**n, lambda ybar: (n * x ** (n - 1) * ybar, 1)

    (f,) = findings(bad, "GG106")
    assert f.message == "argument 1 (n) is an int, which has no tangent, so its tangent must be None, but the pullback returned 1."


def _scaled_exp_rule(nu_tangent, x_factor, name):
    """exp(nu x) as a jax.custom_vjp whose order ``nu`` is an ordinary argument the spec holds constant."""
    import jax
    import jax.numpy as jnp

    from gradguard.checker import jax_rule

    jax.config.update("jax_enable_x64", True)

    @jax.custom_vjp
    def scaled_exp(nu, x):
        return jnp.exp(nu * x)

    def fwd(nu, x):
        y = jnp.exp(nu * x)
        return y, (nu, x, y)

    def bwd(res, g):
        nu, x, y = res
        return nu_tangent(nu, x, y, g), x_factor * g * nu * y

    scaled_exp.defvjp(fwd, bwd)
    return jax_rule(scaled_exp, constant(1.5), arrays(shape=(3,), min_value=-2.0, max_value=2.0), name=name)


def test_gg106_a_jax_rule_may_give_a_constant_float_argument_a_cotangent():
    """JAX needs a cotangent for every float argument outside nondiff_argnums: JAX-GalSim's kv returns
    zeros_like(nu) for its order, which a constant() spec made a GG106 error at every seed."""
    import jax.numpy as jnp

    zeros = check(_scaled_exp_rule(lambda nu, x, y, g: jnp.zeros_like(nu), 1.0, "scaled_exp_zero_nu")).rules[0]
    assert zeros.verdict == "pass" and "GG106" in zeros.checks_run, [f.message for f in zeros.findings]
    exact = check(_scaled_exp_rule(lambda nu, x, y, g: jnp.sum(g * x * y), 1.0, "scaled_exp_nu_derivative")).rules[0]
    assert exact.verdict == "pass", [f.message for f in exact.findings]
    broken = check(_scaled_exp_rule(lambda nu, x, y, g: jnp.zeros_like(nu), 2.0, "scaled_exp_doubled"),
                   select=["GG1", "GG201"]).findings
    assert [f.check_id for f in broken] == ["GG201"]  # the x tangent is still judged; nu's is not GG106's
    # a NumPy rule's constant still must get None (test_gg106_tangent_for_a_constant): only JAX's rule differs


def test_gg105_a_complex_tangent_for_a_real_python_float_fails() -> None:
    """pyadjoint's cbrt adjoint differentiates x ** (1/3) as the principal root: for a Python float x < 0 its tangent
    is complex. GG105 looked at array arguments only, and a real scalar's complex tangent passed it."""
    from hypothesis import strategies as st

    def cbrt(x):
        return float(np.cbrt(x))

    @rrule(cbrt, st.floats(min_value=-8.0, max_value=-0.5))
    def principal_rrule(x):
        return float(np.cbrt(x)), lambda g: (g * (1 / 3) * complex(x) ** (-2 / 3),)

    @rrule(cbrt, st.floats(min_value=-8.0, max_value=-0.5))
    def real_rrule(x):
        return float(np.cbrt(x)), lambda g: (g / (3 * np.cbrt(x) ** 2),)

    (found,) = [f for f in check(principal_rrule, seed=0, select=["GG105"]).findings if f.check_id == "GG105"]
    assert re.fullmatch(r"the tangent for argument 0 \(x\) is complex \(complex128\), but the argument is the real "
                        r"float -?[0-9.e+-]+\.", found.message), found.message
    assert [f for f in check(real_rrule, seed=0, select=["GG105"]).findings] == []


_NOISE = np.random.default_rng(0)


def _perturbed(x):
    """PyEPO's perturbed optimizers: a Monte-Carlo forward whose generator keeps its state across calls."""
    return x + 0.1 * _NOISE.standard_normal(np.shape(x))


@rrule(_perturbed, arrays(shape=(3,)))
def perturbed_rrule(x):
    return _perturbed(x), lambda g: (g,)


def test_gg102_and_gg503_give_no_verdict_on_a_primal_drawn_at_random():
    """Each call of the primal draws new noise: GG102 said the rule computes another function, and GG503 that AD
    differentiates another function, where two runs of the primal itself differ as much."""
    result = check(perturbed_rrule, seed=0, select=["GG102", "GG503"]).rules[0]
    assert result.findings == [], [f.message for f in result.findings]
    skipped = {s["id"]: s["reason"] for s in result.checks_skipped}
    assert re.fullmatch(r"the primal does not reproduce its own value \(the primal called twice on identical copies of "
                        r"the input gave output 0 at \[\d\] as \S+, then \S+\), so there is no single value for the "
                        r"rule's forward to match", skipped["GG102"]), skipped
    assert skipped["GG503"].startswith("the primal does not reproduce its own value (the primal called twice"), skipped
