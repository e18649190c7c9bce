"""The distribution installs one top-level package, ``gradguard``, and works next to a user's own
``checker``, ``engines``, ``service`` and ``web`` packages."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("checker", "engines", "service", "web")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_installed_under_gradguard():
    setuptools = _pyproject()["tool"]["setuptools"]
    on_disk = {"gradguard"} | {
        "gradguard." + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == on_disk, "pyproject's [tool.setuptools] packages must list every package"
    assert setuptools["package-dir"] == {"gradguard": "gradguard", **{f"gradguard.{f}": f for f in FOLDERS}}


def _top_level_imports(path: Path) -> list[str]:
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        bad += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in FOLDERS]
    return bad


def test_no_module_imports_the_folders_as_top_level_packages():
    """`import checker` would find a user's own package, or nothing, once installed."""
    skip = {".git", "node_modules", ".venv", "venv", "build", "dist"}
    files = [p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)]
    bad = [b for p in files for b in _top_level_imports(p)]
    assert not bad, "\n".join(bad)


@pytest.mark.slow
def test_wheel_installs_one_package_and_runs_beside_a_users_own_packages(tmp_path):
    src, dist = tmp_path / "src", tmp_path / "dist"  # a copy: building writes build/ beside the sources
    for name in ("gradguard", *FOLDERS):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)],
                   check=True, capture_output=True)
    (wheel,) = dist.glob("gradguard-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        tops = {name.split("/")[0] for name in zf.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"gradguard"}

    # A fresh venv: the wheel alone, its dependencies read from this interpreter's site-packages.
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False, system_site_packages=True)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True)

    project = tmp_path / "project"
    for name in FOLDERS:  # the user's own packages, with gradguard's folder names
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text(f"OWNER = 'user'\nNAME = {name!r}\n")
    (project / "square_rules.py").write_text(textwrap.dedent("""
        import numpy as np
        from checker import OWNER  # the user's package, not gradguard's
        from gradguard import arrays, rrule

        assert OWNER == "user"

        def square(x):
            return x * x

        @rrule(square, arrays(shape=(3,)))
        def square_rrule(x):
            return square(x), lambda ybar: (2 * x * ybar,)
    """))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = ("import gradguard, web, service, checker, engines; "
            "assert all(m.OWNER == 'user' for m in (web, service, checker, engines)); "
            "print(gradguard.__file__)")
    proc = subprocess.run([str(python), "-c", code], cwd=project, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).is_relative_to(env_dir), proc.stdout  # the wheel's copy, not the checkout
    proc = subprocess.run([str(env_dir / "bin" / "gradguard"), "check", "square_rules.py", "--max-examples", "5"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "square_rrule" in proc.stdout

    # No path: discovery finds square_rules.py by its name, and the project's own packages are never imported
    # as rule modules (checker/__init__.py and the others are packages, not rule files).
    proc = subprocess.run([str(env_dir / "bin" / "gradguard"), "check", "-q", "--max-examples", "5"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.startswith("1 passed"), proc.stdout + proc.stderr

    # The pytest plugin, found through the wheel's pytest11 entry point (no -p), one item per rule.
    (project / "pyproject.toml").write_text("[tool.gradguard]\nmax-examples = 5\n")
    proc = subprocess.run([str(python), "-m", "pytest", "--gradguard", "-v", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-W", "error::pytest.PytestAssertRewriteWarning"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "square_rules.py::square_rrule PASSED" in proc.stdout, proc.stdout
    code = "import gradguard.pytest_plugin as p, gradguard.testing as t; print(p.__file__); print(t.__file__)"
    proc = subprocess.run([str(python), "-c", code], cwd=project, env=env, capture_output=True, text=True)
    assert all(Path(line).is_relative_to(env_dir) for line in proc.stdout.split()), proc.stdout + proc.stderr


def test_public_api_is_the_checkers_and_loads_lazily():
    import gradguard
    from gradguard import checker

    assert gradguard.__all__ == checker.__all__
    assert all(getattr(gradguard, name) is getattr(checker, name) for name in gradguard.__all__)
    code = "import sys, gradguard.service.reports, gradguard.engines; print('gradguard.checker.runner' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
