"""Fixtures for the web tests: one live server per session (uvicorn on a free loopback port, a
temporary SQLite database, the local executor in its sandbox) and real runs submitted through the
API, so every page, badge, the `gradguard submit` command and the Action see what users see.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
ADMIN = "web-tests-admin-token-0123456789"
# Runs other than the one the screenshots show check only the contract family (GG1xx), which is
# where the broken rule's finding (GG103) lives: same pipeline, a fraction of the time.
QUICK = ["GG1"]
XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'

GOOD_RULES = '''\
import numpy as np
from gradguard.checker import arrays, rrule


def square(x):
    return x * x


@rrule(square, arrays(shape=(3,)))
def square_rrule(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        return (2.0 * x * ybar,)
    return square(x), pullback


def scale(x):
    return 3.0 * x


@rrule(scale, arrays(shape=(4,)))
def scale_rrule(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        return (3.0 * ybar,)
    return scale(x), pullback
'''

BAD_RULES = GOOD_RULES.replace(
    "        return (3.0 * ybar,)\n    return scale(x), pullback",
    "        return (3.0 * ybar, None)  # one tangent too many\n    return scale(x), pullback",
)

# The run the screenshots show adds the canonical hazard: an in-place rule that is right alone and
# wrong where dot() captured its input first (GG501, with the safety matrix).
SHOWCASE_RULES = BAD_RULES + '''

def addone_(a):
    a += 1
    return a.sum()


@rrule(addone_, arrays(shape=(3,)), mutates=(0,))
def addone_rrule(a):
    y = addone_(a)

    def pullback(ybar):
        if ybar is None:
            return (None,)
        return (np.full(a.shape, ybar),)
    return y, pullback
'''

XSS_RULES = GOOD_RULES.replace("@rrule(square, arrays(shape=(3,)))", f"@rrule(square, arrays(shape=(3,)), name={XSS!r})")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Live:
    """A running gradguard server and helpers to put real runs into it."""

    base: str
    admin: str
    http: httpx.Client
    tokens: dict[str, str] = field(default_factory=dict)
    read_tokens: dict[str, str] = field(default_factory=dict)

    def create_project(self, slug: str, *, public: bool = True, name: str | None = None) -> str:
        answer = self.http.post("/api/v1/projects", json={"slug": slug, "public": public, "name": name or slug},
                                headers={"Authorization": f"Bearer {self.admin}"})
        assert answer.status_code == 201, answer.text
        self.tokens[slug] = answer.json()["token"]
        self.read_tokens[slug] = answer.json()["read_token"]
        return self.tokens[slug]

    def submit(self, slug: str, files: dict[str, str], **options: Any) -> int:
        answer = self.http.post(f"/api/v1/projects/{slug}/runs", json={"files": files, **options},
                                headers={"Authorization": f"Bearer {self.tokens[slug]}"})
        assert answer.status_code == 202, answer.text
        return answer.json()["id"]

    def wait(self, run_id: int, timeout_s: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            run = self.http.get(f"/api/v1/runs/{run_id}", headers={"Authorization": f"Bearer {self.admin}"}).json()
            if run["status"] in ("passed", "failed", "error"):
                return run
            time.sleep(0.25)
        raise AssertionError(f"run {run_id} did not finish in {timeout_s} s")


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    folder = tmp_path_factory.mktemp("web-server")
    port = _free_port()
    env = {
        **os.environ,
        "GRADGUARD_DATABASE_URL": f"sqlite:///{folder / 'gradguard.sqlite3'}",
        "GRADGUARD_ADMIN_TOKEN": ADMIN,
        "GRADGUARD_EXECUTOR": "local",
        "GRADGUARD_LOCAL_WORKERS": "2",
        "GRADGUARD_DEFAULT_MAX_EXAMPLES": "10",
        "GRADGUARD_RATE_LIMIT_PER_MINUTE": "0",
        "GRADGUARD_READ_RATE_LIMIT_PER_MINUTE": "0",
        "GRADGUARD_PUBLIC_URL": "",
    }
    log = open(folder / "server.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "gradguard.web.app:create_app", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    http = httpx.Client(base_url=base, timeout=30)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError("the server exited:\n" + (folder / "server.log").read_text()[-3000:])
            try:
                if http.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start in 60 s")
            time.sleep(0.2)
        yield Live(base=base, admin=ADMIN, http=http)
    finally:
        http.close()
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture(scope="session")
def seeded(live: Live) -> dict[str, Any]:
    """Public project ``alpha`` (main: a failing then a passing commit; branch ``feature/x`` failing;
    branch ``xss`` with a hostile rule name) and private project ``secret``: all runs finished."""
    live.create_project("alpha", name="Alpha <b>rules</b>")
    live.create_project("secret", public=False)
    quick = {"select": QUICK}
    runs = {
        "fail_main": live.submit("alpha", {"rules/ops.py": SHOWCASE_RULES}, commit="c1aaaaaaaaaa", branch="main"),
        "feature": live.submit("alpha", {"rules/ops.py": BAD_RULES}, commit="f1bbbbbbbbbb", branch="feature/x", **quick),
        "xss": live.submit("alpha", {"rules/ops.py": XSS_RULES}, commit="x1cccccccccc", branch="xss", **quick),
        "secret": live.submit("secret", {"ops.py": BAD_RULES}, commit="s1dddddddddd", branch="main", **quick),
    }
    expected = {"fail_main": "failed", "feature": "failed", "xss": "passed", "secret": "failed"}
    for name, run_id in runs.items():
        run = live.wait(run_id)
        assert run["status"] == expected[name], (name, run["status"], run["error"])
    runs["pass_main"] = live.submit("alpha", {"rules/ops.py": GOOD_RULES}, commit="c2eeeeeeeeee", branch="main",
                                    **quick)
    run = live.wait(runs["pass_main"])
    assert run["status"] == "passed", run
    return runs


@pytest.fixture(scope="session")
def xss() -> str:
    """The hostile rule name the ``xss`` run carries."""
    return XSS


@pytest.fixture(scope="session")
def quick() -> list[str]:
    return list(QUICK)


@pytest.fixture(scope="session")
def rule_sources() -> dict[str, str]:
    return {"good": GOOD_RULES, "bad": BAD_RULES, "xss": XSS_RULES}
