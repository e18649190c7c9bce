"""The same verdicts on a GPU as on the CPU: the JAX corpora checked with ``--device cpu`` and ``--device gpu``.

    python bench/gpu_parity.py                      # needs a machine where JAX sees a GPU
    python bench/gpu_parity.py --devices cpu,cpu    # the comparison itself, on any machine

Each device runs in its own process (JAX's device is chosen once per process; the two run at once),
checking every module below with every check at one seed, no verdict cache. The table gives, per module,
each device's time and the rules whose verdict or finding ids differ between the devices; every differing
rule is then listed with both sides. A GPU computes in a different order (reductions, fused kernels), so a
finding's numbers may differ in the last digits; the verdicts and ids must not. Exit status 1 when any rule
differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# JAX rules (their checks run on the device), then NumPy rules (the JAX reference of GG203 and the JAX
# column of the safety matrix run on the device).
MODULES = [
    "examples/jax_rules.py",
    "tests/corpus/jax_correct.py",
    "tests/corpus/jax_bugs.py",
    "tests/corpus/jax_jvp.py",
    "tests/realworld/correct_jax.py",
    "tests/corpus/correct.py",
]


def _child(device: str, modules: list[str], seed: int, jax_column: str | None, select: str | None) -> None:
    """Check ``modules`` on ``device``; print one JSON object: the device as JAX names it and each module's
    time and rules."""
    os.environ["GRADGUARD_DEVICE"] = device
    from gradguard import check

    out: dict = {"modules": {}}
    for module in modules:
        start = time.perf_counter()
        report = check(str(ROOT / module), seed=seed, jobs=1, use_cache=False, jax_column=jax_column,
                       select=select.split(",") if select else None)
        elapsed = time.perf_counter() - start
        rules = {}
        for r in report.rules:
            ids = sorted({f.check_id for f in r.findings})
            rules[r.name] = {"verdict": r.verdict, "ids": ids,
                             "error": (r.error or {}).get("type") if r.error else None}
        out["modules"][module] = {"seconds": elapsed, "rules": rules}
        out["device"] = report.environment.get("device", "?")
    print(json.dumps(out))


def _start(device: str, modules: list[str], seed: int, jax_column: str | None, select: str | None) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--child", device, "--seed", str(seed), "--modules", ",".join(modules)]
    if jax_column:
        cmd += ["--jax-column", jax_column]
    if select:
        cmd += ["--select", select]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _result(device: str, proc: subprocess.Popen) -> dict:
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"the {device} run failed (exit {proc.returncode}):\n{stderr[-4000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="cpu,gpu", help="the two devices compared (default cpu,gpu)")
    parser.add_argument("--modules", default=",".join(MODULES), help="comma-separated rule modules")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jax-column", default=None, choices=["auto", "jit", "eager", "traced"])
    parser.add_argument("--select", default=None, help="only these checks (id prefixes, comma-separated); default every check")
    parser.add_argument("--json", default=None, help="also write both runs' raw results here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    modules = [m for m in args.modules.split(",") if m]
    if args.child:
        _child(args.child, modules, args.seed, args.jax_column, args.select)
        return 0
    first, second = args.devices.split(",")
    # Both devices at once, in two processes: each module's times are comparable only between devices of
    # one run, and a GPU run's own CPU work is one core's.
    procs = [(d, _start(d, modules, args.seed, args.jax_column, args.select)) for d in (first, second)]
    runs = {f"{d}#{i}": _result(d, p) for i, (d, p) in enumerate(procs, 1)}
    a, b = runs.values()
    print(f"Devices: {a['device']} | {b['device']}; seed {args.seed}, {args.select or 'every check'}, jax column "
          f"{args.jax_column or 'default'}\n")
    print(f"| module | rules | {first} (s) | {second} (s) | differing rules |")
    print("| --- | ---: | ---: | ---: | --- |")
    differing: list[tuple[str, str, dict, dict]] = []
    for module in modules:
        ra, rb = a["modules"][module]["rules"], b["modules"][module]["rules"]
        diff = sorted(name for name in set(ra) | set(rb) if ra.get(name) != rb.get(name))
        differing += [(module, name, ra.get(name, {}), rb.get(name, {})) for name in diff]
        print(f"| {module} | {len(ra)} | {a['modules'][module]['seconds']:.1f} | "
              f"{b['modules'][module]['seconds']:.1f} | {', '.join(diff) or 'none'} |")
    for module, name, x, y in differing:
        print(f"\n{module}:{name}\n  {first}: {x}\n  {second}: {y}")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
