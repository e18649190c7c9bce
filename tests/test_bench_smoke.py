"""The benchmarks in a tiny configuration, so they cannot rot (the full runs are documented commands).

Each script runs in a subprocess with a timeout, on a handful of cases or tiny
sizes. PyTorch is a benchmark-only extra: the gradcheck parts skip with the
reason where it is not installed; gradguard and check_grads are always run.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
TIMEOUT_S = 300
HAS_TORCH = importlib.util.find_spec("torch") is not None
NO_TORCH = "PyTorch is not installed (benchmark-only extra: pip install torch==2.13.0)"

pytestmark = pytest.mark.slow


def run(script: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, f"{script} exited {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    return proc.stdout


CASES = "numeric:sum_ones_rrule,state:sin_shared_buffer_rrule,correct:square_rrule"


def test_detection_gradguard_and_check_grads(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    out = run("detection.py", "--cases", CASES, "--tools", "gradguard,check_grads", "--results", str(results))
    assert "| bug class | cases | gradguard |" in out
    assert "check_grads (any)" in out
    assert "detection rate" in out and "false positives" in out and "total wall time" in out
    assert "worker process(es) (`gradguard check --jobs 0`)" in out
    assert "the same findings as the per-case runs: yes." in out
    # Each tool over the cases in a process of its own, so none reuses programs another compiled; the note says so.
    assert "-- gradguard: a process of its own" in out and "-- check_grads, check_grads[order=2]: a process of its own" in out
    assert "ran over the corpus in a Python process of its own" in out
    text = results.read_text()
    assert text.startswith("# Benchmark results")
    assert "<!-- begin detection -->" in text
    assert "Made by `python bench/detection.py --cases" in text  # the command that made it
    for case in CASES.split(","):
        assert case in text


def test_detection_trade_off_run_leaves_the_results_file_alone() -> None:
    """--max-examples trades detection for time; such a run prints its table but must not replace the
    default-settings table in bench/RESULTS.md."""
    results = BENCH / "RESULTS.md"
    before = results.read_text() if results.exists() else None
    out = run("detection.py", "--cases", "numeric:sum_ones_rrule,correct:square_rrule", "--tools", "gradguard", "--max-examples", "1", "--jobs", "1")
    assert "numeric:sum_ones_rrule (numeric): gradguard=caught" in out
    assert "total wall time" in out
    assert (results.read_text() if results.exists() else None) == before


@pytest.mark.skipif(not HAS_TORCH, reason=NO_TORCH)
def test_detection_gradcheck() -> None:
    out = run("detection.py", "--cases", "numeric:sum_ones_rrule,correct:square_rrule", "--tools", "gradcheck")
    assert "gradcheck[fast]" in out and "gradcheck[undefined]" in out and "gradcheck (any)" in out
    assert "numeric:sum_ones_rrule (numeric): gradcheck=caught" in out
    assert "a process of its own" not in out  # one tool's variants together: nothing to separate


@pytest.mark.skipif(not HAS_TORCH, reason=NO_TORCH)
def test_detection_one_process_runs_every_tool_on_each_case_in_turn() -> None:
    out = run("detection.py", "--cases", "numeric:sum_ones_rrule", "--tools", "gradguard,gradcheck", "--jobs", "1", "--one-process")
    assert "a process of its own" not in out
    assert "numeric:sum_ones_rrule (numeric): gradguard=caught  gradguard[isolation]=caught  gradcheck=caught" in out


TORCH_CASES = "torch_rules:sin_once_torch,torch_rules:exp_torch"


@pytest.mark.skipif(not HAS_TORCH, reason=NO_TORCH)
def test_detection_torch_corpus(tmp_path: Path) -> None:
    """--corpus torch: the Function itself under gradcheck and gradgradcheck (fast too), check_grads shown as not
    applying rather than missing, and its own section of the results file."""
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n<!-- begin detection -->\nkept\n<!-- end detection -->\n")
    out = run("detection.py", "--corpus", "torch", "--cases", TORCH_CASES, "--tools", "gradguard,gradcheck,check_grads", "--results", str(results))
    assert "torch_rules:sin_once_torch (torch): gradguard=caught" in out
    assert "gradcheck=passed" in out and "gradgradcheck=caught" in out and "gradgradcheck[fast]=caught" in out  # once_differentiable
    assert "check_grads=n/a" in out and "not counted as misses" in out
    assert "| torch | 1 | 1 / 0 / 0 |" in out  # the bug class row: gradguard caught it
    assert "| **false positives** on correct rules | 1 | 0 / 1 |" in out
    assert "gradguard total time / fastest anchor (gradcheck (any)" in out
    text = results.read_text()
    assert "kept" in text  # the other sections are left alone
    assert "<!-- begin torch -->" in text and "## PyTorch rules: gradguard against gradcheck and gradgradcheck" in text
    assert "Made by `python bench/detection.py --corpus torch" in text


def test_detection_without_torch_skips_gradcheck_cleanly() -> None:
    """Where PyTorch is missing the script says so and runs the other tools (simulated by hiding torch)."""
    code = (
        "import sys, runpy; sys.modules['torch'] = None; "
        f"sys.argv = ['detection.py', '--cases', 'correct:square_rrule', '--tools', 'gradcheck,check_grads']; "
        f"runpy.run_path({str(BENCH / 'detection.py')!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "skipping gradcheck" in proc.stdout
    assert "check_grads (any)" in proc.stdout


def test_detection_torch_corpus_without_torch_says_so() -> None:
    """The PyTorch rules cannot even load without PyTorch: usage exit code 2 and the reason (torch hidden)."""
    code = (
        "import sys, runpy; sys.modules['torch'] = None; "
        "sys.argv = ['detection.py', '--corpus', 'torch', '--quick']; "
        f"runpy.run_path({str(BENCH / 'detection.py')!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "--corpus torch needs PyTorch, which is not installed" in proc.stderr


def test_scaling_tiny_sizes(tmp_path: Path) -> None:
    tools = "gradguard,gradcheck,gradcheck[fast],check_grads" if HAS_TORCH else "gradguard,check_grads"
    results = tmp_path / "RESULTS.md"
    out = run("scaling.py", "--sizes", "10,100", "--tools", tools, "--budget", "0.05", "--results", str(results))
    assert "Made by `python bench/scaling.py --sizes 10,100" in results.read_text()
    lines = [line for line in out.splitlines() if line.strip().startswith(("10 ", "100 "))]
    assert any("gradguard" in line and "pass" in line for line in lines)
    assert any("check_grads" in line and "pass" in line for line in lines)
    if HAS_TORCH:
        assert any("gradcheck[fast]" in line for line in lines)
        assert any("gradcheck " in line and ("pass" in line or "skipped" in line) for line in lines)


def test_memory_limit_tiny(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    out = run("memory_limit.py", "--modules", "tests/corpus/correct.py", "--select", "GG101", "--repeats", "1", "--pairs", "4",
              "--results", str(results))
    assert "resident memory growth per rule, first uses included" in out
    assert "the same verdicts: yes" in out and "x reference" in out and "back-to-back pairs: median ratio" in out
    assert "Made by `python bench/memory_limit.py --modules tests/corpus/correct.py" in results.read_text()


def test_memory_tiny(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    out = run("memory.py", "--size", "40", "--results", str(results))
    rows = [line.split() for line in out.splitlines() if line.startswith(("softplus ", "mul "))]
    assert [(r[0], r[-1]) for r in rows if "check" in r] == [("softplus", "pass"), ("mul", "pass")]
    assert any(r[1:3] == ["one", "evaluation"] for r in rows)
    assert "largest check peak:" in out and "target <= 10" in out
    text = results.read_text()
    assert "<!-- begin memory -->" in text and "Made by `python bench/memory.py --size 40" in text


def test_checker_speed_tiny(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n<!-- begin checker_speed -->\nold figures\n<!-- end checker_speed -->\n")
    out = run("checker_speed.py", "--repeats", "1", "--n-large", "2000", "--results", str(results))
    assert "median over the small rules" in out
    assert "evaluations' worth" in out
    assert ("MET" in out) and ("target" in out)
    assert "3. Every check (contexts and JAX included; no target)" in out
    text = results.read_text()
    assert "old figures" not in text and text.count("<!-- begin checker_speed -->") == 1  # its section, replaced
    assert "median over the small rules" in text


def test_jax_column_tiny() -> None:
    """The JAX column's modes side by side in fresh processes, and the cell-by-cell corpus comparison."""
    out = run("jax_column.py", "--kinds", "numpy", "--caches", "none", "--repeats", "1", "--corpus", "--cases", "mul_rrule")
    for mode in ("eager", "jit", "traced", "auto"):
        assert any(line.startswith("NumPy softplus rrule (3,)") and f" {mode} " in line and line.rstrip().endswith("yes")
                   for line in out.splitlines()), out
    assert "cells whose status differs from eager: 0" in out
    assert "JAX cells with eager's status and another message under traced: 0" in out
    assert "JAX contexts that ran eagerly instead: 0" in out


def test_gpu_parity_compares_two_devices_runs() -> None:
    """The comparison itself, on any machine (a GPU run of it is `bash .ci/gpu`)."""
    out = run("gpu_parity.py", "--devices", "cpu,cpu", "--modules", "examples/jax_rules.py", "--select", "GG102,GG601")
    assert "| examples/jax_rules.py | 7 |" in out and out.rstrip().endswith("| none |"), out


def test_jax_library_probe_tiny() -> None:
    out = run("jax_library.py", "--rules", "relu,det", "--seeds", "0", "--select", "GG101,GG102")
    assert "| relu | - |" in out and "| det | - |" in out, out


def test_corpus_time_tiny(tmp_path: Path) -> None:
    results, figures = tmp_path / "RESULTS.md", tmp_path / "figures.json"
    out = run("corpus_time.py", "--modules", "tests/realworld/correct_jax.py", "--select", "GG101,GG102", "--processes", "1",
              "--seeds", "0,1", "--json", str(figures), "--results", str(results))
    rows = json.loads(figures.read_text())["modules"]
    assert [row["seed"] for row in rows] == [0, 1]  # one loaded module, checked at each seed in turn
    for row in rows:
        assert row["module"] == "correct_jax.py" and row["rules"] >= 6 and row["errors"] == {}
        assert set(row["checks"]) == {"GG101", "GG102"} and all(v > 0 for v in row["checks"].values())
    assert "per check, summed over the modules (s): GG10" in out and "correct_jax.py" in out
    assert "per seed, summed over the modules (s): seed 0 " in out
    assert "Made by `python bench/corpus_time.py --modules tests/realworld/correct_jax.py" in results.read_text()
