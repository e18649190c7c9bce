"""Checking rules in worker processes gives the report one process gives, in the same order."""

import dataclasses
import json
import textwrap

import pytest
from click.testing import CliRunner

from gradguard.checker import arrays, check, rrule
from gradguard.checker.cli import main
from gradguard.checker.errors import UsageError

RULES = '''
import numpy as np
from gradguard.checker import arrays, rrule


def square(x):
    return x * x


@rrule(square, arrays(shape=(3,)))
def square_rrule(x):
    return x * x, lambda ybar: (None,) if ybar is None else (2 * x * ybar,)


@rrule(square, arrays(shape=(3,)))
def square_ones_rrule(x):
    return x * x, lambda ybar: (2 * x,)          # right only for ybar == 1


def total(x):
    return x.sum()


@rrule(total, arrays(shape=(2, 3)))
def total_rrule(x):
    return x.sum(), lambda ybar: (None,) if ybar is None else (np.full(x.shape, ybar),)
'''

CRASH = '''
import os
from gradguard.checker import arrays, rrule


def ident(x):
    return x


@rrule(ident, arrays(shape=(2,)))
def crashes_rrule(x):
    os._exit(7)                                  # takes the interpreter down, as a segfault would
'''

SELECT = ["GG1", "GG2", "GG3"]


def _verdicts(report):
    data = json.loads(report.to_json())
    out = []
    for rule in data["rules"]:
        rule.pop("duration_s")
        out.append(rule)
    return out


@pytest.fixture()
def rules_dir(tmp_path):
    (tmp_path / "rules_a.py").write_text(textwrap.dedent(RULES))
    (tmp_path / "rules_b.py").write_text(textwrap.dedent(RULES).replace("square_", "sq_").replace("total_rrule", "sum_rrule"))
    return tmp_path


def test_two_workers_give_the_report_one_process_gives(rules_dir):
    one = check(str(rules_dir), select=SELECT)
    two = check(str(rules_dir), select=SELECT, jobs=2)
    assert [r.name for r in two.rules] == [r.name for r in one.rules] == [
        "square_rrule", "square_ones_rrule", "total_rrule", "sq_rrule", "sq_ones_rrule", "sum_rrule",
    ]
    assert _verdicts(two) == _verdicts(one)
    assert {r.verdict for r in two.rules} == {"pass", "fail"}


def test_progress_counts_every_rule_once(rules_dir):
    seen = []
    check(str(rules_dir), select=["GG1"], jobs=2, progress=lambda result, done, total: seen.append((result.name, done, total)))
    assert sorted(done for _, done, _ in seen) == [1, 2, 3, 4, 5, 6]
    assert {total for _, _, total in seen} == {6}
    assert len({name for name, _, _ in seen}) == 6


def test_a_rule_that_kills_its_worker_errors_alone(rules_dir):
    (rules_dir / "rules_c.py").write_text(textwrap.dedent(CRASH))
    report = check(str(rules_dir), select=["GG1"], jobs=2)
    by_name = {r.name: r for r in report.rules}
    assert by_name["crashes_rrule"].verdict == "error"
    assert by_name["crashes_rrule"].error["type"] == "WorkerDied"
    assert "gradguard check FILE --jobs 1" in by_name["crashes_rrule"].error["message"]
    assert all(r.verdict != "error" for name, r in by_name.items() if name != "crashes_rrule")


def square(x):
    return x * x


@rrule(square, arrays(shape=(3,)))
def local_square_rrule(x):
    return x * x, lambda ybar: (None,) if ybar is None else (2 * x * ybar,)


def test_rules_no_worker_can_load_are_checked_here(rules_dir):
    nowhere = dataclasses.replace(local_square_rrule, source_file=None, name="nowhere_rrule")
    report = check([nowhere, str(rules_dir / "rules_a.py")], select=["GG1"], jobs=2)
    assert [r.name for r in report.rules] == ["nowhere_rrule", "square_rrule", "square_ones_rrule", "total_rrule"]
    assert all(r.verdict == "pass" for r in report.rules)


def test_bad_jobs_is_a_usage_error(rules_dir):
    with pytest.raises(UsageError, match="jobs must be an int >= 0"):
        check(str(rules_dir), jobs=-1)
    result = CliRunner().invoke(main, ["check", str(rules_dir), "--jobs", "-1"])
    assert result.exit_code == 2
    result = CliRunner().invoke(main, ["check", str(rules_dir / "rules_a.py"), "--select", "GG202", "-j", "2"])
    assert result.exit_code == 1, result.output  # square_ones_rrule's finding, made by a worker
    assert "FAIL  square_ones_rrule" in result.output


TWO_DOMAINS = '''
import numpy as np
from gradguard.checker import arrays, rrule


def absval(x):
    return np.abs(x)


def abs_pair(x):
    return np.abs(x), lambda ybar: (ybar,)        # the derivative of |x| only where x > 0


neg_rule = rrule(absval, arrays(shape=(3,), min_value=-2.0, max_value=-0.5))(abs_pair)
pos_rule = rrule(absval, arrays(shape=(3,), min_value=0.5, max_value=2.0))(abs_pair)
'''


def test_two_configurations_of_one_rule_are_told_apart(tmp_path):
    """Two configurations of one rule function (or one torch Function, one custom_vjp) are named alike by default:
    a worker checked the first in place of both, and the correct one failed with the other's counterexample."""
    (tmp_path / "rules_two.py").write_text(textwrap.dedent(TWO_DOMAINS))
    for jobs in (1, 2):
        report = check(str(tmp_path), select=["GG201"], jobs=jobs)
        assert [(r.name, r.verdict) for r in report.rules] == [("abs_pair[neg_rule]", "fail"), ("abs_pair[pos_rule]", "pass")]
        (found,) = report.findings
        assert "x=array([-" in found.counterexample["call"], found.counterexample
    from gradguard.checker.loader import load_rule
    assert load_rule(tmp_path / "rules_two.py", "abs_pair[pos_rule]").arg_specs != \
        load_rule(tmp_path / "rules_two.py", "abs_pair[neg_rule]").arg_specs
