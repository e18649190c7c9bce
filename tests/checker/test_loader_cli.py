"""Loading rule modules and the `gradguard check` command: exit codes are contracts."""

import json
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from gradguard.checker import arrays, check, rrule
from gradguard.checker.cli import main

GOOD = '''
import numpy as np
from gradguard.checker import rrule, arrays

def square(x):
    return x * x

@rrule(square, arrays(shape=(3,)))
def square_rrule(x):
    return x * x, lambda ybar: (2 * x * ybar,)
'''

BAD = '''
import numpy as np
from gradguard.checker import rrule, arrays

def total(x):
    return x.sum()

@rrule(total, arrays(shape=(2, 3)))
def total_rrule(x):
    return x.sum(), lambda ybar: (np.full(x.size, ybar),)
'''

BROKEN_IMPORT = '''
import numpy as np
raise RuntimeError("this module cannot be imported")
'''


@pytest.fixture
def rules_dir(tmp_path):
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "broken.py").write_text(BROKEN_IMPORT)
    return tmp_path


def run(*args, cwd=None):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_exit_0_when_all_rules_pass(rules_dir):
    result = run("check", str(rules_dir / "good.py"), "--select", "GG1")
    assert result.exit_code == 0, result.output
    assert "PASS  square_rrule" in result.output


def test_exit_5_when_no_rules_are_found_which_is_never_a_pass(tmp_path):
    (tmp_path / "helpers.py").write_text("import numpy as np\n\ndef square(x):\n    return x * x\n")
    result = run("check", str(tmp_path / "helpers.py"), "--json", str(tmp_path / "r.json"))
    assert result.exit_code == 5, result.output
    assert "no rules found: nothing was checked" in result.output
    summary = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert (summary["rules"], summary["verdict"]) == (0, "error")


def test_exit_1_with_findings_and_import_failures_reported_with_the_users_traceback(rules_dir, tmp_path):
    out = tmp_path / "report.json"
    result = run("check", str(rules_dir), "--select", "GG1", "--json", str(out))
    assert result.exit_code == 1
    data = json.loads(out.read_text())
    assert data["schema"] == "gradguard.report/1"
    assert {r["name"]: r["verdict"] for r in data["rules"]} == {"total_rrule": "fail", "square_rrule": "pass"}
    (failure,) = data["load_errors"]
    assert failure["path"].endswith("broken.py")
    assert 'raise RuntimeError("this module cannot be imported")' in failure["traceback"]
    assert "importlib" not in failure["traceback"]  # the user's frames, not ours
    assert "broken.py failed to import" in result.output


@pytest.mark.parametrize(
    "args, needle",
    [
        (["check", "nowhere.py"], "Got path 'nowhere.py', which does not exist."),
        (["chek", "x.py"], "Did you mean 'check'?"),
        (["check", "--seeed", "1", "x.py"], "Did you mean one of: '--seed'"),
        (["explain", "GG2O1"], "is not a check id."),
    ],
)
def test_exit_2_on_usage_errors_with_close_matches(args, needle):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert needle in result.output


def test_unknown_check_id_is_a_usage_error(rules_dir):
    result = CliRunner().invoke(main, ["check", str(rules_dir / "good.py"), "--select", "GG10x"])
    assert result.exit_code == 2
    assert "Got select='GG10X', which matches no check id. Did you mean GG10" in result.output


def test_exit_3_on_internal_error(rules_dir, monkeypatch):
    import gradguard.checker.runner
    from gradguard import checker

    def explode(*a, **k):
        raise RuntimeError("bug in gradguard")

    monkeypatch.setattr(checker.runner, "check_rule", explode)
    result = CliRunner().invoke(main, ["check", str(rules_dir / "good.py")])
    assert result.exit_code == 3
    assert "internal error" in result.output and "bug in gradguard" in result.output


def test_junit_markdown_and_reproducers_are_written(rules_dir, tmp_path):
    junit, md, repro = tmp_path / "j.xml", tmp_path / "s.md", tmp_path / "repro"
    result = run("check", str(rules_dir / "bad.py"), "--select", "GG1", "--junit", str(junit), "--markdown", str(md), "--reproducers", str(repro))
    assert result.exit_code == 1
    import xml.etree.ElementTree as ET

    root = ET.parse(junit).getroot()
    failures = root.findall(".//failure")
    assert [f.get("type") for f in failures] == ["GG104"]
    assert "## ❌ gradguard: 0/1 rules pass" in md.read_text()
    (script,) = list(repro.iterdir())
    assert script.name.startswith("repro_total_rrule_GG104")


def test_reproducer_replays_the_failure_as_a_standalone_script(rules_dir, tmp_path):
    report = check(rules_dir / "bad.py", select=["GG104"])
    (finding,) = report.findings
    script = tmp_path / "repro.py"
    script.write_text(finding.reproducer)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "AssertionError: GG104 a tangent's shape differs from its argument's: the tangent for argument 0 (x) has shape (6,)" in proc.stderr


def test_reproducer_passes_once_the_rule_is_fixed(rules_dir, tmp_path):
    report = check(rules_dir / "bad.py", select=["GG104"])
    script = report.findings[0].reproducer
    (rules_dir / "bad.py").write_text(BAD.replace("np.full(x.size, ybar)", "np.full(x.shape, ybar)"))
    (tmp_path / "repro.py").write_text(script)
    proc = subprocess.run([sys.executable, str(tmp_path / "repro.py")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "GG104 passes on this input: the rule is fixed." in proc.stdout


def test_hanging_rule_hits_the_per_rule_time_limit_and_the_run_goes_on(tmp_path):
    (tmp_path / "hang.py").write_text(textwrap.dedent('''
        import time
        from gradguard.checker import rrule, arrays

        def f(x):
            return x

        @rrule(f, arrays(shape=(2,)))
        def a_hanging_rule(x):
            while True:
                time.sleep(0.01)
    '''))
    (tmp_path / "good.py").write_text(GOOD)
    result = run("check", str(tmp_path), "--select", "GG1", "--timeout", "1")
    assert result.exit_code == 1
    assert "exceeded the 1 s per-rule time limit" in result.output
    assert "PASS  square_rrule" in result.output


def test_spec_that_cannot_generate_is_reported_for_that_rule_only(tmp_path):
    (tmp_path / "nogen.py").write_text(textwrap.dedent('''
        from hypothesis import strategies as st
        from gradguard.checker import rrule

        def f(x):
            return x

        @rrule(f, st.floats(0, 1).filter(lambda v: v > 2))
        def impossible(x):
            return x, lambda g: (g,)
    '''))
    (tmp_path / "good.py").write_text(GOOD)
    result = run("check", str(tmp_path), "--select", "GG1")
    assert result.exit_code == 1
    assert "could not generate an input" in result.output or "could not draw inputs" in result.output
    assert "PASS  square_rrule" in result.output



def test_searches_ignore_constants_harvested_from_other_loaded_modules():
    """Hypothesis seeds draws with literals harvested from every loaded local module, which would make a
    rule's verdict depend on what else is imported; during the runner's searches that pool is empty, and
    Hypothesis' own hook is back afterwards."""
    providers = pytest.importorskip("hypothesis.internal.conjecture.providers")
    if not hasattr(providers, "_get_local_constants"):
        pytest.skip("this Hypothesis has no local-constants hook: nothing to keep out")
    seen = []

    def square(x):
        return x * x

    @rrule(square, arrays(shape=(2,)))
    def probe(x):
        seen.append(len(providers._get_local_constants()))
        return x * x, lambda ybar: (None,) if ybar is None else (2 * x * ybar,)

    original = providers._get_local_constants
    assert len(original()) > 0  # the test modules loaded here are local: the pool is not empty outside
    check(probe, select=["GG101"])
    assert seen and set(seen) == {0}
    assert providers._get_local_constants is original


def test_floating_point_warnings_of_the_rule_and_the_checker_do_not_bury_the_report(tmp_path):
    """A correct rule with a constant -inf output (a log-mask): the checker's programs compute sin(-inf) and
    the rule log(0) on every drawn input; none of that is a finding, and none of it reaches the terminal."""
    (tmp_path / "mask_rules.py").write_text(textwrap.dedent('''
        import numpy as np
        from gradguard.checker import rrule, arrays

        def masked_softplus(x):
            return np.logaddexp(0.0, x), np.log(np.array([0.0, 1.0, 1.0]))

        @rrule(masked_softplus, arrays(shape=(3,)))
        def masked_softplus_rrule(x):
            sig = 1.0 / (1.0 + np.exp(-x))
            def pullback(ybar):
                g, _ = ybar
                return (None,) if g is None else (g * sig,)
            return masked_softplus(x), pullback
    '''))
    proc = subprocess.run([sys.executable, "-c", "from gradguard.checker.cli import main; main()", "check",
                           "mask_rules.py", "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS  masked_softplus_rrule" in proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr


def test_a_reproducer_loads_the_rule_from_the_module_it_was_declared_in(tmp_path):
    """A rule whose code lives in another module (a torch rule's Function, an rrule imported from a helper): its
    reproducer loaded the file of the code and failed with "no rule named ..."; it loads the rules module now, and
    worker processes find the rule there too."""
    (tmp_path / "ops_impl.py").write_text(textwrap.dedent('''
        import numpy as np

        def total(x):
            return np.sum(x)

        def total_rrule(x):
            return np.sum(x), lambda ybar: (np.full(x.size, ybar),)  # shape (6,) for a (2, 3) input
    '''))
    (tmp_path / "my_rules.py").write_text(textwrap.dedent('''
        from gradguard.checker import arrays, rrule
        from ops_impl import total, total_rrule

        total_rule = rrule(total, arrays(shape=(2, 3)), name="total_rule")(total_rrule)
    '''))
    report = check(tmp_path / "my_rules.py", select=["GG104"])
    (finding,) = report.findings
    assert report.rules[0].source_file.endswith("ops_impl.py")  # where the code is, as reports show it
    script = tmp_path / "sub" / "repro.py"
    script.parent.mkdir()
    script.write_text(finding.reproducer)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path / "sub")
    assert proc.returncode == 1 and "AssertionError: GG104" in proc.stderr, proc.stderr
    from gradguard.checker.loader import load_module, rules_in
    from gradguard.checker.parallel import _locator

    (rule,) = rules_in(load_module(tmp_path / "my_rules.py"))
    assert _locator(rule)[0] == str(tmp_path / "my_rules.py")


TWO_RULES = GOOD + '''
def cube(x):
    return x ** 3

@rrule(cube, arrays(shape=(3,)))
def cube_rrule(x):
    return x ** 3, lambda ybar: (2 * x * x * ybar,)  # wrong: 3 x^2
'''


@pytest.fixture
def two_rules(tmp_path):
    (tmp_path / "two.py").write_text(TWO_RULES)
    (tmp_path / "bad.py").write_text(BAD)
    return tmp_path


@pytest.mark.parametrize("args", [
    ["-k", "square_rrule"],  # a name
    ["--rule", "sq*"],  # a glob
    ["-k", "nothing_like_it,square_rrule"],  # comma-separated: each pattern must name a rule
])
def test_rule_option_checks_only_the_named_rules(two_rules, args):
    if "nothing_like_it" in args[1]:
        result = run("check", str(two_rules / "two.py"), *args, "--select", "GG201", "--no-cache")
        assert result.exit_code == 2
        assert "Got rule 'nothing_like_it', which names none of the rules in the modules checked" in result.output
        assert "its 2 rule(s): square_rrule, cube_rrule" in result.output
        return
    result = run("check", str(two_rules / "two.py"), *args, "--select", "GG201", "--no-cache")
    assert result.exit_code == 0, result.output  # cube_rrule, which fails GG201, was not checked
    assert "PASS  square_rrule" in result.output and "cube_rrule" not in result.output


def test_path_double_colon_chooses_within_that_module_only(two_rules):
    # two.py::cube_rrule checks that rule alone of two.py, and bad.py (given whole) every one of its rules.
    result = run("check", f"{two_rules / 'two.py'}::cube_*", str(two_rules / "bad.py"), "--select", "GG201",
                 "--no-cache", "--json", "-")
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert [r["name"] for r in report["rules"]] == ["cube_rrule", "total_rrule"]
    assert report["settings"].get("rules") is None  # no -k: every rule of bad.py


def test_rule_pattern_naming_nothing_is_a_usage_error_with_close_matches(two_rules):
    result = run("check", f"{two_rules / 'two.py'}::squre_rrule", "--no-cache")
    assert result.exit_code == 2
    assert ("Usage error: Got rule 'squre_rrule', which names none of the rules in "
            f"{two_rules / 'two.py'} (its 2 rule(s): square_rrule, cube_rrule). Did you mean 'square_rrule'?") in result.output
    result = run("check", f"{two_rules / 'two.py'}::", "--no-cache")
    assert result.exit_code == 2 and "write one rule of a module as PATH::NAME" in result.output


def test_rules_keyword_of_check_filters_and_is_recorded_in_the_settings(two_rules):
    report = check(two_rules / "two.py", rules="cube_rrule", select=["GG201"])
    assert [r.name for r in report.rules] == ["cube_rrule"]
    assert report.settings["rules"] == ["cube_rrule"]
    assert not report.passed
    with pytest.raises(ValueError, match=r"rules must be a rule name or glob"):
        check(two_rules / "two.py", rules=[3])
    with pytest.raises(ValueError, match=r"which names no rule"):
        check(two_rules / "two.py", rules=" , ")


def test_a_rule_pattern_in_a_module_that_fails_to_import_reports_the_import_failure(two_rules):
    (two_rules / "broken.py").write_text(BROKEN_IMPORT)
    result = run("check", f"{two_rules / 'broken.py'}::anything", "--no-cache")
    assert result.exit_code == 1, result.output
    assert "this module cannot be imported" in result.output
