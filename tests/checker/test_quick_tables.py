"""GG201 and GG204 try a shallow finite-difference table first and let it settle only a pass its error estimate
cannot have bought (`tolerances.settles`); anything else goes to the full table as before. Test the tester: the
shallow table saves the primal's calls on a smooth pass, and a pullback off by ten times the tolerance still fails,
on a smooth function and on one whose shallow table is too coarse to settle anything."""

import numpy as np
import pytest

from gradguard.checker import arrays, check, rrule, tolerances
from gradguard.engines import fd

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F64 = tolerances.for_dtype("float64")


def test_settles_only_where_the_finite_difference_error_is_within_the_tolerance():
    assert tolerances.settles(1.0, 1.0 + 5e-7, F64, fd_error=1e-9)
    # close, but only thanks to the error estimate: 1e-5 apart, allowed 1e-6 + 10 * 1e-6
    assert tolerances.close(1.0, 1.0 + 1e-5, F64, fd_error=1e-6)
    assert not tolerances.settles(1.0, 1.0 + 1e-5, F64, fd_error=1e-6)
    assert not tolerances.settles(1.0, 1.0 + 1e-3, F64, fd_error=0.0)


def test_quick_tables_are_for_arguments_the_budget_gives_a_full_table():
    assert fd.quick([np.zeros(3)]) == {"levels": fd.SHALLOW_LEVELS}
    assert fd.quick([np.zeros(fd.LARGE_INPUT + 1)]) is None  # their table is shallow already


def counted(off=0.0, k=1.0):
    calls = {"primal": 0}

    def primal(x):
        calls["primal"] += 1
        return np.sin(k * x)

    @rrule(primal, arrays(shape=(3,), min_value=-2.0, max_value=2.0), name=f"sin_{k:g}_off_{off:g}")
    def sin_rrule(x):
        return np.sin(k * x), lambda ybar: (None,) if ybar is None else (ybar * k * np.cos(k * x) * (1 + off),)

    return sin_rrule, calls


def test_gg201_settles_a_smooth_pass_on_the_shallow_table(monkeypatch):
    rule, calls = counted()
    assert not check(rule, select=["GG201"], max_examples=5).findings
    quick = calls["primal"]
    monkeypatch.setattr(fd, "quick", lambda args: None)  # the full table only, as before
    rule, calls = counted()
    assert not check(rule, select=["GG201"], max_examples=5).findings
    assert quick < 0.75 * calls["primal"]


@pytest.mark.parametrize("k", [1.0, 40.0])
def test_a_pullback_ten_times_the_tolerance_off_still_fails_gg201_and_its_twin_passes(k):
    # k = 40: sin(40 x)'s higher derivatives (40**7 for the seventh) make the shallow table's error estimate too
    # large to settle most inputs (17 of 20 at seed 0), and the full table judges them
    wrong, _ = counted(off=10 * F64.rtol, k=k)
    found = [f for f in check(wrong, select=["GG201"]).findings if f.check_id == "GG201"]
    assert found and found[0].message.startswith(f"the pullback of sin_{k:g}_off_1e-05 disagrees with finite differences")
    right, _ = counted(k=k)
    assert not check(right, select=["GG201"]).findings


def test_a_second_order_ten_times_the_tolerance_off_still_fails_gg204_and_its_twin_passes():
    def primal(x):
        return np.sin(x)

    @rrule(primal, arrays(shape=(3,), min_value=-2.0, max_value=2.0))
    def sin_rrule(x):
        c = np.cos(x)
        return np.sin(x), lambda ybar: (None,) if ybar is None else (ybar * c,)

    @rrule(primal, arrays(shape=(3,), min_value=-2.0, max_value=2.0))
    def sin_second_order_off(x):
        c, s = np.cos(x), np.sin(x)
        plain = np.array(s)  # a copy of a residual: a constant to the tape, a function of x to finite differences
        # the pullback's values are ybar * cos(x) exactly; its derivative as traced is off by 1e-5 cos(x)
        return np.sin(x), lambda ybar: (None,) if ybar is None else (ybar * (c + 1e-5 * plain - 1e-5 * s),)

    assert not check(sin_rrule, select=["GG204"]).findings
    found = [f for f in check(sin_second_order_off, select=["GG204"]).findings if f.check_id == "GG204"]
    assert found and "d/dt <w, pullback at (x + t u)(ybar)>" in found[0].message


def matrix_statuses(rule):
    from gradguard.checker.contexts import run_matrix

    return {row.context.name: {c.status for c in row.cells.values()} for row in run_matrix(rule).rows}


def test_the_safety_matrix_settles_a_right_row_on_the_shallow_table(monkeypatch):
    rule, calls = counted()
    quick_rows = matrix_statuses(rule)
    quick = calls["primal"]
    monkeypatch.setattr(fd, "quick", lambda args: None)  # every row's confirmed tables, as before
    rule, calls = counted()
    assert matrix_statuses(rule) == quick_rows
    assert set().union(*quick_rows.values()) == {"right"}
    assert quick < 0.6 * calls["primal"]


def test_a_gradient_ten_times_the_tolerance_off_is_still_wrong_in_the_safety_matrix():
    rows = matrix_statuses(counted(off=10 * F64.rtol)[0])
    # the programs that differentiate through the rule's pullback: every engine is wrong there
    for context in ("output-used", "called-twice", "fan-out", "strided-view"):
        assert rows[context] == {"wrong"}, (context, rows)
