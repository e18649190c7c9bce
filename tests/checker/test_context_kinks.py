"""Kinks of the rule at several call sites of a context program: valid subgradients of each call can sum to a
value outside the whole program's one-sided derivatives along v, and such a cell is no verdict; an answer
no choice of subgradients gives is still wrong."""

import importlib.util
import re

import numpy as np
import pytest
from hypothesis import strategies as st

from gradguard.checker import arrays, check, rrule
from gradguard.checker.contexts import Plan, run_matrix
from gradguard.checker.contexts._call_kinks import call_kinks_excuse
from gradguard.checker.contexts._inputs import draw_inputs
from gradguard.checker.contexts._matrix import _generator
from gradguard.checker.contexts._ops import numpy_ops
from gradguard.checker.contexts._programs import Signature, by_name, weights_like
from gradguard.checker.contexts._verdict import kink_excuse
from gradguard.checker import tolerances

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

TORCH = ["torch"] if importlib.util.find_spec("torch") else []
TORCH_RE = "".join(f", {e}" for e in TORCH)
TOL = tolerances.for_dtype("float64")


def maximum(self, other):
    return np.maximum(self, other)


def torch_max(self, other):
    """PyTorch's max(self, other) formula: at a tie the whole cotangent goes to ``other``."""
    return lambda g: (np.where(self <= other, 0, g), np.where(self > other, 0, g))


def both_max(self, other):
    """HIPS/autograd before #141: at a tie both arguments get the whole cotangent (no subgradient)."""
    ans = np.maximum(self, other)
    return lambda g: (g * (self == ans), g * (other == ans))


def doubled_max(self, other):
    """PyTorch's formula with the tie's cotangent doubled (no subgradient)."""
    return lambda g: (np.where(self <= other, 0, g), np.where(self > other, 0, g) * np.where(self == other, 2, 1))


# -- the range itself, on a program whose value is 0 everywhere ----------------------------------------------
def _cancelling_plan():
    """max(a, b) - max(b, a) at a = b = 0, moved along v = (1, 0): identically 0, so both one-sided
    derivatives of the program are 0. PyTorch's formula gives call 1's cotangent to b (0 along v) and call
    2's to a (-1 along v): <gradient, v> = -1. By hand: call 1's element has one-sided derivatives 0 and 1
    (weight +1), call 2's the same (weight -1), so valid subgradients of each call sum to values from -1 to 1."""

    def program(ops, consts, a, b):
        return ops.xp.sum(ops.call(a, b)) - ops.xp.sum(ops.call(b, a))

    return Plan((np.zeros(1), np.zeros(1)), (), program), (np.ones(1), np.zeros(1))


def _excuse(slope):
    plan, v = _cancelling_plan()
    return call_kinks_excuse(maximum, plan, v, slope=slope, truth=0.0, fd_error=0.0, tol=TOL, scale=1.0)


def test_the_programs_own_sides_do_not_bracket_a_valid_answer_of_two_calls():
    plan, v = _cancelling_plan()
    program = lambda *xs: float(plan.program(numpy_ops(maximum), (), *xs))
    assert program(*plan.inputs) == 0.0
    found = kink_excuse(program, lambda args: -1.0, plan.inputs, v, engine="tape", slope=-1.0, truth=0.0,
                        fd_error=0.0, step=1e-5, tol=TOL, scale=1.0)
    assert found is None, "the whole program's one-sided derivatives are both 0: they cannot excuse -1"


@pytest.mark.parametrize("slope", [-1.0, 0.0, 1.0, 0.5])
def test_valid_subgradients_of_each_call_combine_to_the_exact_range(slope):
    found = _excuse(slope)
    assert found is not None
    assert found == (
        "no verdict: the rule's primal has kinks at 2 of its 2 calls here (2 output elements whose derivatives "
        "along the direction their arguments move differ between their two sides or between the pieces that meet "
        "there); taking each such element's derivative anywhere between the smallest and largest of those (a valid "
        "subgradient of each call) gives <gradient, v> from -1 to 1, "
        f"and both <gradient, v> = {slope:.6g} and finite differences of the program (0) lie among them"
    )


@pytest.mark.parametrize("slope", [-2.0, 2.0, -1.01])
def test_an_answer_no_choice_of_subgradients_gives_is_not_excused(slope):
    assert _excuse(slope) is None  # -2: the tie's cotangent doubled in both calls


def max_norm(x, p):  # norm(x, p) at p = inf, the constant passed to every call
    assert p == np.inf
    return np.max(np.abs(x))


def test_an_infinite_constant_argument_is_held_not_a_direction_of_nan():
    """ChainRules.jl's norm(x, Inf) (tests/realworld/correct_chainrules.py) called twice at ties: p = inf is passed
    to each call, and inf - inf made its move NaN, so the calls were never taken apart and valid subgradients of
    each call summed to a GG501. The same range as the cancelling plan's: -1 to 1."""

    def program(ops, consts, a, b):
        return ops.call(a, np.inf) - ops.call(b, np.inf)

    plan = Plan((np.zeros(1), np.zeros(1)), (), program)
    found = call_kinks_excuse(max_norm, plan, (np.ones(1), np.ones(1)), slope=1.0, truth=0.0, fd_error=0.0, tol=TOL,
                              scale=1.0)
    assert found is not None and "gives <gradient, v> from -2 to 2" in found, found
    assert call_kinks_excuse(max_norm, plan, (np.ones(1), np.ones(1)), slope=2.5, truth=0.0, fd_error=0.0, tol=TOL,
                             scale=1.0) is None


def test_a_rule_whose_arguments_bend_with_the_input_is_not_taken_apart():
    def program(ops, consts, a, b):  # the second call's arguments are not affine in the inputs
        return ops.xp.sum(ops.call(a, b)) - ops.xp.sum(ops.call(b * b, a))

    plan = Plan((np.zeros(1), np.zeros(1)), (), program)
    assert call_kinks_excuse(maximum, plan, (np.ones(1), np.ones(1)), slope=-1.0, truth=0.0, fd_error=0.0,
                             tol=TOL, scale=1.0) is None


def test_a_primal_that_changes_from_run_to_run_is_not_taken_apart():
    rng = np.random.default_rng(0)

    def noisy_maximum(self, other):  # its noise would pass for kinks of any size
        return np.maximum(self, other) + 1e-3 * rng.standard_normal(np.shape(self))

    plan, v = _cancelling_plan()
    assert call_kinks_excuse(noisy_maximum, plan, v, slope=-5.0, truth=0.0, fd_error=0.0, tol=TOL, scale=1.0) is None


# -- the corpus rule at the seed that showed the false error -----------------------------------------------
TIES = st.sampled_from([-1.0, 0.0, 2.0])
SEED = 9  # its draws tie 3 elements in the first call and 2 in the second, weighted both ways


def _twin(pullback):
    @rrule(maximum, arrays(shape=(4,), elements=TIES), arrays(shape=(4,), elements=TIES))
    def max_binary_rrule(self, other):
        return np.maximum(self, other), pullback(self, other)

    return max_binary_rrule


def _by_hand(rule, pullback):
    """The called-twice program's range of valid answers, and the rule's <gradient, v>, by hand: the loss
    y + sin(y)/2 (outputs within pi of 0) weighted by c gives element j of call k the cotangent
    c_j (1 + cos(z_j)/2); at a tie its derivative along v lies between v_self and v_other."""
    args, args2, out = draw_inputs(rule, SEED)
    (ctx,) = by_name(["called-twice"])
    rng = _generator(SEED, ctx)
    plan = ctx.plan(Signature(rule, args, args2, out), rng)
    v = weights_like(plan.inputs, rng)
    low = high = slope = 0.0
    ties = 0
    for k in range(2):
        a, b = plan.inputs[2 * k], plan.inputs[2 * k + 1]
        assert plan.consts[k].scales == 1.0
        ybar = plan.consts[k].weights * (1 + np.cos(np.maximum(a, b)) / 2)
        va, vb = v[2 * k], v[2 * k + 1]
        low += np.sum(np.where(a > b, ybar * va, np.where(a < b, ybar * vb, np.minimum(ybar * va, ybar * vb))))
        high += np.sum(np.where(a > b, ybar * va, np.where(a < b, ybar * vb, np.maximum(ybar * va, ybar * vb))))
        ga, gb = pullback(a, b)(ybar)
        slope += np.sum(ga * va) + np.sum(gb * vb)
        ties += int(np.sum(a == b))
    return low, high, slope, ties


def _called_twice(rule):
    (row,) = run_matrix(rule, seed=SEED, contexts=["called-twice"]).rows
    return row


def test_a_valid_tie_in_two_calls_bent_opposite_ways_is_no_verdict():
    rule = _twin(torch_max)
    low, high, slope, ties = _by_hand(rule, torch_max)
    assert ties >= 2 and low <= slope <= high
    row = _called_twice(rule)
    assert not tolerances.close(row.slope, slope, TOL, fd_error=row.fd_error), "the input shows the problem"
    statuses = {c.status for c in row.cells.values()}
    assert statuses == {"skipped"}, {e: c.message for e, c in row.cells.items()}
    for cell in row.cells.values():
        assert tolerances.close(cell.slope, slope, TOL)
        found = re.fullmatch(
            r"no verdict: the rule's primal has kinks at 2 of its 2 calls here \(\d+ output elements whose "
            r"derivatives along the direction their arguments move differ between their two sides or between the pieces "
            r"that meet there\); taking each such element's derivative anywhere between the smallest and largest of "
            r"those \(a valid subgradient of each call\) gives "
            r"<gradient, v> from (\S+) to (\S+), and both <gradient, v> = (\S+) and finite differences of the "
            r"program \((\S+)\) lie among them, as the gradient does along itself and 6 random directions", cell.message)
        assert found, cell.message
        assert tolerances.close(float(found[1]), low, TOL) and tolerances.close(float(found[2]), high, TOL)
    result = check(rule, seed=SEED, select=["GG501"]).rules[0]
    assert result.verdict != "error", result.error
    assert [f for f in result.findings if f.severity == "error"] == []


@pytest.mark.parametrize("pullback, inside_along_v", [(doubled_max, False), (both_max, True)], ids=["doubled", "both"])
def test_a_tie_no_subgradient_explains_is_still_wrong(pullback, inside_along_v):
    """The doubled tie lies outside the range along v; giving both arguments the whole cotangent happens to
    sum into it along v at this seed (each tie off by its own amount, the errors cancelling), and lies
    outside it along the gradient itself."""
    rule = _twin(pullback)
    low, high, slope, _ = _by_hand(rule, pullback)
    assert (low - 1e-6 <= slope <= high + 1e-6) == inside_along_v
    row = _called_twice(rule)
    for cell in row.cells.values():
        assert cell.status == "wrong" and tolerances.close(cell.slope, slope, TOL), (cell.engine, cell.message)
        assert cell.message == f"<gradient, v> = {slope:.6g}, finite differences of the program give {row.slope:.6g}"
    result = check(rule, seed=SEED, select=["GG501"]).rules[0]
    found = [f for f in result.findings if f.check_id == "GG501" and f.location == "context called-twice"]
    assert len(found) == 1 and found[0].severity == "error"
    assert re.fullmatch(
        r"in context `called-twice` \(the rule is called twice on two inputs; both outputs are used\) the gradient "
        rf"of the program is wrong under tape\[zero\], tape\[skip\], jax{TORCH_RE} \(relative error \S+\)\.",
        found[0].message,
    ), found[0].message


# -- ties in several output elements of one call, bent opposite ways by the loss ---------------------------------------
# MyGrad's max over axes (0, 2) gives each group's cotangent to its first maximum. At seed 2 two groups hold ties and
# the random loss weighs them -0.975 and 0.911: their one-hot answers sum to 4.60354, outside the program's one-sided
# derivatives along v (3.69, 4.48) but inside what valid subgradients give (3.57142 to 4.60354). The weights of the
# two tied elements were taken as not smooth because their finite differences, let down to steps whose rounding
# is within the tolerance at the cell's scale, were then judged at the weight's own, smaller scale.
TIED = st.sampled_from([-1.0, 0.0, 1.5, 3.0])


def max_over_0_2(x):
    return np.max(x, axis=(0, 2), keepdims=True)


def _first_maximum_pullback(x):
    z = x.transpose(1, 0, 2).reshape(x.shape[1], -1)
    first = np.argmax(z, axis=-1)

    def pullback(g):
        out = np.zeros_like(z)
        out[np.arange(z.shape[0]), first] = g.reshape(-1)
        return (out.reshape(x.shape[1], x.shape[0], x.shape[2]).transpose(1, 0, 2),)

    return pullback


@rrule(max_over_0_2, arrays(shape=(2, 3, 2), elements=TIED))
def max_first_tie_rrule(x):
    return max_over_0_2(x), _first_maximum_pullback(x)


@rrule(max_over_0_2, arrays(shape=(2, 3, 2), elements=TIED))
def max_every_tie_rrule(x):
    def pullback(g):
        return (np.where(x == max_over_0_2(x), g, 0.0),)  # BUG: every tied maximum gets the whole cotangent

    return max_over_0_2(x), pullback


def test_ties_of_one_call_weighted_opposite_ways_are_no_verdict():
    outcome = run_matrix(max_first_tie_rrule, seed=2)
    wrong = {(r.context.name, e) for r in outcome.rows for e, c in r.cells.items() if c.status == "wrong"}
    assert wrong == set(), wrong
    cell = next(r for r in outcome.rows if r.context.name == "captured-before").cells["tape[zero]"]
    assert re.search(r"no verdict: the rule's primal has kinks at 1 of its 1 calls here \(2 output elements .*\) gives "
                     r"<gradient, v> from 3\.5714[23] to 4\.60354, and both <gradient, v> = 4\.60354 and finite differences "
                     r"of the program \(4\.08748\) lie among them", cell.message or ""), cell.message


def test_every_tied_maximum_given_the_whole_cotangent_is_still_wrong():
    result = check(max_every_tie_rrule, select="GG501", seed=2).rules[0]
    assert [(f.check_id, f.location) for f in result.findings] == [("GG501", "context fan-out")], result.findings


# -- a kink that looks the same from both sides: the median of tied entries, in two calls ------------------------------
# PyTorch's median shares the cotangent among tied entries (a Clarke subgradient). The median of a three-way tie moves
# at the rate median(v_tied) on both sides along every line, so one-sided derivatives show no kink at either call, and
# the pieces that meet at the tie (each tied entry the median) show the range: at seed 0 of the called-twice context
# the shared cotangent sums to a value outside what the whole program's finite differences and the "jumps around"
# samples bracket, and inside the range the pieces give.
MEDIAN_TIES = st.sampled_from([-1.0, 0.0, 1.0, 2.0])


def median5(x):
    return np.sort(x)[2]


@rrule(median5, arrays(shape=(5,), elements=MEDIAN_TIES))
def median_shared_rrule(x):
    def pullback(g):
        mask = x == median5(x)
        return (np.where(mask, g / mask.sum(), 0.0),)

    return median5(x), pullback


@rrule(median5, arrays(shape=(5,), elements=MEDIAN_TIES))
def median_every_tie_rrule(x):
    def pullback(g):
        return (np.where(x == median5(x), g, 0.0),)  # BUG: every tied entry gets the whole cotangent

    return median5(x), pullback


def _median_by_hand(plan, v):
    """The range of valid answers by hand: call k's cotangent is c_k (1 + cos(median)/2) (the loss y + sin(y)/2
    weighted by c), and a valid subgradient of a median at a tie moves at any rate between the smallest and
    largest of v's tied entries."""
    low = high = 0.0
    ties = []
    for k in range(2):
        x, vk = plan.inputs[k], v[k]
        y = median5(x)
        ybar = float(plan.consts[k].weights * (1 + np.cos(y) / 2))
        tied = x == y
        ties.append(int(tied.sum()))
        rates = ybar * vk[tied]
        low, high = low + rates.min(), high + rates.max()
    return low, high, ties


def test_a_shared_cotangent_at_ties_no_side_shows_is_no_verdict(monkeypatch):
    outcome = run_matrix(median_shared_rrule, seed=0, contexts=["called-twice"])
    (row,) = outcome.rows
    (ctx,) = by_name(["called-twice"])
    rng = _generator(0, ctx)
    args, args2, out = draw_inputs(median_shared_rrule, 0)
    plan = ctx.plan(Signature(median_shared_rrule, args, args2, out), rng)
    v = weights_like(plan.inputs, rng)
    low, high, ties = _median_by_hand(plan, v)
    assert min(ties) >= 3, ties
    assert {c.status for c in row.cells.values()} == {"skipped"}, {e: c.message for e, c in row.cells.items()}
    for cell in row.cells.values():
        found = re.search(r"gives <gradient, v> from (\S+) to (\S+), and both", cell.message)
        assert found and "between the pieces that meet there" in cell.message, cell.message
        assert abs(float(found[1]) - low) <= 1e-5 * abs(low) and abs(float(found[2]) - high) <= 1e-5 * abs(high), (
            found.groups(), low, high)  # the message's 6 digits
    # Without the pieces (one-sided derivatives only) the same input is a false error: the test shows the problem.
    monkeypatch.setattr("gradguard.checker.kinks.PIECE_SAMPLES", 0)
    (row,) = run_matrix(median_shared_rrule, seed=0, contexts=["called-twice"]).rows
    assert {c.status for c in row.cells.values()} == {"wrong"}


def test_every_tied_median_given_the_whole_cotangent_is_still_wrong():
    (row,) = run_matrix(median_every_tie_rrule, seed=0, contexts=["called-twice"]).rows
    for cell in row.cells.values():
        assert cell.status == "wrong", (cell.engine, cell.message)
        assert cell.message.startswith("<gradient, v> = ") and "finite differences of the program give" in cell.message


def test_the_pieces_of_a_smooth_function_are_its_derivative_and_of_a_tie_every_tied_entry():
    """A smooth element's derivative drifts with the distance from x (thinc's gelu, by 6e-7 at the samples'
    distance, passed for a kink and excused a real 3e-7 error in its pullback); extrapolated to distance 0 it is
    the derivative at x. The median of a three-way tie gets every tied entry's rate."""
    from gradguard.checker.kinks import piece_sides

    rng = np.random.default_rng(1)
    x, v = rng.uniform(-2, 2, 6), rng.uniform(-1, 1, 6)
    (side,) = piece_sides(lambda z: np.tanh(3 * z) * z, (x,), (v,), TOL)
    exact = (3 * x / np.cosh(3 * x) ** 2 + np.tanh(3 * x)) * v
    lo, hi = side
    close = TOL.atol + TOL.rtol * np.abs(exact)  # what a kink must exceed (_call_kinks._close)
    assert np.all(np.abs(lo - exact) <= close) and np.all(np.abs(hi - exact) <= close), (lo - exact, hi - exact)
    tie, w = np.array([1.0, 1.0, 1.0, 0.0, 2.0]), np.array([0.3, -0.7, 0.9, 0.5, -0.2])
    ((lo, hi),) = piece_sides(median5, (tie,), (w,), TOL)
    assert abs(lo - -0.7) <= 1e-7 and abs(hi - 0.9) <= 1e-7, (lo, hi)  # the rounding of the differences


def test_the_pieces_are_sought_by_moving_only_the_arguments_that_move():
    """A fixed-point solver's tolerance, declared constant(1e-6), was moved a random hair (to -5e-7) with the
    moving input, and its loop `while |x - x_prev| > eps` never ended: the run stopped as stuck in native code.
    An argument the direction does not move keeps its value at every point the pieces are taken at."""
    from gradguard.checker.kinks import piece_sides

    seen = []

    def solve(a, eps):
        seen.append(eps)
        if not eps > 0:
            raise AssertionError(f"the tolerance was moved to {eps!r}")
        return np.sqrt(a)

    x, v = np.array([2.0, 3.0]), np.array([0.5, -1.0])
    (side,) = piece_sides(solve, (x, 1e-6), (v, None), TOL)
    assert set(seen) == {1e-6} and len(seen) > 1
    exact = v / (2 * np.sqrt(x))
    assert np.all(np.abs(side[0] - exact) <= 1e-6) and np.all(np.abs(side[1] - exact) <= 1e-6), side
