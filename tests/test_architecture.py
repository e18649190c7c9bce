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


_CYCLES = """
import sys, grimp
graph = grimp.build_graph("gradguard", cache_dir=None)
edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
# Tarjan's strongly connected components: any component of two or more modules is an import circle.
index, low, stack, on, circles, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = counter[0]; counter[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        part = []
        while True:
            w = stack.pop(); on.discard(w); part.append(w)
            if w == v:
                break
        if len(part) > 1:
            circles.append(sorted(part))
for m in sorted(edges):
    if m not in index:
        visit(m)
print(len(edges))
for c in circles:
    print(" <-> ".join(c))
"""


def test_no_import_circles_anywhere(tmp_path):
    """No module imports itself back through others, inside one package or across packages, including
    imports inside functions and under TYPE_CHECKING (a circle works only through import order)."""
    env = {**os.environ, "PYTHONPATH": str(namespaced_tree(tmp_path))}
    proc = subprocess.run([sys.executable, "-c", _CYCLES], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    count, *circles = proc.stdout.splitlines()
    assert int(count) > 100  # the whole tree was read, not an empty package
    assert circles == [], "import circles:\n" + "\n".join(circles)


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
