"""JAX's own custom_jvp rules checked as a user would check a library's: a precision probe, not a timing.

    python bench/jax_library.py                    # every rule, seeds 0-3, every check
    python bench/jax_library.py --seeds 0-9 --rules relu,relu6,hyp1f1

The rules are the `jax.custom_jvp` objects the installed JAX exports (jax.nn, jax.scipy.special) and those
behind jnp.linalg.det/slogdet/pinv, jnp.sinc, jax.nn.softmax and jnp.i0 (private names: a rule this JAX
lacks is listed as missing), each on its real domain. The table gives each rule's error findings per seed;
which of them are true (the rule's own numbers are wrong) and which were gradguard's is written down by hand
in bench/RESULTS.md ("Precision: JAX's own custom_jvp rules").
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _spec(lo: float, hi: float, shape: tuple[int, ...] = (3,)):
    from gradguard import arrays

    return arrays(shape=shape, min_value=lo, max_value=hi)


# name -> (module, attribute, argument specs as (lo, hi[, shape]) or ("const", value))
RULES: dict[str, tuple[str, str, list[tuple]]] = {
    "relu": ("jax.nn", "relu", [(-10.0, 10.0, (4,))]),
    "relu6": ("jax.nn", "relu6", [(-10.0, 10.0, (4,))]),
    "log1mexp": ("jax.nn", "log1mexp", [(0.01, 20.0)]),
    "logit": ("jax.scipy.special", "logit", [(0.01, 0.99)]),
    "log_ndtr": ("jax.scipy.special", "log_ndtr", [(-30.0, 8.0)]),
    "xlogy": ("jax.scipy.special", "xlogy", [(-5.0, 5.0), (0.01, 10.0)]),
    "xlog1py": ("jax.scipy.special", "xlog1py", [(-5.0, 5.0), (-0.99, 10.0)]),
    "expi": ("jax.scipy.special", "expi", [(0.1, 5.0)]),
    "expn": ("jax.scipy.special", "expn", [("const", 2), (0.1, 5.0)]),
    "zeta": ("jax.scipy.special", "zeta", [(1.5, 6.0), (0.5, 4.0)]),
    "poch": ("jax.scipy.special", "poch", [(0.5, 5.0), (0.0, 3.0)]),
    "sici": ("jax.scipy.special", "sici", [(0.1, 10.0)]),
    "fresnel": ("jax.scipy.special", "fresnel", [(-3.0, 3.0)]),
    "hyp1f1": ("jax.scipy.special", "hyp1f1", [(0.5, 2.0), (1.0, 3.0), (-1.0, 1.0)]),
    "hyp2f1": ("jax.scipy.special", "hyp2f1", [(0.5, 2.0), (0.5, 2.0), (2.5, 4.0), (-0.5, 0.5)]),
    "det": ("jax._src.numpy.linalg", "_det", [(-3.0, 3.0, (3, 3))]),
    "slogdet_lu": ("jax._src.numpy.linalg", "_slogdet_lu", [(-3.0, 3.0, (3, 3))]),
    "slogdet_qr": ("jax._src.numpy.linalg", "_slogdet_qr", [(-3.0, 3.0, (3, 3))]),
    "pinv": ("jax._src.numpy.linalg", "_pinv", [(-3.0, 3.0, (3, 2)), ("const", None), ("const", False)]),
    "sinc_maclaurin": ("jax._src.numpy.ufuncs", "_sinc_maclaurin", [("const", 0), (-1.0, 1.0)]),
    "softmax": ("jax._src.nn.functions", "_softmax", [(-10.0, 10.0, (2, 3)), ("const", -1)]),
    "dawsn": ("jax._src.scipy.special", "_dawsn", [(-10.0, 10.0)]),
    "erfcx": ("jax._src.scipy.special", "_erfcx", [(-5.0, 30.0)]),
    "owens_t": ("jax._src.scipy.special", "_owens_t_impl", [(-3.0, 3.0), (-3.0, 3.0)]),
    "xlogx": ("jax._src.scipy.special", "_xlogx", [(0.0, 10.0)]),
    "i0": ("jax._src.numpy.lax_numpy", "_i0", [(-10.0, 10.0)]),
}


def rules(names: list[str]) -> tuple[list, list[str]]:
    """(jax_rule objects, names this JAX lacks)."""
    import jax

    from gradguard import constant, jax_rule

    made, missing = [], []
    for name in names:
        module, attr, specs = RULES[name]
        fn = getattr(importlib.import_module(module), attr, None)
        if not isinstance(fn, jax.custom_jvp):
            missing.append(name)
            continue
        args = [constant(s[1]) if s[0] == "const" else _spec(*s) for s in specs]
        made.append(jax_rule(fn, *args, name=name))
    return made, missing


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",") if s]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-3", help="a range (0-3) or a list (0,5)")
    parser.add_argument("--rules", default=",".join(RULES), help="comma-separated, from the names above")
    parser.add_argument("--select", default=None, help="only these checks (id prefixes); default every check")
    args = parser.parse_args()
    from gradguard import check

    made, missing = rules([r for r in args.rules.split(",") if r])
    seeds = _seeds(args.seeds)
    import jax

    print(f"JAX {jax.__version__}; seeds {seeds}; {args.select or 'every check'}")
    if missing:
        print(f"not a custom_jvp in this JAX (skipped): {', '.join(missing)}")
    table: dict[str, list[str]] = {r.name: [] for r in made}
    for seed in seeds:
        report = check(made, seed=seed, jobs=0, use_cache=False, select=args.select.split(",") if args.select else None)
        for r in report.rules:
            ids = sorted({f.check_id for f in r.findings if f.severity == "error"})
            table[r.name].append("error: " + r.error["type"] if r.error else (", ".join(ids) or "-"))
    print("\n| rule | " + " | ".join(f"seed {s}" for s in seeds) + " |")
    print("| --- | " + " | ".join("---" for _ in seeds) + " |")
    for name, cells in table.items():
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
