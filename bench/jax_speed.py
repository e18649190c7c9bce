"""Speed of the JAX checks (GG203, GG204, GG601, GG602): a benchmark, not a timed test.

    python bench/jax_speed.py                  # CPU: small rule, n = 10**6, batched vs sequential FD
    python bench/jax_speed.py --device gpu     # the same on a GPU, plus n = 10**7

    python bench/jax_speed.py --compiles       # XLA compilations per check, with and without the on-disk cache

It prints, for a correct softplus `jax.custom_vjp`:

1. the JAX checks' time on a 5-element rule after warm-up (compilations cached; target: under 1.5 s),
   with the time of each check alone;
2. the same checks on n = 10**6 elements (n = 10**7 on a GPU), after one warm-up run of the same shape;
3. GG204's finite differences of the pullback at those sizes, sequential (`gradguard.engines.fd.directional`, one
   call per Richardson step) against batched (every step in one jitted vmap call).

``--compiles`` instead counts XLA compilations (JAX's own monitoring events) for a NumPy softplus rrule on (3,),
the JAX softplus on (5,), a `jax.custom_jvp` softplus on (3,) (tests/corpus/jax_jvp.py) and a fixed-point
`custom_vjp` whose primal is a `lax.while_loop` (tests/realworld/correct_jax.py) and JAX's own ODE solver
(bench/_ode_rule.py): solvers whose every eager call traces and compiles their loops again. Every check, each
in fresh processes: the first and a second check in one
process, without JAX's persistent compilation cache (the reference), then with an empty cache folder, then
with that folder filled by the previous process (what `gradguard check` does in `.gradguard_cache/jax`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

JAX_CHECKS = ["GG203", "GG204", "GG601", "GG602"]
# --compiles: rules taken from the corpora, (module, rule name)
MODULE_RULES = {"jvp": ("tests/corpus/jax_jvp.py", "softplus_jvp"),
                "fixed_point": ("tests/realworld/correct_jax.py", "fixed_point_sqrt_rule"),
                "odeint": ("bench/_ode_rule.py", "odeint_rule")}


def _rule(n: int):
    import jax
    import jax.numpy as jnp

    from gradguard import arrays, jax_rule

    @jax.custom_vjp
    def softplus(x):
        return jnp.logaddexp(0.0, x)

    softplus.defvjp(lambda x: (jnp.logaddexp(0.0, x), jax.nn.sigmoid(x)), lambda sig, g: (g * sig,))
    return jax_rule(softplus, arrays(shape=(n,), min_value=-20.0, max_value=20.0), name=f"softplus_{n}")


def _timed(fn, repeat: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def small_rule() -> None:
    from gradguard.checker import check

    rule = _rule(5)
    check(rule, select=JAX_CHECKS, seed=0)  # warm-up: JAX import, compilations for this shape
    seconds, report = _timed(lambda: check(rule, select=JAX_CHECKS, seed=1))
    result = report.rules[0]
    target = "under the 1.5 s target" if seconds < 1.5 else "OVER the 1.5 s target"
    print(
        f"small rule (n=5), JAX checks {'+'.join(JAX_CHECKS)} after warm-up: {seconds:.2f} s "
        f"({result.verdict}, {result.examples} inputs; {target})"
    )
    # every input the settings ask for, whatever the time
    seconds, report = _timed(lambda: check(rule, select=JAX_CHECKS, seed=1, input_budget_s=None))
    print(f"    without the input budget: {seconds:.2f} s for {report.rules[0].examples} inputs")
    for check_id in JAX_CHECKS:
        t, rep = _timed(lambda: check(rule, select=[check_id], seed=1))
        print(f"    {check_id} alone: {t:.2f} s, {rep.rules[0].examples} inputs")


def large_rule(n: int) -> None:
    from gradguard import check

    rule = _rule(n)
    start = time.perf_counter()
    check(rule, select=JAX_CHECKS, seed=0, max_examples=1)  # warm-up: compilations for this shape
    warm = time.perf_counter() - start
    start = time.perf_counter()
    report = check(rule, select=JAX_CHECKS, seed=1)
    seconds = time.perf_counter() - start
    result = report.rules[0]
    print(
        f"n={n:.0e}: JAX checks {seconds:.2f} s after a {warm:.2f} s warm-up ({result.verdict}, {result.examples} "
        f"inputs within the runner's evaluation budget)"
    )


def fd_paths(n: int) -> None:
    import numpy as np

    from gradguard.checker.checks._jax import batched_directional
    from gradguard.engines import fd

    rule = _rule(n)
    rng = np.random.default_rng(0)
    x, u, w, ybar = (rng.uniform(-3, 3, n) for _ in range(4))

    def pulled(a):
        _, pullback = rule.rrule(a)
        return pullback(ybar)

    def sequential():
        return fd.directional(pulled, (x,), (u,), (w,), complex_step=False)

    def batched():
        return batched_directional(rule.jax_fn, (x,), (u,), [w], cotangent=ybar, mode="pullback")

    sequential(), batched()  # warm-up: compilations
    t_seq, d_seq = _timed(sequential)
    t_bat, d_bat = _timed(batched)
    print(
        f"n={n:.0e}: finite differences of the pullback, sequential {t_seq:.3f} s ({d_seq.evaluations} calls), "
        f"batched {t_bat:.3f} s ({d_bat.evaluations} points in one call); values {d_seq.value:.10g} vs {d_bat.value:.10g}"
    )


def compile_probe(kind: str, cache: str) -> None:
    """In a fresh process: compilations and persistent-cache hits of two checks of one rule, as JSON (JAX
    reports a program loaded from the cache both as a compilation and as a hit)."""
    import json
    from collections import Counter

    from jax import monitoring

    from gradguard import check

    seen: Counter = Counter()
    monitoring.register_event_duration_secs_listener(
        lambda name, secs, **_: seen.update({"compiles": 1}) if name == "/jax/core/compile/backend_compile_duration" else None)
    monitoring.register_event_listener(
        lambda name, **_: seen.update({"hits": 1}) if name == "/jax/compilation_cache/cache_hits" else None)
    if kind == "numpy":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _cases import counting_softplus_rule

        rule = counting_softplus_rule(3)
    elif kind in MODULE_RULES:
        from gradguard.checker.loader import load_module, rules_in

        path, name = MODULE_RULES[kind]
        (rule,) = [r for r in rules_in(load_module(Path(__file__).resolve().parents[1] / path)) if r.name == name]
    else:
        rule = _rule(5)
    runs = []
    for seed in (0, 1):
        seen.clear()
        start = time.perf_counter()
        report = check(rule, seed=seed, jax_cache_dir=cache or None)
        runs.append({"seconds": time.perf_counter() - start, "compiles": seen["compiles"], "hits": seen["hits"],
                     "verdict": report.rules[0].verdict})
    print(json.dumps(runs))


COMPILE_RULES = (("numpy", "softplus rrule (3,)"), ("jax", "softplus custom_vjp (5,)"),
                 ("jvp", "softplus custom_jvp (3,)"), ("fixed_point", "fixed-point custom_vjp ()"),
                 ("odeint", "odeint custom_vjp (2,)"))


def compiles(kinds: list[str]) -> None:
    import json
    import subprocess
    import tempfile

    def probe(kind: str, cache: str) -> list[dict]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADGUARD_", "JAX_COMPILATION_CACHE"))}
        done = subprocess.run([sys.executable, __file__, "--compile-probe", kind, cache], env=env,
                              capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    print("XLA programs per check (every check), a fresh process per cache setting, two checks (seeds 0, 1) in each;")
    print("compiled: compiled by XLA here; from disk: loaded from JAX's persistent compilation cache instead")
    print(f"{'rule':26} {'persistent cache':28} {'check':>5} {'compiled':>8} {'from disk':>9} {'time (s)':>8} {'x ref':>6}")
    print("-" * 98)
    for kind, label in COMPILE_RULES:
        if kinds and kind not in kinds:
            continue
        with tempfile.TemporaryDirectory() as folder:
            rows = [("none (reference)", probe(kind, "")), ("empty folder", probe(kind, folder)),
                    ("filled by the process above", probe(kind, folder))]
        reference = rows[0][1][0]["seconds"]
        for name, runs in rows:
            for i, run in enumerate(runs, 1):
                print(f"{label:26} {name:28} {i:>5} {run['compiles'] - run['hits']:>8} {run['hits']:>9} {run['seconds']:>8.2f} "
                      f"{run['seconds'] / reference:>6.2f}  {run['verdict']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--n", type=int, default=None, help="large size (default 10**6 on cpu, 10**7 on gpu)")
    parser.add_argument("--compiles", nargs="*", metavar="RULE", choices=[k for k, _ in COMPILE_RULES],
                        help="count XLA compilations, with and without the disk cache (all rules, or those named: "
                             f"{', '.join(k for k, _ in COMPILE_RULES)})")
    parser.add_argument("--compile-probe", nargs=2, metavar=("KIND", "CACHE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.compile_probe:
        compile_probe(*args.compile_probe)
        return
    if args.compiles is not None:
        compiles(args.compiles)
        return
    os.environ["GRADGUARD_DEVICE"] = args.device
    from gradguard.checker.jax_rules import ensure_device
    from gradguard.engines.jax_engine import environment

    ensure_device()
    env = environment()
    print(f"JAX {env['jax']} (jaxlib {env['jaxlib']}) on {env['device']}, float64 {'on' if env['x64'] else 'off'}")
    small_rule()
    sizes = [args.n] if args.n else ([10**6] if args.device == "cpu" else [10**6, 10**7])
    for n in sizes:
        large_rule(n)
        fd_paths(n)


if __name__ == "__main__":
    main()
