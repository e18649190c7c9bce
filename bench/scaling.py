"""Scaling benchmark: time to verdict and function evaluations against input size.

    python bench/scaling.py [--sizes 10,100,...,1000000] [--budget 60] [--select GG1,GG2,GG3,GG4]

One correct elementwise rule (softplus: n inputs, n outputs) is checked at
each size n by gradguard (the isolation checks by default), by
``torch.autograd.gradcheck`` (default mode: full Jacobians; and
``fast_mode=True``) and by ``jax.test_util.check_grads`` (reverse mode, order
1), each wrapped as in bench/detection.py. For each tool the table gives the
wall time, that time in units of one forward+pullback of the rule at that
size (measured in the same run), the ratio to gradguard's time, and the
number of calls of the rule's forward, pullback and primal (a counting
wrapper). gradcheck's default mode builds two n x n Jacobians (2n forward
calls and n pullback calls); sizes where its estimated time or memory exceeds
the budget are skipped and say so.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cases import BenchCase, counting_softplus_rule
from _results import Transcript, command_line, write_section

SIZES = [10**k for k in range(1, 7)]
JACOBIAN_MEMORY_LIMIT = 2 * 2**30  # bytes for gradcheck's two dense float64 Jacobians


def unit_time(n: int, repeats: int = 5) -> float:
    """One forward + pullback of softplus at size n (median)."""
    rng = np.random.default_rng(0)
    x, ybar = rng.uniform(-30, 30, n), rng.uniform(-4, 4, n)
    rule = counting_softplus_rule(n, Counter())

    def once() -> float:
        start = time.perf_counter()
        _, pb = rule.rrule(x.copy())
        pb(ybar)
        return time.perf_counter() - start

    once()
    return statistics.median(once() for _ in range(repeats))


def run_gradguard(n: int, calls: Counter, select: list[str]) -> str:
    from gradguard import check

    result = check(counting_softplus_rule(n, calls), select=select, seed=0).rules[0]
    return result.verdict


def _case(n: int, calls: Counter) -> BenchCase:
    x = np.random.default_rng(1).uniform(-30, 30, n)
    return BenchCase("scaling", f"softplus_{n}", counting_softplus_rule(n, calls), "correct", [], {}, args=(x,))


def run_gradcheck(n: int, calls: Counter, fast: bool) -> str:
    import _torch_tools
    import torch

    case = _case(n, calls)
    apply = _torch_tools.function(case)
    x = _torch_tools.to_input(case.args[0])
    ok = torch.autograd.gradcheck(apply, [x], raise_exception=False, fast_mode=fast, check_undefined_grad=False)
    return "pass" if ok else "fail"


def run_check_grads(n: int, calls: Counter) -> str:
    import _jax_tools
    import jax.numpy as jnp
    from jax.test_util import check_grads

    case = _case(n, calls)
    f = _jax_tools.function(case)
    calls.clear()  # the wrapper called the rule once to learn its output's shape
    try:
        check_grads(f, (jnp.asarray(case.args[0]),), order=1, modes=["rev"])
    except AssertionError:
        return "fail"
    return "pass"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="comma-separated input sizes")
    parser.add_argument("--budget", type=float, default=60.0, help="skip an anchor at a size where its estimated time exceeds this (s)")
    parser.add_argument("--select", default="GG1,GG2,GG3,GG4", help="gradguard checks (id prefixes); 'all' for every check")
    parser.add_argument("--tools", default="gradguard,gradcheck,gradcheck[fast],check_grads")
    parser.add_argument("--results", default=None, help="also write the table into this Markdown file (e.g. bench/RESULTS.md)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    print = Transcript()  # prints, and keeps the lines for --results
    sizes = [int(s) for s in args.sizes.split(",")]
    select = None if args.select == "all" else args.select.split(",")
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        print(f"skipping gradcheck: {exc} (PyTorch is a benchmark-only extra: pip install torch==2.13.0)")
        tools = [t for t in tools if not t.startswith("gradcheck")]
    import jax

    jax.config.update("jax_enable_x64", True)
    from gradguard import checker  # noqa: F401
    from gradguard.checker.jax_rules import ensure_device

    ensure_device()
    # Warm every tool once at a tiny size, so first-call costs (JIT, imports) do not land on n = 10.
    for tool in tools:
        _run(tool, 4, Counter(), select)

    print(f"gradguard checks: {args.select}; anchors as in bench/detection.py; budget {args.budget:g} s per anchor call.")
    print("eval units: wall time / one forward+pullback at that size. calls: forward / pullback / primal.\n")
    header = f"{'n':>9} {'tool':15} {'verdict':8} {'time (s)':>10} {'eval units':>11} {'x gradguard':>11}  calls"
    print(header)
    print("-" * len(header))
    for n in sizes:
        unit = unit_time(n)
        base = None
        for tool in tools:
            estimate = _estimate(tool, n, unit)
            if estimate is not None and estimate > args.budget:
                print(f"{n:>9} {tool:15} skipped (>{args.budget:g}s: about {estimate:.0f} s estimated)")
                continue
            if tool == "gradcheck" and 2 * n * n * 8 > JACOBIAN_MEMORY_LIMIT:
                print(f"{n:>9} {tool:15} skipped (two {n}x{n} Jacobians need {2 * n * n * 8 / 2**30:.0f} GiB)")
                continue
            calls: Counter = Counter()
            start = time.perf_counter()
            try:
                verdict = _run(tool, n, calls, select)
            except Exception as exc:  # noqa: BLE001
                verdict = f"error: {type(exc).__name__}"
            took = time.perf_counter() - start
            if tool == "gradguard":
                base = took
            ratio = f"{took / base:.2f}" if base else "-"
            print(f"{n:>9} {tool:15} {verdict:8} {took:10.3f} {took / unit:11.0f} {ratio:>11}  "
                  f"{calls['forward']} / {calls['pullback']} / {calls['primal']}", flush=True)
        print(f"{'':>9} (one forward+pullback at n = {n}: {unit * 1e3:.3f} ms)")
    if args.results:
        body = print.block()
        write_section(args.results, "scaling", "Scaling with input size", command_line("scaling.py", argv), body)
        sys.stdout.write(f"wrote {args.results}\n")
    return 0


def _estimate(tool: str, n: int, unit: float) -> float | None:
    """gradcheck's default mode: 2n forward calls and n pullback calls, plus filling two n x n Jacobians."""
    if tool != "gradcheck":
        return None
    return 3 * n * max(unit, 2e-5) + 2 * n * n * 2e-9


def _run(tool: str, n: int, calls: Counter, select: list[str] | None) -> str:
    if tool == "gradguard":
        return run_gradguard(n, calls, select)
    if tool == "gradcheck":
        return run_gradcheck(n, calls, fast=False)
    if tool == "gradcheck[fast]":
        return run_gradcheck(n, calls, fast=True)
    if tool == "check_grads":
        return run_check_grads(n, calls)
    raise SystemExit(f"unknown tool {tool!r}")


if __name__ == "__main__":
    sys.exit(main())
