"""The files a server or a run writes beside the checkout are ignored by git."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["gradguard.sqlite3", "gradguard.sqlite3-wal", "gradguard.sqlite3-shm",
                                  "gradguard.sqlite3-journal", "x.db-wal", "x.db-shm", ".gradguard-cache/v1/a.json"])
def test_database_side_files_and_caches_are_ignored(name):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(["git", "check-ignore", "--no-index", "-q", name], cwd=ROOT)
    assert proc.returncode == 0, f"{name} is not ignored"
