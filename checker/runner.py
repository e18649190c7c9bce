"""Running checks on rules: which checks, which rules, on how many processes, with which cached verdicts.

:func:`check` collects the rules of a target (a rule, module, path, folder or list), selects the check
ids, reuses the verdicts of unchanged rules (:mod:`gradguard.checker.cache`), and checks the others one
by one (:func:`gradguard.checker.per_rule.check_rule`) or on worker processes
(:mod:`gradguard.checker.parallel`), with the same report in the same order. Verdicts are deterministic
for a seed.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any, Callable

import numpy as np

from gradguard.checker._search import RuleTimeout
from gradguard.checker._version import VERSION
from gradguard.checker.checks import catalogue, check_prefixes
from gradguard.checker.contexts._jax_engine import MODES as JAX_COLUMN_MODES
from gradguard.checker.errors import SpecError, UsageError
from gradguard.checker.loader import collect, matching, no_rule_matches
from gradguard.checker.options import (DEFAULT_INPUT_BUDGET_S, DEFAULT_MAX_EXAMPLES, DEFAULT_MEMORY_LIMIT_MB,
                                       DEFAULT_RULE_TIMEOUT_S, DEFAULT_SHRINK_BUDGET_S, DEFAULT_SHRINK_STEPS, Options,
                                       PerRule)
from gradguard.checker.per_rule import INHERITED_MAPS, check_rule, time_limit
from gradguard.checker.report import Report, RuleResult
from gradguard.checker.specs import validate_unused_cotangent
from gradguard.engines.jax_engine._runtime import share_gpu_memory

__all__ = ["check", "check_rule", "select_checks", "time_limit", "Options", "PerRule", "RuleTimeout"]

# ``jobs=None`` checks on one process per CPU above this many rules to check: below it, starting
# worker processes (each imports NumPy, Hypothesis and maybe JAX) costs more than it saves.
AUTO_JOBS_ABOVE = 4


def select_checks(select: Any = None, ignore: Any = None) -> list[str]:
    """Check ids matching the ``select`` prefixes minus the ``ignore`` prefixes (like a linter's codes)."""
    known = [c.id for c in catalogue()]
    chosen = check_prefixes("select", select, UsageError) or ["GG"]
    dropped = check_prefixes("ignore", ignore, UsageError)
    return [k for k in known if any(k.startswith(p) for p in chosen) and not any(k.startswith(p) for p in dropped)]


def environment() -> dict[str, Any]:
    env = {
        "gradguard": VERSION,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(terse=True),
        "device": os.environ.get("GRADGUARD_DEVICE", "cpu"),
    }
    if "jax" in sys.modules:
        try:
            from gradguard.engines import jax_engine

            env.update(jax_engine.environment())
        except Exception:  # noqa: BLE001 - the environment block is informative only
            pass
    if os.environ.get("GRADGUARD_SANDBOX"):
        env["sandbox"] = os.environ["GRADGUARD_SANDBOX"]
    return env


def check(
    target: Any,
    *,
    select: Any = None,
    ignore: Any = None,
    seed: int = 0,
    max_examples: int | None = None,
    rule_timeout_s: float | None = DEFAULT_RULE_TIMEOUT_S,
    memory_limit_mb: float | None = DEFAULT_MEMORY_LIMIT_MB,
    progress: Callable[[RuleResult, int, int], None] | None = None,
    jobs: int | None = 1,
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool | None = None,
    shrink_budget_s: float | None = DEFAULT_SHRINK_BUDGET_S,
    shrink_steps: int | None = DEFAULT_SHRINK_STEPS,
    input_budget_s: float | None = DEFAULT_INPUT_BUDGET_S,
    jax_cache_dir: str | os.PathLike[str] | None = None,
    unused_cotangent: str | None = None,
    jax_column: str | None = None,
    rules: Any = None,
) -> Report:
    """Check every rule in ``target`` (a rule, module, path, folder or list) and return a :class:`Report`.

    ``jobs`` > 1 checks rules on that many worker processes (0: one per CPU), with the same report;
    ``None``: one per CPU when there are more than a handful of rules (``AUTO_JOBS_ABOVE``), else one.
    ``cache_dir``: reuse the stored result of every rule unchanged since it was last checked there
    (:mod:`gradguard.checker.cache`; reused results say ``cached``). ``use_cache``: None uses the cache
    when ``cache_dir`` is given; True uses it (in ``.gradguard_cache`` when no folder is given); False
    checks every rule. ``shrink_budget_s`` (per rule) and ``shrink_steps`` (evaluations per failing
    check) bound shrinking; when one runs out the smallest failing input so far is reported, and the
    counterexample's ``shrinking`` says so (None: no bound). ``input_budget_s``: once a rule's checks have taken
    this long (the checker's own time, as for ``rule_timeout_s``), no new input is drawn for it, and its result's
    ``examples_cut`` says how many it was checked on (None or 0: every input ``max_examples`` asks for). ``jax_cache_dir``: JAX's persistent
    compilation cache, so later processes load compiled programs instead of compiling them (default:
    ``jax`` inside the verdict cache's folder when that is used; ``JAX_COMPILATION_CACHE_DIR`` wins).
    ``unused_cotangent`` ("zeros" or "none") is the project's convention for rules that declare none: what
    the pullback of an unused output receives (None: "zeros"; GG302 and the tape's columns follow it).
    ``memory_limit_mb`` bounds how much each rule may grow the process's resident memory (default: half the
    machine's physical memory; None or 0: no limit); a rule over it is an error of type ``MemoryLimit``.
    ``jax_column`` ("auto", "jit", "eager" or "traced") is how the safety matrix's JAX column runs each
    context program: compiled once per (rule, context, shapes, dtypes), eagerly (primitive by primitive), or
    traced by JAX once per (rule, context, shapes, dtypes) and run with NumPy, compiling nothing (NumPy
    rules; a JAX rule's programs run eagerly). None: "auto", traced for a NumPy rule and, for a JAX rule,
    compiled while JAX's persistent cache is in force and eager otherwise. The verdicts are the same;
    bench/RESULTS.md has the measured trade-offs. ``rules``: only the rules named by these patterns (a rule's name
    or a glob of names, a string or a list; a path target written ``path::pattern`` chooses within that module);
    a pattern that names no rule is a usage error, unless a module failed to import (the report then says so)."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise UsageError(f"Got seed={seed!r}, but seed must be an int.")
    if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 0):
        raise UsageError(f"Got jobs={jobs!r}, but jobs must be an int >= 0 (0: one worker process per CPU).")
    if max_examples is not None and (not isinstance(max_examples, int) or max_examples < 1):
        raise UsageError(f"Got max_examples={max_examples!r}, but max_examples must be an int >= 1.")
    if shrink_budget_s is not None and (isinstance(shrink_budget_s, bool) or not isinstance(shrink_budget_s, (int, float))
                                        or not shrink_budget_s >= 0):
        raise UsageError(f"Got shrink_budget_s={shrink_budget_s!r}, but it must be a number of seconds >= 0, or None (no limit).")
    if input_budget_s is not None and (isinstance(input_budget_s, bool) or not isinstance(input_budget_s, (int, float))
                                       or not 0 <= input_budget_s < float("inf")):
        raise UsageError(f"Got input_budget_s={input_budget_s!r}, but it must be a number of seconds >= 0 "
                         "(0 or None: no budget, every input max_examples asks for).")
    if memory_limit_mb is not None and (isinstance(memory_limit_mb, bool) or not isinstance(memory_limit_mb, (int, float))
                                        or not 0 <= memory_limit_mb < float("inf")):
        raise UsageError(f"Got memory_limit_mb={memory_limit_mb!r}, but it must be a number of megabytes >= 0 "
                         "(0 or None: no limit).")
    if shrink_steps is not None and (not isinstance(shrink_steps, int) or isinstance(shrink_steps, bool) or shrink_steps < 0):
        raise UsageError(f"Got shrink_steps={shrink_steps!r}, but it must be an int >= 0, or None (no limit).")
    try:
        validate_unused_cotangent(unused_cotangent)
    except SpecError as exc:  # a usage error here, quoting the value
        raise UsageError(str(exc)) from None
    if jax_column is not None and jax_column not in JAX_COLUMN_MODES:
        raise UsageError(f"Got jax_column={jax_column!r}, but it must be one of "
                         f"{', '.join(map(repr, JAX_COLUMN_MODES))} (how the JAX column runs a context program).")
    ids = select_checks(select, ignore)
    started = time.perf_counter()
    share_gpu_memory()  # before the rules' modules load: one may start JAX's GPU backend at import
    patterns = _rule_patterns(rules)
    rules, failures = collect(target)
    if patterns:
        chosen = {id(r) for p in patterns for r in matching(rules, p)}
        if not failures:
            for pattern in patterns:
                if not matching(rules, pattern):
                    raise no_rule_matches(pattern, rules, "the modules checked")
        rules = [r for r in rules if id(r) in chosen]
    options = Options(seed=seed, max_examples=max_examples or DEFAULT_MAX_EXAMPLES, rule_timeout_s=rule_timeout_s,
                      memory_limit_mb=memory_limit_mb or None, root=os.getcwd(),
                      shrink_budget_s=shrink_budget_s, shrink_steps=shrink_steps, unused_cotangent=unused_cotangent,
                      jax_column=jax_column, input_budget_s=input_budget_s or None)
    settings = {"seed": seed, "max_examples": options.max_examples, "checks": ids, "select": select, "ignore": ignore}
    if unused_cotangent is not None:
        settings["unused_cotangent"] = unused_cotangent
    if patterns:
        settings["rules"] = patterns
    report = Report(load_errors=failures, settings=settings)
    cache = _open_cache(cache_dir, use_cache, ids, options)
    if jax_cache_dir is not None:
        options.jax_cache_dir = os.fspath(jax_cache_dir)
    elif cache is not None and cache.prepare():
        options.jax_cache_dir = os.fspath(cache.folder / "jax")
    keys = [cache.key(rule) if cache else None for rule in rules]
    results: list[RuleResult | None] = [cache.get(k) if cache else None for k in keys]
    todo = [i for i, r in enumerate(results) if r is None]
    done = 0

    def finished(result: RuleResult, *_: int) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(result, done, len(rules))

    for result in results:
        if result is not None:
            finished(result)
    if jobs is None:
        jobs = 0 if len(todo) > AUTO_JOBS_ABOVE else 1

    def final(result: RuleResult, *_: int) -> None:
        if not _inherited_maps(result):  # reported once checked again in a process of its own
            finished(result)

    inherited: list[int] = []
    if jobs != 1 and len(todo) > 1:
        from gradguard.checker.parallel import check_in_processes

        for i, result in zip(todo, check_in_processes([rules[i] for i in todo], ids, options, jobs, final)):
            results[i] = result
        inherited = [i for i in todo if _inherited_maps(results[i])]
    else:
        for n, i in enumerate(todo):
            results[i] = check_rule(rules[i], ids, options)
            if _inherited_maps(results[i]):
                inherited = todo[n:]  # this process can map no more: the rest go to a fresh one
                break
            finished(results[i])
    _check_in_fresh_processes(inherited, rules, results, ids, options, final, finished)
    if cache is not None:
        for i in todo:
            cache.put(keys[i], results[i])
    report.rules.extend(r for r in results if r is not None)
    report.environment = environment()
    report.duration_s = time.perf_counter() - started
    return report


def _inherited_maps(result: RuleResult | None) -> bool:
    return result is not None and result.verdict == "error" and (result.error or {}).get("type") == INHERITED_MAPS


def _check_in_fresh_processes(indices: list[int], rules: list[Any], results: list[RuleResult | None], ids: list[str],
                              options: Options, final: Any, finished: Any) -> None:
    """Check again, in a fresh worker process, the rules stopped by memory maps that rules before them left in their
    process (`per_rule.INHERITED_MAPS`), until each has had a process that held few maps when it started (each round's
    first rule does) or a round makes no progress (rules no worker can load run in this process)."""
    if not indices:
        return
    from gradguard.checker.parallel import check_in_processes

    while indices:
        for i, result in zip(indices, check_in_processes([rules[i] for i in indices], ids, options, 1, final)):
            results[i] = result
        again = [i for i in indices if _inherited_maps(results[i])]
        if len(again) == len(indices):
            for i in again:
                finished(results[i])
            return
        indices = again


def _rule_patterns(rules: Any) -> list[str]:
    """``rules=`` as a list of patterns: a string (comma-separated names or globs) or an iterable of strings."""
    if rules is None:
        return []
    items = [rules] if isinstance(rules, str) else rules
    try:
        items = list(items)
    except TypeError:
        items = [items]
    if not all(isinstance(i, str) for i in items):
        raise UsageError(f"Got rules={rules!r}, but rules must be a rule name or glob ('soft*'), or a list of them.")
    patterns = [p.strip() for i in items for p in i.split(",") if p.strip()]
    if not patterns:
        raise UsageError(f"Got rules={rules!r}, which names no rule. Give a rule's name or a glob such as 'soft*', "
                         "or leave rules out to check every rule.")
    return patterns


def _open_cache(cache_dir: Any, use_cache: bool | None, ids: list[str], options: Options) -> Any:
    if use_cache is False or (use_cache is None and cache_dir is None):
        return None
    from gradguard.checker.cache import DEFAULT_CACHE_DIR, VerdictCache

    settings = {"checks": ids, "seed": options.seed, "max_examples": options.max_examples,
                "rule_timeout_s": options.rule_timeout_s, "memory_limit_mb": options.memory_limit_mb,
                "root": options.root,
                "unused_cotangent": options.unused_cotangent,
                "shrink": [options.shrink_budget_s, options.shrink_steps],
                "input_budget_s": options.input_budget_s,
                "device": os.environ.get("GRADGUARD_DEVICE", "cpu"),
                "batched_fd": os.environ.get("GRADGUARD_BATCHED_FD", "")}
    return VerdictCache(cache_dir if cache_dir is not None else DEFAULT_CACHE_DIR, settings)
