"""The safety matrix's JAX column, compiled per context program (``jit``) or traced and run with NumPy
(``traced``), against eager JAX.

    python bench/jax_column.py                      # the timing table (fresh processes)
    python bench/jax_column.py --corpus             # also: every corpus rule's matrix under each mode, cell by cell

For a NumPy softplus rrule on (3,) (its programs hold host callbacks, which JAX never stores in its
persistent cache), the JAX softplus ``custom_vjp`` on (5,), and the four rules of `matrix_speed.py` checked
one after another in one process (how ``gradguard check`` meets a module), it runs the JAX column alone
(``run_matrix(engines=["jax"])``) in a fresh process per mode and cache setting: the first matrix
(cold), the second, the median of the later ones (warm), and the XLA programs
of the first matrix, compiled and loaded from the persistent cache. Ratios are against eager in the
same situation, measured in the same run.

``--corpus`` runs every labelled corpus rule's whole matrix under eager and each of ``--modes`` (one
process, the rules in order; ``--realworld``: the real-world corpus) and prints every cell whose status
differs from eager's, the largest change of a cell's relative error, the cells whose message differs, and
the JAX contexts that ran eagerly instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

MODES = ("eager", "jit", "traced", "auto")


def _rules(kind: str) -> list:
    if kind == "numpy":
        from _cases import counting_softplus_rule

        return [counting_softplus_rule(3)]
    if kind == "jax":
        from jax_speed import _rule

        return [_rule(5)]
    from matrix_speed import rules

    return rules()


def probe(kind: str, mode: str, cache: str, repeats: int) -> None:
    """In a fresh process: the JAX column's cold and warm time and its compilations, as JSON."""
    from collections import Counter

    from jax import monitoring

    from gradguard.checker.contexts import run_matrix
    from gradguard.engines.jax_engine import use_compilation_cache

    warnings.simplefilter("ignore")
    if cache:
        use_compilation_cache(cache)
    seen: Counter = Counter()
    monitoring.register_event_duration_secs_listener(
        lambda name, secs, **_: seen.update({"compiles": 1}) if name == "/jax/core/compile/backend_compile_duration" else None)
    monitoring.register_event_listener(
        lambda name, **_: seen.update({"hits": 1}) if name == "/jax/compilation_cache/cache_hits" else None)
    rules = _rules(kind)
    settings = {"jax_column": mode}

    def once() -> tuple[float, list]:
        start = time.perf_counter()
        cells = [[(r.context.name, r.cells["jax"].status) for r in run_matrix(rule, engines=["jax"], settings=settings).rows]
                 for rule in rules]
        return time.perf_counter() - start, cells

    cold, cells = once()
    first = dict(seen)
    second, _ = once()
    warm = [once()[0] for _ in range(repeats)]
    print(json.dumps({"cold": cold, "second": second, "warm": statistics.median(warm),
                      "compiled": first.get("compiles", 0) - first.get("hits", 0), "from_disk": first.get("hits", 0),
                      "cells": cells}))


def _run_probe(kind: str, mode: str, cache: str, repeats: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADGUARD_", "JAX_COMPILATION_CACHE"))}
    done = subprocess.run([sys.executable, __file__, "--probe", kind, mode, cache, str(repeats)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def timings(repeats: int, kinds: list[str], caches: list[str]) -> None:
    print("JAX column alone (run_matrix(engines=['jax'])), a fresh process per row; 1st: the first matrix of the")
    print(f"process (cold); 2nd: the second; warm: median of {repeats} later ones; compiled / from disk: XLA programs")
    print("of the first matrix; x eager: against eager in the same situation, same run")
    print(f"{'rules':30} {'persistent cache':19} {'mode':7} {'1st (s)':>8} {'x eager':>7} {'2nd (s)':>8} {'x eager':>7} "
          f"{'warm (s)':>8} {'x eager':>7} {'compiled':>8} {'from disk':>9} {'same cells':>10}")
    print("-" * 143)
    labels = {"numpy": "NumPy softplus rrule (3,)", "jax": "JAX softplus custom_vjp (5,)", "module": "4 NumPy rules in one process"}
    for kind in kinds:
        for cache_label in caches:
            with tempfile.TemporaryDirectory() as folder:
                rows = {}
                for mode in MODES:
                    if cache_label == "none":
                        rows[mode] = _run_probe(kind, mode, "", repeats)
                    else:
                        sub = os.path.join(folder, mode)
                        run = _run_probe(kind, mode, sub, repeats)
                        rows[mode] = run if cache_label == "empty folder" else _run_probe(kind, mode, sub, repeats)
            ref = rows["eager"]
            for mode in MODES:
                r = rows[mode]
                print(f"{labels[kind]:30} {cache_label:19} {mode:7} {r['cold']:>8.3f} {r['cold'] / ref['cold']:>7.2f} "
                      f"{r['second']:>8.3f} {r['second'] / ref['second']:>7.2f} {r['warm']:>8.3f} {r['warm'] / ref['warm']:>7.2f} "
                      f"{r['compiled']:>8} {r['from_disk']:>9} {'yes' if r['cells'] == ref['cells'] else 'NO':>10}")


def corpus(names: list[str] | None, modes: list[str], realworld: bool = False) -> None:
    """Every corpus rule's whole matrix under each mode (one process, eager first for each rule), compared
    cell by cell with eager: statuses, and how far values and slopes moved (relative)."""
    import numpy as np
    from _cases import load_cases, load_realworld_cases

    from gradguard.checker.contexts import run_matrix
    from gradguard.checker.contexts._jax_engine import eager_fallbacks

    warnings.simplefilter("ignore")
    cases = load_realworld_cases(names=names) if realworld else load_cases(names=names)
    modes = ["eager"] + [m for m in modes if m != "eager"]
    differ, total, times = [], 0, {m: 0.0 for m in modes}
    moved = {m: 0.0 for m in modes}
    reworded: dict[str, list] = {m: [] for m in modes}
    fallbacks = {}
    for case in cases:
        got = {}
        for mode in modes:
            start = time.perf_counter()
            got[mode] = run_matrix(case.rule, settings={"jax_column": mode}).to_json()
            times[mode] += time.perf_counter() - start
        if eager_fallbacks(case.rule):
            fallbacks[case.key] = eager_fallbacks(case.rule)
        for mode in modes[1:]:
            for a, b in zip(got["eager"]["cells"], got[mode]["cells"]):
                total += a["engine"] == "jax"
                if a["status"] != b["status"]:
                    differ.append((case.key, mode, a["context"], a["engine"], a["status"], b["status"]))
                x, y = a.get("rel_error"), b.get("rel_error")  # the cell's error against finite differences
                if a["engine"] == "jax" and isinstance(x, (int, float)) and isinstance(y, (int, float)) and np.isfinite(x):
                    moved[mode] = max(moved[mode], abs(x - y))
                if a["engine"] == "jax" and a["status"] == b["status"] and a.get("message") != b.get("message"):
                    reworded[mode].append((case.key, a["context"], str(a.get("message")), str(b.get("message"))))
            if got["eager"]["skipped"] != got[mode]["skipped"]:
                differ.append((case.key, mode, "skipped contexts", "", "", ""))
    print(f"\ncorpus: {len(cases)} rules, {total} JAX cells per mode compared; whole-matrix time "
          + ", ".join(f"{m} {times[m]:.1f} s" for m in modes) + " (eager ran first for each rule)")
    print("largest change of a JAX cell's relative error (against finite differences) from eager's: "
          + ", ".join(f"{m} {moved[m]:.2g}" for m in modes[1:]))
    for mode in modes[1:]:
        print(f"JAX cells with eager's status and another message under {mode}: {len(reworded[mode])}")
        for key, context, was, now in reworded[mode]:
            print(f"    {key} {context}: eager {was[:70]!r}, {mode} {now[:70]!r}")
    print(f"cells whose status differs from eager: {len(differ)}")
    for d in differ:
        print("   ", " | ".join(d))
    print(f"JAX contexts that ran eagerly instead: {sum(len(f) for f in fallbacks.values())}")
    for key, f in fallbacks.items():
        for context, reason in f.items():
            print(f"    {key} {context}: {reason[:160]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kinds", default="numpy,jax,module", help="which rows: numpy, jax, module")
    parser.add_argument("--caches", default="none,empty folder,filled", help="persistent cache settings: none, empty folder, filled")
    parser.add_argument("--corpus", action="store_true", help="also compare every corpus rule's matrix cell by cell")
    parser.add_argument("--cases", default=None, help="comma-separated corpus rule names for --corpus")
    parser.add_argument("--modes", default="jit,traced", help="modes --corpus compares with eager (comma-separated)")
    parser.add_argument("--realworld", action="store_true", help="--corpus runs the real-world corpus (tests/realworld)")
    parser.add_argument("--no-timings", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        kind, mode, cache, repeats = args.probe
        probe(kind, mode, cache, int(repeats))
        return 0
    if not args.no_timings:
        timings(args.repeats, args.kinds.split(","), args.caches.split(","))
    if args.corpus:
        corpus(args.cases.split(",") if args.cases else None, args.modes.split(","), args.realworld)
    return 0


if __name__ == "__main__":
    sys.exit(main())
