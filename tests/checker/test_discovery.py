"""What `gradguard check` imports: explicit and safe; reproducers never as rules, and they run from anywhere."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradguard.checker.cli import main
from gradguard.checker.loader import discover, is_rule_file, module_files

ROOT = Path(__file__).resolve().parents[2]

RULES = '''
import numpy as np
from gradguard import rrule, arrays

def total(x):
    return x.sum()

@rrule(total, arrays(shape=(2, 3)))
def total_rrule(x):
    return x.sum(), lambda ybar: (np.full(x.size, ybar),)
'''


@pytest.fixture
def project(tmp_path):
    (tmp_path / "my_rules.py").write_text(RULES)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "more.py").write_text(RULES.replace("total_rrule", "more_rrule"))
    (tmp_path / "helpers.py").write_text("raise RuntimeError('not a rule module')\n")
    (tmp_path / "setup.py").write_text("import sys\nsys.exit('setup.py was imported')\n")
    (tmp_path / "conftest.py").write_text("raise SystemExit(1)\n")
    for folder in [".venv/lib", "venv2/lib", "build/lib", "dist", ".hidden", "pkg.egg-info"]:
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "x_rules.py").write_text("raise RuntimeError('imported from a skipped folder')\n")
    (tmp_path / "venv2" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return tmp_path


def test_default_discovery_takes_rule_files_by_name_only(project):
    names = [p.relative_to(project).as_posix() for p in discover(project)]
    assert names == ["my_rules.py", "rules/more.py"]


def test_a_folder_given_imports_its_modules_but_never_setup_conftest_venvs_hidden_or_build(project):
    names = [p.relative_to(project).as_posix() for p in module_files(project)]
    assert names == ["helpers.py", "my_rules.py", "rules/more.py"]


@pytest.mark.parametrize("path, expected", [
    ("a/linalg_rules.py", True), ("rules_linalg.py", True), ("pkg/rules/anything.py", True),
    ("rules.py", False), ("myrules.py", False), ("pkg/helpers.py", False),
])
def test_the_discovery_pattern(path, expected):
    assert is_rule_file(Path(path)) is expected


def test_check_with_no_path_uses_discovery_and_exits_by_the_verdict(project, monkeypatch):
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, ["check", "--select", "GG104"])
    assert result.exit_code == 1, result.output
    assert "FAIL  total_rrule" in result.output and "FAIL  more_rrule" in result.output
    assert "failed to import" not in result.output


def test_check_dot_skips_setup_py_and_reproducers_and_reproducers_run_from_any_directory(project, monkeypatch):
    monkeypatch.chdir(project)
    (project / "helpers.py").unlink()
    first = CliRunner().invoke(main, ["check", ".", "--select", "GG104", "--reproducers", "out/repro"])
    assert first.exit_code == 1, first.output
    scripts = sorted((project / "out" / "repro").glob("*.py"))
    assert scripts
    # the next run over the whole folder does not import the reproducer scripts as rule modules
    again = CliRunner().invoke(main, ["check", ".", "--select", "GG104"])
    assert "failed to import" not in again.output and again.output.count("FAIL ") == 2, again.output
    # a reproducer replays its failure from another directory, finding the rule through its own location
    elsewhere = project.parent
    run = subprocess.run([sys.executable, str(scripts[0])], cwd=elsewhere, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert run.returncode == 1
    assert "AssertionError: GG104" in run.stderr and "FileNotFoundError" not in run.stderr
