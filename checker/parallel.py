"""Checking rules in worker processes (``check(..., jobs=N)``, ``gradguard check --jobs N``).

Rules are independent, and each one's verdict depends only on the seed, so a
folder of rules can be checked on several cores with the same report as one
process gives, in the same order. A worker loads the rule's module from its
file (rules cannot be pickled: they hold the user's closures) and finds the
rule again by name and source lines. Workers are spawned, not forked: JAX and
the threads it starts do not survive a fork. A rule defined where no worker
can load it (a notebook, a lambda in a test) is checked in this process; a
worker that dies (a rule that crashes the interpreter, or one stuck in native
code past its time limit, which only ending its process stops) costs that rule
an error verdict, not the run.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gradguard.checker.report import RuleResult
from gradguard.checker.specs import DECLARED_IN

if TYPE_CHECKING:
    from gradguard.checker.options import Options
    from gradguard.checker.specs import RuleSpec

__all__ = ["check_in_processes", "workers_for"]

Locator = tuple[str, str, "tuple[int, int] | None"]


def workers_for(jobs: int, rules: int) -> int:
    """Worker processes for ``jobs`` (0: one per CPU) and this many rules."""
    if jobs < 0:
        raise ValueError(f"jobs must be >= 0 (0: one per CPU), got {jobs}")
    wanted = jobs or os.cpu_count() or 1
    return max(1, min(wanted, rules))


def _lines(rule: RuleSpec) -> tuple[int, int] | None:
    return tuple(rule.source_lines) if rule.source_lines else None  # type: ignore[return-value]


def _locator(rule: RuleSpec) -> Locator | None:
    """Where a worker finds the rule: the module it was found in (a torch rule's Function, or an rrule, may be
    defined in another module, where the rule is not: such rules were all checked in the main process)."""
    where = rule.extra.get(DECLARED_IN) or rule.source_file
    if not where or not Path(where).is_file():
        return None
    return (str(where), rule.name, _lines(rule))


def _check_located(locator: Locator, ids: list[str], options: Options) -> RuleResult | None:
    """In a worker: load the rule's module, find the rule, check it (None: not found there)."""
    from gradguard.checker.errors import LoadError
    from gradguard.checker.loader import load_module, rules_in
    from gradguard.checker.per_rule import check_rule

    path, name, lines = locator
    try:
        module = load_module(path)
    except LoadError:
        return None
    for rule in rules_in(module):
        if rule.name == name and _lines(rule) == lines:
            return check_rule(rule, ids, options)
    return None


def _errored(rule: RuleSpec, kind: str, message: str) -> RuleResult:
    """An error verdict for ``rule`` that its worker could not give (the worker died or was stopped)."""
    return RuleResult(
        name=rule.name,
        module=rule.module,
        source_file=rule.source_file,
        source_lines=list(rule.source_lines) if rule.source_lines else None,
        kind=rule.kind,
        verdict="error",
        error={"type": kind, "message": message, "traceback": ""},
    )


def _died(rule: RuleSpec, exc: BaseException) -> RuleResult:
    return _errored(rule, "WorkerDied", f"the worker process checking this rule died ({type(exc).__name__}: {exc}); the "
                    "rule may crash the interpreter (a segfault in native code, os._exit). Check it alone: gradguard "
                    "check FILE --jobs 1")


def _worker_started(stuck_folder: str) -> None:
    """In each worker, at its start: where a rule stuck in native code leaves its reason (per_rule's stage 3)."""
    from gradguard.checker import per_rule

    per_rule.STUCK_FOLDER[:] = [stuck_folder]


def _stuck(rule: RuleSpec, reason: str) -> RuleResult:
    return _errored(rule, "Timeout", f"{reason}; its worker process was stopped, and the other rules were checked. Draw "
                    "inputs where the rule ends (a solver's loop bounded, or specs inside its domain), or raise --timeout")


def check_in_processes(
    rules: list[RuleSpec],
    ids: list[str],
    options: Options,
    jobs: int,
    progress: Callable[[RuleResult, int, int], None] | None = None,
) -> list[RuleResult]:
    """Check ``rules`` on up to ``jobs`` worker processes; results in the order of ``rules``."""
    from gradguard.checker.per_rule import check_rule

    results: list[RuleResult | None] = [None] * len(rules)
    done = 0

    def finish(i: int, result: RuleResult) -> None:
        nonlocal done
        results[i] = result
        done += 1
        if progress is not None:
            progress(result, done, len(rules))

    located = {i: loc for i, rule in enumerate(rules) if (loc := _locator(rule)) is not None}
    here = [i for i in range(len(rules)) if i not in located]
    context = multiprocessing.get_context("spawn")

    def run_pool(indices: list[int], workers: int, then: list[int]) -> dict[int, BaseException]:
        """Check ``indices`` on a pool (and ``then`` here meanwhile); the rules lost to a broken pool."""
        lost: dict[int, BaseException] = {}
        with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_started,
                                 initargs=(str(folder),)) as pool:
            pending: dict[Future[Any], int] = {pool.submit(_check_located, located[i], ids, options): i for i in indices}
            for i in then:  # the rules no worker can load run here meanwhile
                finish(i, check_rule(rules[i], ids, options))
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    i = pending.pop(future)
                    try:
                        result = future.result()
                    except BrokenProcessPool as exc:
                        lost[i] = exc
                        continue
                    finish(i, result if result is not None else check_rule(rules[i], ids, options))
        return lost

    if located:
        with tempfile.TemporaryDirectory(prefix="gradguard-stuck-") as name:
            folder = Path(name)
            lost = run_pool(list(located), workers_for(jobs, len(located)), here)
            here = []
            # A dying worker breaks the whole pool: check each rule it took down alone, so only the culprit errors.
            for i in sorted(lost):
                for old in folder.iterdir():
                    old.unlink()
                again = run_pool([i], 1, [])
                if i in again:
                    left = [f.read_text() for f in folder.iterdir()]
                    finish(i, _stuck(rules[i], left[0]) if left else _died(rules[i], again[i]))
    for i in here:
        finish(i, check_rule(rules[i], ids, options))
    return [r for r in results if r is not None]
