"""``jobs=None`` (the CLI's default): one worker process per CPU above a handful of rules, one process below."""

import pytest
from click.testing import CliRunner

from gradguard.checker import arrays, check, parallel, rrule, runner
from gradguard.checker.cli import main


def _square(x):
    return x * x


def _rules(n):
    return [rrule(_square, arrays(shape=(2,)), name=f"square_{i}")(lambda x: (x * x, lambda ybar: (2 * x * ybar,)))
            for i in range(n)]


@pytest.fixture
def pools(monkeypatch):
    """The calls that would start worker processes: (number of rules, jobs); the rules are checked here."""
    started = []

    def in_this_process(rules, ids, options, jobs, progress=None):
        started.append((len(rules), jobs))
        return [runner.check_rule(rule, ids, options) for rule in rules]

    monkeypatch.setattr(parallel, "check_in_processes", in_this_process)
    return started


@pytest.mark.parametrize("n, expected", [(runner.AUTO_JOBS_ABOVE, []), (runner.AUTO_JOBS_ABOVE + 1, [(runner.AUTO_JOBS_ABOVE + 1, 0)])])
def test_jobs_none_uses_one_process_per_cpu_only_above_a_handful_of_rules(pools, n, expected):
    report = check(_rules(n), select=["GG101"], jobs=None)
    assert pools == expected
    assert [r.name for r in report.rules] == [f"square_{i}" for i in range(n)]  # the order of the rules


def test_the_cli_defaults_to_jobs_none(monkeypatch, tmp_path):
    seen = {}

    def fake_check(target, **kwargs):
        seen.update(kwargs)
        return runner.Report()

    monkeypatch.setattr(runner, "check", fake_check)
    (tmp_path / "rules.py").write_text("x = 1\n")
    CliRunner().invoke(main, ["check", str(tmp_path / "rules.py"), "--no-cache"])
    assert seen["jobs"] is None and seen["use_cache"] is False
