"""bench/web_pages.py in a tiny configuration, so it cannot rot (the full run is a documented command)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_page_bench_runs(tmp_path: Path) -> None:
    out = tmp_path / "pages.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "web_pages.py"), "--runs", "30", "--rules", "2",
                           "--repeat", "2", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    assert {"project page", "run page (findings)", "rule page", "badge svg"} <= set(results)
    assert all(r["p50_ms"] > 0 for r in results.values())


def _tiny_report() -> dict:
    finding = {"check_id": "GG103", "severity": "error", "title": "pullback raises or returns the wrong number of tangents",
               "rule": "b_rrule", "message": "m", "source_file": "rules.py", "source_lines": [3, 4]}
    return {
        "schema": "gradguard.report/1",
        "summary": {"rules": 2, "passed": 1, "failed": 1, "errored": 0, "load_errors": 0, "findings": 1,
                    "errors": 1, "warnings": 0, "by_check": {"GG103": 1}, "verdict": "fail"},
        "settings": {}, "environment": {}, "duration_s": 0.1, "load_errors": [],
        "rules": [
            {"name": "a_rrule", "verdict": "pass", "findings": [], "checks_run": ["GG103"], "source_file": "rules.py",
             "source_lines": [1, 2]},
            {"name": "b_rrule", "verdict": "fail", "findings": [finding], "checks_run": ["GG103"],
             "source_file": "rules.py", "source_lines": [3, 4]},
        ],
    }


def test_project_pages_through_many_runs(tmp_path: Path) -> None:
    """Pagination and the chart on a stored history of 130 runs (rows as the workers write them)."""
    import re
    import importlib.util

    from fastapi.testclient import TestClient

    from gradguard.service.config import Settings
    from gradguard.web.app import create_app

    spec = importlib.util.spec_from_file_location("web_pages_bench", ROOT / "bench" / "web_pages.py")
    bench = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(bench)
    url = f"sqlite:///{tmp_path / 'many.sqlite3'}"
    bench.populate(url, 130, _tiny_report(), "def a():\n    pass\ndef b():\n    pass\n")
    settings = Settings(database_url=url, admin_token="many-runs-admin-token-0123", local_workers=0)
    with TestClient(create_app(settings, start_executor=False)) as client:
        first = client.get("/p/bench").text
        shown = re.findall(r'<th scope="row"><a href="/runs/(\d+)">', first)
        assert len(shown) == 50 and shown[0] == "130" and shown[-1] == "81"
        older = re.search(r'href="/p/bench\?(cursor=[^"#]+)#runs">Older runs', first)
        assert older is not None
        second = client.get(f"/p/bench?{older.group(1)}").text
        assert re.findall(r'<th scope="row"><a href="/runs/(\d+)">', second)[0] == "80"
        assert "Newest runs" in second
        assert client.get("/p/bench?cursor=garbage").status_code == 200  # a stale cursor shows the newest runs
        assert first.count("<circle") == 104  # main's finished runs, at most 120 on the chart
        branch = client.get("/p/bench", params={"branch": "feature/3"}).text
        assert "History on feature/3" in branch
