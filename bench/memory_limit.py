"""The per-rule memory budget: what watching it costs, and how much memory checking a rule takes.

    python bench/memory_limit.py [--modules tests/corpus/correct.py,...] [--repeats 3] [--select IDS]
                                 [--results bench/RESULTS.md]

First, in a fresh process with the default budget (half the physical memory), the growth of the
process's resident memory that each rule's check measured (the largest sample, as the budget sees it),
first uses included (JAX's compilations, a library a check loads): the largest, the median, and the
default budget it is measured against. The modules default to every module of tests/corpus that needs no
PyTorch.

Then the modules are checked again in the same process, ``check(module, jobs=1)``, alternately with no
budget (``memory_limit_mb=0``, the reference) and with the default budget (the monitor thread, the
samples at safe points), ``--repeats`` times each, and it prints the median wall time of each, their
ratio, and whether the verdicts are the same. On a loaded machine whole rounds drift apart by more than
the budget costs, so last it times a fixed workload (NumPy and Python, about 20 ms) with and without an
active budget, ``--pairs`` times back to back, and prints the median of the paired ratios: the cost of
the monitor thread and its samples on the main thread, with the drift of the machine's load cancelled
pair by pair. Times are wall-clock on a shared machine: only ratios measured in this run mean anything.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _results import Transcript, command_line, write_section  # noqa: E402

DEFAULT_MODULES = ",".join(str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests" / "corpus").glob("*.py"))
                           if not p.name.startswith(("_", "torch")))


def _verdicts(report: Any) -> list[tuple[str, str, list[str]]]:
    return [(r.name, r.verdict, sorted(f.check_id for f in r.findings)) for r in report.rules]


def _growths(modules: list[Path], select: str | None) -> dict[str, int]:
    """Each rule's largest measured growth, in bytes, under the default budget."""
    from gradguard.checker import check, per_rule
    from gradguard.checker.options import DEFAULT_MEMORY_LIMIT_MB

    made: list[Any] = []  # check_rule makes one per rule, in the order of the report (jobs=1)
    plain = per_rule.MemoryLimit

    class Recording(plain):  # type: ignore[misc, valid-type]
        def __init__(self, mb: float | None) -> None:
            super().__init__(mb)
            made.append(self)

        def __exit__(self, *exc: Any) -> None:
            self.sample()  # the growth at the end counts too
            super().__exit__(*exc)

    per_rule.MemoryLimit = Recording  # type: ignore[misc]
    seen: dict[str, int] = {}
    try:
        for module in modules:
            made.clear()
            report = check(module, select=select, memory_limit_mb=DEFAULT_MEMORY_LIMIT_MB, jobs=1)
            assert len(made) == len(report.rules), (module, len(made), len(report.rules))
            for rule, limit in zip(report.rules, made):
                seen[f"{module.stem}:{rule.name}"] = limit.peak
    finally:
        per_rule.MemoryLimit = plain  # type: ignore[misc]
    return seen


def _workload() -> float:
    import numpy as np

    started = time.perf_counter()
    total = 0.0
    for i in range(2000):  # many small calls, as checks make them, with allocations the budget sees
        a = np.arange(100.0) * i
        total += float(a.sum()) + sum(range(50))
    return time.perf_counter() - started + 0.0 * total


def _paired(pairs: int, budget_mb: float) -> list[float]:
    from gradguard.checker._memory import MemoryLimit

    ratios = []
    for n in range(pairs + 1):
        plain = _workload()
        with MemoryLimit(budget_mb):
            watched = _workload()
        if n:  # the first pair warms up
            ratios.append(watched / plain)
    return ratios


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", default=DEFAULT_MODULES, help="comma-separated rule modules to check")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds of each setting")
    parser.add_argument("--pairs", type=int, default=200, help="back-to-back timings of the fixed workload")
    parser.add_argument("--select", default=None, help="check ids (default: every check)")
    parser.add_argument("--results", default=None, help="write the table into this RESULTS.md section")
    args = parser.parse_args(argv)
    out = Transcript()
    modules = [ROOT / m for m in args.modules.split(",") if m]

    from gradguard.checker import check
    from gradguard.checker.options import DEFAULT_MEMORY_LIMIT_MB

    growth = _growths(modules, args.select)
    mb = [g / 2**20 for g in growth.values()]
    largest = max(growth, key=lambda k: growth[k])
    out(f"resident memory growth per rule, first uses included, under the default budget ({len(mb)} rules): "
        f"largest {max(mb):.1f} MB ({largest}), median {statistics.median(mb):.1f} MB; "
        f"the default budget is {DEFAULT_MEMORY_LIMIT_MB} MB ({max(mb) / DEFAULT_MEMORY_LIMIT_MB:.2%} of it used at most)")
    out("")

    settings = {"no budget (reference)": 0, f"default budget ({DEFAULT_MEMORY_LIMIT_MB} MB)": DEFAULT_MEMORY_LIMIT_MB}
    times: dict[str, list[float]] = {label: [] for label in settings}
    verdicts: dict[str, list[Any]] = {}
    for round_ in range(args.repeats):
        for label, budget in settings.items() if round_ % 2 == 0 else reversed(settings.items()):
            started = time.perf_counter()
            found = [v for m in modules for v in _verdicts(check(m, select=args.select, memory_limit_mb=budget, jobs=1))]
            times[label].append(time.perf_counter() - started)
            verdicts.setdefault(label, found)
    reference, budgeted = (statistics.median(times[label]) for label in settings)
    rules = len(next(iter(verdicts.values())))
    out(f"modules: {len(modules)} ({rules} rules); checks: {args.select or 'all'}; check(module, jobs=1) in one "
        f"process (after the run above: warm), the settings alternating, {args.repeats} round(s)")
    out("")
    out(f"{'setting':34} {'median wall (s)':>16} {'x reference':>12}")
    out("-" * 64)
    for label in settings:
        median = statistics.median(times[label])
        out(f"{label:34} {median:16.2f} {median / reference:12.3f}")
    same = len({repr(v) for v in verdicts.values()}) == 1
    out("")
    out(f"overhead of the budget: {budgeted / reference - 1:+.1%} of the reference's wall time; "
        f"the same verdicts: {'yes' if same else 'NO'}")
    ratios = _paired(args.pairs, DEFAULT_MEMORY_LIMIT_MB)
    quartiles = statistics.quantiles(ratios, n=4)
    out(f"a fixed workload of {statistics.median(_workload() for _ in range(5)) * 1000:.0f} ms with / without an "
        f"active budget, {len(ratios)} back-to-back pairs: median ratio {statistics.median(ratios):.3f} "
        f"(quartiles {quartiles[0]:.3f} to {quartiles[2]:.3f})")
    if args.results:
        write_section(args.results, "memory_limit", "Per-rule memory budget", command_line("memory_limit.py", argv),
                      out.block())


if __name__ == "__main__":
    main()
