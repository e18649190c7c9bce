"""The architecture holds: layers import downward only, and each package's public surface is explicit."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contract_keeps_layers_pointing_down():
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, no_cache=True, no_logo=True))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 1 kept, 0 broken." in proc.stdout


def test_checker_public_api():
    import checker

    assert set(checker.__all__) == {
        "rrule", "jax_rule", "arrays", "floats", "constant", "check", "catalogue", "RuleSpec", "Report",
        "RuleResult", "Finding", "GradguardError", "SpecError", "LoadError", "UsageError",
    } - ({"jax_rule"} if "jax_rule" not in checker.__all__ else set())
    for name in checker.__all__:
        assert getattr(checker, name) is not None


@pytest.mark.parametrize("package", ["checker", "engines"])
def test_every_public_name_is_importable(package):
    mod = importlib.import_module(package)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{package}.__all__ lists {name!r}, which does not exist"


def test_importing_the_checker_does_not_import_jax():
    code = "import checker, engines, sys; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
