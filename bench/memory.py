"""Peak memory of the checker on a large rule, as a multiple of its inputs' bytes (issue 14's target).

    python bench/memory.py [--size 5000] [--rules softplus,mul] [--select GG1,GG2,GG3,GG4]

Each rule takes ``--size`` x ``--size`` float64 arrays (5000 x 5000 by default: 200 MB an array). Every
figure is measured in a fresh subprocess, so no earlier allocation hides in it: the subprocess imports
what it needs and checks a tiny version of the rule (imports, JIT and caches are then paid), reads its
resident set size (RSS), runs the measured work once, and reports its peak RSS (``ru_maxrss``) minus the
RSS before. Rows:

- ``one evaluation``: one forward call and pullback of the rule on a fresh copy of an input (what the
  rule itself needs, for reference);
- ``check``: ``check(rule, select=...)`` with one drawn input (the number the large input gets anyway).

``copies`` is that peak over the bytes of the rule's inputs (the drawn input counts: the checker holds
it). Target: at most 10 copies for the check. Linux only (RSS read from /proc). Use sizes whose arrays
are well above 32 MB (over 2048 x 2048): smaller ones come from the C library's heap, whose freed memory
can stay in the RSS, so that the peak reads high.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import Transcript, command_line, write_section

TARGET_COPIES = 10.0
RULES = ("softplus", "mul")
KINDS = ("one evaluation", "check")


def softplus(x):
    return np.logaddexp(0.0, x)


def mul(a, b):
    return a * b


def make_rule(name: str, size: int):
    """A correct float64 rule on size x size arrays: softplus (one input) or an elementwise product (two)."""
    from gradguard import arrays, rrule

    spec = arrays(shape=(size, size), min_value=-30.0, max_value=30.0)
    if name == "softplus":

        @rrule(softplus, spec, name=f"softplus_{size}x{size}")
        def softplus_rrule(x):
            sig = 1.0 / (1.0 + np.exp(-x))
            return softplus(x), lambda ybar: (None,) if ybar is None else (ybar * sig,)

        return softplus_rrule
    if name == "mul":

        @rrule(mul, spec, spec, name=f"mul_{size}x{size}")
        def mul_rrule(a, b):
            return a * b, lambda ybar: (None, None) if ybar is None else (ybar * b, ybar * a)

        return mul_rrule
    raise SystemExit(f"unknown rule {name!r}; choose from {', '.join(RULES)}")


def rss_bytes() -> int:
    """The current resident set size of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def child(rule_name: str, kind: str, size: int, select: list[str] | None) -> dict:
    """Measure one figure in this (fresh) process."""
    from gradguard import check

    warnings.simplefilter("ignore")
    nargs = 1 if rule_name == "softplus" else 2
    check(make_rule(rule_name, 4), select=select, seed=0)  # imports, JIT caches: paid before the baseline
    rule = make_rule(rule_name, size)
    inputs = [np.random.default_rng(k).uniform(-30, 30, size=(size, size)) for k in range(nargs)] if kind != "check" else []
    input_bytes = nargs * size * size * 8
    before = rss_bytes()
    start = time.perf_counter()
    verdict = "-"
    if kind == "one evaluation":
        out, pb = rule.rrule(*[x.copy() for x in inputs])
        tangents = pb(np.ones_like(out) if isinstance(out, np.ndarray) else 1.0)
        del out, pb, tangents
    else:
        # No time limit: on a loaded machine the per-rule limit would cut the check short, and its peak with it.
        verdict = check(rule, select=select, seed=0, max_examples=1, rule_timeout_s=None).rules[0].verdict
    took = time.perf_counter() - start
    # ru_maxrss is the kernel's high-water mark, which it updates lazily: on tiny inputs it can read a little
    # below the RSS read before, which means that nothing measurable was added.
    return {"rule": rule_name, "kind": kind, "peak": max(0, peak_bytes() - before), "input_bytes": input_bytes,
            "verdict": verdict, "seconds": took}


def measure(rule: str, kind: str, size: int, select: str) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", rule, "--kind", kind, "--size", str(size), "--select", select],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the measurement of {rule} ({kind}) failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=5000, help="the side of the rule's square float64 arrays")
    parser.add_argument("--rules", default=",".join(RULES), help=f"comma-separated, from {', '.join(RULES)}")
    parser.add_argument("--select", default="GG1,GG2,GG3,GG4", help="checks (id prefixes); 'all' for every check")
    parser.add_argument("--results", default=None, help="also write the table into this Markdown file (e.g. bench/RESULTS.md)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="check", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    select = None if args.select == "all" else args.select.split(",")
    if args.child:
        sys.stdout.write(json.dumps(child(args.child, args.kind, args.size, select)) + "\n")
        return 0
    if not Path("/proc/self/statm").exists():
        raise SystemExit("bench/memory.py reads the resident set size from /proc/self/statm: run it on Linux")

    print = Transcript()  # prints, and keeps the lines for --results
    print(f"rules on {args.size} x {args.size} float64 arrays; checks: {args.select}; one drawn input; "
          "each row in a fresh process: peak RSS minus the RSS before, in copies of the rule's inputs")
    header = f"{'rule':10} {'measured':15} {'inputs (MB)':>11} {'peak (MB)':>10} {'copies':>7} {'time (s)':>9}  verdict"
    print(header)
    print("-" * len(header))
    worst = 0.0
    for rule in [r.strip() for r in args.rules.split(",") if r.strip()]:
        for kind in KINDS:
            m = measure(rule, kind, args.size, args.select)
            copies = m["peak"] / m["input_bytes"]
            if kind == "check":
                worst = max(worst, copies)
            print(f"{rule:10} {kind:15} {m['input_bytes'] / 1e6:11.0f} {m['peak'] / 1e6:10.0f} {copies:7.1f} "
                  f"{m['seconds']:9.2f}  {m['verdict']}")
    verdict = "MET" if worst <= TARGET_COPIES else "NOT MET"
    print(f"largest check peak: {worst:.1f} copies of the inputs; target <= {TARGET_COPIES:.0f}: {verdict}")
    if args.results:
        write_section(args.results, "memory", "Peak memory on large inputs (issue 14)", command_line("memory.py", argv), print.block())
        sys.stdout.write(f"wrote {args.results}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
