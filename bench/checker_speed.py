"""Checker speed (issue 2's targets): the isolation checks on small rules, and on a 10**6-element rule.

    python bench/checker_speed.py [--repeats 7] [--n-large 1000000] [--breakdown]

1. Small rules (n <= 100 elements): the median wall time of
   ``check(rule, select=GG1-GG4)`` after the first import and a warm-up call.
   Target: under 0.5 s.
2. A rule with ``--n-large`` elements (10**6 by default): the time of the same
   checks in units of one forward+pullback evaluation of that rule (the median
   of several evaluations, measured in this run), with the number of forward,
   pullback and primal calls. Target: at most 50. It runs after part 1, so
   JAX (which GG203 loads) is already imported, as in part 1.
3. For reference, every check (the safety matrix and the JAX checks too) on a
   fresh copy of the large rule, in the same units. No target.

``--breakdown`` also times each check alone on the small rules, to show what
dominates. Both figures are ratios or medians measured in this run; absolute
times on a loaded machine are noisy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cases import counting_softplus_rule, softplus
from _results import Transcript, command_line, write_section

ISOLATION = ["GG1", "GG2", "GG3", "GG4"]
SMALL_TARGET_S = 0.5
LARGE_TARGET_EVALS = 50.0
EVERY_CHECK_TARGET_S = 0.1  # issue 14: a passing softplus on (3,), every check, warm
PER_INPUT_TARGET_EVALS = 12.0  # issue 14: at n = 10**6, forward+pullback evaluations' worth per drawn input


def matmul(a, b):
    return a @ b


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def small_rules() -> list[Any]:
    from gradguard import arrays, rrule

    @rrule(softplus, arrays(shape=(100,), min_value=-30.0, max_value=30.0))
    def softplus_rrule(x):
        sig = 1.0 / (1.0 + np.exp(-x))
        return softplus(x), lambda ybar: (None,) if ybar is None else (ybar * sig,)

    @rrule(matmul, arrays(shape=(8, 8)), arrays(shape=(8, 8)))
    def matmul_rrule(a, b):
        return a @ b, lambda ybar: (None, None) if ybar is None else (ybar @ b.T, a.T @ ybar)

    @rrule(softmax, arrays(shape=(10,)))
    def softmax_rrule(x):
        s = softmax(x)
        return s, lambda ybar: (None,) if ybar is None else (s * (ybar - np.dot(s, ybar)),)

    return [softplus_rrule, matmul_rrule, softmax_rrule]


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def check_time(rule: Any, select: list[str] | None, max_examples: int | None = None, **settings: Any) -> tuple[float, Any]:
    from gradguard import check

    start = time.perf_counter()
    report = check(rule, select=select, seed=0, max_examples=max_examples, **settings)
    return time.perf_counter() - start, report.rules[0]


def evaluation_time(rule: Any, n: int, repeats: int) -> float:
    """Median time of one forward + pullback of ``rule`` on an n-element input (random cotangent)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-30, 30, size=n)
    ybar = rng.uniform(-4, 4, size=n)

    def once() -> None:
        _, pb = rule.rrule(x.copy())
        pb(ybar)

    once()
    return statistics.median(timed(once) for _ in range(repeats))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed repetitions per figure (median)")
    parser.add_argument("--n-large", type=int, default=10**6, help="elements of the large rule")
    parser.add_argument("--breakdown", action="store_true", help="time each isolation check alone on the small rules")
    parser.add_argument("--results", default=None, help="also write the figures into this Markdown file (e.g. bench/RESULTS.md)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    print = Transcript()  # prints, and keeps the lines for --results

    t = time.perf_counter()
    from gradguard import checker  # noqa: F401
    from gradguard.checker.checks import catalogue

    print(f"import checker: {time.perf_counter() - t:.2f} s (excluded below)")

    print(f"\n1. Isolation checks ({', '.join(ISOLATION)}) on small rules, median of {args.repeats} after a warm-up call:")
    medians = []
    for rule in small_rules():
        first, _ = check_time(rule, ISOLATION)
        times, results = [], []
        for _ in range(args.repeats):
            s, res = check_time(rule, ISOLATION)
            times.append(s)
            results.append(res)
        med = statistics.median(times)
        medians.append(med)
        res = results[-1]
        print(f"   {rule.name:16s} first call {first:6.2f} s, median {med:6.3f} s (min {min(times):.3f}, max {max(times):.3f}), "
              f"verdict {res.verdict}, {res.examples} examples")
    overall = statistics.median(medians)
    verdict = "MET" if overall < SMALL_TARGET_S else "NOT MET"
    print(f"   median over the small rules: {overall:.3f} s; target < {SMALL_TARGET_S} s: {verdict}")

    print(f"\n1b. Every check (contexts and JAX included) on softplus (3,), median of {args.repeats} after two warm-up calls:")
    tiny = counting_softplus_rule(3)
    first, _ = check_time(tiny, None)
    check_time(tiny, None, jax_column="jit")  # the compiled JAX column's programs, compiled before timing
    times, compiled = [], []
    for _ in range(args.repeats):  # interleaved with the reference: the JAX column compiled per context program
        times.append(check_time(tiny, None))
        compiled.append(check_time(tiny, None, jax_column="jit")[0])
    med = statistics.median(t for t, _ in times)
    verdict = "MET" if med < EVERY_CHECK_TARGET_S else "NOT MET"
    print(f"   first call {first:.2f} s, median {med:.3f} s (min {min(t for t, _ in times):.3f}), verdict "
          f"{times[-1][1].verdict}, {times[-1][1].examples} examples; target < {EVERY_CHECK_TARGET_S} s: {verdict}")
    print(f"   the same with the JAX column compiled, its programs already compiled (jax_column=\"jit\", interleaved): "
          f"median {statistics.median(compiled):.3f} s; default / compiled: {med / statistics.median(compiled):.2f}")

    if args.breakdown:
        ids = [c.id for c in catalogue() if any(c.id.startswith(p) for p in ISOLATION)]
        print("\n   each check alone (median over the small rules; one Hypothesis search per check):")
        for cid in ids:
            per = [statistics.median(check_time(rule, [cid])[0] for _ in range(max(1, args.repeats // 3))) for rule in small_rules()]
            print(f"   {cid}: {statistics.median(per):.3f} s")

    n = args.n_large
    print(f"\n2. Isolation checks on a rule with n = {n:,} elements, in units of one forward+pullback:")
    calls: Counter = Counter()
    rule = counting_softplus_rule(n, calls)
    unit = evaluation_time(rule, n, args.repeats)
    calls.clear()
    total, res = check_time(rule, ISOLATION)
    evals = total / unit
    verdict = "MET" if evals <= LARGE_TARGET_EVALS else "NOT MET"
    print(f"   one forward+pullback: {unit * 1e3:.1f} ms (median of {args.repeats})")
    print(f"   check: {total:.2f} s = {evals:.0f} evaluations' worth (verdict {res.verdict}, {res.examples} examples); "
          f"target <= {LARGE_TARGET_EVALS:.0f}: {verdict}")
    per = max(res.examples, 1)
    print(f"   calls: {calls['forward']} forward, {calls['pullback']} pullback, {calls['primal']} primal "
          f"(about {(calls['forward'] + calls['primal']) / per:.0f} forward or primal calls per example)")
    per_input = evals / per
    print(f"   per drawn input: {per_input:.1f} evaluations' worth; target <= {PER_INPUT_TARGET_EVALS:.0f} (issue 14): "
          f"{'MET' if per_input <= PER_INPUT_TARGET_EVALS else 'NOT MET'}")
    if verdict == "NOT MET":
        print("   what dominates: the calls above (the checks of one drawn input share its first forward call and")
        print("   pullback; GG201's finite differences call the primal, GG202, GG301, GG404 and GG406 make calls")
        print("   of their own), then copies and comparisons of the 10**6-element arrays.")
    # For reference (no target): every check, the safety matrix and the JAX checks included, on a fresh copy
    # of the same rule (nothing cached from part 2).
    calls.clear()
    everything, res_all = check_time(counting_softplus_rule(n, calls), None)
    print(f"\n3. Every check (contexts and JAX included; no target) on the same n: {everything:.2f} s = "
          f"{everything / unit:.0f} evaluations' worth (verdict {res_all.verdict}); calls: {calls['forward']} forward, "
          f"{calls['pullback']} pullback, {calls['primal']} primal")
    if args.results:
        body = print.block()
        write_section(args.results, "checker_speed", "Checker speed (issue 2's targets)", command_line("checker_speed.py", argv), body)
        sys.stdout.write(f"wrote {args.results}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
