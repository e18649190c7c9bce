"""The sandbox's contract: its public surface, the level it reports, benign runs at every level,
limits that end in a clear reason, and the start-up cost. Hostile submissions: test_sandbox_hostile.py.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import statistics
from pathlib import Path

import pytest

import gradguard.service.sandbox as sandbox
from gradguard.service.sandbox import Limits, SandboxOutcome, sandbox_level

# These tests exercise each level on purpose, rlimits included: every level is allowed here.
run_check = functools.partial(sandbox.run_check, min_level="rlimits")

HOSTILE = Path(__file__).parent / "hostile"
QUICK = Limits(wall_s=5, cpu_s=5, memory_mb=1536, processes=48, open_files=64, output_bytes=2**20, tmpfs_mb=16)
WORKING = [lvl for lvl in sandbox.LEVELS[:-1] if sandbox._probe(lvl) is None] + ["rlimits"]


def bundle_of(tmp_path: Path, *names: str) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    for name in names:
        shutil.copy(HOSTILE / f"{name}.py", bundle / f"{name}.py")
    return bundle


@pytest.fixture(params=WORKING)
def level(request, monkeypatch):
    monkeypatch.setattr(sandbox, "sandbox_level", lambda: request.param)
    return request.param


def test_public_surface_is_the_agreed_interface():
    assert {"Limits", "SandboxOutcome", "run_check", "sandbox_level"} <= set(sandbox.__all__)
    assert Limits() == Limits(60, 60, 2048, 64, 256, 5 * 2**20, 64)
    assert [f.name for f in dataclasses.fields(SandboxOutcome)] == [
        "ok", "report", "level", "reason", "duration_s", "returncode", "stderr_tail"
    ]


@pytest.mark.parametrize("field", ["wall_s", "cpu_s", "memory_mb", "processes", "open_files", "output_bytes", "tmpfs_mb"])
def test_limits_must_be_positive(field):
    with pytest.raises(ValueError, match=f"Got {field}=0, but {field} must be a positive number"):
        Limits(**{field: 0})


def test_arguments_are_checked_eagerly(tmp_path):
    with pytest.raises(ValueError, match="must be an existing folder"):
        run_check(tmp_path / "missing")
    with pytest.raises(ValueError, match="device must be 'cpu' or 'gpu'"):
        run_check(tmp_path, device="tpu")


def test_level_is_the_strongest_that_works_and_is_detected_once():
    level = sandbox_level()
    assert level == WORKING[0]
    for stronger in sandbox.LEVELS[: sandbox.LEVELS.index(level)]:  # each one skipped says why
        assert isinstance(sandbox._probe(stronger), str) and sandbox._probe(stronger)
    if shutil.which("bwrap") is None:
        assert sandbox._probe("bubblewrap") == "bwrap is not installed"
    before = sandbox_level.cache_info().misses
    assert sandbox_level() == level
    assert sandbox_level.cache_info().misses == before


def test_a_weaker_level_can_be_forced_but_not_a_bogus_one(monkeypatch):
    sandbox_level.cache_clear()
    try:
        monkeypatch.setenv("GRADGUARD_SANDBOX_LEVEL", "rlimits")
        assert sandbox_level() == "rlimits"
        sandbox_level.cache_clear()
        monkeypatch.setenv("GRADGUARD_SANDBOX_LEVEL", "chroot")
        with pytest.raises(ValueError, match="GRADGUARD_SANDBOX_LEVEL='chroot'"):
            sandbox_level()
    finally:
        monkeypatch.delenv("GRADGUARD_SANDBOX_LEVEL")
        sandbox_level.cache_clear()


def test_benign_bundle_gives_a_passing_report_at_every_level(tmp_path, level, monkeypatch):
    monkeypatch.setenv("GRADGUARD_DATABASE_URL", "postgresql://u:hunter2@127.0.0.1/db")
    bundle = bundle_of(tmp_path, "benign")
    outcome = run_check(bundle, select=["GG1", "GG202", "GG301", "GG302"], seed=3, max_examples=5, limits=QUICK)
    assert outcome.ok, (outcome.reason, outcome.stderr_tail)
    assert outcome.reason is None and outcome.returncode == 0 and outcome.level == level
    report = outcome.report
    assert report["schema"] == "gradguard.report/1"
    assert report["environment"]["sandbox"] == level
    assert report["environment"]["device"] == "cpu"
    assert report["settings"]["seed"] == 3 and report["settings"]["select"] == ["GG1", "GG202", "GG301", "GG302"]
    assert report["summary"]["verdict"] == "pass", json.dumps(report["rules"], indent=1)[:2000]
    assert [r["name"] for r in report["rules"]] == ["scale_rrule"]
    assert report["rules"][0]["source_file"].endswith("benign.py")


def _jax_sees_a_gpu() -> bool:
    try:
        import jax

        return bool(jax.devices("gpu"))
    except Exception:  # noqa: BLE001 - no GPU backend, or none at all
        return False


@pytest.mark.skipif(_jax_sees_a_gpu(), reason="this machine has a GPU: its runs find it (.ci/gpu checks that)")
def test_a_gpu_run_where_there_is_no_gpu_errors_its_jax_rules_and_checks_the_others(tmp_path):
    """A GPU run's sandbox allows only JAX's CUDA backend (JAX_PLATFORMS=cuda): without a GPU, JAX starts no
    backend at all and asserts instead of raising. Each JAX rule gets an error naming the problem; the run
    and its NumPy rules do not crash with it."""
    bundle = bundle_of(tmp_path, "benign")
    (bundle / "jax_rule.py").write_text(
        "import jax, jax.numpy as jnp\nfrom gradguard import arrays, jax_rule\n\n"
        "@jax.custom_vjp\ndef sp(x):\n    return jnp.logaddexp(0.0, x)\n\n"
        "sp.defvjp(lambda x: (jnp.logaddexp(0.0, x), jax.nn.sigmoid(x)), lambda s, g: (g * s,))\n"
        "sp_rule = jax_rule(sp, arrays(shape=(3,)))\n"
    )
    outcome = run_check(bundle, select=["GG1"], max_examples=3, device="gpu", limits=QUICK)
    assert outcome.ok, (outcome.reason, outcome.stderr_tail)
    rules = {r["name"]: r for r in outcome.report["rules"]}
    assert rules["scale_rrule"]["verdict"] == "pass"
    error = rules["sp"]["error"]
    assert rules["sp"]["verdict"] == "error" and error["type"] == "PlatformUnavailable", error
    assert error["message"].startswith("GPU requested but JAX sees no GPU here (devices: none)."), error


def test_interpreter_crash_is_reported_with_its_signal(tmp_path):
    outcome = run_check(bundle_of(tmp_path, "crashes"), limits=QUICK)
    assert not outcome.ok and outcome.report is None
    assert outcome.reason.startswith("checker killed by SIGSEGV"), outcome


def test_report_channel_is_capped(tmp_path):
    outcome = run_check(bundle_of(tmp_path, "floods_report"), limits=QUICK)
    assert not outcome.ok
    assert outcome.reason == "exceeded 1 MB report"


def test_tmpfs_is_bounded(tmp_path):
    outcome = run_check(bundle_of(tmp_path, "fills_tmpfs"), limits=QUICK)
    assert not outcome.ok
    assert outcome.reason == "exceeded 16 MB tmpfs", outcome


def test_open_files_are_bounded(tmp_path):
    outcome = run_check(bundle_of(tmp_path, "opens_many_files"), limits=QUICK)
    assert not outcome.ok
    assert outcome.reason == "exceeded 64 open files", outcome


def test_environment_is_built_from_nothing():
    from gradguard.service.sandbox import _run

    env = _run.env("gpu", pythonpath="/opt/gradguard/lib", tmp="/tmp")
    assert env["GRADGUARD_DEVICE"] == "gpu" and env["JAX_PLATFORMS"] == "cuda"
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"  # runs sharing a GPU: none takes 75% of it
    assert env["HOME"] == env["TMPDIR"] == "/tmp"
    allowed = {"PATH", "HOME", "TMPDIR", "LANG", "GRADGUARD_DEVICE", "JAX_PLATFORMS", "XLA_FLAGS", "MALLOC_ARENA_MAX",
               "XLA_PYTHON_CLIENT_PREALLOCATE", *THREAD_ENV}
    assert {k for k in env if not k.startswith("PYTHON")} <= allowed
    assert {k: env[k] for k in THREAD_ENV} == THREAD_ENV  # pools sized for a run, not for the machine
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in _run.env("cpu", pythonpath="/x", tmp="/tmp")  # JAX_PLATFORMS=cpu


THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NPROC": "4"}


def test_a_run_uses_a_few_cpus_whatever_the_machine_has(tmp_path, monkeypatch):
    """NumPy's BLAS and XLA's CPU client size their thread pools by the machine's cores: on a 16-core GPU
    machine a run's JAX alone passed the default limit of 64 processes and threads, and every run ended
    "exceeded 64 processes" before its first rule. A run now sees at most `RUN_CPUS` CPUs (here 1), and its
    pools are sized for it."""
    from gradguard.service.sandbox import _run

    monkeypatch.setattr(_run, "RUN_CPUS", 1)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "counts.py").write_text(
        "import json, os, sys\nimport jax.numpy as jnp\n\njnp.ones(3).block_until_ready()\n"
        "print('GG-FACTS ' + json.dumps({'cpus': sorted(os.sched_getaffinity(0)), "
        "'tasks': len(os.listdir('/proc/self/task'))}), file=sys.stderr)\n"
    )
    outcome = run_check(bundle, select=["GG101"], max_examples=1, limits=QUICK)
    assert outcome.ok, (outcome.reason, outcome.stderr_tail)
    facts = json.loads(next(x for x in outcome.stderr_tail.splitlines() if x.startswith("GG-FACTS "))[9:])
    assert len(facts["cpus"]) == 1 and set(facts["cpus"]) <= __import__("os").sched_getaffinity(0), facts
    assert facts["tasks"] < QUICK.processes // 2, facts


def test_start_overhead_of_a_trivial_run(tmp_path, record_property):
    """End to end, an empty bundle: sandbox start, interpreter, `import checker`, report, cleanup."""
    bundle = tmp_path / "empty"
    bundle.mkdir()
    times = []
    for _ in range(5):
        outcome = run_check(bundle, limits=QUICK)
        assert outcome.ok, outcome.reason
        times.append(outcome.duration_s)
    p50 = statistics.median(times)
    record_property("sandbox_trivial_run_p50_s", round(p50, 3))
    print(f"\ntrivial run at level {sandbox_level()}: p50 {p50:.3f} s of {[round(t, 3) for t in times]}")
    assert p50 < 20  # a measurement, not a benchmark: CI machines are busy


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() != 0, reason="needs root")
def test_cleanup_kills_every_process_of_the_runs_uid():
    """The last line of defence: whatever escaped the session and the namespace, its uid gives it away."""
    import subprocess

    from gradguard.service.sandbox import _run

    uid, gid = _run.run_ids()
    procs = [subprocess.Popen(["sleep", "60"], user=uid, group=gid, extra_groups=[], start_new_session=True)
             for _ in range(3)]
    _run.sweep(uid)
    for proc in procs:
        assert proc.wait(timeout=5) == -9
