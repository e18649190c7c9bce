"""Copies of submitted files in the temp folder are removed once the process that made them is gone:
at a worker's start, before each run, and when the pool sees a worker die."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gradguard.service import scratch
from gradguard.service.app import create_app
from gradguard.service.models import Run

from service_support import SLEEPY_RULES, wait_for  # type: ignore[import-not-found]


def _killed_owner(base: Path, prefix: str, label: str) -> Path:
    """A folder made through ``scratch.folder`` by a process that was then killed (SIGKILL: no cleanup)."""
    code = textwrap.dedent(f"""
        import os, sys, time
        from gradguard.service import scratch
        with scratch.folder({prefix!r}, {label!r}) as tmp:
            (tmp / "rules.py").write_text("SECRET = 1\\n")
            print(tmp, flush=True)
            time.sleep(600)
    """)
    env = {**os.environ, "TMPDIR": str(base)}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    path = Path(proc.stdout.readline().strip())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert path.is_dir() and path.parent == base
    return path


def test_a_killed_processs_folders_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead_run = _killed_owner(tmp_path, "gradguard-run-", "7-")
    dead_stage = _killed_owner(tmp_path, "gradguard-sandbox-", "")
    host_and_pid = scratch.owner_tag().rsplit(".", 1)[0]
    reused_pid = tmp_path / f"gradguard-run-8-{host_and_pid}.1-x"  # our pid, but another process's start time
    other_host = tmp_path / f"gradguard-run-9-h00000000.{os.getpid() + 1}.1-x"
    unrelated = tmp_path / "gradguard-other-h00000000.1.1-x"
    for path in (reused_pid, other_host, unrelated):
        path.mkdir()
    with scratch.folder("gradguard-run-", "10-") as ours:
        assert ours.parent == tmp_path and ours.name.startswith(f"gradguard-run-10-{scratch.owner_tag()}-")
        removed = scratch.remove_orphans()
        assert sorted(removed) == sorted([dead_run.name, dead_stage.name, reused_pid.name])
        assert ours.is_dir(), "a live process's folder must be kept"
    assert not dead_run.exists() and not dead_stage.exists() and not reused_pid.exists()
    assert other_host.is_dir() and unrelated.is_dir()


def test_only_the_known_prefixes_are_made():
    with pytest.raises(ValueError, match="prefix='gg-'"):
        with scratch.folder("gg-"):
            pass


@pytest.mark.slow
def test_a_killed_workers_copies_are_removed_and_so_are_those_found_at_start(make_settings, admin_headers, tmp_path,
                                                                          monkeypatch):
    base = tmp_path / "tmp"
    base.mkdir()
    monkeypatch.setenv("TMPDIR", str(base))  # the workers' temp folder (they are spawned)
    monkeypatch.setattr(tempfile, "tempdir", str(base))  # and the pool's
    left_before = _killed_owner(base, "gradguard-run-", "99-")
    app = create_app(make_settings(local_workers=1, max_retries=0, run_wall_s=60))
    with TestClient(app) as client:
        wait_for(lambda: not left_before.exists(), 60, "the worker to remove what a dead one left at its start")
        token = client.post("/api/v1/projects", json={"slug": "p"}, headers=admin_headers).json()["token"]
        response = client.post("/api/v1/projects/p/runs", json={"files": {"rules.py": SLEEPY_RULES}},
                               headers={"Authorization": f"Bearer {token}"})
        run_id = response.json()["id"]
        copies = lambda: sorted(p.name for p in base.iterdir() if p.name.startswith(scratch.PREFIXES))  # noqa: E731
        wait_for(lambda: client.get(f"/api/v1/runs/{run_id}").json()["status"] == "running", 60, "the run to start")
        running = wait_for(lambda: len(copies()) == 2 and copies(), 30, "the run's and the sandbox's folders")
        assert any(name.startswith(f"gradguard-run-{run_id}-") for name in running), running
        with app.state.sessionmaker() as session:
            holder = session.get(Run, run_id).worker
        os.kill(int(holder.rpartition(":")[2]), signal.SIGKILL)
        wait_for(lambda: not copies(), 30, "the pool to remove the killed worker's copies")
