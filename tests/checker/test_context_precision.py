"""Test the tester on the context checks' precision (GG501-GG503): a correct rule that gradguard used to
report wrong, beside a broken twin that must still fail with its exact message.

* kinks a hair from the input: the whole-program finite difference straddles them;
* large program values: one Richardson table is fooled, its error estimate must bound the claim;
* inputs from the rule's own specs only (no reordered copies outside the declared domain), and NaN
  against NaN is not "a different value";
* contexts that need special shapes draw them from the user's strategy before skipping.
"""

import importlib.util
import re
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import strategies as st

from gradguard.checker import arrays, check, rrule
from gradguard.checker.contexts import safety_matrix
from gradguard.engines import fd

# The torch column is in every NumPy rule's matrix where PyTorch is installed, and absent where not.
TORCH = ["torch"] if importlib.util.find_spec("torch") else []
TORCH_RE = "".join(f", {e}" for e in TORCH)  # what the engine lists below end with


def _context_findings(rule, seed=0):
    result = check(rule, select="GG5", seed=seed).rules[0]
    assert result.verdict != "error", result.error
    return result


def _statuses(matrix, context):
    return {c["engine"]: c["status"] for c in matrix["cells"] if c["context"] == context}


# -- kinks a hair from the input ---------------------------------------------------------------------------
def maximum(x, y):
    return np.maximum(x, y)


def _tied_first(a):
    """The first entries of both arguments lie within 1e-38 of 0: a kink of maximum under every usable step."""
    return np.concatenate([a[:1] * 1e-38, a[1:]])


NEAR_TIE = arrays(shape=(4,), min_value=-2.0, max_value=2.0).map(_tied_first)


def _balanced_eq(x, z, y):
    return (x == z) / (1.0 + (x == y))


@rrule(maximum, NEAR_TIE, NEAR_TIE)
def maximum_near_tie_rrule(x, y):
    ans = np.maximum(x, y)
    return ans, lambda g: (None, None) if g is None else (g * _balanced_eq(x, ans, y), g * _balanced_eq(y, ans, x))


@rrule(maximum, NEAR_TIE, NEAR_TIE)
def maximum_near_tie_doubled_rrule(x, y):
    ans = np.maximum(x, y)  # HIPS/autograd before #141: at x == y both arguments get the whole cotangent
    return ans, lambda g: (None, None) if g is None else (g * (x == ans), g * (y == ans))


@pytest.mark.parametrize("seed", [0, 1])
def test_a_kink_a_hair_from_the_input_is_no_verdict_not_a_wrong_gradient(seed):
    result = _context_findings(maximum_near_tie_rrule, seed)
    assert result.findings == [] and result.verdict == "pass"
    cells = result.safety_matrix["cells"]
    assert "wrong" not in {c["status"] for c in cells}
    excused = [c for c in cells if c["status"] == "skipped"]
    assert excused, "the near-tied inputs put a kink under the finite differences of some context"
    assert all(c["message"].startswith("no verdict: ") for c in excused)


def test_a_kink_near_the_input_does_not_hide_an_aliasing_bug():
    result = _context_findings(maximum_near_tie_doubled_rrule)
    (finding,) = result.findings
    assert finding.check_id == "GG502" and finding.location == "context same-array-twice"
    # every entry of max(x, x) is a tie, and two distinct arrays of the same values tie as well: the rule gives each
    # slot the whole cotangent either way, and GG502 says so rather than blame accumulation alone
    assert re.fullmatch(
        r"in context `same-array-twice` \(the same array in two argument slots: rule\(x, x\)\) the gradient of the "
        rf"program is wrong under tape\[zero\], tape\[skip\], jax{TORCH_RE} \(relative error \S+\), and wrong too "
        r"when the slots get distinct arrays of the same values \(relative error \S+\): the gradient is wrong at this "
        r"input whatever the aliasing, not in how the rule accumulates over aliases\. The input: argument 0 = "
        r"array\(\[.*\]\); argument 1 is argument 0's array\.",
        finding.message,
    ), finding.message
    assert "a tie that gives each slot the whole cotangent" in finding.fix


# -- large program values: the finite difference's error must bound the claim -----------------------------
def self_power(x):
    return x**x


SELF_POWER_INPUTS = arrays(shape=(3,), min_value=0.5, max_value=6.0)


@rrule(self_power, SELF_POWER_INPUTS)
def self_power_rrule(x):
    y = x**x
    return y, lambda g: (None,) if g is None else (g * y * (np.log(x) + 1),)


_LAST = {}


@rrule(self_power, SELF_POWER_INPUTS)
def self_power_cached_rrule(x):
    _LAST["y"], _LAST["x"] = x**x, x.copy()  # the pullback reads whatever the latest call left here
    return _LAST["y"].copy(), lambda g: (None,) if g is None else (g * _LAST["y"] * (np.log(_LAST["x"]) + 1),)


def test_one_richardson_table_is_fooled_by_sin_of_large_values_and_the_confirmed_one_is_not():
    x = np.array([3.00803383, 4.9236441, 5.96518055])
    v = np.array([0.3, -0.7, 0.5])

    def program(x):
        y = x**x
        return np.sum(y + np.sin(y) / 2)

    exact = float(np.dot((1 + np.cos(x**x) / 2) * x**x * (np.log(x) + 1), v))
    one = fd.directional(program, (x,), (v,), complex_step=False)
    assert abs(one.value - exact) > 100 * one.error  # the single table's estimate does not bound its error
    sure = fd.confirmed(program, (x,), (v,), complex_step=False)
    assert abs(sure.value - exact) <= sure.error and sure.error < 1e-6 * abs(exact)


@pytest.mark.parametrize("seed", [0, 2])
def test_large_program_values_do_not_make_a_right_rule_wrong(seed):
    result = _context_findings(self_power_rrule, seed)
    assert result.findings == [] and result.verdict == "pass"
    assert {c["status"] for c in result.safety_matrix["cells"]} == {"right"}


def test_large_program_values_do_not_hide_stale_state():
    result = _context_findings(self_power_cached_rrule)
    (finding,) = result.findings
    assert finding.check_id == "GG501" and finding.location == "context called-twice"
    assert re.fullmatch(
        r"in context `called-twice` \(the rule is called twice on two inputs; both outputs are used\) the gradient "
        rf"of the program is wrong under tape\[zero\], tape\[skip\]{TORCH_RE} \(relative error \S+\)\.",
        finding.message,
    ), finding.message
    assert "keep each call's residuals in the pullback's own closure" in finding.fix


def exp_(x):
    return np.exp(x)


HUGE_EXP = arrays(shape=(2, 3), min_value=-20.0, max_value=20.0)  # HIPS/autograd's exp in the corpus: y up to 5e8


@rrule(exp_, HUGE_EXP)
def exp_rrule(x):
    ans = np.exp(x)
    return ans, lambda g: (None,) if g is None else (ans * g,)


@rrule(exp_, HUGE_EXP)
def exp_cached_rrule(x):
    _LAST["exp"] = np.exp(x)  # the pullback reads whatever the latest call left here
    return _LAST["exp"].copy(), lambda g: (None,) if g is None else (_LAST["exp"] * g,)


def test_finer_tables_that_contradict_a_confirmed_value_widen_its_error():
    """y + sin(y) / 2 with y = exp(x) ~ 1e8 turns every 6e-8 in x: the first two tables (steps from 1.8e-2)
    agree on the slope without its cos(y) / 2 term, and only the finest table sees the term."""
    x = np.array([-17.561, -12.278, -7.28, 18.384, -1.041, 0.5])
    v = np.array([0.483, -0.279, 0.558, -0.488, 0.145, -0.084])
    c = np.array([0.3, -0.6, 0.9, 0.7, -0.2, 0.4])

    def program(x):
        y = np.exp(x)
        return np.sum(c * (y + np.sin(y) / 2))

    exact = float(np.dot(c * np.exp(x) * (1 + np.cos(np.exp(x)) / 2), v))
    one = fd.directional(program, (x,), (v,), complex_step=False)
    assert abs(one.value - exact) > 1e4 * one.error  # the coarse table is sure of the averaged slope
    sure = fd.confirmed(program, (x,), (v,), complex_step=False)
    assert abs(sure.value - exact) <= sure.error, (sure, exact)


@pytest.mark.parametrize("seed", [0, 2, 3])
def test_large_outputs_keep_the_context_programs_resolvable_and_exp_right(seed):
    """exp of up to 20 gives outputs up to 5e8: the loss's sin turns over the output's range, not every 1e-8,
    so the finite differences of every program resolve its slope and every engine is judged right."""
    result = _context_findings(exp_rrule, seed)
    assert result.findings == [] and result.verdict == "pass", [f.message for f in result.findings]
    assert {c["status"] for c in result.safety_matrix["cells"]} == {"right"}


def test_the_loss_is_y_plus_sin_y_over_2_for_moderate_outputs_and_widens_for_large_ones():
    from gradguard.checker.contexts._ops import LossWeights, numpy_ops
    from gradguard.checker.contexts._programs import loss_scale, loss_weights

    assert loss_scale(np.array([0.5, -3.0, np.nan])) == 1.0
    assert loss_scale(np.array([[1e8, -2.0]])) == pytest.approx(1e8 / np.pi)
    rng = np.random.default_rng(0)
    y = (np.array([0.3, -2.5]), np.array([4e8, -1.0]))
    w = loss_weights(y, rng)
    assert isinstance(w, LossWeights) and w.scales[0] == 1.0 and w.scales[1] == pytest.approx(4e8 / np.pi)
    ops = numpy_ops(lambda x: x)
    moderate = np.sum(w.weights[0] * (y[0] + np.sin(y[0]) / 2))
    large = np.sum(w.weights[1] * (y[1] + w.scales[1] * np.sin(y[1] / w.scales[1]) / 2))
    assert ops.loss(y, w) == moderate + large
    assert ops.loss(y[0], w.weights[0]) == moderate  # plain weights: s = 1, bit for bit the loss it always was


def test_program_values_finite_differences_cannot_resolve_do_not_hide_stale_state_of_exp():
    result = _context_findings(exp_cached_rrule)
    (finding,) = result.findings
    assert finding.check_id == "GG501" and finding.location == "context called-twice"
    assert re.fullmatch(
        r"in context `called-twice` \(the rule is called twice on two inputs; both outputs are used\) the gradient "
        rf"of the program is wrong under tape\[zero\], tape\[skip\]{TORCH_RE} \(relative error \S+\)\.",
        finding.message,
    ), finding.message


def test_a_finite_difference_too_coarse_to_judge_is_no_verdict():
    from gradguard.checker import tolerances
    from gradguard.checker.contexts._verdict import compare

    tol = tolerances.for_dtype("float64")
    assert compare(1.0, 1.02, 0.0, tol, 1.0) == ("wrong", "<gradient, v> = 1, finite differences of the program give 1.02")
    assert compare(1.0, 1.02, 0.02, tol, 1.0) == (
        "skipped",
        "no verdict: finite differences of the program give 1.02 ± 0.2, an error bound too wide to judge "
        "<gradient, v> = 1 (finite differences cannot resolve the program's derivative at this input)",
    )
    assert compare(1.0, 1.0001, 0.0001, tol, 1.0) == (
        "right",
        "right within the finite differences' error bound: <gradient, v> = 1, finite differences of the program "
        "give 1.0001 ± 0.001",
    )
    assert compare(1.5, 1.0001, 0.0001, tol, 1.0)[0] == "wrong"  # a wider bound still finds a wide miss


# -- every input from the rule's own specs; NaN is the same value as NaN -----------------------------------
def gaps(x):
    return np.sum(np.abs(np.diff(x)) ** 1.5)


INCREASING = arrays(shape=(6,), min_value=0.0, max_value=10.0).map(np.sort)  # the declared domain: sorted values


def _spread(w):
    """The tangent of sum(f(diff(x))) from f'(diff(x)) = w."""
    t = np.zeros(w.size + 1)
    t[:-1] -= w
    t[1:] += w
    return t


@rrule(gaps, INCREASING)
def gaps_rrule(x):
    d = np.diff(x)  # positive on the declared domain, so |d| = d
    return gaps(x), lambda g: (None,) if g is None else (_spread(1.5 * np.sqrt(d) * g),)


_GAPS = {}


@rrule(gaps, INCREASING)
def gaps_shared_rrule(x):
    _GAPS["d"] = np.diff(x)  # the residual kept in a module-level buffer: the pullback reads the latest call's
    return gaps(x), lambda g: (None,) if g is None else (_spread(1.5 * np.sqrt(_GAPS["d"]) * g),)


@pytest.mark.parametrize("seed", [0, 1])
def test_contexts_use_only_inputs_drawn_from_the_specs(seed):
    from gradguard.checker.contexts._inputs import draw_inputs

    _, second, _ = draw_inputs(gaps_rrule, seed)
    assert np.all(np.diff(second[0]) >= 0)  # a draw of the spec, not a reversed copy of the first
    result = _context_findings(gaps_rrule, seed)
    assert result.findings == [] and result.verdict == "pass"
    assert set(_statuses(result.safety_matrix, "called-twice").values()) == {"right"}


def test_stale_state_is_still_found_on_a_declared_domain():
    (finding,) = _context_findings(gaps_shared_rrule).findings
    assert finding.check_id == "GG501" and finding.location == "context called-twice"
    assert finding.message.startswith("in context `called-twice` (the rule is called twice on two inputs; both "
                                      "outputs are used) the gradient of the program is wrong under tape[zero], ")


def half_square(x, d):
    return 0.5 * x * x


# The derivative passed in beside x, drawn with it (fairseq's LogSumExpMoE takes softmax(logp) beside logp).
WITH_ITS_DERIVATIVE = arrays(shape=(3,), min_value=-3.0, max_value=3.0).map(lambda x: (x, x.copy()))


@rrule(half_square, args=WITH_ITS_DERIVATIVE, nondiff=(1,))
def half_square_given_rrule(x, d):
    return half_square(x, d), lambda g: (None, None) if g is None else (g * d, None)


@rrule(half_square, args=WITH_ITS_DERIVATIVE, nondiff=(1,))
def half_square_given_twice_rrule(x, d):
    return half_square(x, d), lambda g: (None, None) if g is None else (2 * g * d, None)


@pytest.mark.parametrize("seed", [0, 1])
def test_called_twice_passes_the_second_draw_whole(seed):
    """The second call of `called-twice` takes the second draw's arguments that are not differentiated too: the
    specs drew them with its differentiated ones, and the first draw's beside the second's is no input the specs
    make (the rule's gradient there is "wrong" only because the input is)."""
    result = _context_findings(half_square_given_rrule, seed)
    assert result.findings == [] and result.verdict == "pass"
    assert set(_statuses(result.safety_matrix, "called-twice").values()) == {"right"}
    broken = _context_findings(half_square_given_twice_rrule, seed)
    assert "GG501" in {f.check_id for f in broken.findings}
    assert set(_statuses(broken.safety_matrix, "called-twice").values()) == {"wrong"}


def _log_softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def cross_entropy(logits, labels):
    return np.sum(-labels * _log_softmax(logits), axis=-1)


# TensorFlow's softmax cross-entropy takes labels that are distributions: the spec draws them through a .map, and
# declares no range of its own.
LABEL_ROWS = arrays(shape=(2, 4), min_value=0.01, max_value=1.0).map(lambda p: p / np.sum(p, axis=-1, keepdims=True))


@rrule(cross_entropy, arrays(shape=(2, 4), min_value=-10.0, max_value=10.0), LABEL_ROWS)
def cross_entropy_rrule(logits, labels):  # tensorflow/python/ops/nn_grad.py: softmax - labels, -log_softmax
    d_logits, d_labels = np.exp(_log_softmax(logits)) - labels, -_log_softmax(logits)
    return cross_entropy(logits, labels), lambda g: (g[:, None] * d_logits, g[:, None] * d_labels)


@rrule(cross_entropy, arrays(shape=(2, 4), min_value=-10.0, max_value=10.0), LABEL_ROWS)
def cross_entropy_sign_rrule(logits, labels):
    d_logits, d_labels = np.exp(_log_softmax(logits)) - labels, _log_softmax(logits)  # the labels' sign lost
    return cross_entropy(logits, labels), lambda g: (g[:, None] * d_logits, g[:, None] * d_labels)


def test_an_array_goes_to_an_undeclared_domain_only_within_the_range_of_its_draws():
    """`same-array-twice` passes one drawn array in two slots. The labels' spec declares no range (a .map), so the
    range of the labels' own draws stands in for one: the logits' negative values are not passed as labels (rows
    that do not sum to 1, where the rule's -log_softmax is not the derivative), the labels' array may be passed as
    logits (inside [-10, 10]), and a wrong rule is still wrong there."""
    result = check(cross_entropy_rrule, select="GG5", seed=0).rules[0]
    assert result.findings == [] and result.verdict == "pass", [f.message for f in result.findings]
    assert set(_statuses(result.safety_matrix, "same-array-twice").values()) == {"right"}
    broken = check(cross_entropy_sign_rrule, select="GG5", seed=0).rules[0]
    assert set(_statuses(broken.safety_matrix, "same-array-twice").values()) == {"wrong"}


def log_(x):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log(x)


WIDE = arrays(shape=(3,), min_value=-1.0, max_value=1.0)  # wider than log's domain: the program's value is NaN


@rrule(log_, WIDE)
def log_rrule(x):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log(x), lambda g: (None,) if g is None else (g / x,)


@rrule(log_, WIDE)
def log_abs_rrule(x):
    with np.errstate(divide="ignore"):
        return np.log(np.abs(x)), lambda g: (None,) if g is None else (g / x,)  # not the primal below 0


def test_nan_against_nan_is_not_a_different_value():
    result = _context_findings(log_rrule)
    assert [f.check_id for f in result.findings] == []
    used = [c for c in result.safety_matrix["cells"] if c["context"] == "output-used"]
    assert len(used) == 3 + len(TORCH) and all(c["status"] == "skipped" for c in used)  # NaN under NumPy: no ground truth
    assert all(c["message"].startswith("no ground truth: the program's value is nan at this input") for c in used)


# -- no value, or a derivative beyond float64: nothing to hold a non-finite gradient to -------------------
def reciprocal(x):
    return 1.0 / x


@rrule(reciprocal, st.just(np.array([5e-324, 2.0])))  # 1/x is inf there: Chainer's digamma/lgamma drew such points
def reciprocal_at_subnormal_rrule(x):
    with np.errstate(all="ignore"):
        return 1.0 / x, lambda g: (-g / x**2,)


@rrule(reciprocal, st.just(np.array([1e-200, 2.0])))  # 1/x is 1e200; its derivative, -1e400, is not a float64
def reciprocal_derivative_overflows_rrule(x):
    with np.errstate(all="ignore"):
        return 1.0 / x, lambda g: (-g / x**2,)


@rrule(reciprocal, st.just(np.array([0.5, 2.0])))
def reciprocal_nan_rrule(x):
    with np.errstate(all="ignore"):
        return 1.0 / x, lambda g: (-g / x**2 * np.array([np.nan, 1.0]),)  # BUG: NaN where 1/x is smooth


def test_a_program_without_a_value_gives_no_ground_truth():
    result = _context_findings(reciprocal_at_subnormal_rrule)
    assert [f.check_id for f in result.findings] == []
    used = [c for c in result.safety_matrix["cells"] if c["context"] == "output-used"]
    assert used and all(c["status"] == "skipped" for c in used)
    assert all(re.fullmatch(r"no ground truth: the program's value is (inf|nan) at this input under plain NumPy",
                            c["message"]) for c in used), used
    unused = [c for c in result.safety_matrix["cells"] if c["context"] == "output-unused" and c["status"] != "right"]
    assert [c["engine"] for c in unused] == ["tape[zero]"], unused  # the program is finite; the rule's value is not
    assert all(re.fullmatch(r"no verdict: the gradient is not finite \(<gradient, v> = nan\) where the rule itself "
                            r"has no derivative float64 holds: call 1 of the rule gives inf at this input under plain "
                            r"NumPy",
                            c["message"]) for c in unused), unused


def test_a_non_finite_gradient_where_finite_differences_resolve_nothing_is_no_verdict():
    result = _context_findings(reciprocal_derivative_overflows_rrule)
    used = [c for c in result.safety_matrix["cells"] if c["context"] == "output-used" and c["engine"] == "jax"]
    assert used[0]["status"] == "skipped", used
    assert re.fullmatch(r"no verdict: the gradient is not finite \(<gradient, v> = -?inf\), and finite differences of "
                        r"the program \(\S+ ± \S+\) cannot resolve a derivative at this input to hold it to",
                        used[0]["message"]), used
    assert [f.check_id for f in result.findings] == []
    # its output unused, the rule's pullback gives 0 * inf = NaN: the rule's own derivative is beyond float64
    unused = [c for c in result.safety_matrix["cells"] if c["context"] == "output-unused" and c["status"] != "right"]
    assert unused and all(c["message"].endswith(
        "where the rule itself has no derivative float64 holds: the derivative at call 1 of the rule is beyond float64 "
        "(its pullback's tangent for a unit cotangent is not finite and finite differences resolve none) at this "
        "input under plain NumPy") for c in unused), unused


def test_a_non_finite_gradient_where_the_program_is_smooth_is_still_wrong():
    result = _context_findings(reciprocal_nan_rrule)
    assert "GG501" in [f.check_id for f in result.findings]
    assert any("a non-finite gradient" in f.message for f in result.findings if f.check_id == "GG501")


def test_a_finite_value_against_nan_is_a_different_value():
    result = _context_findings(log_abs_rrule)
    (finding,) = result.findings
    assert finding.check_id == "GG503"
    assert re.fullmatch(
        r"the program computes a different value under AD than when run, so AD differentiates a different function "
        r"from the one users run: `output-used`: tape\[zero\] \S+, tape\[skip\] \S+, jax \S+"
        + "".join(rf", {e} \S+" for e in TORCH) + r" vs nan "
        r"when run; .*\.",
        finding.message,
    ), finding.message


# -- contexts that need special shapes draw them from the user's strategy ---------------------------------
def matmul(a, b):
    return a @ b


DIMS = st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4))
PAIRS = DIMS.flatmap(lambda d: st.tuples(arrays(shape=(d[0], d[1])), arrays(shape=(d[1], d[2]))))


@rrule(matmul, args=PAIRS)
def matmul_rrule(a, b):
    return a @ b, lambda g: (None, None) if g is None else (g @ b.T, a.T @ g)


@rrule(matmul, args=PAIRS)
def matmul_shared_rrule(a, b):
    if np.shares_memory(a, b):  # x @ x.T: "helpfully" returns the total derivative in both slots
        total = lambda g: g @ b.T + (a.T @ g).T  # noqa: E731
        return a @ b, lambda g: (None, None) if g is None else (total(g), total(g).T)
    return a @ b, lambda g: (None, None) if g is None else (g @ b.T, a.T @ g)


def test_shaped_contexts_draw_fitting_inputs_from_the_users_strategy():
    m = safety_matrix(matmul_rrule, seed=0)
    for context in ("same-array-twice", "transposed-alias", "tied-weights"):
        assert context in m["contexts"], m["skipped"]
        assert set(_statuses(m, context).values()) == {"right"}
    searched = [d for d in m["descriptions"].values() if "further draws from the argument specs" in d]
    assert searched and all(re.search(r"the richest of \d+ fitting draws among \d+ further draws", d) for d in searched)


def test_an_aliasing_bug_is_found_on_drawn_shapes():
    result = _context_findings(matmul_shared_rrule)
    locations = [(f.check_id, f.location) for f in result.findings]
    assert ("GG502", "context transposed-alias") in locations, [f.message for f in result.findings]
    finding = next(f for f in result.findings if f.location == "context transposed-alias")
    assert finding.message.startswith(
        "in context `transposed-alias` (an array and its transpose in two slots: rule(x, x.T)) the gradient of the "
        f"program is wrong under {', '.join(['tape[zero]', 'tape[skip]', *TORCH])} (relative error "
    )


def cube(x):
    return x**3


@rrule(cube, arrays(shape=(3,)))
def cube_rrule(x):
    return x**3, lambda g: (None,) if g is None else (3 * x**2 * g,)


def test_a_context_no_draw_can_fit_is_skipped_without_searching():
    m = safety_matrix(cube_rrule)  # every draw has shape (3,): no draw can give x and x.T
    reasons = {s["context"]: s["reason"] for s in m["skipped"]}
    assert reasons["transposed-alias"] == (
        "the rule has no two 2-D array arguments with transposed shapes (for x and x.T)"
    )


# -- a float32 program flat at the finite differences' finer steps (jax-ml/jax b0805a8's fixed celu) ----------
def neg_expm1(x):
    return np.expm1(np.minimum(x, np.float32(0.0)))


FAR_NEGATIVE_F32 = arrays(shape=(3,), dtype="float32", min_value=-1000.0, max_value=-300.0)


@rrule(neg_expm1, FAR_NEGATIVE_F32)
def neg_expm1_f32_rrule(x):
    return neg_expm1(x), lambda g: (None,) if g is None else ((g * np.exp(np.minimum(x, 0.0))).astype(x.dtype),)


@rrule(neg_expm1, FAR_NEGATIVE_F32)
def neg_expm1_f32_unit_rrule(x):
    return neg_expm1(x), lambda g: (None,) if g is None else (g.astype(x.dtype),)  # BUG: the derivative is exp(x) ~ 0


def test_a_float32_program_below_its_resolution_is_no_ground_truth_of_zero():
    """`captured-before` adds dot(x, x) ~ 1e6 in float32: at the finer Richardson steps the program does not change
    at all, and a table of equal values claims a slope of 0 with no error. The rounding at the step bounds it."""
    result = _context_findings(neg_expm1_f32_rrule)
    assert result.findings == [] and result.verdict == "pass"
    assert "wrong" not in {c["status"] for c in result.safety_matrix["cells"]}


def test_a_wrong_float32_rule_is_still_found_where_the_program_resolves_it():
    result = _context_findings(neg_expm1_f32_unit_rrule)
    output_used = [f for f in result.findings if f.location == "context output-used"]
    (finding,) = output_used
    assert re.fullmatch(
        r"in context `output-used` \(the output goes through y \+ s sin\(y/s\)/2 \(s = 1 unless the output exceeds "
        r"pi or a finite-difference step moves it further\) into a random linear functional\) the "
        rf"gradient of the program is wrong under tape\[zero\], tape\[skip\], jax{TORCH_RE} \(\S+ where the program's "
        r"gradient is 0\)\.",  # exp(x) of 1e-38 and below: the program's gradient is 0 to the tolerance
        finding.message,
    ), finding.message


# -- aliasing contexts stay inside each argument's declared domain ---------------------------------------------------
# distrax's von Mises CDF (a location and a concentration > 0, both arrays of one shape) was reported GG502: the
# same-array-twice context passed the location's negative values as the concentration, where the rule was never
# meant to be right. A scale taken by its absolute value shows the same: the pullback uses k where the primal
# uses |k|, right on the declared domain k > 0 only.
def scale_by(x, k):
    return x * np.abs(k)


@rrule(scale_by, arrays(shape=(3,), min_value=-2.0, max_value=-0.5), arrays(shape=(3,), min_value=0.5, max_value=2.0))
def scale_by_disjoint_rrule(x, k):
    return x * np.abs(k), lambda g: (None, None) if g is None else (g * k, g * x)  # |k| = k for k > 0


@rrule(scale_by, arrays(shape=(3,), min_value=-2.0, max_value=2.0), arrays(shape=(3,), min_value=0.5, max_value=2.0))
def scale_by_overlapping_rrule(x, k):
    return x * np.abs(k), lambda g: (None, None) if g is None else (g * k, g * x)


@rrule(scale_by, arrays(shape=(3,), min_value=-2.0, max_value=2.0), arrays(shape=(3,), min_value=0.5, max_value=2.0))
def scale_by_aliasing_bug_rrule(x, k):
    def pullback(g):
        if g is None:
            return None, None
        if x is k:  # BUG: special-cases aliasing, so rule(x, x) loses the second slot's share
            return g * k, np.zeros_like(x)
        return g * k, g * x

    return x * np.abs(k), pullback


def test_an_aliasing_context_never_passes_an_array_outside_the_other_arguments_declared_range():
    m = safety_matrix(scale_by_disjoint_rrule, seed=0)
    reasons = {s["context"]: s["reason"] for s in m["skipped"]}
    assert reasons["same-array-twice"] == (
        "argument 0's drawn values lie outside argument 1's declared range [0.5, 2]; argument 1's drawn values lie "
        "outside argument 0's declared range [-2, -0.5] (the declared domains share no array, so no draw can fit)"
    )
    result = check(scale_by_disjoint_rrule, select="GG5", seed=0).rules[0]
    assert result.verdict == "pass", [f.message for f in result.findings]
    assert {s["id"]: s["reason"] for s in result.checks_skipped}["GG502"] == (
        "no aliasing context applies: same-array-twice: " + reasons["same-array-twice"]
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_where_the_declared_ranges_overlap_the_aliasing_context_draws_an_array_inside_both(seed):
    m = safety_matrix(scale_by_overlapping_rrule, seed=seed)
    assert "same-array-twice" in m["contexts"], m["skipped"]
    assert set(_statuses(m, "same-array-twice").values()) == {"right"}
    result = check(scale_by_overlapping_rrule, select="GG5", seed=seed).rules[0]
    assert result.verdict == "pass", [f.message for f in result.findings]


def test_an_aliasing_bug_is_still_found_inside_overlapping_declared_ranges():
    result = _context_findings(scale_by_aliasing_bug_rrule)
    finding = next(f for f in result.findings if f.location == "context same-array-twice")
    assert finding.check_id == "GG502"
    assert finding.message.startswith(
        "in context `same-array-twice` (the same array in two argument slots: rule(x, x)) the gradient of the "
        f"program is wrong under {', '.join(['tape[zero]', 'tape[skip]', *TORCH])} (relative error "
    ), finding.message


def sqrt_(x):
    return np.sqrt(x)


@rrule(sqrt_, st.just(np.array([0.0, 2.0])))  # Chainer's sqrt backward at 0: gy / (2 y) = 0 / 0 for an unused output
def sqrt_at_zero_rrule(x):
    y = np.sqrt(x)
    with np.errstate(all="ignore"):
        return y, lambda g: (g / (y * 2.0),)


def test_an_unused_output_at_a_vertical_tangent_is_no_verdict_as_gg301_warns():
    result = _context_findings(sqrt_at_zero_rrule)
    assert [f.check_id for f in result.findings] == []
    unused = [c for c in result.safety_matrix["cells"] if c["context"] == "output-unused" and c["status"] != "right"]
    assert unused and all(c["message"].endswith(
        "where the rule itself has no derivative float64 holds: call 1 of the rule is at a vertical tangent (its "
        "pullback's tangent for a unit cotangent is not finite and its one-sided difference quotients grow at every "
        "step) at this input under plain NumPy") for c in unused), unused


# -- an output whose derivative dwarfs its value: the loss's bend fitted to the finite differences' steps ---------------
# LogExpFunctions' xexpy (x * exp(y)) at x = 0, y = 50: the output is 0 and moves by 5.2e21 per unit of x. A bend of
# scale 1 turned billions of times over every step finite differences take, they saw only its average slope (1, not the
# 1.5 at x), and every engine's right gradient looked wrong by a third (GG501 in output-used).
XEXPY_X = np.array([0.0, -5.1889967850776921, 9.8262167324078575, -1.1169164234902969])
XEXPY_Y = np.array([50.0, 0.0, -0.3333333333333333, -28.758870650654604])


def xexpy(x, y):
    return x * np.exp(y)


@rrule(xexpy, st.just(XEXPY_X), st.just(XEXPY_Y))
def xexpy_rrule(x, y):  # LogExpFunctions.jl's rule: (exp(y) dΩ, Ω dΩ)
    e = np.exp(y)
    out = x * e
    return out, lambda g: (e * g, out * g)


@rrule(xexpy, st.just(XEXPY_X), st.just(XEXPY_Y))
def xexpy_doubled_at_zero_rrule(x, y):
    e = np.exp(y)
    out = x * e
    return out, lambda g: (e * g * np.where(x == 0, 2.0, 1.0), out * g)  # BUG: twice the derivative where x is 0


def test_a_bend_is_widened_to_what_the_first_step_moves_the_output():
    from gradguard.checker.contexts._inputs import draw_inputs
    from gradguard.checker.contexts._matrix import _generator
    from gradguard.checker.contexts._ops import numpy_ops
    from gradguard.checker.contexts._programs import BEND_TURN, Signature, by_name, fit_bends, weights_like

    (ctx,) = by_name(["output-used"])
    rng = _generator(0, ctx)
    args, args2, out = draw_inputs(xexpy_rrule, 0)
    plan = ctx.plan(Signature(xexpy_rrule, args, args2, out), rng)
    v = weights_like(plan.inputs, rng)
    step = fd.first_step(plan.inputs, v)
    (before,) = plan.consts
    assert before.scales == pytest.approx(np.max(np.abs(out)) / np.pi)  # fitted to the values: 7.04 / pi
    fitted = fit_bends(plan, v, xexpy, step)
    (after,) = fitted.plan.consts
    assert fitted.value is None  # the widened bend changes the program's value at x: the ground truth runs it again
    moved = np.max(np.abs(xexpy(*(a + step * d for a, d in zip(plan.inputs, v))) - out))
    assert moved > 1e18 and after.scales == pytest.approx(moved / BEND_TURN, rel=1e-12)
    assert after.weights is before.weights
    # A rule whose outputs move less than the bend's turn keeps its plan as it is.
    small = ctx.plan(Signature(xexpy_rrule, (XEXPY_X, np.zeros(4)), None, XEXPY_X), _generator(0, ctx))
    kept = fit_bends(small, weights_like(small.inputs, rng), xexpy, step)
    assert kept.plan is small and kept.value == small.program(numpy_ops(xexpy), small.consts, *small.inputs)


def test_a_right_gradient_of_an_output_whose_derivative_dwarfs_its_value_is_right():
    assert [f for f in _context_findings(xexpy_rrule).findings if f.severity == "error"] == []


def test_a_wrong_gradient_there_is_still_wrong():
    found = [(f.check_id, f.location) for f in _context_findings(xexpy_doubled_at_zero_rrule).findings
             if f.severity == "error" and f.check_id == "GG501"]
    assert ("GG501", "context output-used") in found, found


# A NamedTuple output (a JAX eigh's EighResult) whose bend was widened: the plan's weights were rebuilt with
# type(consts)(generator), which a NamedTuple refuses ("missing 1 required positional argument"), and GG501 crashed.
class _Pair(NamedTuple):
    big: Any
    small: Any


def _scaled_pair(x):
    return _Pair(1e4 * x, x.copy())


@rrule(_scaled_pair, arrays(shape=(3,), min_value=-1e-3, max_value=1e-3))
def scaled_pair_rrule(x):
    return _scaled_pair(x), lambda g: (1e4 * g[0] + g[1],)


@rrule(_scaled_pair, arrays(shape=(3,), min_value=-1e-3, max_value=1e-3))
def scaled_pair_broken_rrule(x):
    return _scaled_pair(x), lambda g: (1e4 * g[0],)  # BUG: drops the second output's cotangent


def test_a_named_tuple_output_whose_bend_is_widened_is_judged():
    assert [f.check_id for f in _context_findings(scaled_pair_rrule).findings if f.severity == "error"] == []
    found = {f.location for f in _context_findings(scaled_pair_broken_rrule).findings if f.check_id == "GG501"}
    assert "context output-used" in found, found


# -- tied weights: W.T only in a shape the spec makes ---------------------------------------------------------------------
# kymatio's ModulusStable takes (..., 2) arrays of complex numbers as (re, im) pairs. Declared on (3, 2), its W.T is a
# (2, 3) array its spec never makes; the primal runs on it (reading columns 0 and 1 as the pairs) while the pullback
# scales all three columns, and tied-weights reported a false GG502.
def modulus(x):
    return np.sqrt(x[..., 0] * x[..., 0] + x[..., 1] * x[..., 1])


@rrule(modulus, arrays(shape=(3, 2), min_value=0.5, max_value=2.0))
def modulus_rrule(x):
    out = modulus(x)
    return out, lambda g: (x * (g / out)[..., None],)


def test_tied_weights_passes_w_transposed_only_in_a_shape_the_spec_makes():
    m = safety_matrix(modulus_rrule, seed=0)
    (skipped,) = [s for s in m["skipped"] if s["context"] == "tied-weights"]
    assert skipped["reason"].startswith("the rule has no 2-D array argument that can also take its transpose (tied "
                                        "weights W, W.T): a square one, or one whose spec also draws the transposed shape")
    assert [f for f in _context_findings(modulus_rrule).findings if f.severity == "error"] == []
    # Where the spec draws both shapes, tied-weights runs on them (and its aliasing bugs are still found:
    # test_an_aliasing_bug_is_found_on_drawn_shapes).
    assert "tied-weights" in safety_matrix(matmul_rrule, seed=0)["contexts"]


# -- a rule that computes in float32 whatever its inputs ---------------------------------------------------------
def softplus_total_f32(x):
    """NeMo's RNN-T loss's pattern: float64 in, the loss computed and returned in float32."""
    return np.asarray(np.sum(np.logaddexp(np.float32(0), 40 * x.astype(np.float32))), dtype=np.float32)


@rrule(softplus_total_f32, arrays(shape=(3,), min_value=0.5, max_value=2.0))
def softplus_total_f32_rrule(x):
    grad = 40 / (1 + np.exp(-40 * x))
    return softplus_total_f32(x), lambda ybar: (None,) if ybar is None else (ybar * grad,)


@rrule(softplus_total_f32, arrays(shape=(3,), min_value=0.5, max_value=2.0))
def softplus_total_f32_halved_rrule(x):
    grad = 20 / (1 + np.exp(-40 * x))
    return softplus_total_f32(x), lambda ybar: (None,) if ybar is None else (ybar * grad,)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_program_through_a_float32_rule_is_differentiated_at_float32s_steps(seed):
    """NeMo's RNN-T loss returns float32 for float64 log-probabilities: the programs' finite differences took float64's
    steps (5.6e-7), over which the float32 loss did not move, and read a slope of 0 with no error, so a right cell
    was WRONG ("0.0707 where the program's gradient is 0") and most others no verdict. They take float32's steps and
    price in its rounding now: every cell is right, and a rule off by half is still wrong."""
    result = _context_findings(softplus_total_f32_rrule, seed)
    assert result.findings == [], [(f.check_id, f.message) for f in result.findings]
    statuses = {c["status"] for c in result.safety_matrix["cells"]}
    assert statuses <= {"right", "not applicable"} and "right" in statuses, result.safety_matrix["cells"]
    wrong = _context_findings(softplus_total_f32_halved_rrule, seed)
    assert "GG501" in {f.check_id for f in wrong.findings}


def test_gg503_holds_two_runs_of_a_float32_rule_to_float32s_rounding_and_shows_the_digits_that_differ() -> None:
    """fairscale's TargetScoreFunction casts its scores with .float() (an upcast from half precision, a downcast from
    float64): on a transposed view its float32 sums round otherwise than on the contiguous input, and GG503 called
    the program "a different function under AD": "torch 0.00141087 vs 0.00141087 when run". A value that differs
    beyond that rounding, or any difference in a float64 rule, still counts."""
    import numpy as np

    from gradguard.checker.checks.context import _value_differs
    from gradguard.checker.contexts import CONTEXTS
    from gradguard.checker.contexts._engine import Cell
    from gradguard.checker.contexts._matrix import Row

    def row(value: float, other: float, computed_at: float | None) -> Row:
        r = Row(CONTEXTS[0], computed_at=computed_at)
        r.value = value
        r.cells["torch"] = Cell("torch", "ran", value=other, slope=0.0)
        return r

    eps32 = float(np.finfo(np.float32).eps)
    assert not _value_differs(row(0.0014108700, 0.0014108700 + 2e-7, eps32), "torch")
    assert _value_differs(row(0.0014108700, 0.0014108700 + 2e-7, None), "torch")
    assert _value_differs(row(0.0014108700, 0.0028217400, eps32), "torch")  # a different function, float32 or not


# -- an input of many scales (camp_zipnerf's safe_sqrt: sqrt of x clipped at 0, its exact jvp) ------------------
# Seed 1 draws x = [6.1e-05, 0.99999, 7.8e+29, 6.4e-16] for `output-used`. One step for the whole input crosses the
# clip at 0 beside the small elements, where the pullback is exactly 0.5/sqrt(x) (1.98e7 at 6.4e-16), and two tables
# that both cross it agreed on -11.43 +- 64 against the engines' -8.07e6: a false GG501 error. Taken again at each
# of the input's scales, the elements of 7.8e29 resolve their share and agree, and the others resolve nothing
# (the program's value, 2e14, rounds away what steps of their size change): no verdict.
def clipped_sqrt(x):
    return np.sqrt(np.maximum(x, 0.0))


MANY_SCALES = arrays(shape=(4,), min_value=1e-30, max_value=1e30)


@rrule(clipped_sqrt, MANY_SCALES)
def clipped_sqrt_rrule(x):
    return clipped_sqrt(x), lambda g: (None,) if g is None else (0.5 * g / np.sqrt(x),)


def test_an_input_of_many_scales_is_no_verdict_where_no_step_resolves_its_small_elements():
    result = _context_findings(clipped_sqrt_rrule, seed=1)
    assert result.findings == [] and result.verdict == "pass"
    cells = [c for c in result.safety_matrix["cells"] if c["context"] == "output-used"]
    assert {c["engine"] for c in cells} == {"tape[zero]", "tape[skip]", "jax", *TORCH}
    for cell in cells:
        assert cell["status"] == "skipped"
        assert re.fullmatch(
            r"no verdict: finite differences of the program along v \(-11\.4299 ± 6\.4e\+02\) resolve no derivative "
            r"to hold <gradient, v> = -8\.07392e\+06 to; taken again at each of the input's scales, with steps of that "
            r"scale's own size, against the gradient's share there \(elements of 7\.8e\+29: (\S+) against \1; elements "
            r"of 6\.1e-05 to 1: \S+ ± \S+, no derivative; elements of 6\.4e-16: \S+ ± \S+, no derivative\), where each "
            r"derivative they resolve agrees",
            cell["message"],
        ), cell["message"]


def _sqrt_sum(x):
    return float(np.sum(np.sqrt(np.maximum(x, 0.0))))


SCALES_X = (np.array([1e-12, 1.0]),)
SCALES_V = (np.array([0.8, -0.6]),)


def _by_scales(grads):
    from gradguard.checker import tolerances
    from gradguard.checker.contexts._verdict import by_scales

    slope = float(np.dot(grads[0], SCALES_V[0]))
    # one step of 0.018 along v crosses 0 at 1e-12: the whole input's finite differences resolve nothing there
    return by_scales(_sqrt_sum, SCALES_X, SCALES_V, grads, value=_sqrt_sum(SCALES_X[0]), slope=slope, truth=3.0,
                     fd_error=10.0, tol=tolerances.for_dtype("float64"), computed_at=None)


def test_at_the_inputs_own_scales_an_exact_gradient_is_right():
    status, message = _by_scales((0.5 / np.sqrt(SCALES_X[0]),))
    assert status == "right"
    assert re.fullmatch(
        r"right at the input's own scales: finite differences of the program along v \(3 ± 1e\+02\) resolve no "
        r"derivative to hold <gradient, v> = 400000 to; taken again at each of the input's scales, with steps of "
        r"that scale's own size, against the gradient's share there \(elements of 1: -0\.3 against -0\.3; elements of "
        r"1e-12: 400000 against 400000\)",
        message,
    ), message


@pytest.mark.parametrize("wrong_at", [0, 1])
def test_at_the_inputs_own_scales_a_wrong_share_leaves_the_cell_wrong(wrong_at):
    grads = 0.5 / np.sqrt(SCALES_X[0])
    grads[wrong_at] *= 2.0  # BUG: twice the derivative at one scale
    assert _by_scales((grads,)) is None


def log_of_negative(x):
    return np.log(-x)


@rrule(log_of_negative, st.just(np.array([-1e-9, -3e-9])))  # finite differences cannot step 1e-9 without leaving x < 0
def log_of_negative_at_the_edge_rrule(x):
    with np.errstate(all="ignore"):
        return np.log(-x), lambda g: (g / x,)


def test_no_step_inside_the_domain_is_said_as_such_without_advice_the_user_cannot_take():
    """At 1e-9 from the edge of the primal's domain every step finite differences take leaves it: the cell had no
    ground truth, with fd's own advice to "pass max_step", a parameter no user of the checker has."""
    result = _context_findings(log_of_negative_at_the_edge_rrule)
    used = [c for c in result.safety_matrix["cells"] if c["context"] == "output-used"]
    assert used and all(c["status"] == "skipped" for c in used)
    for cell in used:
        assert re.fullmatch(r"no ground truth: finite differences of the program found no step that stays where it is "
                            r"finite and does not raise, down to \S+ \(.*\): the input is that close to the edge of the "
                            r"program's domain or to a pole", cell["message"]), cell["message"]
        assert "max_step" not in cell["message"]
