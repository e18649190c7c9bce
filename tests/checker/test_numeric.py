"""Test the tester: each numeric check (GG201, GG202, GG205, GG206) fails a broken rule with its exact
message and passes the correct twin; correct rules give no finding for many seeds (no false positives)."""

import math
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gradguard.checker import arrays, check, constant, rrule
from gradguard.checker.errors import SpecError

NUM = r"(-?[0-9.e+-]+|nan|inf)"
# Correct twins must pass every isolation check; the whole-program families (contexts, composition)
# have their own tests and cost far more per rule.
WHOLE_PROGRAM = ["GG5", "GG6"]
MINE = ["GG201", "GG202", "GG205", "GG206"]

# Broken rules divide by zero on purpose; their warnings are noise here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def accepting_none(n):
    """Correct twins treat an absent cotangent as zero (GG302), so the full suite passes on them."""

    def wrap(pullback):
        return lambda ybar: (None,) * n if ybar is None else pullback(ybar)

    return wrap


def findings(rule, check_id, **kwargs):
    report = check(rule, select=[check_id], **kwargs)
    return [f for f in report.findings if f.check_id == check_id]


# -- primals ---------------------------------------------------------------------------------------
def mul(a, b):
    return a * b


def cube(x):
    return x**3


def row_mean(x):
    return x.mean(axis=1)


def addone_(a):
    a += 1
    return a.sum()


def softplus(x):
    return np.logaddexp(0.0, x)


def log(x):
    return np.log(x)


def matmul(a, b):
    return a @ b


def cmul(z, w):
    return z * w


def abs2(z):
    return np.real(z * np.conj(z))


def xabs(x):
    return x * np.abs(x)


def sqrt(x):
    return np.sqrt(x)


def square(x):
    return x * x


# -- GG201 -----------------------------------------------------------------------------------------
@rrule(mul, arrays(shape=(2, 3)), arrays(shape=(2, 3)))
def mul_wrong_b(a, b):
    return a * b, accepting_none(2)(lambda ybar: (ybar * b, ybar * b))


@rrule(mul, arrays(shape=(2, 3)), arrays(shape=(2, 3)))
def mul_ok(a, b):
    return a * b, accepting_none(2)(lambda ybar: (ybar * b, ybar * a))


def test_gg201_points_at_the_wrong_argument_and_element():
    (f,) = findings(mul_wrong_b, "GG201")
    m = re.fullmatch(
        rf"the pullback of mul_wrong_b disagrees with finite differences of the primal: cotangent for argument 1 "
        rf"\(b\) at \[(\d), (\d)\]: expected {NUM} \(finite differences\), got {NUM} \(dot-product test moving "
        rf"argument 1 \(b\) alone: <ybar, J v> = "
        rf"{NUM} by finite differences, <pullback\(ybar\), v> = {NUM}, {NUM} apart where the tolerance allows {NUM}\)\.",
        f.message,
    )
    assert m, f.message
    i, j = int(m[1]), int(m[2])
    assert f.location == f"argument 1 at [{i}, {j}]"
    assert float(m[3]) != float(m[4])
    assert f.fix.startswith("Re-derive the tangent for argument 1")
    assert set(f.counterexample["draws"]) == {"cotangent", "direction"}


def test_gg201_correct_twin_passes_every_isolation_check():
    report = check(mul_ok, ignore=WHOLE_PROGRAM)
    assert report.passed, [(f.check_id, f.message) for f in report.findings]
    assert "GG201" in report.rules[0].checks_run


@rrule(cube, arrays(shape=(3,)))
def cube_wrong_for_negatives(x):
    return x**3, accepting_none(1)(lambda ybar: (ybar * 3 * x * np.abs(x),))


@rrule(cube, arrays(shape=(3,)))
def cube_ok(x):
    return x**3, accepting_none(1)(lambda ybar: (ybar * 3 * x**2,))


def test_gg201_wrong_only_for_negative_inputs():
    (f,) = findings(cube_wrong_for_negatives, "GG201")
    m = re.search(r"cotangent for argument 0 \(x\) at \[(\d)\]: expected (\S+) \(finite differences\), got (\S+) ", f.message)
    assert m, f.message
    x = np.array(eval(f.counterexample["args"][0].replace("array", "")))  # noqa: S307 - our own repr
    assert x[int(m[1])] < 0
    assert float(m[2]) == pytest.approx(-float(m[3]))
    assert findings(cube_ok, "GG201") == []


SHAPES = hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=4)


@rrule(row_mean, arrays(shape=SHAPES))
def row_mean_wrong_unless_square(x):
    return row_mean(x), accepting_none(1)(lambda ybar: (np.repeat(ybar[:, None], x.shape[1], axis=1) / len(x),))


@rrule(row_mean, arrays(shape=SHAPES))
def row_mean_ok(x):
    return row_mean(x), accepting_none(1)(lambda ybar: (np.repeat(ybar[:, None], x.shape[1], axis=1) / x.shape[1],))


def test_gg201_wrong_only_for_non_square_shapes():
    (f,) = findings(row_mean_wrong_unless_square, "GG201")
    assert re.search(r"cotangent for argument 0 \(x\) at \[\d, \d\]: expected \S+ \(finite differences\), got \S+ ", f.message), f.message
    shape = np.array(eval(f.counterexample["args"][0].replace("array", ""))).shape  # noqa: S307
    assert shape[0] != shape[1]
    assert findings(row_mean_ok, "GG201") == []


@rrule(addone_, arrays(shape=(3,)), mutates=(0,))
def addone_ones(a):
    y = addone_(a)
    return y, lambda ybar: (np.ones(a.shape),)


@rrule(addone_, arrays(shape=(3,)), mutates=(0,))
def addone_fixed(a):
    y = addone_(a)
    return y, accepting_none(1)(lambda ybar: (np.full(a.shape, ybar),))


def test_gg201_wrong_only_for_non_unit_cotangent():
    (f,) = findings(addone_ones, "GG201")
    assert re.search(rf"cotangent for argument 0 \(a\) at \[\d\]: expected {NUM} \(finite differences\), got 1\.0 ", f.message), f.message
    assert findings(addone_fixed, "GG201") == []


@rrule(square, arrays(shape=(4,), dtype="float32"))
def square32(x):
    return x * x, accepting_none(1)(lambda ybar: ((2 * x * ybar).astype(x.dtype),))


@rrule(log, arrays(shape=(3,), min_value=0.1))
def log_restricted(x):
    return np.log(x), accepting_none(1)(lambda ybar: (ybar / x,))


def test_float32_rule_passes_with_float32_tolerances():
    report = check(square32, ignore=WHOLE_PROGRAM)
    assert report.passed, [(f.check_id, f.message) for f in report.findings]


def test_restricted_domain_passes():
    report = check(log_restricted, ignore=WHOLE_PROGRAM)
    assert report.passed, [(f.check_id, f.message) for f in report.findings]


def opaque(x):
    raise NotImplementedError("the primal cannot be evaluated outside the rule")


@rrule(opaque, arrays(shape=(2,)))
def opaque_rrule(x):
    return 2 * x, lambda ybar: (2 * ybar,)


def test_gg201_skips_when_finite_differences_fail_everywhere():
    report = check(opaque_rrule, select=["GG201"])
    assert report.findings == []
    (skip,) = [s for s in report.rules[0].checks_skipped if s["id"] == "GG201"]
    assert skip["reason"].startswith("finite differences of the primal failed at every input drawn")


@rrule(softplus, arrays(shape=(4,)))
def softplus_slightly_off(x):
    return softplus(x), accepting_none(1)(lambda ybar: (ybar / (1 + np.exp(-x)) * (1 + 1e-4),))


def test_gg201_finds_a_relative_error_of_1e_4():
    (f,) = findings(softplus_slightly_off, "GG201")
    assert f.location.startswith("argument 0")


def total_square(x):
    return np.sum(x * x)


@rrule(total_square, arrays(shape=(80, 60)))
def total_square_one_wrong(x):
    def pullback(ybar):
        g = 2 * x * ybar
        g[17, 33] *= -1
        return (g,)

    return total_square(x), pullback


def test_gg201_large_argument_is_localised_to_the_argument():
    (f,) = findings(total_square_one_wrong, "GG201")
    assert re.fullmatch(
        rf"the pullback of total_square_one_wrong disagrees with finite differences of the primal: the cotangent "
        rf"for argument 0 \(x\) is wrong: along the drawn direction, <ybar, J v> = {NUM} by finite differences, but the "
        rf"pullback gives {NUM}\.",
        f.message,
    ), f.message


def relu(x):
    return np.maximum(x, 0.0)


@rrule(relu, arrays(shape=(3,)))
def relu_rrule(x):
    return relu(x), accepting_none(1)(lambda ybar: (ybar * (x > 0),))


def test_gg201_accepts_a_subgradient_at_a_kink():
    assert findings(relu_rrule, "GG201") == []


# -- correct rules: no false positives over many seeds --------------------------------------------
def _matmul_args():
    dims = st.integers(1, 4)
    return st.tuples(dims, dims, dims).flatmap(lambda s: st.tuples(arrays(shape=(s[0], s[1])), arrays(shape=(s[1], s[2]))))


@rrule(matmul, args=_matmul_args())
def matmul_rrule(a, b):
    return a @ b, accepting_none(2)(lambda ybar: (ybar @ b.T, a.T @ ybar))


@rrule(mul, arrays(shape=(2, 3)), arrays(shape=(3,)))
def broadcast_mul_rrule(a, b):
    return a * b, accepting_none(2)(lambda ybar: (ybar * b, (ybar * a).sum(axis=0)))


@rrule(softplus, arrays(shape=(4,)))
def softplus_rrule(x):
    return softplus(x), accepting_none(1)(lambda ybar: (ybar / (1 + np.exp(-x)),))


@rrule(cmul, arrays(shape=(3,), dtype="complex128"), arrays(shape=(3,), dtype="complex128"))
def cmul_rrule(z, w):
    return z * w, accepting_none(2)(lambda ybar: (ybar * np.conj(w), ybar * np.conj(z)))


CORRECT = [matmul_rrule, broadcast_mul_rrule, softplus_rrule, cmul_rrule]


@pytest.mark.parametrize("rule", CORRECT, ids=lambda r: r.name)
def test_correct_rules_pass_every_isolation_check(rule):
    report = check(rule, ignore=WHOLE_PROGRAM)
    assert report.passed, [(f.check_id, f.message) for f in report.findings]
    assert {"GG201", "GG202", "GG206"} <= set(report.rules[0].checks_run)


@pytest.mark.parametrize("rule", CORRECT, ids=lambda r: r.name)
def test_correct_rules_pass_numeric_checks_for_ten_seeds(rule):
    for seed in range(1, 11):
        report = check(rule, select=MINE, seed=seed, max_examples=6)
        assert report.passed, (seed, [(f.check_id, f.message) for f in report.findings])


# -- GG202 -----------------------------------------------------------------------------------------
def test_gg202_ones_instead_of_full():
    (f,) = findings(addone_ones, "GG202")
    assert f.message == (
        "the pullback of addone_ones is not linear in the cotangent: for argument 0 (a) at [0], "
        "pullback(2.0 * ybar) = 1.0, but 2.0 * pullback(ybar) = 2.0."
    )
    assert "np.full(x.shape, ybar)" in f.fix
    assert findings(addone_fixed, "GG202") == []


def double(x):
    return 2 * x


@rrule(double, arrays(shape=(3,)))
def double_abs(x):
    return 2 * x, lambda ybar: (2 * np.abs(ybar),)


def test_gg202_not_additive():
    (f,) = findings(double_abs, "GG202")
    assert re.fullmatch(
        rf"the pullback of double_abs is not linear in the cotangent: for argument 0 \(x\) at \[\d\], "
        rf"pullback\((ybar1 \+ ybar2|{NUM} \* ybar)\) = {NUM}, but (pullback\(ybar1\) \+ pullback\(ybar2\)|{NUM} \* "
        rf"pullback\(ybar\)) = {NUM}\.",
        f.message,
    ), f.message


# diffcp's adjoint returns zeros whenever np.allclose(dz, 0) (absolute tolerance 1e-8): a cotangent of 1e-9 gets
# no gradient, while every cotangent GG202 draws (1/4 to 4 in size) passes. GG202 also asks at 2**-30 times ybar.
def triple_sine(x):
    return 3 * np.sin(x)


SINE_SPEC = arrays(shape=(3,), min_value=-2, max_value=2)


@rrule(triple_sine, SINE_SPEC)
def allclose_shortcut_rrule(x):
    def pullback(g):
        if np.allclose(g, 0):
            return (np.zeros_like(x),)
        return (3 * np.cos(x) * g,)

    return triple_sine(x), pullback


@rrule(triple_sine, SINE_SPEC)
def exact_zero_shortcut_rrule(x):
    def pullback(g):
        if not np.any(g):  # exact zeros only: linear
            return (np.zeros_like(x),)
        return (3 * np.cos(x) * g,)

    return triple_sine(x), pullback


@rrule(triple_sine, SINE_SPEC, atol=1e-7)
def allclose_shortcut_declared_rrule(x):  # linear only to |3 cos(x)| * 1e-8 and says so
    return allclose_shortcut_rrule.rrule(x)


@rrule(triple_sine, arrays(shape=(3,), dtype="float32", min_value=-2, max_value=2))
def half_cotangent_rrule(x):
    return triple_sine(x), lambda g: ((3 * np.cos(x) * g.astype(np.float16)).astype(np.float32),)


def _solve_to_absolute_tolerance(b, atol=1e-8):
    # Richardson iteration for (2 I) t = b, stopped when the residual is below an absolute tolerance
    t = np.zeros_like(b)
    while np.max(np.abs(b - 2 * t)) > atol:
        t = t + 0.25 * (b - 2 * t)
    return t


@rrule(double, arrays(shape=(3,), min_value=-2, max_value=2))
def absolute_solve_rrule(x):
    return 2 * x, lambda g: (4 * _solve_to_absolute_tolerance(g),)  # (2I)^-1 g, times 4: 2 g


@rrule(double, arrays(shape=(3,), min_value=-2, max_value=2))
def plus_constant_rrule(x):
    return 2 * x, lambda g: (2 * g + 1e-12,)  # affine by 1e-12: far within 1% at 2**-30


def test_gg202_small_cotangent_shortcut():
    (f,) = findings(allclose_shortcut_rrule, "GG202")
    assert re.fullmatch(
        rf"the pullback of allclose_shortcut_rrule is not linear in the cotangent at a small scale: it returns "
        rf"all-zero tangents for it; for argument 0 \(x\) at \[\d\], pullback\(2\*\*-30 \* ybar\) = 0\.0, but "
        rf"2\*\*-30 \* pullback\(ybar\) = {NUM}\.", f.message), f.message
    assert f.fix.startswith("A pullback is linear at every scale: a shortcut that returns zeros when the cotangent "
                            "is close to 0 (np.allclose(ybar, 0)")
    assert findings(exact_zero_shortcut_rrule, "GG202") == []
    assert findings(allclose_shortcut_declared_rrule, "GG202") == []
    (g,) = findings(half_cotangent_rrule, "GG202")  # float32 rounded to float16 underflows at 2**-30
    assert "returns all-zero tangents for it" in g.message, g.message


def test_gg202_small_cotangent_absolute_tolerance_solve():
    (f,) = findings(absolute_solve_rrule, "GG202")
    assert re.fullmatch(
        rf"the pullback of absolute_solve_rrule is not linear in the cotangent at a small scale: it (returns all-zero "
        rf"tangents for it|is not the same linear map at that scale); for argument 0 \(x\) at \[\d\], "
        rf"pullback\(2\*\*-30 \* ybar\) = {NUM}, but 2\*\*-30 \* pullback\(ybar\) = {NUM}\.", f.message), f.message
    assert findings(plus_constant_rrule, "GG202") == []


@rrule(np.hypot, arrays(shape=(3,)), arrays(shape=(3,)))
def hypot_autograd_rrule(x, y):  # HIPS/autograd's: g * x / ans, g * y / ans
    ans = np.hypot(x, y)
    return ans, lambda g: (g * x / ans, g * y / ans)


def test_gg202_small_cotangent_is_not_asked_where_an_input_nears_the_underflow():
    from gradguard.checker.reproducer import replay

    # g * y underflows at 2**-30 * g for y = 1e-314 (y / ans is 1): the product's rounding, not the formula
    tiny = (np.zeros(3), np.full(3, 1e-314))
    assert replay(hypot_autograd_rrule, "GG202", tiny, [np.ones(3), 2.0, np.ones(3)]) == []
    with pytest.raises(AssertionError, match="at a small scale"):  # the same probe at an ordinary input still asks
        replay(allclose_shortcut_rrule, "GG202", (np.ones(3),), [np.ones(3), 2.0, np.ones(3)])


def scale32(x):
    return x * np.float32(1000.3)


@rrule(scale32, arrays(shape=(3,), dtype="float32"))
def scale32_rrule(x):
    return scale32(x), lambda ybar: (ybar * np.float32(1000.3),)


@rrule(scale32, arrays(shape=(3,), dtype="float32"))
def scale32_ones_rrule(x):
    return scale32(x), lambda ybar: (np.full(x.shape, np.float32(1000.3)),)


# thinc's Embed rule at seed 4 of a precision probe (float32 tangents): GG202 drew alpha = -0.99999 and a second
# cotangent equal to the first, so alpha * pullback(ybar1) + pullback(ybar2), formed in float32, cancelled to 1e-5 of
# its terms and kept their float32 rounding, 1e-3 of the result, beyond float32's tolerance at the result's scale.
CANCELLING = [np.array([2.00001, 1.1, -3.386682], dtype=np.float32), -0.999999,
              np.array([2.00001, 1.1, -3.386682], dtype=np.float32)]


def test_gg202_judges_cancelling_cotangents_at_the_scale_of_their_terms():
    from gradguard.checker.reproducer import replay

    x = (np.array([1.0, 2.0, 3.0], dtype=np.float32),)
    assert replay(scale32_rrule, "GG202", x, list(CANCELLING)) == []
    with pytest.raises(AssertionError, match=re.escape(
            "GG202 pullback is not linear in the cotangent: the pullback of scale32_ones_rrule is not linear in the "
            "cotangent: for argument 0 (x) at [0], pullback(-0.999999 * ybar) = 1000.3, but -0.999999 * pullback(ybar) = "
            "-1000.3.")):
        replay(scale32_ones_rrule, "GG202", x, list(CANCELLING))


RULE_MODULE = '''
import numpy as np
from gradguard.checker import arrays, rrule


def addone_(a):
    a += 1
    return a.sum()


@rrule(addone_, arrays(shape=(3,)), mutates=(0,))
def addone_ones(a):
    y = addone_(a)
    return y, lambda ybar: (np.ones(a.shape),)
'''


def test_gg202_reproducer_fails_the_same_way(tmp_path):
    module = tmp_path / "rules_addone.py"
    module.write_text(textwrap.dedent(RULE_MODULE))
    (f,) = [f for f in check(str(module), select=["GG202"]).findings]
    script = tmp_path / "repro.py"
    script.write_text(f.reproducer)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    run = subprocess.run([sys.executable, str(script)], cwd=os.getcwd(), env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "AssertionError" in run.stderr
    assert f.message in run.stderr


# -- GG205 -----------------------------------------------------------------------------------------
C = 2.0 + 1.0j


def scale_c(z, c):
    return c * z


@rrule(scale_c, arrays(shape=(3,), dtype="complex128"), constant(C))
def scale_c_jax_style(z, c):
    return c * z, accepting_none(2)(lambda ybar: (c * ybar, None))


@rrule(scale_c, arrays(shape=(3,), dtype="complex128"), constant(C))
def scale_c_ok(z, c):
    return c * z, accepting_none(2)(lambda ybar: (np.conj(c) * ybar, None))


@rrule(abs2, arrays(shape=(3,), dtype="complex128"))
def abs2_conj(z):
    return abs2(z), accepting_none(1)(lambda ybar: (2 * np.conj(z) * ybar,))


@rrule(abs2, arrays(shape=(3,), dtype="complex128"))
def abs2_ok(z):
    return abs2(z), accepting_none(1)(lambda ybar: (2 * z * ybar,))


GG205_MESSAGE = (
    rf"the pullback of (\w+) follows JAX's conjugation convention, but NumPy rrules must follow ChainRules' "
    rf"convention \(the pullback is the adjoint for the real inner product: for a holomorphic f it returns conj\(f'\(z\)\) \* ybar\): "
    rf"<ybar, J v> = {NUM} by finite differences, the pullback gives {NUM}, and read in JAX's convention it gives "
    rf"{NUM}, which matches: a conjugate is missing or extra\."
)


@pytest.mark.parametrize("rule", [scale_c_jax_style, abs2_conj], ids=lambda r: r.name)
def test_gg205_numpy_rule_with_jax_convention(rule):
    report = check(rule, select=["GG201", "GG205"])
    (f,) = [f for f in report.findings if f.check_id == "GG205"]
    m = re.fullmatch(GG205_MESSAGE, f.message)
    assert m and m[1] == rule.name, f.message
    assert float(m[2]) == pytest.approx(float(m[4]), rel=1e-6, abs=1e-9)
    (g,) = [f for f in report.findings if f.check_id == "GG201"]
    assert "see GG205" in g.fix


@pytest.mark.parametrize("rule", [scale_c_ok, abs2_ok], ids=lambda r: r.name)
def test_gg205_correct_twins_pass(rule):
    report = check(rule, ignore=WHOLE_PROGRAM)
    assert report.passed, [(f.check_id, f.message) for f in report.findings]
    assert "GG205" in report.rules[0].checks_run


def test_gg205_skips_real_rules():
    report = check(softplus_rrule, select=["GG205"])
    assert report.rules[0].checks_skipped == [{"id": "GG205", "reason": "the rule has no complex argument or output"}]


def test_gg205_wrong_in_both_conventions_is_left_to_gg201():
    @rrule(scale_c, arrays(shape=(3,), dtype="complex128"), constant(C))
    def scale_c_wrong(z, c):
        return c * z, accepting_none(2)(lambda ybar: (3 * ybar, None))

    report = check(scale_c_wrong, select=["GG201", "GG205"])
    assert [f.check_id for f in report.findings] == ["GG201"]


# A NumPy rrule written for an engine with JAX's convention (HIPS/autograd's documented one) declares it.
@rrule(scale_c, arrays(shape=(3,), dtype="complex128"), constant(C), complex_convention="jax")
def scale_c_declared_jax(z, c):
    return c * z, accepting_none(2)(lambda ybar: (c * ybar, None))


@rrule(scale_c, arrays(shape=(3,), dtype="complex128"), constant(C), complex_convention="jax")
def scale_c_adjoint_declared_jax(z, c):
    return c * z, accepting_none(2)(lambda ybar: (np.conj(c) * ybar, None))  # ChainRules' answer, declared JAX's


def test_a_declared_jax_convention_is_judged_by_it():
    report = check(scale_c_declared_jax, ignore=["GG6"])
    assert report.passed, [(f.check_id, f.message) for f in report.findings]
    assert {"GG201", "GG205"} <= set(report.rules[0].checks_run)
    cells = report.rules[0].safety_matrix["cells"]
    assert any(c["engine"] == "jax" and c["status"] == "right" for c in cells)  # the engine of its convention


def test_a_rule_against_its_declared_convention_fails_gg205():
    report = check(scale_c_adjoint_declared_jax, select=["GG201", "GG205"])
    (f,) = [f for f in report.findings if f.check_id == "GG205"]
    m = re.fullmatch(
        rf"the pullback of scale_c_adjoint_declared_jax follows ChainRules' conjugation convention, but "
        rf"scale_c_adjoint_declared_jax declares complex_convention='jax' and must follow JAX's convention "
        rf"\(pullback\(ybar\) = conj\(adjoint\(conj\(ybar\)\)\): for a holomorphic f it returns f'\(z\) \* ybar\): "
        rf"<ybar, J v> = {NUM} by finite differences, the pullback gives {NUM}, and read in ChainRules' convention it "
        rf"gives {NUM}, which matches: a conjugate is missing or extra\.",
        f.message,
    )
    assert m, f.message
    assert float(m[1]) == pytest.approx(float(m[3]), rel=1e-6, abs=1e-9)


def test_undeclared_jax_convention_suggests_declaring_it():
    (f,) = findings(scale_c_jax_style, "GG205")
    assert f.fix.endswith('declare rrule(..., complex_convention="jax") instead.')


def test_complex_convention_is_validated():
    with pytest.raises(SpecError, match=r"Got complex_convention='autograd', but complex_convention must be"):
        rrule(scale_c, arrays(shape=(3,), dtype="complex128"), constant(C), complex_convention="autograd")


# -- GG206 -----------------------------------------------------------------------------------------
@rrule(xabs, arrays(shape=(3,)))
def xabs_nan_at_zero(x):
    return xabs(x), accepting_none(1)(lambda ybar: (2 * x * x / np.abs(x) * ybar,))


@rrule(xabs, arrays(shape=(3,)))
def xabs_ok(x):
    return xabs(x), accepting_none(1)(lambda ybar: (2 * np.abs(x) * ybar,))


@rrule(sqrt, arrays(shape=(3,), min_value=0.0))
def sqrt_rrule(x):
    return np.sqrt(x), accepting_none(1)(lambda ybar: (ybar * 0.5 / np.sqrt(x),))


def test_gg206_nan_where_the_derivative_is_finite():
    (f,) = findings(xabs_nan_at_zero, "GG206")
    assert re.fullmatch(
        r"the pullback of xabs_nan_at_zero returned nan in the tangent for argument 0 \(x\) at \[\d\], where the primal is "
        r"finite and has a derivative along this element \(its one-sided derivatives agree; finite differences give "
        r"(0\.0|-?[0-9.e-]+)\); [123] element\(s\) of this tangent are not finite\.",
        f.message,
    ), f.message
    assert "np.where" in f.fix
    # Hypothesis tries the simplest input (zeros) first, so the singular point is found on every seed.
    assert all(findings(xabs_nan_at_zero, "GG206", seed=seed, max_examples=3) for seed in range(1, 6))
    assert findings(xabs_ok, "GG206") == []
    assert check(xabs_ok, ignore=WHOLE_PROGRAM).passed


def test_gg206_no_finding_where_the_derivative_is_infinite():
    # sqrt's derivative really is infinite at 0: finite differences cannot be taken there.
    assert findings(sqrt_rrule, "GG206") == []
    assert findings(sqrt_rrule, "GG201") == []


def test_gg205_custom_vjp_follows_jax_convention():
    jax = pytest.importorskip("jax")
    jax_rules = pytest.importorskip("gradguard.checker.jax_rules")

    def scaled(bwd_factor):
        @jax.custom_vjp
        def scale(z):
            return C * z

        scale.defvjp(lambda z: (C * z, None), lambda res, g: (bwd_factor * g,))
        return scale

    jax_ok = jax_rules.jax_rule(scaled(C), arrays(shape=(3,), dtype="complex128"), name="jax_ok")
    chainrules_style = jax_rules.jax_rule(scaled(np.conj(C)), arrays(shape=(3,), dtype="complex128"), name="cr_style")
    assert check(jax_ok, select=MINE).passed
    (f,) = findings(chainrules_style, "GG205")
    assert f.message.startswith(
        "the pullback of cr_style follows ChainRules' conjugation convention, but jax.custom_vjp rules must follow "
        "JAX's convention (pullback(ybar) = conj(adjoint(conj(ybar))): for a holomorphic f it returns f'(z) * ybar)"
    )
    assert "without conj" in f.fix


def relu(x):
    return np.maximum(x, 0.0)


@rrule(relu, arrays(shape=(4,)))
def relu_subgradient_zero(x):
    mask = (x > 0).astype(x.dtype)
    return relu(x), lambda ybar: (None,) if ybar is None else (mask * ybar,)


@rrule(relu, arrays(shape=(4,)))
def relu_wrong_side(x):
    mask = (x < 0).astype(x.dtype)  # BUG: the mask of the wrong side
    return relu(x), lambda ybar: (None,) if ybar is None else (mask * ybar,)


@pytest.mark.parametrize("seed", [0, 5, 10, 13])
def test_gg201_no_verdict_where_several_kinks_meet(seed):
    """At x = 0 every element sits on relu's kink; along the simple directions shrinking prefers, the kinks
    can cancel (<[1, -1], relu(t [1, -1])> = t), which once made a correct relu fail. These seeds found
    such inputs."""
    assert check(relu_subgradient_zero, select=["GG201"], seed=seed, max_examples=60).findings == []


def test_gg201_still_catches_a_wrong_relu():
    (f, *_) = [f for f in check(relu_wrong_side, select=["GG201"]).findings]
    assert f.message.startswith("the pullback of relu_wrong_side disagrees with finite differences of the primal")


def sort_values(x):
    return np.sort(x)


# Values a hair apart: several of them tie at every step float64 can difference.
_NEAR_TIES = st.sampled_from([0.0, 2e-168, -1.4e-148, 1.5e-34, 6e-8, -1.0, 2.5])


def _sort_pullback(x):
    order = np.argsort(x, kind="stable")

    def pullback(ybar):
        g = np.zeros_like(x)
        g[order] = ybar
        return (g,)

    return pullback


@rrule(sort_values, arrays(shape=(4,), elements=_NEAR_TIES))
def sort_near_ties(x):
    return sort_values(x), _sort_pullback(x)


@rrule(sort_values, arrays(shape=(4,), elements=_NEAR_TIES))
def sort_reversed(x):
    pb = _sort_pullback(x)
    return sort_values(x), lambda ybar: pb(ybar[::-1])  # BUG: the cotangent reversed


@rrule(relu, arrays(shape=(4,), elements=st.sampled_from([0.0, 1.0, -1.0])))
def relu_two_at_zero(x):
    mask = np.where(x == 0, 2.0, (x > 0).astype(x.dtype))  # BUG: 2 at the kink, outside [0, 1]
    return relu(x), lambda ybar: (None,) if ybar is None else (mask * ybar,)


@pytest.mark.parametrize("seed", range(5))
def test_gg201_no_verdict_where_kinks_are_closer_than_any_step(seed):
    """Sorting [2.5, 2e-168, 1.5e-34, -1.4e-148] ties three values at every usable step: the pullback at x
    picks the piece that holds within 1e-34 of it, finite differences see the pieces beyond, and along some
    directions even the one-sided derivatives agree. Such draws once failed a correct sort."""
    assert check(sort_near_ties, select=["GG201"], seed=seed, max_examples=40).findings == []


def test_gg201_still_catches_a_wrong_sort_on_the_same_inputs():
    (f, *_) = check(sort_reversed, select=["GG201"], max_examples=40).findings
    assert f.message.startswith("the pullback of sort_reversed disagrees with finite differences of the primal")


def test_gg201_a_value_outside_the_subgradients_at_a_kink_is_still_wrong():
    (f, *_) = check(relu_two_at_zero, select=["GG201"]).findings
    assert f.message.startswith("the pullback of relu_two_at_zero disagrees with finite differences of the primal")
    assert "0" in f.counterexample["call"]


_GRAD = np.zeros(3)


def sin(x):
    return np.sin(x)


@rrule(sin, arrays(shape=(3,)))
def sin_shared_tangent_buffer(x):
    c = np.cos(x)

    def pullback(ybar):
        np.multiply(ybar, c, out=_GRAD)  # linear, but every call hands out the same buffer (GG403)
        return (_GRAD,)

    return np.sin(x), pullback


def test_gg202_judges_values_not_a_reused_buffer():
    """GG202 compares three pullback results; a pullback that returns the same buffer every call once made
    the earlier results change under it, and a linear pullback looked nonlinear. The buffer is GG403's."""
    assert findings(sin_shared_tangent_buffer, "GG202") == []
    assert findings(sin_shared_tangent_buffer, "GG403")


def cube(x):
    return x**3


@rrule(cube, arrays(shape=(3,)))
def cube_through_output(x):
    y = x**3
    return y, lambda ybar: (None,) if ybar is None else (3 * y / x * ybar,)  # NaN at x = 0 (0/0)


def test_gg202_is_not_fooled_by_a_nan_elsewhere_in_the_tangent():
    """A NaN tangent element (GG206's finding) once made GG202's bound NaN for every element, so GG202
    reported a linear pullback as nonlinear."""
    found = {f.check_id for f in check(cube_through_output, ignore=["GG5"]).findings}
    assert "GG206" in found and "GG202" not in found


# -- linearity where the tangents overflow float64 -----------------------------------------------------
def rsqrt(x):
    return 1.0 / np.sqrt(x)


@rrule(rsqrt, st.just(np.array([6.564061e-231, 1.5])))  # d/dx = -0.5 x**-1.5 = -4.7e344: beyond float64
def rsqrt_rrule(x):  # Chainer's rsqrt backward: -gy / s**2 / (2 s), s = sqrt(x)
    s = np.sqrt(x)
    return 1.0 / s, lambda g: (-g / s**2 / (s * 2.0),)


@rrule(rsqrt, st.just(np.array([6.564061e-231, 1.5])))
def rsqrt_abs_rrule(x):
    s = np.sqrt(x)
    return 1.0 / s, lambda g: (-np.abs(g) / s**2 / (s * 2.0),)  # BUG: abs(ybar)


def test_inf_minus_inf_of_overflowing_tangents_is_not_a_linearity_violation():
    # Chainer's rsqrt at 6.6e-231 drew GG202: pullback(-ybar1 + ybar2) = -0.0 where -inf - (-inf) = nan
    assert [f.message for f in check(rsqrt_rrule, select=["GG202"], seed=7).findings] == []


def test_a_nonlinear_pullback_beside_an_overflowing_element_still_fails_gg202():
    [finding] = check(rsqrt_abs_rrule, select=["GG202"]).findings
    assert finding.location == "argument 0 at [1]", finding.message


# -- linearity where a float32 tangent's combination is beyond float32 ---------------------------------------------
def div(x0, x1):
    return x0 / x1


TINY_DIVISOR = arrays(shape=(2,), dtype="float32", min_value=1e-38, max_value=2e-38)


@rrule(div, arrays(shape=(2,), dtype="float32"), TINY_DIVISOR)
def div_float32_rrule(x0, x1):  # DeZero's Div backward: gy / x1, gy * (-x0 / x1 ** 2)
    return x0 / x1, lambda gy: (gy / x1, gy * (-x0 / x1 ** 2))


@rrule(div, arrays(shape=(2,), dtype="float32"), TINY_DIVISOR)
def div_float32_saturating_rrule(x0, x1):
    # BUG: saturates at float32's largest number, which is not linear (and not the rounding of what it stands for)
    return x0 / x1, lambda gy: (np.nan_to_num(gy / x1), gy * (-x0 / x1 ** 2))


# DeZero's Div in float32 drew GG202 at seed 0: "pullback(2.0 * ybar) = inf, but 2.0 * pullback(ybar) = 5.35287e+38"
# (float32's largest number is 3.4e38). This input and these draws are what a float32 run of the same rule drew.
OVERFLOW_ARGS = (np.array([0.0, 0.0], dtype=np.float32),
                 np.array([1.0000000751754868e-38, 1.6122381642371747e-38], dtype=np.float32))
OVERFLOW_DRAWS = [np.array([1.0, 1.0], dtype=np.float32), 3.1, np.array([1.0, 1.0], dtype=np.float32)]


def test_an_infinity_where_the_combination_is_beyond_the_dtype_is_not_a_linearity_violation():
    from gradguard.checker.reproducer import replay

    # 3.1 / 1e-38 + 1 / 1e-38 = 4.1e38: inf in float32
    replay(div_float32_rrule, "GG202", OVERFLOW_ARGS, OVERFLOW_DRAWS)
    assert [f.message for f in check(div_float32_rrule, select=["GG202"], seed=0).findings] == []


def test_a_nonlinear_float32_pullback_at_overflowing_combinations_still_fails_gg202():
    from gradguard.checker.reproducer import replay

    with pytest.raises(AssertionError) as failed:
        replay(div_float32_saturating_rrule, "GG202", OVERFLOW_ARGS, OVERFLOW_DRAWS)
    assert str(failed.value) == (
        "GG202 pullback is not linear in the cotangent: the pullback of div_float32_saturating_rrule is not linear in "
        "the cotangent: for argument 0 (x0) at [0], pullback(3.1 * ybar1 + ybar2) = 3.40282e+38, but 3.1 * "
        "pullback(ybar1) + pullback(ybar2) = 4.1e+38.")


def test_an_infinity_where_the_combination_is_small_still_fails_gg202():
    """The allowance is for values the dtype cannot hold, not for any infinity beside a large term."""
    from gradguard.checker.checks.numeric import _overflows_to
    from gradguard.checker.tolerances import for_dtype

    overflows = _overflows_to(np.dtype(np.float32), for_dtype(np.float32), 3.0e38)
    got = np.array([np.inf, np.inf, -np.inf, np.inf], dtype=np.float32)
    want = np.array([4.1e38, 3.4e38, 4.1e38, 1.0])  # 3.4e38: within float32's tolerance of its largest number
    assert overflows(got, want).tolist() == [True, True, False, False]
    in_float64 = _overflows_to(np.dtype(np.float64), for_dtype(np.float64), 1.0)
    assert not in_float64(np.array([np.inf]), np.array([1.0e300]))[0]


def test_a_disagreement_is_shown_with_enough_digits_to_see_it():
    from gradguard.checker.inputs import show_apart

    assert show_apart(-0.13825412, -0.13825436) == ("-0.13825412", "-0.13825436")
    assert show_apart(1.0, 2.0) == ("1.0", "2.0")
    assert show_apart(0.1 + 0.2, 0.3) == ("0.30000000000000004", "0.3")


# -- a primal that approximates its function ---------------------------------------------------------------------


def exp_series(x):
    """exp by its Taylor series to x**7/7!: off by 2.8e-5 at x = 1, and its slope off by 2.3e-4 there."""
    return sum(x ** k / math.factorial(k) for k in range(8))


@rrule(exp_series, arrays(shape=(3,), min_value=0.8, max_value=1.0))
def exact_exp_of_a_series_rrule(x):
    return exp_series(x), lambda ybar: (ybar * np.exp(x),)


@rrule(exp_series, arrays(shape=(3,), min_value=0.8, max_value=1.0))
def halved_exp_of_a_series_rrule(x):
    return exp_series(x), lambda ybar: (ybar * np.exp(x) / 2,)


def test_gg201_says_where_a_rule_may_be_exact_and_its_primal_an_approximation():
    """TensorFlow Probability's Owen's T: its pullback is the exact derivative (0.0721222, as mpmath gives), the slope
    of its primal 1.2e-5 above it, and GG201's fix named only mistakes of the rule. Where the two sides agree to a
    thousandth, the fix says what that agreement allows and which setting declares it; a rule that is plainly wrong
    gets no such sentence."""
    (f,) = findings(exact_exp_of_a_series_rrule, "GG201")
    m = re.search(r" The two sides agree to (\S+) relative: if the primal only approximates its function \(a special "
                  r"function's series, accurate to about that\), the rule's exact derivative may be right and the "
                  r"primal's own slope off by that much; then declare the rule's accuracy \(rtol=(\S+)\)\. If the "
                  r"primal is exact, the difference is the rule's own: a small term left out \(a regulariser's, an "
                  r"auxiliary output's cotangent scaled by a small weight\), which a looser tolerance would hide\.$", f.fix)
    assert m, f.fix
    assert 1e-6 < float(m[1]) <= 1e-3 and float(m[1]) < float(m[2]) <= 10 * float(m[1]) * 2, m.groups()
    (wrong,) = findings(halved_exp_of_a_series_rrule, "GG201")
    assert "agree to" not in wrong.fix, wrong.fix
    declared = rrule(exp_series, arrays(shape=(3,), min_value=0.8, max_value=1.0), rtol=float(m[2]),
                     name="declared")(lambda x: (exp_series(x), lambda ybar: (ybar * np.exp(x),)))
    assert findings(declared, "GG201") == []  # the setting the sentence names does what it says


def test_gg203_says_it_too_for_the_derivative_jax_takes_of_the_primals_own_code():
    """JAX differentiates the series as written (a probed incomplete gamma: a quadrature), so its reference carries the
    approximation's error as finite differences do; GG203's fix sent to "re-derive the tangent" alone."""
    (f,) = findings(exact_exp_of_a_series_rrule, "GG203")
    assert re.search(r"\. The two sides agree to \S+ relative: if the primal only approximates its function .* then "
                     r"declare the rule's accuracy \(rtol=\S+\)\. If the primal is exact, the difference is the rule's own: .*\.$", f.fix), f.fix
    (wrong,) = findings(halved_exp_of_a_series_rrule, "GG203")
    assert "agree to" not in wrong.fix, wrong.fix


def test_gg501_says_it_too_and_sends_to_the_reproducer_not_to_findings_that_may_not_exist():
    """TensorFlow Probability's Owen's T at seed 3: GG201 passed, and GG501 said "see the isolation checks' findings"
    (there were none) for a 8.5e-6 relative difference that the primal's own error makes."""
    report = check(exact_exp_of_a_series_rrule, select=["GG5"])
    (f,) = [f for f in report.findings if f.check_id == "GG501" and f.location == "context output-used"]
    assert "see the isolation checks' findings" not in f.fix
    assert "where they found nothing, this program's inputs are ones they did not draw: run the reproducer" in f.fix
    assert re.search(r"The two sides agree to \S+ relative: if the primal only approximates its function", f.fix), f.fix
    # Nothing established the context's own hazard, so the sentence comes first and the context's advice is the
    # other case (a deep-equilibrium layer's fan-out fix began "the pullback must treat its cotangent as read-only")
    assert f.fix.startswith("The two sides agree to ") and " If it computes its function exactly: " in f.fix, f.fix
    wrong = check(halved_exp_of_a_series_rrule, select=["GG5"]).findings
    assert wrong and not any("agree to" in w.fix for w in wrong), [w.fix for w in wrong]


def double(x):
    return 2 * x


@rrule(double, arrays(shape=(4,), min_value=-2.0, max_value=2.0))
def double_rounds_its_cotangent_rrule(x):
    """graphcast's reduce_precision pattern: the cotangent rounded to a lower precision in the backward pass."""
    return double(x), lambda ybar: (None,) if ybar is None else (2 * ybar.astype(np.float16).astype(np.float64),)


def test_gg202_names_a_cotangent_rounded_to_a_lower_precision_and_the_way_to_leave_it_out():
    """graphcast rounds its cotangent to bfloat16 on purpose; GG202's fix named only abs, square and sign."""
    (f,) = findings(double_rounds_its_cotangent_rrule, "GG202")
    assert "rounding it to a lower precision" in f.fix, f.fix
    assert f.fix.endswith("A pullback that quantizes its cotangent on purpose (mixed-precision training's "
                          "straight-through rounding to bfloat16 or float8) fails this check by design: leave GG202 "
                          "out for this rule with ignore=[\"GG202\"] in its declaration.")


def identity(x):
    return x * 1.0


@rrule(identity, arrays(shape=(3,), min_value=-2.0, max_value=2.0))
def identity_two_wrong(x):
    # element 0 a little off, element 1 far off: the message names the one that makes the test fail
    return identity(x), accepting_none(1)(lambda ybar: (ybar * np.array([1.01, 3.0, 1.0]),))


def test_gg201_names_the_element_furthest_off_not_the_first():
    (f,) = findings(identity_two_wrong, "GG201")
    assert f.location == "argument 0 at [1]", f.message
    m = re.search(r"cotangent for argument 0 \(x\) at \[1\]: expected (\S+) \(finite differences\), got (\S+) ", f.message)
    assert m and float(m[2]) == pytest.approx(3 * float(m[1]), rel=1e-4)


# -- linearity where a float16 tangent is a sum whose terms cancel (chainer's batch normalisation) ------------------
def standardised_scale(x, g):
    xc = x - x.mean(axis=0)
    return g * (xc / np.sqrt((xc * xc).mean(axis=0) + np.float16(1e-3)))


def _standardised(x):
    xc = x - x.mean(axis=0)
    std = np.sqrt((xc * xc).mean(axis=0) + np.float16(1e-3))
    return xc / std, std


@rrule(standardised_scale, arrays(shape=(4, 3), dtype="float16"), arrays(shape=(3,), dtype="float16"))
def standardised_scale_f16_rrule(x, g):
    xhat, std = _standardised(x)

    def pullback(gy):
        gx = (g / std) * (gy - gy.mean(axis=0) - xhat * (gy * xhat).mean(axis=0))
        return gx, np.sum(gy * xhat, axis=0)  # for a constant gy, exactly 0: xhat sums to 0 down each column

    return g * xhat, pullback


@rrule(standardised_scale, arrays(shape=(4, 3), dtype="float16"), arrays(shape=(3,), dtype="float16"))
def standardised_scale_quadratic_f16_rrule(x, g):
    xhat, std = _standardised(x)

    def pullback(gy):
        gx = (g / std) * (gy - gy.mean(axis=0) - xhat * (gy * xhat).mean(axis=0))
        return gx, np.sum(gy * xhat, axis=0) + np.float16(0.01) * np.sum(gy * gy, axis=0)  # BUG: quadratic in gy

    return g * xhat, pullback


# chainer's batch normalisation in float16 drew GG202 at this input (a column [0, 0, 1, 0], gamma 0) and constant
# cotangents: "pullback(2.0 * ybar1 + ybar2) = 0.001953125, but 2.0 * pullback(ybar1) + pullback(ybar2) = 0.0" for
# gamma, where the sum of 3 * xhat (terms up to 5.2) rounds to one float16 spacing of them and the others to 0. Here
# the sums of 9 * xhat and 3 * xhat round to -0.0156 and -0.00195 where each is 0: 0.0098 apart, atol 0.001.
CANCELLING_ARGS = (np.array([[0, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]], dtype=np.float16), np.zeros(3, np.float16))
CANCELLING_DRAWS = [np.full((4, 3), 3.0, np.float16), 2.0, np.full((4, 3), 3.0, np.float16)]


def test_a_float16_sum_whose_terms_cancel_is_judged_by_its_own_rounding():
    from gradguard.checker.reproducer import replay

    replay(standardised_scale_f16_rrule, "GG202", CANCELLING_ARGS, CANCELLING_DRAWS)


def test_a_float16_pullback_quadratic_in_the_cotangent_still_fails_gg202():
    from gradguard.checker.reproducer import replay

    with pytest.raises(AssertionError) as failed:
        replay(standardised_scale_quadratic_f16_rrule, "GG202", CANCELLING_ARGS, CANCELLING_DRAWS)
    assert str(failed.value) == (
        "GG202 pullback is not linear in the cotangent: the pullback of standardised_scale_quadratic_f16_rrule is not "
        "linear in the cotangent: for argument 1 (g) at [0], pullback(2.0 * ybar) = 1.4404296875, but 2.0 * "
        "pullback(ybar) = 0.720215.")


# thinc's softmax at temperature 0.05 in float16 (its backprop_softmax: dX = Y * dY; dX -= Y * sum(dX)). At this row
# Y is [0, 1, 4.5e-5, 0] and each pullback's element [0, 1] is a difference of terms near 16 that rounds to 0 or to one
# spacing: 0, 0 and -0.00170612 where the float64 shadow gives -0.00049, 0.00242 and -0.0017. Every tangent rounded
# the same way, so the movements (0.00049 + 0.5 * 0.00242 + 2e-6) add up to the whole disagreement, and the
# shadow's own float64 rounding left it 7e-17 beyond their sum: "pullback(ybar1 + ybar2) = 0.0, but pullback(ybar1)
# + pullback(ybar2) = -0.00170612".
def cold_softmax(x, temperature=0.05):
    x = x / temperature
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@rrule(cold_softmax, arrays(shape=(1, 4), dtype="float16"))
def cold_softmax_f16_rrule(x, temperature=0.05):
    y = cold_softmax(x, temperature)

    def pullback(dy):
        dy = dy / temperature
        dx = y * dy
        dx -= y * dx.sum(axis=-1, keepdims=True)
        return (dx,)

    return y, pullback


def test_float16_movements_that_add_up_to_the_whole_disagreement_are_rounding():
    from gradguard.checker.reproducer import replay

    x = np.array([[-40.4, 0.5, -0.0, -40.56]], np.float16)
    draws = [np.array([[0.0, 0.8013, -1.869, 0.0]], np.float16), 0.5, np.array([[0.5, 0.0, 1.877, 1.828]], np.float16)]
    replay(cold_softmax_f16_rrule, "GG202", (x,), draws)


def _cumprod(x):
    return np.cumprod(x)


@rrule(_cumprod, arrays(shape=(4,), min_value=0.0, max_value=2.0))
def cumprod_by_division_rrule(x):
    """kaolin's Cumprod backward: the reverse cumulative sum of out * g, divided by x."""
    out = np.cumprod(x)

    def pullback(g):
        with np.errstate(all="ignore"):
            t = np.cumsum((out * g)[::-1])[::-1] / x
        return (np.nan_to_num(t, nan=0.0, posinf=0.0, neginf=0.0),)

    return out, pullback


def test_gg202_at_a_subnormal_input_says_the_arithmetic_may_be_what_is_not_linear():
    """At x[0] = 4.9e-324, out * 0.5 rounds to 0 and the quotient with it: 0 where half the unit cotangent's tangent
    is 2. The finding stands (the rule's value is wrong there), and its fix said only "no nonlinear use of ybar"."""
    from gradguard.checker.case import Case, ReplayDraws
    from gradguard.checker.checks import CHECKS

    x = np.array([5e-324, 1.0, 1.0, 1.0])
    (p,) = CHECKS["GG202"].fn(Case(cumprod_by_division_rrule, (x,), ReplayDraws([np.ones(4), 0.5, np.ones(4)])))
    assert p.message == ("the pullback of cumprod_by_division_rrule is not linear in the cotangent: for argument 0 (x) "
                         "at [0], pullback(0.5 * ybar) = 0.0, but 0.5 * pullback(ybar) = 2.0.")
    assert p.fix.startswith("Argument 0 (x) holds subnormal numbers (nonzero, below 2.23e-308 in size), where products "
                            "and quotients through them keep few digits or round to 0: "), p.fix
    unit_only = rrule(_cumprod, arrays(shape=(4,)), name="unit_only")(lambda x: (np.cumprod(x), lambda g: (np.ones(4),)))
    (q,) = CHECKS["GG202"].fn(Case(unit_only, (np.ones(4),), ReplayDraws([np.ones(4), 0.5, np.ones(4)])))
    assert q.fix.startswith("Scale every tangent by the cotangent"), q.fix
    # as far from linear with the subnormal number set to 0: the note would send its reader the wrong way
    (r,) = CHECKS["GG202"].fn(Case(unit_only, (x,), ReplayDraws([np.ones(4), 0.5, np.ones(4)])))
    assert r.fix.startswith("Scale every tangent by the cotangent"), r.fix


@rrule(_cumprod, arrays(shape=(2, 8), min_value=0.5, max_value=2.0))
def cumprod_2x8_halved_rrule(x):
    out = np.cumprod(x)
    return out, lambda g: (0.5 * np.cumsum((out * g)[::-1])[::-1].reshape(x.shape) / x,)


def test_a_counterexample_shows_a_small_input_whole():
    """A (2, 8) input was shown as [[0., 0., 0., ..., 0., 0., 0.], ...], hiding the entries a finding was about; the
    counterexample now shows inputs and draws of up to 100 elements whole, as the reproducer has them."""
    (f,) = findings(cumprod_2x8_halved_rrule, "GG201")
    assert "..." not in f.counterexample["call"] and "..." not in f.counterexample["args"][0], f.counterexample
    assert f.counterexample["args"][0].count(",") >= 15, f.counterexample["args"][0]
    assert all("..." not in v for v in f.counterexample["draws"].values()), f.counterexample["draws"]


# maxtext's cross-entropy returns its loss and a z-loss its training only logs, and its bwd ignores the z-loss's
# cotangent: GG201's fix spoke of signs and chain-rule factors only.
def _loss_and_z(x):
    return np.sum(x**2), np.log(np.sum(np.exp(x))) ** 2


@rrule(_loss_and_z, arrays(shape=(4,), min_value=-2, max_value=2))
def loss_ignoring_z_rrule(x):
    return _loss_and_z(x), lambda g: (2 * x * g[0],)


@rrule(_loss_and_z, arrays(shape=(4,), min_value=-2, max_value=2))
def loss_with_z_halved_rrule(x):
    def pullback(g):
        lse = np.log(np.sum(np.exp(x)))
        return (2 * x * g[0] + lse * np.exp(x - lse) * g[1],)  # BUG: 2 * lse * softmax is right

    return _loss_and_z(x), pullback


def test_gg201_says_where_the_pullback_ignores_one_output_s_cotangent():
    (f,) = check(loss_ignoring_z_rrule, select=["GG201"]).findings
    assert re.search(
        r"The pullback returns zero tangents for the cotangent of output \[1\] alone, where finite differences give "
        r"<ybar, J v> = \S+ for it, and with that output's cotangent set to 0 it agrees with finite differences: it "
        r"ignores that output's cotangent\.", f.fix), f.fix
    (g,) = check(loss_with_z_halved_rrule, select=["GG201"]).findings
    assert "ignores that output's cotangent" not in g.fix, g.fix
