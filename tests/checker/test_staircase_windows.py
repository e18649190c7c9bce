"""The staircase probe takes its samples window by window and stops at a window that settles the answer.

`kinks._stairs_at` looks for stairs in 8, 12, 16 or 24 samples either side of x, within the stretch where the
samples are finite. It used to take all 49 samples for every output and spacing it tried: about 500 calls of the
primal per input element for a fixed-point solver's output, which moves in steps of its own rounding (a
deep-equilibrium layer: 40 s for one evaluation of GG201). The answer must be the one all 49 samples give,
with fewer calls where a window already rules out every wider one.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from gradguard.checker import kinks


def _all_samples(values, n, idx, spacing, side=None):
    """The definition: every sample first, then the windows (the probe as it was before it went window by
    window)."""
    if side is not None:
        samples = np.array([values(side * j * spacing)[n][idx] for j in range(kinks.STAIR_SAMPLES + 1)])
        bad = np.flatnonzero(~np.isfinite(samples))
        end = int(bad.min()) if len(bad) else len(samples)
        for reach in kinks.WINDOWS:
            found = kinks._stairs_in(np.diff(samples[:min(end, reach + 1)]), spacing)
            if found is not None:
                return found
        return None
    c = kinks.STAIR_SAMPLES
    samples = np.array([values(j * spacing)[n][idx] for j in range(-c, c + 1)])
    bad = np.flatnonzero(~np.isfinite(samples))
    lo = int(bad[bad < c].max()) + 1 if np.any(bad < c) else 0
    hi = int(bad[bad > c].min()) if np.any(bad > c) else len(samples)
    for reach in kinks.WINDOWS:
        found = kinks._stairs_in(np.diff(samples[max(lo, c - reach):min(hi, c + reach + 1)]), spacing)
        if found is not None:
            return found
    return None


class _Line:
    """An output sampled at t = j * spacing for j in -24..24, from a table; counts its calls."""

    def __init__(self, table: list[float], spacing: float) -> None:
        self.table, self.spacing, self.calls = table, spacing, 0

    def __call__(self, t: float) -> list[np.ndarray]:
        self.calls += 1
        j = int(round(t / self.spacing)) + kinks.STAIR_SAMPLES
        return [np.array([self.table[j]])]


# Each step between samples: flat, a jump up or down of a few sizes, or the stretch leaving the finite values.
_STEP = st.sampled_from([0.0, 0.0, 0.0, 1.0, 1.0, -1.0, 1e-3, -1e-3, np.inf, np.nan])


@st.composite
def _tables(draw):
    steps = draw(st.lists(_STEP, min_size=2 * kinks.STAIR_SAMPLES, max_size=2 * kinks.STAIR_SAMPLES))
    c = kinks.STAIR_SAMPLES
    table = [0.0] * (2 * c + 1)
    for j in range(c + 1, 2 * c + 1):  # outwards from x = 0 on each side
        table[j] = table[j - 1] + steps[j - c - 1]
    for j in range(c - 1, -1, -1):
        table[j] = table[j + 1] - steps[c + (c - 1 - j)]
    return table


@settings(max_examples=300, deadline=None)
@given(_tables(), st.sampled_from([None, 1.0, -1.0]))
def test_windows_give_the_answer_of_every_sample_with_no_more_calls(table, side):
    spacing = 0.25
    lazy, full = _Line(table, spacing), _Line(table, spacing)
    assert kinks._stairs_at(lazy, 0, (0,), spacing, side) == _all_samples(full, 0, (0,), spacing, side)
    assert lazy.calls <= full.calls


def test_an_output_that_moves_in_steps_of_both_signs_is_settled_by_the_first_window():
    """A solver's output moved by its own rounding: jumps of both signs near x, no staircase in any window; the
    first window (8 samples either side) shows it, where all 49 samples were taken before."""
    rng = np.random.default_rng(0)
    table = list(np.cumsum(rng.choice([-1e-16, 0.0, 1e-16], size=2 * kinks.STAIR_SAMPLES + 1)))
    line = _Line(table, 1.0)
    assert kinks._stairs_at(line, 0, (0,), 1.0) is None and _all_samples(_Line(table, 1.0), 0, (0,), 1.0) is None
    assert line.calls == 2 * 8 + 1


def test_a_smooth_output_is_settled_once_its_jumps_outnumber_what_the_widest_window_could_match():
    """Every step a jump of one sign (a smooth output): a staircase needs as many flat steps as jumps, and 32
    jumps in the window of 16 either side are more than the widest window's 48 steps can balance."""
    table = [0.1 * j for j in range(2 * kinks.STAIR_SAMPLES + 1)]
    line = _Line(table, 1.0)
    assert kinks._stairs_at(line, 0, (0,), 1.0) is None
    assert line.calls == 2 * 16 + 1


def test_a_staircase_is_still_found_in_the_window_that_holds_it():
    """Stairs every third sample: found in the first window, with its width and height."""
    table = [float((j - kinks.STAIR_SAMPLES) // 3) for j in range(2 * kinks.STAIR_SAMPLES + 1)]
    line = _Line(table, 0.5)
    found = kinks._stairs_at(line, 0, (0,), 0.5)
    assert found == _all_samples(_Line(table, 0.5), 0, (0,), 0.5)
    width, height = found
    assert height == 1.0 and abs(width - 1.5) < 0.2
