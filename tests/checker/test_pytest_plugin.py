"""The pytest plugin, run by pytest's own pytester: `pytest --gradguard` and gradguard.testing.assert_rule_ok."""

from importlib.metadata import entry_points

import pytest

# pytester runs pytest in this process and drops the modules the inner run imported afterwards; numpy cannot
# be imported twice in one process, so the checker (and numpy with it) is imported here, once.
import gradguard.checker.runner  # noqa: F401

pytest_plugins = ["pytester"]

RULES = '''
import numpy as np
from gradguard import rrule, arrays

def square(x):
    return x * x

@rrule(square, arrays(shape=(3,)))
def square_rrule(x):
    return x * x, lambda ybar: (2 * x * ybar,)

def total(x):
    return x.sum()

@rrule(total, arrays(shape=(2, 3)))
def total_rrule(x):
    return x.sum(), lambda ybar: (np.full(x.size, ybar),)
'''

CONFIG = '[tool.gradguard]\nselect = ["GG1"]\nmax-examples = 3\n'


def _plugin_args():
    installed = any(ep.value == "gradguard.pytest_plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "gradguard.pytest_plugin"]


@pytest.fixture
def project(pytester):
    pytester.makefile(".toml", pyproject=CONFIG)
    pytester.makepyfile(linalg_rules=RULES)
    pytester.makepyfile(helpers="raise RuntimeError('helpers.py is not a rule module')\n")
    return pytester


def test_each_rule_is_a_test_item_and_findings_are_the_failure_text(project):
    result = project.runpytest(*_plugin_args(), "--gradguard", "-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*GG104 error*", "*Fix:*", "FAILED linalg_rules.py::total_rrule - total_rrule: GG104 a tangent's shape*"])
    assert "helpers.py is not a rule module" not in result.stdout.str()


def test_dash_k_selects_rules_by_name(project):
    result = project.runpytest(*_plugin_args(), "--gradguard", "-k", "square", "-p", "no:xdist", "-v")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*linalg_rules.py::square_rrule PASSED*"])


def test_without_the_flag_no_rule_is_collected(project):
    result = project.runpytest(*_plugin_args(), "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_a_rule_module_that_fails_to_import_is_a_collection_error(project):
    project.makepyfile(broken_rules="raise RuntimeError('cannot import this')\n")
    result = project.runpytest(*_plugin_args(), "--gradguard", "-p", "no:xdist")
    result.assert_outcomes(errors=1)  # as for any module: collection stops, unless asked to go on
    result = project.runpytest(*_plugin_args(), "--gradguard", "-p", "no:xdist", "--continue-on-collection-errors")
    result.assert_outcomes(passed=1, failed=1, errors=1)
    result.stdout.fnmatch_lines(["*broken_rules.py failed to import*", "*RuntimeError: cannot import this*"])


def test_assert_rule_ok_inside_a_users_own_tests(project):
    project.makepyfile(test_mine='''
from gradguard.testing import assert_rule_ok
import linalg_rules

def test_square():
    report = assert_rule_ok(linalg_rules.square_rrule)
    assert report.passed

def test_total():
    assert_rule_ok(linalg_rules.total_rrule, select="GG104")
''')
    result = project.runpytest("-p", "no:xdist")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: gradguard: rule total_rrule does not pass*", "*GG104*"])


SLOW_RULES = '''
import time
from gradguard import rrule, arrays

def double(x):
    return 2.0 * x

@rrule(double, arrays(shape=(3,)))
def slow_rrule(x):
    time.sleep(0.06)
    return 2.0 * x, lambda ybar: (2.0 * ybar,)
'''


def test_a_rule_that_spent_its_input_budget_passes_with_a_warning_that_says_so(pytester):
    pytester.makefile(".toml", pyproject='[tool.gradguard]\nselect = ["GG101"]\nmax-examples = 3\ninput-budget = 0.05\n')
    pytester.makepyfile(slow_rules=SLOW_RULES)
    result = pytester.runpytest(*_plugin_args(), "--gradguard", "-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*FewerInputsWarning: gradguard: slow_rrule: checked on 1 of 3 inputs: the input "
                                 "budget, 0.05 s of checking per rule*"])


def test_assert_rule_ok_warns_when_the_input_budget_cut_the_inputs(tmp_path):
    from gradguard.checker.errors import FewerInputsWarning
    from gradguard.checker.loader import load_module
    from gradguard.testing import assert_rule_ok

    (tmp_path / "slow_rules.py").write_text(SLOW_RULES)
    slow_rrule = load_module(tmp_path / "slow_rules.py").slow_rrule
    with pytest.warns(FewerInputsWarning, match=r"gradguard: slow_rrule: checked on 1 of 3 inputs: the input budget"):
        assert_rule_ok(slow_rrule, config=False, select=["GG101"], max_examples=3, input_budget_s=0.05)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_rule_ok(slow_rrule, config=False, select=["GG101"], max_examples=3, input_budget_s=None)
