"""Safety-matrix speed (issue 3's target): the full matrix of a small rule beside its isolation checks.

    python bench/matrix_speed.py [--repeats 7]

For a few small rules (n <= 100 elements) it prints the median wall time of
``check(rule, select=GG1-GG4)`` (the isolation checks) and of
``safety_matrix(rule)`` (every applicable context under every engine that
applies: tape[zero], tape[none], tape[skip], JAX, and PyTorch where it is
installed, against finite differences of each program),
both after a warm-up call, and the matrix's first (cold) call, which includes
JAX's first compilations. Target: the warm matrix under 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_S = 1.0


def addone_(a):
    a += 1
    return a.sum()


def softplus(x):
    return np.logaddexp(0.0, x)


def mul(a, b):
    return a * b


def matvec(w, x):
    return w @ x


def rules() -> list[Any]:
    from gradguard import arrays, rrule

    @rrule(addone_, arrays(shape=(100,)), mutates=(0,))
    def addone_rrule(a):
        y = addone_(a)
        return y, lambda ybar: (None,) if ybar is None else (np.full(a.shape, ybar),)

    @rrule(softplus, arrays(shape=(100,), min_value=-30.0, max_value=30.0))
    def softplus_rrule(x):
        sig = 1.0 / (1.0 + np.exp(-x))
        return softplus(x), lambda ybar: (None,) if ybar is None else (ybar * sig,)

    @rrule(mul, arrays(shape=(8, 8)), arrays(shape=(8, 8)))
    def mul_rrule(a, b):
        return a * b, lambda g: (None, None) if g is None else (g * b, g * a)

    @rrule(matvec, arrays(shape=(10, 10)), arrays(shape=(10,)))
    def matvec_rrule(w, x):
        return w @ x, lambda g: (None, None) if g is None else (np.outer(g, x), w.T @ g)

    return [addone_rrule, softplus_rrule, mul_rrule, matvec_rrule]


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float]]:
    start = time.perf_counter()
    fn()
    cold = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return cold, times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)

    from gradguard import check
    from gradguard.checker.contexts import safety_matrix

    rows = []
    for rule in rules():
        _, iso = timed(lambda: check(rule, select=["GG1", "GG2", "GG3", "GG4"]), max(3, args.repeats // 2))
        cold, warm = timed(lambda: safety_matrix(rule), args.repeats)
        m = safety_matrix(rule)
        rows.append((rule.name, statistics.median(iso), cold, statistics.median(warm), len(m["contexts"]),
                     sum(c["status"] != "right" for c in m["cells"])))

    print(f"{'rule':<16} {'isolation (s)':>14} {'matrix cold (s)':>16} {'matrix warm (s)':>16} {'contexts':>9} "
          f"{'cells not right':>16}")
    for name, iso, cold, warm, n, bad in rows:
        print(f"{name:<16} {iso:>14.3f} {cold:>16.3f} {warm:>16.3f} {n:>9} {bad:>16}")
    worst = max(r[3] for r in rows)
    verdict = "met" if worst < TARGET_S else "MISSED"
    print(f"\nslowest warm matrix {worst:.3f} s (median of {args.repeats}); target < {TARGET_S:.1f} s: {verdict}")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
