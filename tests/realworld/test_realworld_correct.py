"""Correct rules of public projects (tests/realworld/correct_*.py): gradguard reports no error on them.

At each seed (0..9 for the full pin, the first two by default: tests/realworld/_seeds.py) every correct rule must get no error-severity finding and must not crash the checker, except
the findings listed in ``UPSTREAM_FLAWS``: real flaws of the upstream rule (NaN where the derivative exists),
each documented with evidence in tests/realworld/INDEX.md. Those are held to exactly the listed checks: a
listed rule must show each of them at some seed (so the list cannot go stale) and no other.

The checker runs once per module and seed (a module-level cache), and each rule gets its own test case,
so a failure names the rule and the seed. Run it with `-p no:xdist`, or with `--dist loadgroup` under
pytest-xdist, so that a module and seed are not checked again on each worker (the project's addopts set
`--dist loadgroup`). Findings that are gradguard's own mistakes are not listed
anywhere here: their tests fail until the checker is fixed (INDEX.md lists them with a diagnosis and a
minimal reproduction under tests/realworld/false_errors/).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from gradguard.checker import catalogue, check
from gradguard.checker.loader import load_module, rules_in

HERE = Path(__file__).resolve().parent
from _seeds import SEEDS  # noqa: E402  (0 and 1 by default; GRADGUARD_REALWORLD_SEEDS=0-9: the full pin)
from _modules import correct_modules  # noqa: E402
MIN_RULES = 60
WHOLE_MODULE_TIMEOUT_S = 1800





# The modules, those written against PyTorch itself only where it is installed (CI installs it; the README's test
# command alone does not).
_module_paths = correct_modules


# gradguard's own remaining mistakes on correct rules (each one open work on the wave's first priority): rule ->
# (the seeds where the run after the last fixes showed it, what gradguard reports, why it is wrong). Each listed
# case is an expected failure that must still fail (strict: a fixed one must leave this list), and every other
# case must pass; INDEX.md's false-error table has the diagnosis and reproductions.
KNOWN_FALSE_ERRORS: dict[str, tuple[frozenset[int], str]] = {}


@functools.lru_cache(maxsize=None)
def _module(path: Path) -> object:
    return load_module(path)


# Error findings that are real flaws of the upstream rule: rule -> (checks, evidence in one line), from the
# modules' own UPSTREAM_FLAWS (where bench/detection.py reads them too). An entry may name, third, the seeds of
# the ten-seed run where the flaw showed, when the default seeds do not draw it (FLAW_SEEDS); seeds beyond 9 where
# no seed of 0-9 draws it (the full pin then needs those seeds too).
UPSTREAM_FLAWS: dict[str, tuple[frozenset[str], str]] = {
    name: (frozenset(entry[0]), entry[1]) for path in _module_paths()
    for name, entry in getattr(_module(path), "UPSTREAM_FLAWS", {}).items()
}
FLAW_SEEDS: dict[str, frozenset[int]] = {
    name: frozenset(entry[2]) for path in _module_paths()
    for name, entry in getattr(_module(path), "UPSTREAM_FLAWS", {}).items() if len(entry) > 2
}


def _rules() -> list[tuple[str, Path]]:
    return [(rule.name, path) for path in _module_paths() for rule in rules_in(_module(path))]


RULES = _rules()


_REPORTS: dict[tuple[Path, int], dict[str, object]] = {}


def _report(path: Path, seed: int) -> dict[str, object]:
    """Every rule of one module checked at one seed: rule name -> its result."""
    if (path, seed) not in _REPORTS:
        # No clock cut, neither the time limit nor the input budget (a loaded machine must not change a verdict): the
        # tests' own timeouts bound the run.
        report = check(_module(path), seed=seed, rule_timeout_s=0, input_budget_s=None)
        _REPORTS[path, seed] = {result.name: result for result in report.rules}
    return _REPORTS[path, seed]


def _errors(name: str, path: Path, seed: int) -> set[str]:
    result = _report(path, seed)[name]
    assert result.verdict != "error", f"gradguard crashed on {name} at seed {seed}: {result.error}"
    return {f.check_id for f in result.findings if f.severity == "error"}


def test_corpus_size_sources_and_index() -> None:
    index = (HERE / "INDEX.md").read_text()
    names = [name for name, _ in RULES]
    assert len(names) >= MIN_RULES, f"only {len(names)} correct rules"
    assert len(set(names)) == len(names), "rule names repeat across modules"
    known = {c.id for c in catalogue()}
    for path in _module_paths():
        module, rules = _module(path), {rule.name for rule in rules_in(_module(path))}
        labels = module.LABELS
        assert set(labels) == rules, f"{path.name}: rules without labels or labels without rules: {sorted(set(labels) ^ rules)}"
        for name, label in labels.items():
            assert "/" in label["source"], f"{name}: no upstream source"
            assert f"`{name}`" in index, f"{name} is missing from INDEX.md's correct-rules table"
    for name in KNOWN_FALSE_ERRORS:
        assert name in names, f"KNOWN_FALSE_ERRORS names a rule that does not exist: {name}"
        assert f"`{name}`" in index.split("### gradguard's false errors")[1], f"{name} is missing from INDEX.md's false errors"
    for name, (checks, _) in UPSTREAM_FLAWS.items():
        assert name in names, f"UPSTREAM_FLAWS names a rule that does not exist: {name}"
        assert checks <= known, f"{name}: unknown check ids {sorted(checks - known)}"
        flaws = index.split("### Upstream flaws")[1].split("###")[0]
        assert f"`{name}`" in flaws, f"{name}'s flaw is not documented in INDEX.md's upstream-flaws table"


# One case per rule and seed, ordered module by module and seed by seed so that each module is checked once per
# seed; under pytest-xdist, `--dist loadgroup` keeps a module's cases, every seed, on one worker: the upstream-flaw
# cases below read every seed's check of their module, and in a group per seed they checked the module again at
# the other seeds on their own worker (the whole module twice at seed 1, about 100 s on a 2-core machine).
CASES = [
    pytest.param(name, path, seed, id=f"{name}-seed{seed}", marks=pytest.mark.xdist_group(path.stem))
    for path in _module_paths()
    for seed in SEEDS
    for name, rule_path in RULES
    if rule_path == path
]


# The first case of a module and seed pays for checking the whole module (up to about 300 s alone on a 2-core
# machine): beyond the suite's per-test timeout, within this one.
@pytest.mark.slow
@pytest.mark.timeout(WHOLE_MODULE_TIMEOUT_S)
@pytest.mark.parametrize("name,path,seed", CASES)
def test_correct_rule_has_no_false_error(name: str, path: Path, seed: int) -> None:
    allowed = UPSTREAM_FLAWS.get(name, (frozenset(), ""))[0]
    known_seeds, why = KNOWN_FALSE_ERRORS.get(name, (frozenset(), ""))
    if seed in known_seeds:
        try:
            errors = _errors(name, path, seed)
        except AssertionError:  # the crash itself
            pytest.xfail(f"known false error: {why}")
        assert not errors <= allowed, f"{name} passes at seed {seed} now: remove seed {seed} from KNOWN_FALSE_ERRORS"
        pytest.xfail(f"known false error: {why}")
    errors = _errors(name, path, seed)
    assert errors <= allowed, f"{name} is a correct upstream rule, but seed {seed} reported errors {sorted(errors - allowed)}"


# The flaws are judged on the module checks the correct-rule cases read (a rule checked alone can draw other
# inputs for the checks that depend on what ran before in the process), so these cases join their module's group.
@pytest.mark.slow
@pytest.mark.timeout(WHOLE_MODULE_TIMEOUT_S)
@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xdist_group(dict(RULES)[name].stem))
    for name in sorted(UPSTREAM_FLAWS)])
def test_upstream_flaw_is_found_exactly(name: str) -> None:
    path = dict(RULES)[name]
    seen = set().union(*(_errors(name, path, seed) for seed in SEEDS))
    checks, evidence = UPSTREAM_FLAWS[name]
    if set(SEEDS) >= set(range(10)) | FLAW_SEEDS.get(name, set()):  # the full pin: the documented set is exactly what ten seeds find
        assert seen == checks, f"{name} ({evidence}): error findings over seeds 0..9 are {sorted(seen)}, documented {sorted(checks)}"
    else:  # fewer seeds may not reach every documented finding (nor, away from the default seeds, the flaw)
        assert seen <= checks, f"{name} ({evidence}): error findings over seeds {SEEDS} are {sorted(seen)}, documented {sorted(checks)}"
        if set(SEEDS) >= {0, 1} and set(SEEDS) & FLAW_SEEDS.get(name, set(SEEDS)):  # seeds that drew it before
            assert seen, f"{name} ({evidence}): no error finding over seeds {SEEDS}, where the flaw was found before"
