"""Shrinking speed: how long a failing rule takes to get its shrunk counterexamples.

    python bench/shrink_speed.py [--against REV] [--select IDS] [--rounds N] [--repeat K] [--results bench/RESULTS.md]

For failing rules (a 3x4 @ 4x2 matmul whose pullback scales one tangent, and buggy rules of the corpus),
each is checked once to warm up, then timed: the whole check, and the part spent in the searches that
re-find and shrink each failing check's counterexample (everything after the first pass over the drawn
inputs), in wall-clock seconds and in the process's CPU seconds (which other jobs on a shared machine
disturb less). ``--against REV`` runs the same measurement, in the same run, on gradguard as it was at git
revision REV (the reference, e.g. the commit before the shrinking budget), and prints the ratios.
Each measurement runs in a fresh process, which times every rule ``--repeat K`` times and keeps the fastest;
with ``--rounds N`` the trees take turns, N processes each, and every figure is the median of its N.
Target: the shrinking part under 1 s per rule.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS_CASES = ["numeric:matmul_missing_transpose_rrule", "numeric:col_mean_wrong_count_rrule",
                "numeric:softmax_missing_term_rrule", "numeric:sincos_swapped_rrule",
                "state:normalise_inplace_rrule", "contract:roll_shift_tangent_rrule"]
TARGET_S = 1.0


def _rules() -> list[tuple[str, object]]:
    import numpy as np

    from gradguard import arrays, rrule
    from gradguard.checker.loader import load_module, rules_in

    def matmul(a, b):
        return a @ b

    @rrule(matmul, arrays(shape=(3, 4)), arrays(shape=(4, 2)))
    def matmul_scaled_rrule(a, b):
        return a @ b, lambda ybar: (1.5 * ybar @ b.T, a.T @ ybar)

    found = [("matmul 3x4 @ 4x2 (scaled tangent)", matmul_scaled_rrule)]
    for case in CORPUS_CASES:
        module, name = case.split(":")
        rule = next(r for r in rules_in(load_module(ROOT / "tests" / "corpus" / f"{module}.py")) if r.name == name)
        found.append((case, rule))
    del np
    return found


def measure(select: list[str] | None, repeat: int = 1) -> list[dict]:
    """In this process (gradguard from PYTHONPATH): time each failing rule's check and its shrinking."""
    from gradguard.checker import check

    try:  # the module whose global `_search` the per-rule checking calls (older commits: the runner)
        from gradguard.checker import per_rule as owner
    except ImportError:
        from gradguard.checker import runner as owner
    real = owner._search
    spent: list[float] = []
    spent_cpu: list[float] = []

    def timed(*args, **kwargs):  # the searches that re-find and shrink a failing check
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)
            spent_cpu.append(time.process_time() - cpu)

    owner._search = timed
    rows = []
    for label, rule in _rules():
        check(rule, select=select)  # warm-up: imports, JAX compilations for these shapes
        row: dict = {}
        for _ in range(max(1, repeat)):  # the fastest of `repeat` checks: what other jobs disturbed least
            spent.clear()
            spent_cpu.clear()
            start = time.perf_counter()
            report = check(rule, select=select)
            total = time.perf_counter() - start
            notes = [f.counterexample.get("shrinking") for f in report.findings if f.counterexample]
            found = {"rule": label, "total_s": total, "shrink_s": sum(spent), "shrink_cpu_s": sum(spent_cpu),
                     "searches": len(spent), "findings": sorted({f.check_id for f in report.findings}),
                     "cut": sum(1 for n in notes if n and n != "complete")}
            if row and (found["findings"], found["cut"]) != (row["findings"], row["cut"]):
                found["findings"] = ["differs between checks"]
            row = found if not row else {**found, **{k: min(row[k], found[k]) for k in
                                                     ("total_s", "shrink_s", "shrink_cpu_s")}}
        rows.append(row)
    return rows


def _median_rows(runs: list[list[dict]]) -> list[dict]:
    """Per rule, the median of each time over the processes; the findings and cuts must agree (seeded)."""
    rows = []
    for same_rule in zip(*runs):
        row = dict(same_rule[0])
        for key in ("total_s", "shrink_s", "shrink_cpu_s"):
            row[key] = statistics.median(r.get(key, float("nan")) for r in same_rule)
        if any(r["findings"] != row["findings"] or r["cut"] != row["cut"] for r in same_rule):
            row["findings"] = ["differs between processes"]
        rows.append(row)
    return rows


def _in_process(tree: Path, select: str | None, repeat: int) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADGUARD_")}
    env["PYTHONPATH"] = str(tree)
    args = [sys.executable, str(Path(__file__).resolve()), "--measure", "--repeat", str(repeat)]
    args += ["--select", select] if select else []
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measuring {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tree_at(rev: str, into: Path) -> Path:
    archive = into / "tree.tar"
    with open(archive, "wb") as handle:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev], stdout=handle, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", default=None, help="git revision to measure as the reference, in the same run")
    parser.add_argument("--select", default=None, help="check ids (default: every check)")
    parser.add_argument("--rounds", type=int, default=3, help="processes per tree, taking turns (median of them)")
    parser.add_argument("--repeat", type=int, default=3, help="timed checks per rule in a process (the fastest counts)")
    parser.add_argument("--results", default=None, help="write the table into this RESULTS.md section")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    select = args.select.split(",") if args.select else None
    if args.measure:
        print(json.dumps(measure(select, args.repeat)))
        return
    sys.path.insert(0, str(ROOT / "bench"))
    from _results import Transcript, command_line, write_section

    out = Transcript()
    before_runs: list[list[dict]] = []
    after_runs: list[list[dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        reference = _tree_at(args.against, Path(tmp)) if args.against else None
        for _ in range(max(1, args.rounds)):  # the trees take turns, so a change in the machine's load hits both
            if reference is not None:
                before_runs.append(_in_process(reference, args.select, args.repeat))
            after_runs.append(_in_process(ROOT, args.select, args.repeat))
    before = _median_rows(before_runs) if before_runs else None
    after = _median_rows(after_runs)
    out(f"checks: {args.select or 'all'}; in a fresh process each rule is checked once to warm up, then timed "
        f"{max(1, args.repeat)} times (the fastest counts); medians of {len(after_runs)} such processes per tree, "
        "the trees taking turns")
    if before:
        out(f"reference: gradguard at {args.against}")
    out("")
    head = f"{'failing rule':40} {'check (s)':>9} {'shrink (s)':>10} {'cpu (s)':>7}"
    if before:
        head = (f"{'failing rule':40} {'ref check':>9} {'ref shrink':>10} {'check (s)':>9} {'shrink (s)':>10} "
                f"{'x ref':>6} {'cpu x ref':>9}")
    out(head + f" {'cut':>4}  same ids")
    out("-" * (len(head) + 15))
    worst = 0.0
    for i, row in enumerate(after):
        worst = max(worst, row["shrink_s"])
        if before:
            ref = before[i]
            same = "yes" if ref["findings"] == row["findings"] else f"NO ({ref['findings']} -> {row['findings']})"
            out(f"{row['rule']:40} {ref['total_s']:9.2f} {ref['shrink_s']:10.2f} {row['total_s']:9.2f} "
                f"{row['shrink_s']:10.2f} {row['shrink_s'] / max(ref['shrink_s'], 1e-9):6.2f} "
                f"{row['shrink_cpu_s'] / max(ref.get('shrink_cpu_s', float('nan')), 1e-9):9.2f} {row['cut']:>4}  {same}")
        else:
            out(f"{row['rule']:40} {row['total_s']:9.2f} {row['shrink_s']:10.2f} {row['shrink_cpu_s']:7.2f} "
                f"{row['cut']:>4}  -")
    out("")
    out("shrink: wall-clock seconds in the searches that re-find and shrink failures; cpu x ref: the same searches' "
        "CPU seconds against the reference's")
    out("cut: counterexamples reported before shrinking finished (a budget ran out; the report says so)")
    out(f"slowest shrinking: {worst:.2f} s; target < {TARGET_S:g} s per rule: {'MET' if worst < TARGET_S else 'NOT MET'}")
    if args.results:
        write_section(args.results, "shrink_speed", "Shrinking speed (issue 14)", command_line("shrink_speed.py", argv),
                      out.block())


if __name__ == "__main__":
    main()
