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
