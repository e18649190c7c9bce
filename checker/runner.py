"""Running checks on rules: Hypothesis draws inputs, finds failures and shrinks them.

For each rule and each selected per-input check, one Hypothesis search runs
the check on drawn inputs; the first failure is shrunk to the smallest input
(and cotangent) that still fails, and that final example becomes the finding,
with its reproducer. Structural contract checks (``gates=True``) run first;
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
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, given, seed as hyp_seed, settings as hyp_settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky, HypothesisException, Unsatisfiable

from gradguard.checker import reproducer
from gradguard.checker._hypothesis import own_constants_only
from gradguard.checker.case import Case, HypothesisDraws, RuleRaised, Shared, UnsupportedOutput
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


@dataclass
class Options:
    seed: int = 0
    max_examples: int = DEFAULT_MAX_EXAMPLES
    rule_timeout_s: float | None = DEFAULT_RULE_TIMEOUT_S
    root: str | None = None  # paths in reports and reproducers are relative to this
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


class _CheckFailed(Exception):
    pass


class _BudgetSpent(BaseException):
    """Ends a search early without a failure (BaseException: Hypothesis neither catches nor shrinks it)."""


class RuleTimeout(BaseException):
    """Raised in the main thread when a rule exceeds its time limit (BaseException: Hypothesis must not catch it)."""


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
    jobs: int = 1,
    unused_cotangent: str | None = None,
) -> Report:
    """Check every rule in ``target`` (a rule, module, path, folder or list) and return a :class:`Report`.

    ``jobs`` > 1 checks rules on that many worker processes (0: one per CPU), with the same report.
    ``unused_cotangent`` ("zeros" or "none") is the project's convention for rules that declare none: what
    the pullback of an unused output receives (None: "zeros"; GG302 and the tape's columns follow it)."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise UsageError(f"Got seed={seed!r}, but seed must be an int.")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 0:
        raise UsageError(f"Got jobs={jobs!r}, but jobs must be an int >= 0 (0: one worker process per CPU).")
    if max_examples is not None and (not isinstance(max_examples, int) or max_examples < 1):
        raise UsageError(f"Got max_examples={max_examples!r}, but max_examples must be an int >= 1.")
    try:
        validate_unused_cotangent(unused_cotangent)
    except SpecError as exc:  # a usage error here, quoting the value
        raise UsageError(str(exc)) from None
    ids = select_checks(select, ignore)
    started = time.perf_counter()
    rules, failures = collect(target)
    options = Options(seed=seed, max_examples=max_examples or DEFAULT_MAX_EXAMPLES, rule_timeout_s=rule_timeout_s,
                      root=os.getcwd(), unused_cotangent=unused_cotangent)
    settings = {"seed": seed, "max_examples": options.max_examples, "checks": ids, "select": select, "ignore": ignore}
    if unused_cotangent is not None:
        settings["unused_cotangent"] = unused_cotangent
    report = Report(load_errors=failures, settings=settings)
    if jobs != 1 and len(rules) > 1:
        from gradguard.checker.parallel import check_in_processes

        report.rules.extend(check_in_processes(rules, ids, options, jobs, progress))
    else:
        for i, rule in enumerate(rules):
            result = check_rule(rule, ids, options)
            report.rules.append(result)
            if progress is not None:
                progress(result, i + 1, len(rules))
    report.environment = environment()
    report.duration_s = time.perf_counter() - started
    return report


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
            _prepare_engine(rule, ids)
            _run_checks(rule, infos, options, result)
    except RuleTimeout:
        result.verdict = "error"
        result.error = {
            "type": "Timeout",
            "message": f"exceeded the {options.rule_timeout_s:g} s per-rule time limit; the rule's forward or pullback may hang",
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


def _prepare_engine(rule: RuleSpec, ids: list[str]) -> None:
    """Load JAX on the requested device (GRADGUARD_DEVICE) before the survey's clock starts.

    A JAX rule needs it (PlatformUnavailable: this rule errors, the others
    run); a NumPy rule only for the JAX checks (GG203), which skip with the
    reason when the device is missing.
    """
    if rule.kind != "jax" and not any(CHECKS[i].extra.get("needs_jax") for i in ids):
        return
    from gradguard.checker.jax_rules import ensure_device

    try:
        ensure_device()
    except PlatformUnavailable:
        if rule.kind == "jax":
            raise


class _SpecCannotGenerate(Exception):
    pass


class _InternalError(Exception):
    def __init__(self, message: str, tb: str) -> None:
        super().__init__(message)
        self.tb = tb


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
        errors_only = _severity(info, first_failure[1]) == "error"
        failure = (_search(rule, info, options, errors_only).failure if shrinkable else None) or first_failure
        case, problems, raised = failure
        if raised is not None:
            key = f"{raised.phase}:{type(raised.exc).__name__}:{raised.exc}"
            if key in raised_messages:
                continue  # the same crash, already reported by an earlier check
            raised_messages.add(key)
        for problem in problems:
            result.findings.append(_finding(rule, info, case, problem, options))
        if info.gates:
            gate_failed = info.id


_Failure = tuple[Case, list[Problem], "RuleRaised | None"]


@dataclass
class _Survey:
    examples: int = 0
    cap: int = 0  # examples this rule gets, from the size of its first input
    ran: dict[str, int] = field(default_factory=dict)
    skip_reasons: dict[str, str] = field(default_factory=dict)
    failures: dict[str, _Failure] = field(default_factory=dict)
    # Problems of warning severity only: kept, while the search goes on for an error from the same check.
    warnings: dict[str, _Failure] = field(default_factory=dict)


def _severity(info: CheckInfo, problems: list[Problem]) -> str:
    """"error" when any problem has error severity (its own, or the check's), else "warning"."""
    return "error" if any((p.severity or info.severity) == "error" for p in problems) else "warning"


def _example_cap(args: Any, max_examples: int) -> int:
    """Examples for a rule whose first input is ``args``: all of them for small inputs, fewer for large ones."""
    from gradguard.checker.trees import leaves

    size = sum(np.size(x) for x in leaves(tuple(args)) if isinstance(x, np.ndarray))
    if size <= FULL_EXAMPLES_UP_TO:
        return max_examples
    return max(1, max_examples * FULL_EXAMPLES_UP_TO // size)


def _run_one(info: CheckInfo, case: Case) -> tuple[list[Problem], RuleRaised | None] | str:
    """Problems found by one check on one case, or the reason it did not apply."""
    try:
        return list(info.fn(case) or ()), None
    except Skip as skip:
        return str(skip)
    except RuleRaised as exc:
        return [exc.problem()], exc


def _hypothesis_settings(options: Options) -> Callable[[Any], Any]:
    return hyp_settings(
        max_examples=options.max_examples,
        database=None,
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
        print_blob=False,
    )


def _drive(rule: RuleSpec, options: Options, body: Callable[[Any, Any], None], label: str) -> None:
    """Run a Hypothesis search over the rule's inputs, mapping Hypothesis' errors to ours."""
    search = _hypothesis_settings(options)(hyp_seed(options.seed)(given(rule.args_strategy, st.data())(body)))
    try:
        # NumPy's warnings from the user's rule (0/0, overflow) would bury the report; the values that
        # caused them are what GG206 and the other checks judge.
        with own_constants_only(), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            search()
    except (_CheckFailed, _BudgetSpent):
        pass
    except Flaky:
        pass  # the failure did not replay (a nondeterministic rule): the last failing example seen is kept
    except Unsatisfiable as exc:
        raise _SpecCannotGenerate(
            f"the argument specs of {rule.name} could not generate an input ({exc}). Loosen the specs' filters or bounds."
        ) from None
    except (RuleTimeout, KeyboardInterrupt):
        raise
    except HypothesisException as exc:
        raise _SpecCannotGenerate(f"could not draw inputs for {rule.name}: {exc}. Check the argument specs.") from None
    except _InternalError:
        raise
    except Exception as exc:  # a bug in gradguard's check, not in the rule
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        raise _InternalError(f"internal error in {label} on rule {rule.name}: {type(exc).__name__}: {exc}", tb) from None


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
            if problems and _severity(info, problems) == "warning":
                survey.warnings.setdefault(info.id, (case, problems, raised))
            elif problems:
                survey.failures[info.id] = (case, problems, raised)
                gate_failed = gate_failed or info.gates

    _drive(rule, options, body, "the checks")
    return survey


@dataclass
class _Outcome:
    ran: int = 0
    skip_reason: str | None = None
    failure: _Failure | None = None


def _search(rule: RuleSpec, info: CheckInfo, options: Options, errors_only: bool = False) -> _Outcome:
    """A search for one failing check: Hypothesis finds the failure again and shrinks it (an error-severity
    one when ``errors_only``, so that a warning the same check gives elsewhere does not replace it)."""
    outcome = _Outcome()

    def body(args: Any, data: Any) -> None:
        case = Case(rule, tuple(args), HypothesisDraws(data))
        found = _run_one(info, case)
        if isinstance(found, str):
            outcome.skip_reason = found
            return
        problems, raised = found
        if problems and (not errors_only or _severity(info, problems) == "error"):
            outcome.failure = (case, problems, raised)
            raise _CheckFailed(info.id)
        outcome.ran += 1

    _drive(rule, options, body, f"check {info.id}")
    return outcome


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


def _finding(rule: RuleSpec, info: CheckInfo, case: Case | None, problem: Problem, options: Options) -> Finding:
    counterexample = None
    script = problem.reproducer
    if case is not None:
        counterexample = {
            "call": format_call(rule.primal, case.args, getattr(rule.primal, "__name__", rule.name)),
            "args": [show(a) for a in case.args],
            "draws": {label: show(value) for label, value in case.record},
        }
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
