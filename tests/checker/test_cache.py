"""The verdict cache: unchanged rules are not checked again, and every change that matters re-checks them."""

import json
import uuid

import pytest
from click.testing import CliRunner

from gradguard.checker import arrays, check, rrule, runner
from gradguard.checker.cache import VerdictCache, project_sources
from gradguard.checker.cli import main

RULES = '''
import numpy as np
from gradguard.checker import arrays, rrule
from {helper}.grads import double


def square(x):
    return x * x


@rrule(square, arrays(shape=(3,)))
def square_rrule(x):
    return x * x, lambda ybar: (None,) if ybar is None else (double(x) * ybar,)


@rrule(square, arrays(shape=(3,)))
def square_ones_rrule(x):
    return x * x, lambda ybar: (2 * x,)          # right only for ybar == 1
'''

HELPER = '''
from .scale import factor


def double(x):
    return factor() * x
'''

SELECT = ["GG1", "GG202"]


@pytest.fixture
def project(tmp_path):
    """A rule module importing a helper package of the user's project, which imports a sibling module."""
    helper = f"helpers_{uuid.uuid4().hex[:8]}"
    (tmp_path / helper).mkdir()
    (tmp_path / helper / "__init__.py").write_text("")
    (tmp_path / helper / "grads.py").write_text(HELPER)
    (tmp_path / helper / "scale.py").write_text("def factor():\n    return 2\n")
    (tmp_path / "rules.py").write_text(RULES.format(helper=helper))
    return tmp_path, helper


@pytest.fixture
def calls(monkeypatch):
    """The names of the rules actually checked (not taken from the cache)."""
    checked = []
    real = runner.check_rule

    def counting(rule, ids, options):
        checked.append(rule.name)
        return real(rule, ids, options)

    monkeypatch.setattr(runner, "check_rule", counting)
    return checked


def _without_timing(report):
    data = json.loads(report.to_json())
    for rule in data["rules"]:
        rule.pop("duration_s")
        rule.pop("cached")
    return data["rules"]


def test_an_unchanged_module_is_not_checked_again_and_says_cached(project, calls):
    folder, _ = project
    cache = folder / "cache"
    first = check(folder / "rules.py", select=SELECT, cache_dir=cache)
    assert calls == ["square_rrule", "square_ones_rrule"]
    assert not any(r.cached for r in first.rules)
    second = check(folder / "rules.py", select=SELECT, cache_dir=cache)
    assert calls == ["square_rrule", "square_ones_rrule"]  # nothing checked the second time
    assert all(r.cached for r in second.rules)
    assert _without_timing(second) == _without_timing(first)
    assert [r.verdict for r in second.rules] == ["pass", "fail"]
    assert (cache / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert (cache / ".gitignore").read_text().splitlines()[-1] == "*"


@pytest.mark.parametrize("edited", ["rules.py", "grads.py", "scale.py"])
def test_editing_the_rule_module_or_a_project_module_it_imports_rechecks(project, calls, edited):
    folder, helper = project
    cache = folder / "cache"
    check(folder / "rules.py", select=SELECT, cache_dir=cache)
    path = folder / edited if edited == "rules.py" else folder / helper / edited
    path.write_text(path.read_text() + "\n# edited\n")
    again = check(folder / "rules.py", select=SELECT, cache_dir=cache)
    assert calls == ["square_rrule", "square_ones_rrule"] * 2
    assert not any(r.cached for r in again.rules)


def test_project_sources_follow_imports_but_not_installed_packages(project):
    folder, helper = project
    files = project_sources(folder / "rules.py")
    names = sorted(p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] for p in files)
    assert names == [f"{helper}/__init__.py", f"{helper}/grads.py", f"{helper}/scale.py", f"{folder.name}/rules.py"]


@pytest.mark.parametrize("change", [{"seed": 1}, {"select": ["GG1"]}, {"ignore": ["GG105"]}, {"max_examples": 5}])
def test_a_changed_seed_selection_or_example_count_rechecks(project, calls, change):
    folder, _ = project
    cache = folder / "cache"
    check(folder / "rules.py", select=SELECT, cache_dir=cache)
    options = {"select": SELECT, **change}
    again = check(folder / "rules.py", cache_dir=cache, **options)
    assert len(calls) == 4
    assert not any(r.cached for r in again.rules)


def test_no_cache_checks_every_time_and_writes_nothing(project, calls):
    folder, _ = project
    cache = folder / "cache"
    check(folder / "rules.py", select=SELECT, cache_dir=cache, use_cache=False)
    check(folder / "rules.py", select=SELECT, cache_dir=cache, use_cache=False)
    assert len(calls) == 4
    assert not cache.exists()


def test_errors_are_not_stored(project, monkeypatch):
    folder, _ = project
    cache = folder / "cache"
    real = runner.check_rule

    def erroring(rule, ids, options):
        result = real(rule, ids, options)
        result.verdict, result.error = "error", {"type": "Timeout", "message": "slow", "traceback": ""}
        return result

    monkeypatch.setattr(runner, "check_rule", erroring)
    check(folder / "rules.py", select=SELECT, cache_dir=cache)
    monkeypatch.setattr(runner, "check_rule", real)
    again = check(folder / "rules.py", select=SELECT, cache_dir=cache)
    assert [r.cached for r in again.rules] == [False, False]
    assert [r.verdict for r in again.rules] == ["pass", "fail"]


def _square(x):
    return x * x


def test_a_rule_without_a_source_file_is_always_checked(tmp_path):
    rule = rrule(_square, arrays(shape=(2,)))(lambda x: (x * x, lambda ybar: (2 * x * ybar,)))
    rule.source_file = None
    assert VerdictCache(tmp_path, {}).key(rule) is None


def test_a_read_only_cache_folder_is_skipped(project, tmp_path):
    folder, _ = project
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would go")
    report = check(folder / "rules.py", select=SELECT, cache_dir=blocker)
    assert [r.verdict for r in report.rules] == ["pass", "fail"]


def test_cli_cache_dir_and_no_cache(project, calls, monkeypatch):
    folder, _ = project
    monkeypatch.delenv("GRADGUARD_NO_CACHE", raising=False)
    cache = folder / "cli-cache"
    args = ["check", str(folder / "rules.py"), "--select", "GG1,GG202", "--cache-dir", str(cache), "--json", "-"]
    first = CliRunner().invoke(main, args)
    second = CliRunner().invoke(main, args)
    third = CliRunner().invoke(main, args + ["--no-cache"])
    assert first.exit_code == second.exit_code == third.exit_code == 1
    assert [r["cached"] for r in json.loads(second.output)["rules"]] == [True, True]
    assert [r["cached"] for r in json.loads(third.output)["rules"]] == [False, False]
    assert len(calls) == 4  # the first run and the --no-cache run
