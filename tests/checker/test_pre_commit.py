"""The pre-commit hook runs `gradguard check` on exactly the files default discovery would import."""

import re
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gradguard.checker.cli import main
from gradguard.checker.loader import NEVER_IMPORTED, is_rule_file

ROOT = Path(__file__).resolve().parents[2]
(HOOK,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())


def _hook_takes(path: str) -> bool:
    return bool(re.search(HOOK["files"], path)) and not re.search(HOOK["exclude"], path)


@pytest.mark.parametrize("path", [
    "linalg_rules.py", "src/pkg/linalg_rules.py", "rules_linalg.py", "pkg/rules/softplus.py",
    "rules.py", "pkg/helpers.py", "setup.py", "conftest.py", "pkg/rules/conftest.py", "pkg/rules/test_x.py",
    "pkg/rules/_private.py",
])
def test_the_hook_takes_the_files_discovery_takes(path):
    p = Path(path)
    discovered = is_rule_file(p) and p.name not in NEVER_IMPORTED and not p.name.startswith(("_", "test_"))
    assert _hook_takes(path) is discovered


def test_the_hook_runs_the_check_command_on_the_files_it_is_given(tmp_path, monkeypatch):
    assert HOOK["id"] == "gradguard" and HOOK["language"] == "python" and HOOK.get("pass_filenames", True)
    program, *args = shlex.split(HOOK["entry"])
    assert program == "gradguard"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sq_rules.py").write_text(
        "from gradguard import rrule, arrays\n\ndef sq(x):\n    return x * x\n\n"
        "@rrule(sq, arrays(shape=(2,)))\ndef sq_rrule(x):\n    return x * x, lambda g: (2 * x * g,)\n")
    result = CliRunner().invoke(main, [*args, "sq_rules.py", "--select", "GG1"])
    assert result.exit_code == 0, result.output
    assert "PASS  sq_rrule" in result.output
