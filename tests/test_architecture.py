"""The architecture holds: layers import downward only, and each package's public surface is explicit."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def namespaced_tree(tmp: Path) -> Path:
    """The installed layout, ``gradguard/{checker,engines,service,web}``, as links to this checkout's
    folders: import-linter and grimp find packages on the file system, not through ``package-dir``."""
    pkg = tmp / "gradguard"
    pkg.mkdir()
    (pkg / "__init__.py").symlink_to(ROOT / "gradguard" / "__init__.py")
    for name in ("checker", "engines", "service", "web"):
        (pkg / name).symlink_to(ROOT / name, target_is_directory=True)
    return tmp


def test_import_linter_contract_keeps_layers_pointing_down(tmp_path):
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, no_cache=True, no_logo=True))"
    )
    env = {**os.environ, "PYTHONPATH": str(namespaced_tree(tmp_path))}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 1 kept, 0 broken." in proc.stdout


def test_checker_public_api():
    from gradguard import checker

    assert set(checker.__all__) == {
        "rrule", "jax_rule", "torch_rule", "arrays", "floats", "constant", "check", "catalogue", "RuleSpec", "Report",
        "RuleResult", "Finding", "GradguardError", "SpecError", "LoadError", "UsageError",
    } - ({"jax_rule"} if "jax_rule" not in checker.__all__ else set())
    for name in checker.__all__:
        assert getattr(checker, name) is not None


@pytest.mark.parametrize("package", ["checker", "engines"])
def test_every_public_name_is_importable(package):
    mod = importlib.import_module(f"gradguard.{package}")
    for name in mod.__all__:
        assert hasattr(mod, name), f"{package}.__all__ lists {name!r}, which does not exist"


def test_importing_the_checker_does_not_import_jax():
    code = "import gradguard.checker, gradguard.engines, sys; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_importing_the_checker_does_not_import_torch():
    code = "import gradguard.checker, gradguard.engines, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
