"""GG201 on float32 primals whose own rounding is all finite differences see: a loss that saturates in float32
(``-log(1 - sigmoid(x) + 1e-7)``, the sigmoid cross-entropy of a textbook's float32 network, for label 0) is a
staircase near x = 16 whose last stair is a plateau. Its exact derivative is no finding there; a wrong one still
is."""

import numpy as np
import pytest

from gradguard.checker import arrays, check, kinks, rrule

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def loss32(x):
    y = 1 / (1 + np.exp(-x))  # float32 on float32 input
    return -np.log(1 - y + 1e-7)


def exact_derivative(x):
    x64 = np.asarray(x, dtype=np.float64)
    y = 1 / (1 + np.exp(-x64))
    return y * (1 - y) / (1 - y + 1e-7)


def loss_rule(scale=1.0, name="loss32_rrule"):
    @rrule(loss32, arrays(shape=(1,), dtype="float32", min_value=15.6, max_value=16.6), name=name)
    def loss32_rrule(x):
        g = exact_derivative(x) * scale
        return loss32(x), lambda ybar: (None,) if ybar is None else ((ybar * g).astype(np.float32),)

    return loss32_rrule


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_exact_derivative_of_a_float32_loss_on_its_last_stairs_passes_gg201(seed):
    # seed 0 failed before: "expected 0.0 (finite differences), got 0.52949" at x = 16
    assert not check(loss_rule(), select=["GG201"], seed=seed).findings


def test_a_wrong_derivative_of_the_same_float32_loss_still_fails_gg201():
    found = check(loss_rule(1.1, name="loss32_off_rrule"), select=["GG201"]).findings
    assert found and found[0].message.startswith("the pullback of loss32_off_rrule disagrees with finite differences of the primal")


def plateau_rule(primal):
    # x in [19, 20]: float32's loss is flat for good there, its stairs end 2.4 or more away
    @rrule(primal, arrays(shape=(1,), dtype="float32", min_value=19.0, max_value=20.0), name=f"{primal.__name__}_rrule")
    def plateau_rrule(x):
        g = exact_derivative(x)  # 0.01 to 0.05
        return primal(x), lambda ybar: (None,) if ybar is None else ((ybar * g).astype(np.float32),)

    return plateau_rrule


def test_the_exact_derivative_on_float32s_plateau_passes_where_the_primal_in_float64_agrees():
    assert not check(plateau_rule(loss32), select=["GG201"]).findings


def test_a_primal_that_fixes_its_own_float32_precision_gets_no_float64_excuse():
    def loss32_fixed(x):
        return loss32(np.asarray(x, dtype=np.float32))

    found = check(plateau_rule(loss32_fixed), select=["GG201"]).findings
    assert [f.check_id for f in found] == ["GG201"]
    assert "expected 0.0 (finite differences)" in found[0].message


def test_a_staircase_is_found_beside_its_last_stair_and_a_kink_beyond_the_steps_is_not_one():
    x = np.array([16.0], dtype=np.float32)  # stairs on the left, a plateau 0.69 away on the right
    assert kinks.staircase(loss32, (x,), 0, 0) is not None

    def relu(z):
        return np.maximum(z, 0.0)

    # flat on the left for good, a straight line beyond the kink on the right: no stairs
    assert kinks.staircase(relu, (np.array([-1e-3]),), 0, 0) is None
