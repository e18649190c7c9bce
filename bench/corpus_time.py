"""Where the checker's time goes on the real-world corpus: each module at one seed (or several), split by check.

    python bench/corpus_time.py [--seeds 0] [--modules tests/realworld/correct_mygrad.py,...] [--processes 2]
                                [--select IDS] [--json FILE] [--results bench/RESULTS.md]

Every module of correct rules (tests/realworld/correct_*.py, those written against PyTorch only where it is
installed) is checked as the real-world tests check it, ``check(module, seed=, rule_timeout_s=0, jobs=1)``,
by ``--processes`` worker processes that take the modules in turn and keep what they compiled from one module
to the next, as the test suite's two workers do. With several ``--seeds`` (``0,1``: the suite's default), each
worker checks one loaded module at each seed in turn, as the suite does: a later seed reuses what the rules
keep of an earlier one (traces, compiled programs), and its row shows what it still costs. A timer around
each check's call splits a module's time by check; what is left is the search's own work (drawing inputs,
Hypothesis' engine) and each rule's setup.

It prints, per module, its wall time and its three slowest checks, then the total per check, and each
module's error findings by rule. ``--json`` writes all of it, so that two trees can be compared for what
they find as well as for their time: run this script from the tree to measure (or with ``PYTHONPATH`` set to
another checkout, whose code it then imports). Absolute times depend on the machine and its load; compare runs
made side by side. No target: issue 14's CI-suite target depends on this corpus's time, and this is where it goes.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import importlib.util
import json
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _results import Transcript, command_line, write_section  # noqa: E402

REALWORLD = ROOT / "tests" / "realworld"
sys.path.insert(0, str(REALWORLD))

from _modules import correct_modules  # noqa: E402  (the modules the real-world tests check)


def _timed_module(task: tuple[str, tuple[int, ...], str | None]) -> list[dict[str, Any]]:
    """One module checked in this worker process at each seed in turn (one loaded module, as the real-world tests
    check it): per seed, its wall time, the time in each check, its error findings."""
    path, seeds, select = task
    import gradguard.checker.per_rule as per_rule
    from gradguard.checker import check
    from gradguard.checker.loader import load_module

    if not getattr(per_rule, "_bench_timed", False):
        # Timers around the two places a check is called: once per drawn input, and once per rule.
        run_one, run_per_rule = per_rule._run_one, per_rule._run_per_rule

        def timed_one(info: Any, case: Any) -> Any:
            start = time.perf_counter()
            try:
                return run_one(info, case)
            finally:
                per_rule._bench_spent[info.id] += time.perf_counter() - start

        def timed_per_rule(rule: Any, info: Any, *args: Any) -> Any:
            start = time.perf_counter()
            try:
                return run_per_rule(rule, info, *args)
            finally:
                per_rule._bench_spent[info.id] += time.perf_counter() - start

        per_rule._run_one, per_rule._run_per_rule, per_rule._bench_timed = timed_one, timed_per_rule, True
    module = load_module(path)
    rows = []
    for seed in seeds:
        spent: collections.Counter[str] = collections.Counter()
        per_rule._bench_spent = spent
        start = time.perf_counter()
        # The real-world tests lift the input budget so that load cannot change a verdict; so does this.
        report = check(module, seed=seed, rule_timeout_s=0, input_budget_s=None, jobs=1, use_cache=False,
                       select=select.split(",") if select else None)
        wall = time.perf_counter() - start
        errors = {}
        for rule in report.rules:
            found = sorted({f.check_id for f in rule.findings if f.severity == "error"})
            if rule.verdict == "error" or found:
                errors[rule.name] = found or [f"crashed: {rule.error}"]
        rows.append({"module": Path(path).name, "seed": seed, "wall": wall, "checks": dict(spent),
                     "rules": len(report.rules), "errors": errors})
    return rows


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; give seeds as integers separated by commas, e.g. 0,1") from None
    if not seeds:
        raise argparse.ArgumentTypeError("give at least one seed, e.g. 0 or 0,1")
    return seeds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=_seeds, default=(0,), help="comma-separated seeds, each module checked at "
                        "each in turn in one process (default 0; the real-world tests' default is 0,1)")
    parser.add_argument("--modules", default="", help="comma-separated module paths (default: every correct_*.py)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--select", default=None, help="check ids or prefixes, as check(select=)")
    parser.add_argument("--json", default=None, help="write every module's figures and findings here")
    parser.add_argument("--results", default=None, help="write a section of this RESULTS.md")
    args = parser.parse_args(argv)
    modules = [Path(m) for m in args.modules.split(",") if m] or correct_modules()
    out = Transcript()
    import gradguard

    for name in ("jax", "torch"):  # named in the section's environment line (the workers import them)
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)

    own = Path(gradguard.__file__).resolve().parent.parent == ROOT
    seeds = ",".join(map(str, args.seeds))
    out(f"gradguard: {'this checkout' if own else 'another checkout (PYTHONPATH)'}; {len(modules)} modules at seed"
        f"{'s' if len(args.seeds) > 1 else ''} {seeds}, {args.processes} worker process(es)")
    tasks = [(str(m), args.seeds, args.select) for m in modules]
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
        rows = [row for rows in pool.imap(_timed_module, tasks) for row in rows]
    elapsed = time.perf_counter() - start
    total: collections.Counter[str] = collections.Counter()
    out(f"\n{'module':34s} {'seed':>4s} {'rules':>5s} {'wall s':>7s}  slowest checks (s)")
    for row in sorted(rows, key=lambda r: -r["wall"]):
        total.update(row["checks"])
        slowest = ", ".join(f"{k} {v:.1f}" for k, v in collections.Counter(row["checks"]).most_common(3))
        out(f"{row['module']:34s} {row['seed']:4d} {row['rules']:5d} {row['wall']:7.1f}  {slowest}")
    if len(args.seeds) > 1:
        by_seed = {seed: sum(r["wall"] for r in rows if r["seed"] == seed) for seed in args.seeds}
        out("\nper seed, summed over the modules (s): " + ", ".join(f"seed {k} {v:.1f}" for k, v in by_seed.items()))
    summed = sum(r["wall"] for r in rows)
    out(f"\nsum of the modules' wall times: {summed:.1f} s ({elapsed:.1f} s elapsed on {args.processes} process(es)); "
        f"outside every check's call: {summed - sum(total.values()):.1f} s")
    out("per check, summed over the modules (s): " + ", ".join(f"{k} {v:.1f}" for k, v in total.most_common()))
    out("\nerror findings (upstream flaws the tests list, or gradguard's mistakes):")
    for row in sorted(rows, key=lambda r: (r["module"], r["seed"])):
        where = row["module"] if len(args.seeds) == 1 else f"{row['module']} (seed {row['seed']})"
        for name, ids in sorted(row["errors"].items()):
            out(f"  {where}: {name}: {', '.join(ids)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"seeds": list(args.seeds), "modules": rows}, indent=1))
    if args.results:
        write_section(args.results, "corpus_time", "Where the time goes on the real-world corpus",
                      command_line("corpus_time.py", argv), out.block())


if __name__ == "__main__":
    main()
