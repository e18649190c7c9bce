"""The primal's value at a drawn input is computed once for GG102, GG201 and GG203 where the rule's forward
output shows it bit for bit, and the report is the same as when every check calls the primal itself."""

from dataclasses import asdict

import numpy as np
import pytest

from gradguard.checker import arrays, check, rrule
from gradguard.checker.case import UNKNOWN, Case, identical


def square(x):
    return x * x


def _bits(x):
    return (x.dtype.str, x.shape, x.tobytes())


class Calls:
    """Per drawn input (each forward call starts one), how often the primal ran on exactly that input."""

    def __init__(self):
        self.at_input: list[int] = []
        self.current = None

    def forward(self, x):
        self.current = _bits(x)
        self.at_input.append(0)

    def primal(self, x):
        if self.at_input and _bits(x) == self.current:
            self.at_input[-1] += 1


def counting_square(calls, noise=0.0):
    rng = np.random.default_rng(1)

    def primal(x):
        calls.primal(x)
        return x * x + (noise * rng.standard_normal(x.shape) if noise else 0.0)

    @rrule(primal, arrays(shape=(5,), min_value=-3.0, max_value=3.0), name="square_counted")
    def square_rrule(x):
        calls.forward(x)
        return x * x, lambda ybar: (None,) if ybar is None else (2 * x * ybar,)

    return square_rrule


def test_the_primal_runs_once_per_drawn_input_for_gg102_and_gg201():
    calls = Calls()
    report = check(counting_square(calls), select=["GG102", "GG201"], seed=0, max_examples=20)
    assert report.rules[0].verdict == "pass"
    assert len(calls.at_input) >= 10
    assert calls.at_input == [1] * len(calls.at_input)  # GG102's call; GG201's finite differences reuse it


def test_a_primal_that_does_not_reproduce_the_forward_output_is_called_again():
    # Hidden noise of 1e-13: within GG102's tolerance, but not the forward's bits, so nothing shows the value GG102
    # got is the input's; GG201 calls the primal at the input itself, as before.
    calls = Calls()
    # Where the shallow table does not settle, the confirmed table calls it at the input once more: nothing shows
    # the primal gives the same value twice there either.
    report = check(counting_square(calls, noise=1e-13), select=["GG102", "GG201"], seed=0, max_examples=20)
    assert report.rules[0].verdict == "pass"
    assert len(calls.at_input) >= 10
    assert min(calls.at_input) == 2 and max(calls.at_input) <= 3, calls.at_input


@rrule(square, arrays(shape=(3,)))
def square_wrong_pullback(x):
    return x * x, lambda ybar: (3 * x * ybar,)


def training_square(x):
    return x * x * 1.5


@rrule(square, arrays(shape=(3,)))
def square_wrong_forward(x):
    return training_square(x), lambda ybar: (2 * x * ybar,)


@rrule(square, arrays(shape=(4,)))
def square_ok(x):
    return x * x, lambda ybar: (2 * x * ybar,)


def _without_times(tree):
    if isinstance(tree, dict):
        return {k: _without_times(v) for k, v in tree.items() if "duration" not in k}
    if isinstance(tree, list):
        return [_without_times(v) for v in tree]
    return tree


@pytest.mark.parametrize("rule", [square_ok, square_wrong_pullback, square_wrong_forward], ids=lambda r: r.name)
def test_the_report_is_the_same_as_without_reuse(rule, monkeypatch):
    with_reuse = check(rule, select=["GG1", "GG2"], seed=0)
    monkeypatch.setattr(Case, "known_primal", lambda self: UNKNOWN)
    without = check(rule, select=["GG1", "GG2"], seed=0)
    assert _without_times([asdict(r) for r in with_reuse.rules]) == _without_times([asdict(r) for r in without.rules])
    assert with_reuse.rules[0].verdict == ("pass" if rule is square_ok else "fail")


def test_identical_compares_containers_and_array_bits():
    a = np.array([1.0, -0.0])
    assert identical((a, [a, None]), (a.copy(), [a.copy(), None]))
    assert not identical((a,), [a])  # another container type
    assert not identical(a, np.array([1.0, 0.0]))  # -0.0 and 0.0 differ in their bits
    assert not identical(a, a.astype(np.float32))
    assert not identical({"x": a}, {"y": a})
    assert not identical(1.0, 1.0)  # scalars' bits are not compared: never called identical
