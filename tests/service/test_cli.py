"""`gradguard migrate`, `gradguard worker` and `gradguard serve --demo` (through the real top-level CLI)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from sqlalchemy import inspect, select

from gradguard.service.cli import migrate, worker
from gradguard.service.db import get_engine
from gradguard.web.cli import serve

from service_support import LIVE_TIMEOUT_S, wait_for  # type: ignore[import-not-found]

GRADGUARD = [sys.executable, "-c", "from gradguard.checker.cli import main; main()"]


def test_migrate_creates_the_schema(db_url: str) -> None:
    result = CliRunner().invoke(migrate, ["--database-url", db_url])
    assert result.exit_code == 0, result.output
    assert "is at revision head" in result.output
    assert "runs" in inspect(get_engine(db_url)).get_table_names()


def test_bad_configuration_is_a_usage_error(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GRADGUARD_MODE", "production")
    monkeypatch.setenv("GRADGUARD_ADMIN_TOKEN", "changeme")
    result = CliRunner().invoke(migrate, [])
    assert result.exit_code == 2 and "GRADGUARD_ADMIN_TOKEN" in result.output


def test_commands_document_their_options() -> None:
    runner = CliRunner()
    assert "--queue [cpu|gpu]" in runner.invoke(worker, ["--help"]).output
    help_text = runner.invoke(serve, ["--help"]).output
    assert all(option in help_text for option in ("--host", "--port", "--demo", "--workers"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_demo_leaves_out_a_module_whose_imports_are_missing(tmp_path: Path) -> None:
    """A fresh install without an optional package (PyTorch) must not greet its user with an "error" verdict."""
    from gradguard.service.db import make_sessionmaker
    from gradguard.service.demo import missing_packages, seed_demo
    from gradguard.service.migrate import upgrade
    from gradguard.service.models import RunFile

    examples = tmp_path / "examples"
    examples.mkdir()
    (examples / "correct_rules.py").write_text("import numpy as np\nfrom _shared import helper\n")
    (examples / "_shared.py").write_text("helper = 1\n")
    (examples / "needs_extra.py").write_text("import numpy\nimport os.path\nfrom gg_not_installed.sub import f\n"
                                            "def g():\n    import gg_also_absent_but_lazy\n")
    assert missing_packages(examples / "needs_extra.py") == ["gg_not_installed"]
    assert missing_packages(examples / "correct_rules.py") == []
    url = f"sqlite:///{tmp_path / 'gg.sqlite3'}"
    upgrade(url)
    factory = make_sessionmaker(url)
    token, runs, skipped = seed_demo(factory, examples)
    assert token and skipped == {"needs_extra.py": ["gg_not_installed"]}
    with factory() as session:
        queued = [sorted(session.scalars(select(RunFile.path).where(RunFile.run_id == run_id))) for run_id, _ in runs]
    assert queued == [["correct_rules.py"]] * 3  # demo-1, demo-2 and its own branch: never the left-out module


@pytest.mark.slow
def test_serve_demo_shows_verdicts_within_a_minute(tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADGUARD_")}
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*GRADGUARD, "serve", "--port", str(port), "--demo", "--workers", "2"], cwd=tmp_path,
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            try:
                return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                assert proc.poll() is None, log.read_text()
                return False

        wait_for(ready, 60, "gradguard serve to be ready")
        output = log.read_text()
        assert "admin token" in output and "demo project token" in output and f"{base}/api/v1/runs/" in output
        branches = wait_for(lambda: httpx.get(f"{base}/api/v1/projects/demo/branches", timeout=LIVE_TIMEOUT_S).json()["items"], 60,
                            "the first demo verdict")
        assert branches[0]["status"] in ("passed", "failed", "error")
        assert (tmp_path / "gradguard.sqlite3").exists()
        # The default branch shows a verdict at first sight: its badge is coloured, not grey.
        main = wait_for(lambda: [b for b in httpx.get(f"{base}/api/v1/projects/demo/branches", timeout=LIVE_TIMEOUT_S).json()["items"]
                                 if b["branch"] == "main"], 90, "a verdict on the demo's default branch")
        assert main[0]["status"] in ("passed", "failed")
        badge = httpx.get(f"{base}/badge/demo.json", timeout=LIVE_TIMEOUT_S).json()
        assert badge["color"] not in ("lightgrey", "grey", "inactive"), badge
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    output = log.read_text()
    assert "leaked semaphore" not in output and "resource_tracker" not in output, output[-2000:]
