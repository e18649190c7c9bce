"""Hostile submissions, each contained and reported: the sandbox's reason to exist.

Every module under ``hostile/`` runs through ``run_check`` with small limits.
Observers (secrets, network, writes) run at each isolation level that works
here; attacks on limits run at the level this machine uses.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from gradguard import checker
import gradguard.service.sandbox as sandbox
from gradguard.service.sandbox import Limits

# These tests exercise each level on purpose, rlimits included: every level is allowed here.
run_check = functools.partial(sandbox.run_check, min_level="rlimits")

HOSTILE = Path(__file__).parent / "hostile"
QUICK = Limits(wall_s=5, cpu_s=5, memory_mb=1536, processes=48, output_bytes=2**20, tmpfs_mb=16)
ISOLATING = [lvl for lvl in ("bubblewrap", "namespaces") if sandbox._probe(lvl) is None]
ALL = [*ISOLATING, "rlimits"]
OBSERVE = {"select": ["GG101"], "max_examples": 1}  # the observations happen at import: check little
SECRETS = {
    "GRADGUARD_DATABASE_URL": "postgresql://gradguard:hunter2-db@127.0.0.1/gradguard",
    "GRADGUARD_ADMIN_TOKEN": "gga_hunter2_admin",
    "AWS_SECRET_ACCESS_KEY": "hunter2-aws",
}
ALLOWED_ENV = {"PATH", "PWD", "HOME", "TMPDIR", "LANG", "GRADGUARD_DEVICE", "JAX_PLATFORMS", "XLA_FLAGS", "MALLOC_ARENA_MAX",
               "XLA_PYTHON_CLIENT_PREALLOCATE", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NPROC"}


def bundle_of(tmp_path: Path, name: str, **params) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy(HOSTILE / f"{name}.py", bundle / f"{name}.py")
    (bundle / "params.json").write_text(json.dumps(params))
    return bundle


def facts(outcome) -> dict:
    assert outcome.ok, (outcome.reason, outcome.stderr_tail)
    line = next(line for line in outcome.stderr_tail.splitlines() if line.startswith("GG-FACTS "))
    return json.loads(line.removeprefix("GG-FACTS "))


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))}


def strays(bundle: Path) -> list[str]:
    """Processes still running from this bundle's run (the entry program carries --origin BUNDLE)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(bundle).encode() in cmdline:
                out.append(f"{entry.name}: {b' '.join(cmdline)[:200]!r}")
    return out


@pytest.fixture(params=ALL)
def any_level(request, monkeypatch):
    monkeypatch.setattr(sandbox, "sandbox_level", lambda: request.param)
    return request.param


@pytest.fixture(scope="module", params=ISOLATING or [pytest.param("none", marks=pytest.mark.skip("no isolation here"))])
def observed(request, tmp_path_factory):
    """One run per isolating level of the three observers together (one bundle): what could they see?"""
    tmp = tmp_path_factory.mktemp(f"observers-{request.param}")
    db = tmp / "service" / "gradguard.sqlite3"  # where the service keeps its data, outside any bind
    db.parent.mkdir()
    db.write_text("SQLite format 3 hunter2-row")
    config = tmp / "service" / ".env"
    config.write_text("GRADGUARD_ADMIN_TOKEN=gga_hunter2_admin\n")
    source = Path(sandbox.__file__)  # the service's own code: not part of the sandbox's view
    accepted: list[bytes] = []
    stop = threading.Event()
    with pytest.MonkeyPatch.context() as mp, socket.socket() as server:
        for key, value in SECRETS.items():
            mp.setenv(key, value)
        mp.setattr(sandbox, "sandbox_level", lambda: request.param)
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)

        def serve():
            while not stop.is_set():
                try:
                    accepted.append(server.accept()[0].recv(100))
                except OSError:
                    pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        bundle = bundle_of(tmp, "reads_secrets", paths=[str(db), str(config), str(source)], port=server.getsockname()[1])
        for name in ("opens_socket", "writes_outside"):
            shutil.copy(HOSTILE / f"{name}.py", bundle / f"{name}.py")
        before = digest(bundle)
        outcome = run_check(bundle, limits=QUICK, **OBSERVE)
        stop.set()
        thread.join()
    assert outcome.ok, (outcome.reason, outcome.stderr_tail)
    seen = {}
    for line in outcome.stderr_tail.splitlines():
        if line.startswith("GG-FACTS "):
            data = json.loads(line.removeprefix("GG-FACTS "))
            seen[data.pop("observer")] = data
    assert set(seen) == {"secrets", "network", "writes"}, outcome.stderr_tail
    return {"level": request.param, "outcome": outcome, "accepted": accepted, "bundle": bundle, "before": before, **seen}


def test_secrets_are_out_of_reach(observed):
    seen = observed["secrets"]
    assert observed["outcome"].report["environment"]["sandbox"] == observed["level"]
    assert set(seen["env"]) - ALLOWED_ENV <= {k for k in seen["env"] if k.startswith("PYTHON")}
    assert "hunter2" not in json.dumps(seen)
    for path, text in seen["files"].items():  # /etc/shadow, the database, the settings, service/ source
        assert text.startswith(("FileNotFoundError", "PermissionError")), (path, text)
    assert seen["uid"] != 0


def test_no_network_not_even_loopback(observed):
    seen = observed["network"]
    assert observed["accepted"] == []  # the test's server on 127.0.0.1 never heard from the rule
    assert "Network is unreachable" in seen["loopback"] or "Connection refused" in seen["loopback"]
    if os.geteuid() == 0:  # we can take the namespace's loopback down: no network at all
        assert "Network is unreachable" in seen["loopback"]
    assert "Network is unreachable" in seen["outside"]
    assert "gaierror" in seen["dns"]


def test_writes_outside_tmpfs_fail_and_bundle_is_unchanged(observed):
    seen = dict(observed["writes"])
    assert seen.pop("tmpdir") == "written" and seen.pop("home") == "written"
    for where, result in seen.items():
        assert result.startswith(("OSError", "PermissionError", "FileNotFoundError")), (where, result)
        assert "Read-only file system" in result or "Permission denied" in result or "No such file" in result
    assert digest(observed["bundle"]) == observed["before"]
    assert not (Path(checker.__file__).parent / "pwned.py").exists()


def test_environment_secrets_are_gone_even_at_the_rlimits_level(tmp_path, monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sandbox, "sandbox_level", lambda: "rlimits")
    bundle = bundle_of(tmp_path, "reads_secrets", paths=[], port=0)
    outcome = run_check(bundle, limits=QUICK, **OBSERVE)
    assert outcome.ok, outcome.reason
    line = next(x for x in outcome.stderr_tail.splitlines() if x.startswith("GG-FACTS "))
    env = json.loads(line.removeprefix("GG-FACTS "))["env"]
    assert {k for k in env if not k.startswith("PYTHON")} <= ALLOWED_ENV | {"GRADGUARD_SANDBOX_RUN"}
    assert "hunter2" not in json.dumps(env)


def test_fork_bomb_is_contained_and_leaves_no_process(tmp_path, any_level):
    """RLIMIT_NPROC on the run's own uid, or (rlimits level as root) the parent's process watchdog."""
    bundle = bundle_of(tmp_path, "forks_without_bound")
    outcome = run_check(bundle, limits=QUICK)
    assert not outcome.ok
    assert outcome.reason == "exceeded 48 processes", outcome
    assert strays(bundle) == []


def test_50_gb_allocation_fails_fast_as_memory_limit(tmp_path):
    bundle = bundle_of(tmp_path, "allocates_50gb")
    outcome = run_check(bundle, limits=QUICK)
    assert not outcome.ok
    assert outcome.reason == "exceeded 1536 MB memory"
    assert outcome.duration_s < QUICK.wall_s  # failed at once, not at the wall limit
    assert outcome.report is not None  # the checker recorded the MemoryError as a load error


def test_cpu_loop_ends_at_the_cpu_limit(tmp_path):
    bundle = bundle_of(tmp_path, "loops_forever")
    outcome = run_check(bundle, limits=Limits(wall_s=40, cpu_s=1))  # a busy machine stretches 1 s of CPU
    assert not outcome.ok
    assert outcome.reason == "exceeded 1 s CPU time"
    assert outcome.returncode == 128 + 24 or outcome.returncode == -24 or outcome.returncode == 128 + 9
    assert strays(bundle) == []


def test_sleeping_forever_ends_at_the_wall_limit(tmp_path, any_level):
    bundle = bundle_of(tmp_path, "sleeps_forever")
    outcome = run_check(bundle, limits=Limits(wall_s=2.5, cpu_s=30))
    assert not outcome.ok
    assert outcome.reason == "exceeded 2.5 s wall time"
    assert 2.5 <= outcome.duration_s < 6  # killed at the limit; cleanup is quick even on a busy machine
    assert outcome.report is None and outcome.returncode is not None
    assert strays(bundle) == []


def test_printing_1_gb_is_cut_at_the_output_cap(tmp_path):
    bundle = bundle_of(tmp_path, "prints_1gb")
    outcome = run_check(bundle, limits=QUICK)
    assert not outcome.ok
    assert outcome.reason == "exceeded 1 MB output"
    assert outcome.duration_s < QUICK.wall_s
    assert len(outcome.stderr_tail) <= 8192
    assert strays(bundle) == []


def test_threads_count_as_processes_even_when_native_code_aborts(tmp_path):
    """XLA starts a thread pool per client; pthread_create fails and it aborts with a stack trace."""
    if sandbox.sandbox_level() == "rlimits" and os.geteuid() == 0:
        pytest.skip("at the rlimits level as root, RLIMIT_NPROC does not apply and the watchdog counts processes")
    bundle = bundle_of(tmp_path, "starts_threads")
    outcome = run_check(bundle, limits=Limits(wall_s=60, processes=8))
    assert not outcome.ok
    assert outcome.reason == "exceeded 8 processes", (outcome.reason, outcome.stderr_tail[-2000:])


def _answers(family: int, address, hello: bytes) -> str:
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        s.connect(address)
        s.sendall(hello)
        return s.recv(64).decode("latin-1")


def test_at_the_configured_level_a_submission_cannot_reach_postgresql_or_redis(tmp_path, redis_url):
    """The real servers the service uses (127.0.0.1:5432 and :6379), reachable from here, are out of reach
    of a submission checked at the configured minimum level (never lowered for this test)."""
    import glob

    ssl_request = (8).to_bytes(4, "big") + (80877103).to_bytes(4, "big")
    assert _answers(socket.AF_INET, ("127.0.0.1", 5432), ssl_request) in ("S", "N")  # PostgreSQL is there
    assert _answers(socket.AF_INET, ("127.0.0.1", 6379), b"PING\r\n").startswith("+PONG")  # and Redis
    unix = sorted(glob.glob("/var/run/postgresql/.s.PGSQL.*") + glob.glob("/tmp/.s.PGSQL.*"))
    bundle = bundle_of(tmp_path, "reaches_services", postgres_port=5432, redis_port=6379, unix_sockets=unix)
    outcome = sandbox.run_check(bundle, limits=QUICK, **OBSERVE)  # the default floor: namespaces or bubblewrap
    seen = facts(outcome)
    assert outcome.level in ("bubblewrap", "namespaces")
    for name in ("postgres_tcp", "redis_tcp"):
        assert not seen[name].startswith("answered"), (name, seen[name])
        assert "Network is unreachable" in seen[name] or "Connection refused" in seen[name], seen[name]
    for path, result in seen["postgres_unix"].items():
        assert not result.startswith("answered") and ("No such file" in result or "Permission denied" in result), (
            path, result)


@pytest.mark.parametrize("level", ISOLATING or [pytest.param("none", marks=pytest.mark.skip("no isolation here"))])
def test_the_seccomp_filter_denies_namespaces_mounts_ptrace_and_keyrings(tmp_path, monkeypatch, level):
    monkeypatch.setattr(sandbox, "sandbox_level", lambda: level)
    outcome = run_check(bundle_of(tmp_path, "escapes_namespaces"), limits=QUICK, **OBSERVE)
    seen = facts(outcome)
    assert seen.pop("observer") == "seccomp" and seen.pop("fork_still_works") == "yes"
    assert seen == {name: "Operation not permitted" for name in seen}, seen
    assert len(seen) == 7 * 2 + 5


@pytest.mark.parametrize("level", ISOLATING or [pytest.param("none", marks=pytest.mark.skip("no isolation here"))])
def test_without_its_seccomp_filter_a_level_fails_its_probe(monkeypatch, level):
    from gradguard.service.sandbox import _seccomp

    def unavailable() -> str:
        raise _seccomp.Unavailable("no libseccomp binding (test)")

    monkeypatch.setattr(_seccomp, "program", unavailable)
    sandbox._probe.cache_clear()
    try:
        problem = sandbox._probe(level)
    finally:
        sandbox._probe.cache_clear()
    assert problem is not None and problem.startswith("isolation incomplete") and "'seccomp': False" in problem


@pytest.mark.parametrize("level", ISOLATING or [pytest.param("none", marks=pytest.mark.skip("no isolation here"))])
def test_memory_is_counted_over_all_of_a_runs_processes(tmp_path, monkeypatch, level):
    """Three children of 600 MB each: every one under the 1536 MB limit, together over it."""
    monkeypatch.setattr(sandbox, "sandbox_level", lambda: level)
    limits = Limits(wall_s=40, cpu_s=40, memory_mb=1536, processes=48, output_bytes=2**20, tmpfs_mb=16)
    started = time.monotonic()
    outcome = run_check(bundle_of(tmp_path, "hoards_in_children", children=3, mb_each=600, sleep_s=60), limits=limits,
                        **OBSERVE)
    assert not outcome.ok and outcome.reason == "exceeded 1536 MB memory", (outcome.reason, outcome.stderr_tail)
    assert time.monotonic() - started < 30  # stopped when the total passed the limit, not at the wall
    # the twin: two children of 500 MB, 1000 MB together, is within the run's budget
    (tmp_path / "twin").mkdir()
    twin = run_check(bundle_of(tmp_path / "twin", "hoards_in_children", children=2, mb_each=500, sleep_s=3),
                     limits=limits, **OBSERVE)
    assert twin.ok, (twin.reason, twin.stderr_tail)
