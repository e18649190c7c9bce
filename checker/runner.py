"""Running checks on rules: Hypothesis draws inputs, finds failures and shrinks them.

For each rule and each selected per-input check, one Hypothesis search runs
the check on drawn inputs; the first failure is shrunk to the smallest input
(and cotangent) that still fails, and that final example becomes the finding,
with its reproducer (the searches themselves live in :mod:`gradguard.checker._search`).
Structural contract checks (``gates=True``) run first;
when one fails, the checks that depend on the structure are skipped with the
reason, so the first message is the real cause. Per-rule checks (the
contexts' safety matrix) run last. Verdicts are deterministic for a seed.
"""

from __future__ import annotations

import difflib
import os
import platform
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from gradguard.checker import reproducer
from gradguard.checker._search import (RuleTimeout, _BudgetSpent, _drive, _Failure, _InternalError, _run_one, _search,
                                       _shrink_note, _SpecCannotGenerate, severity)
from gradguard.checker.case import Case, HypothesisDraws, Shared, UnsupportedOutput
from gradguard.checker.checks.registry import CHECKS, CheckInfo, Problem, Skip, catalogue
from gradguard.checker.errors import SpecError, UsageError
from gradguard.checker.inputs import format_call, show
from gradguard.checker.loader import collect
from gradguard.checker.report import Finding, Report, RuleResult
from gradguard.checker.specs import RUN_UNUSED_COTANGENT, RuleSpec, validate_unused_cotangent
from gradguard.engines.errors import PlatformUnavailable

__all__ = ["check", "check_rule", "select_checks", "time_limit", "Options", "PerRule", "RuleTimeout"]

DEFAULT_MAX_EXAMPLES = 20
DEFAULT_RULE_TIMEOUT_S = 120.0
# Large inputs get fewer examples, decided by the size of the first (seeded) input so that verdicts stay
# deterministic: up to this many array elements a rule gets every example; beyond it, proportionally
# fewer (one at 10**6 elements, which keeps the isolation checks near 50 forward+pullback evaluations).
FULL_EXAMPLES_UP_TO = 2**14
# A safety net for rules that are slow for their size: no new input is drawn after this many seconds.
# It is the only load-dependent cut, and only rules far slower than their input size suggests reach it.
BUDGET_FLOOR_S = 30.0
VERSION = "0.1.0"
# ``jobs=None`` checks on one process per CPU above this many rules to check: below it, starting
# worker processes (each imports NumPy, Hypothesis and maybe JAX) costs more than it saves.
AUTO_JOBS_ABOVE = 4
# Shrinking a failure costs far more than finding it (Hypothesis' shrinker on element-by-element arrays).
# The arrays are shrunk once per rule: the later failing checks start from the first one's shrunk input
# and shrink only their own draws. Each check gets at most DEFAULT_SHRINK_STEPS evaluations while
# shrinking (deterministic: the budget that keeps a failing rule's shrinking near a second), and each
# rule DEFAULT_SHRINK_BUDGET_S seconds of shrinking, shared by its failing checks: a safety net, like
# BUDGET_FLOOR_S, set far above what the step budget takes, because a cut by the clock makes
# counterexamples depend on the machine's load, and they depend on the seed only (bench/RESULTS.md has
# the measured trade-off). When either runs out, the smallest failing input found so far is reported
# and its counterexample says so. None: no limit (Hypothesis' own five minutes).
DEFAULT_SHRINK_BUDGET_S = 10.0
DEFAULT_SHRINK_STEPS = 25


@dataclass
class Options:
    seed: int = 0
    max_examples: int = DEFAULT_MAX_EXAMPLES
    rule_timeout_s: float | None = DEFAULT_RULE_TIMEOUT_S
    root: str | None = None  # paths in reports and reproducers are relative to this
    shrink_budget_s: float | None = DEFAULT_SHRINK_BUDGET_S  # shrinking time per rule
    shrink_steps: int | None = DEFAULT_SHRINK_STEPS  # evaluations per check while shrinking
    jax_cache_dir: str | None = None  # JAX's persistent compilation cache (None: compile in each process)
    # What an unused output's pullback receives, for rules that declare no convention (specs.UNUSED_COTANGENTS);
    # None: specs.DEFAULT_UNUSED_COTANGENT.
    unused_cotangent: str | None = None


@dataclass
class PerRule:
    """What a per-rule check (e.g. the safety matrix) receives."""

    rule: RuleSpec
    options: Options
    result: RuleResult
    shared: dict[str, Any] = field(default_factory=dict)  # computed once, used by several checks (the matrix)


def select_checks(select: Any = None, ignore: Any = None) -> list[str]:
    """Check ids matching the ``select`` prefixes minus the ``ignore`` prefixes (like a linter's codes)."""
    known = [c.id for c in catalogue()]

    def prefixes(option: str, value: Any) -> list[str]:
        if value is None:
            return []
        items = [value] if isinstance(value, str) else list(value)
        out = []
        for item in items:
            for part in str(item).split(","):
                part = part.strip().upper()
                if not part:
                    continue
                if not any(k.startswith(part) for k in known):
                    close = difflib.get_close_matches(part, known, n=3)
                    hint = f" Did you mean {', '.join(close)}?" if close else f" Known ids: {known[0]}..{known[-1]}."
                    raise UsageError(f"Got {option}={part!r}, which matches no check id.{hint}")
                out.append(part)
        return out

    chosen = prefixes("select", select) or ["GG"]
    dropped = prefixes("ignore", ignore)
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
    progress: Callable[[RuleResult, int, int], None] | None = None,
    jobs: int | None = 1,
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool | None = None,
    shrink_budget_s: float | None = DEFAULT_SHRINK_BUDGET_S,
    shrink_steps: int | None = DEFAULT_SHRINK_STEPS,
    jax_cache_dir: str | os.PathLike[str] | None = None,
    unused_cotangent: str | None = None,
) -> Report:
    """Check every rule in ``target`` (a rule, module, path, folder or list) and return a :class:`Report`.

    ``jobs`` > 1 checks rules on that many worker processes (0: one per CPU), with the same report;
    ``None``: one per CPU when there are more than a handful of rules (``AUTO_JOBS_ABOVE``), else one.
    ``cache_dir``: reuse the stored result of every rule unchanged since it was last checked there
    (:mod:`gradguard.checker.cache`; reused results say ``cached``). ``use_cache``: None uses the cache
    when ``cache_dir`` is given; True uses it (in ``.gradguard_cache`` when no folder is given); False
    checks every rule. ``shrink_budget_s`` (per rule) and ``shrink_steps`` (evaluations per failing
    check) bound shrinking; when one runs out the smallest failing input so far is reported, and the
    counterexample's ``shrinking`` says so (None: no bound). ``jax_cache_dir``: JAX's persistent
    compilation cache, so later processes load compiled programs instead of compiling them (default:
    ``jax`` inside the verdict cache's folder when that is used; ``JAX_COMPILATION_CACHE_DIR`` wins).
    ``unused_cotangent`` ("zeros" or "none") is the project's convention for rules that declare none: what
    the pullback of an unused output receives (None: "zeros"; GG302 and the tape's columns follow it)."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise UsageError(f"Got seed={seed!r}, but seed must be an int.")
    if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 0):
        raise UsageError(f"Got jobs={jobs!r}, but jobs must be an int >= 0 (0: one worker process per CPU).")
    if max_examples is not None and (not isinstance(max_examples, int) or max_examples < 1):
        raise UsageError(f"Got max_examples={max_examples!r}, but max_examples must be an int >= 1.")
    if shrink_budget_s is not None and (isinstance(shrink_budget_s, bool) or not isinstance(shrink_budget_s, (int, float))
                                        or not shrink_budget_s >= 0):
        raise UsageError(f"Got shrink_budget_s={shrink_budget_s!r}, but it must be a number of seconds >= 0, or None (no limit).")
    if shrink_steps is not None and (not isinstance(shrink_steps, int) or isinstance(shrink_steps, bool) or shrink_steps < 0):
        raise UsageError(f"Got shrink_steps={shrink_steps!r}, but it must be an int >= 0, or None (no limit).")
    try:
        validate_unused_cotangent(unused_cotangent)
    except SpecError as exc:  # a usage error here, quoting the value
        raise UsageError(str(exc)) from None
    ids = select_checks(select, ignore)
    started = time.perf_counter()
    rules, failures = collect(target)
    options = Options(seed=seed, max_examples=max_examples or DEFAULT_MAX_EXAMPLES, rule_timeout_s=rule_timeout_s, root=os.getcwd(),
                      shrink_budget_s=shrink_budget_s, shrink_steps=shrink_steps, unused_cotangent=unused_cotangent)
    settings = {"seed": seed, "max_examples": options.max_examples, "checks": ids, "select": select, "ignore": ignore}
    if unused_cotangent is not None:
        settings["unused_cotangent"] = unused_cotangent
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
    if jobs != 1 and len(todo) > 1:
        from gradguard.checker.parallel import check_in_processes

        for i, result in zip(todo, check_in_processes([rules[i] for i in todo], ids, options, jobs, finished)):
            results[i] = result
    else:
        for i in todo:
            results[i] = check_rule(rules[i], ids, options)
            finished(results[i])
    if cache is not None:
        for i in todo:
            cache.put(keys[i], results[i])
    report.rules.extend(r for r in results if r is not None)
    report.environment = environment()
    report.duration_s = time.perf_counter() - started
    return report


def _open_cache(cache_dir: Any, use_cache: bool | None, ids: list[str], options: Options) -> Any:
    if use_cache is False or (use_cache is None and cache_dir is None):
        return None
    from gradguard.checker.cache import DEFAULT_CACHE_DIR, VerdictCache

    settings = {"checks": ids, "seed": options.seed, "max_examples": options.max_examples,
                "rule_timeout_s": options.rule_timeout_s, "root": options.root,
                "unused_cotangent": options.unused_cotangent,
                "shrink": [options.shrink_budget_s, options.shrink_steps],
                "device": os.environ.get("GRADGUARD_DEVICE", "cpu"),
                "batched_fd": os.environ.get("GRADGUARD_BATCHED_FD", "")}
    return VerdictCache(cache_dir if cache_dir is not None else DEFAULT_CACHE_DIR, settings)


def check_rule(rule: RuleSpec, ids: list[str], options: Options) -> RuleResult:
    start = time.perf_counter()
    result = RuleResult(
        name=rule.name,
        module=rule.module,
        source_file=_relative(rule.source_file, options.root),
        source_lines=list(rule.source_lines) if rule.source_lines else None,
        kind=rule.kind,
    )
    infos = [CHECKS[i] for i in ids]
    rule.run_state.clear()
    if options.unused_cotangent is not None:
        rule.run_state[RUN_UNUSED_COTANGENT] = options.unused_cotangent
    try:
        with time_limit(options.rule_timeout_s):
            _prepare_engine(rule, ids, options.jax_cache_dir)
            _run_checks(rule, infos, options, result)
    except RuleTimeout:
        result.verdict = "error"
        result.error = {
            "type": "Timeout",
            "message": f"exceeded the {options.rule_timeout_s:g} s per-rule time limit before every check had run; "
            "raise it with --timeout SECONDS (check(rule_timeout_s=); 0: no limit), or draw fewer inputs with "
            "--max-examples",
            "traceback": "",
        }
    except _SpecCannotGenerate as exc:
        result.verdict = "error"
        result.error = {"type": "SpecError", "message": str(exc), "traceback": ""}
    except UnsupportedOutput as exc:  # this rule gets an error naming the value; the other rules are checked
        result.verdict = "error"
        result.error = {"type": "UnsupportedOutput", "message": str(exc), "traceback": ""}
    except PlatformUnavailable as exc:  # e.g. --device gpu where JAX sees none: this JAX rule errors, others run
        result.verdict = "error"
        result.error = {"type": "PlatformUnavailable", "message": str(exc), "traceback": ""}
    except _InternalError as exc:
        result.verdict = "error"
        result.error = {"type": "InternalError", "message": str(exc), "traceback": exc.tb}
    rule.run_state.pop(RUN_UNUSED_COTANGENT, None)  # the run's default must not outlive the run
    result.duration_s = round(time.perf_counter() - start, 4)
    if result.verdict != "error":
        result.verdict = "fail" if any(f.severity == "error" for f in result.findings) else "pass"
    return result


def _prepare_engine(rule: RuleSpec, ids: list[str], jax_cache_dir: str | None = None) -> None:
    """Load JAX on the requested device (GRADGUARD_DEVICE) before the survey's clock starts.

    A JAX rule needs it (PlatformUnavailable: this rule errors, the others
    run); a NumPy rule only for the JAX checks (GG203), which skip with the
    reason when the device is missing.
    """
    if rule.kind != "jax" and not any(CHECKS[i].extra.get("needs_jax") for i in ids):
        return
    from gradguard.checker.jax_rules import ensure_device

    if jax_cache_dir is not None:
        from gradguard.engines.jax_engine import use_compilation_cache

        use_compilation_cache(jax_cache_dir)
    try:
        ensure_device()
    except PlatformUnavailable:
        if rule.kind == "jax":
            raise


def _run_checks(rule: RuleSpec, infos: list[CheckInfo], options: Options, result: RuleResult) -> None:
    applicable = []
    for info in infos:
        if rule.kind not in info.kinds:
            result.checks_skipped.append({"id": info.id, "reason": f"does not apply to {rule.kind} rules"})
        else:
            applicable.append(info)
    per_input = [i for i in applicable if not i.per_rule]
    # One search runs every check on each drawn input (generation is the expensive part);
    # only the checks that failed get a search of their own, which shrinks the failure.
    survey = _survey(rule, per_input, options)
    result.examples = survey.examples

    gate_failed: str | None = None
    raised_messages: set[str] = set()
    shared: dict[str, Any] = {}
    shrink_left = options.shrink_budget_s  # this rule's shrinking time, shared by its failing checks
    shrunk_args: tuple[Any, ...] | None = None  # the first failing check's shrunk input, tried first by the others
    for info in applicable:
        if gate_failed and not info.gates:
            result.checks_skipped.append({"id": info.id, "reason": f"skipped because {gate_failed} failed: fix the structure first"})
            continue
        if info.per_rule:
            _run_per_rule(rule, info, options, result, shared)
            continue
        first_failure = survey.failures.get(info.id) or survey.warnings.get(info.id)
        if first_failure is None:
            if survey.ran.get(info.id, 0) == 0 and info.id in survey.skip_reasons:
                result.checks_skipped.append({"id": info.id, "reason": survey.skip_reasons[info.id]})
            else:
                result.checks_run.append(info.id)
            continue
        result.checks_run.append(info.id)
        # Shrinking re-runs the check many times: worth it for inputs people can read, not for
        # seed-filled large arrays whose evaluations are expensive.
        shrinkable = survey.cap >= options.max_examples
        note = None
        failure = None
        errors_only = severity(info, first_failure[1]) == "error"
        if shrinkable and shrink_left is not None and shrink_left <= 0:
            note = _shrink_note(options, spent_earlier=bool(options.shrink_budget_s))
        elif shrinkable:
            # Arrays are what is slow to shrink: when an earlier check's shrunk input fails this check too,
            # only this check's own draws (cotangents, directions) are shrunk.
            searched = (_search(rule, info, options, shrink_left, at=shrunk_args, errors_only=errors_only)
                        if shrunk_args is not None else None)
            if searched is None or searched.failure is None:
                searched = _search(rule, info, options, shrink_left, errors_only=errors_only)
            failure = searched.failure
            if shrink_left is not None:
                shrink_left -= searched.shrink_s
            note = _shrink_note(options, spent_earlier=False) if searched.stopped else "complete"
            if failure is not None and shrunk_args is None:
                shrunk_args = failure[0].args
        if failure is None:
            failure = first_failure
            if shrinkable and note == "complete":
                note = None  # the search did not find it again (a flaky rule): the first failure, as drawn
        case, problems, raised = failure
        if raised is not None:
            key = f"{raised.phase}:{type(raised.exc).__name__}:{raised.exc}"
            if key in raised_messages:
                continue  # the same crash, already reported by an earlier check
            raised_messages.add(key)
        for problem in problems:
            result.findings.append(_finding(rule, info, case, problem, options, shrinking=note))
        if info.gates:
            gate_failed = info.id


@dataclass
class _Survey:
    examples: int = 0
    cap: int = 0  # examples this rule gets, from the size of its first input
    ran: dict[str, int] = field(default_factory=dict)
    skip_reasons: dict[str, str] = field(default_factory=dict)
    failures: dict[str, _Failure] = field(default_factory=dict)
    # Problems of warning severity only: kept, while the search goes on for an error from the same check.
    warnings: dict[str, _Failure] = field(default_factory=dict)


def _example_cap(args: Any, max_examples: int) -> int:
    """Examples for a rule whose first input is ``args``: all of them for small inputs, fewer for large ones."""
    from gradguard.checker.trees import leaves

    size = sum(np.size(x) for x in leaves(tuple(args)) if isinstance(x, np.ndarray))
    if size <= FULL_EXAMPLES_UP_TO:
        return max_examples
    return max(1, max_examples * FULL_EXAMPLES_UP_TO // size)


def _survey(rule: RuleSpec, infos: list[CheckInfo], options: Options) -> _Survey:
    survey = _Survey()
    if not infos:
        return survey

    started = time.perf_counter()

    def body(args: Any, data: Any) -> None:
        if survey.examples == 0:
            survey.cap = _example_cap(args, options.max_examples)
        elif survey.examples >= survey.cap or time.perf_counter() - started > BUDGET_FLOOR_S:
            raise _BudgetSpent()
        survey.examples += 1
        gate_failed = False
        draws = HypothesisDraws(data)
        shared = Shared()  # this input's first forward call and first pullback, made once for all checks
        for info in infos:
            if info.id in survey.failures or (gate_failed and not info.gates):
                continue
            case = Case(rule, tuple(args), draws, shared)
            try:
                outcome = _run_one(info, case)
            except (RuleTimeout, KeyboardInterrupt):
                raise
            except Exception as exc:
                tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                raise _InternalError(f"internal error in check {info.id} on rule {rule.name}: {type(exc).__name__}: {exc}", tb) from None
            if isinstance(outcome, str):
                survey.skip_reasons.setdefault(info.id, outcome)
                continue
            survey.ran[info.id] = survey.ran.get(info.id, 0) + 1
            problems, raised = outcome
            if problems and severity(info, problems) == "warning":
                survey.warnings.setdefault(info.id, (case, problems, raised))
            elif problems:
                survey.failures[info.id] = (case, problems, raised)
                gate_failed = gate_failed or info.gates

    _drive(rule, options, body, "the checks")
    return survey


def _run_per_rule(rule: RuleSpec, info: CheckInfo, options: Options, result: RuleResult, shared: dict[str, Any]) -> None:
    ctx = PerRule(rule=rule, options=options, result=result, shared=shared)
    try:
        found = list(info.fn(ctx) or ())
    except Skip as skip:
        result.checks_skipped.append({"id": info.id, "reason": str(skip)})
        return
    except (RuleTimeout, KeyboardInterrupt):
        raise
    except Exception as exc:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        raise _InternalError(f"internal error in check {info.id} on rule {rule.name}: {type(exc).__name__}: {exc}", tb) from None
    result.checks_run.append(info.id)
    for item in found:
        if isinstance(item, Finding):
            result.findings.append(item)
        else:
            result.findings.append(_finding(rule, info, None, item, options))


def _finding(rule: RuleSpec, info: CheckInfo, case: Case | None, problem: Problem, options: Options,
             shrinking: str | None = None) -> Finding:
    counterexample = None
    script = problem.reproducer
    if case is not None:
        counterexample = {
            "call": format_call(rule.primal, case.args, getattr(rule.primal, "__name__", rule.name)),
            "args": [show(a) for a in case.args],
            "draws": {label: show(value) for label, value in case.record},
        }
        if shrinking is not None:
            counterexample["shrinking"] = shrinking
        script = reproducer.script(rule, info.id, case, problem, root=options.root)
    return Finding(
        check_id=info.id,
        severity=problem.severity or info.severity,
        title=info.title,
        rule=rule.name,
        message=problem.message,
        location=problem.location,
        expected=problem.expected,
        actual=problem.actual,
        fix=problem.fix,
        counterexample=counterexample,
        reproducer=script,
        source_file=_relative(rule.source_file, options.root),
        source_lines=list(range(rule.source_lines[0], rule.source_lines[1] + 1)) if rule.source_lines else None,
    )


def _relative(path: str | None, root: str | None) -> str | None:
    if path is None or root is None:
        return path
    try:
        rel = os.path.relpath(path, root)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


@contextmanager
def time_limit(seconds: float | None, exception: type[BaseException] = RuleTimeout) -> Iterator[None]:
    """Raise ``exception`` in the block after ``seconds`` of wall time (main thread only, where signals are
    delivered; elsewhere the service's sandbox enforces limits). Make ``exception`` a BaseException so
    that neither Hypothesis nor the user's code swallows it."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise exception()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
