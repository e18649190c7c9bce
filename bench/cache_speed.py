"""The verdict cache: what re-checking an unchanged module costs next to checking it the first time.

    python bench/cache_speed.py [--modules tests/corpus/correct.py,tests/corpus/numeric.py] [--select IDS]
                                [--results bench/RESULTS.md]

The modules are copied into a temporary project and checked with ``gradguard check --jobs 1``, each run in
a fresh process, as a user runs it:

1. first run, empty cache (the reference);
2. the same command again, nothing changed: every rule's verdict comes from the cache;
3. ``--no-cache``: every rule checked again (what a re-run costs without the cache);
4. one module edited (a comment appended): only its rules are checked again.

It prints wall times (process start included), the checker's own time (``duration_s`` of the JSON report,
imports excluded), each as a ratio to run 1, and whether the reports are the same apart from timings and
the ``cached`` flags. Target: run 2 under 5% of run 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _results import Transcript, command_line, write_section  # noqa: E402

DEFAULT_MODULES = "tests/corpus/correct.py,tests/corpus/numeric.py"
TARGET = 0.05


def _run(project: Path, cache: Path, report: Path, select: str | None, *extra: str) -> tuple[float, dict]:
    args = [sys.executable, "-c", "from gradguard.checker.cli import main; main()", "check", str(project),
            "--jobs", "1", "--cache-dir", str(cache), "--json", str(report), "--no-progress", *extra]
    if select:
        args += ["--select", select]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADGUARD_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    start = time.perf_counter()
    done = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"gradguard check exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, json.loads(report.read_text())


def _comparable(data: dict) -> list[dict]:
    rules = []
    for rule in data["rules"]:
        rule = {k: v for k, v in rule.items() if k not in ("duration_s", "cached")}
        rules.append(rule)
    return rules


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", default=DEFAULT_MODULES, help="comma-separated rule modules to copy and check")
    parser.add_argument("--select", default=None, help="check ids (default: every check)")
    parser.add_argument("--results", default=None, help="write the table into this RESULTS.md section")
    args = parser.parse_args(argv)
    out = Transcript()
    modules = [ROOT / m for m in args.modules.split(",") if m]
    with tempfile.TemporaryDirectory() as tmp:
        project, cache = Path(tmp) / "project", Path(tmp) / "cache"
        project.mkdir()
        for module in modules:
            shutil.copy(module, project / module.name)
        report = Path(tmp) / "report.json"
        runs: list[tuple[str, float, dict]] = []
        for label, extra, edit in (("1. first run, empty cache", (), None),
                                   ("2. unchanged, cache used", (), None),
                                   ("3. unchanged, --no-cache", ("--no-cache",), None),
                                   (f"4. {modules[-1].name} edited", (), modules[-1].name)):
            if edit:
                with open(project / edit, "a") as handle:
                    handle.write("\n# edited\n")
            wall, data = _run(project, cache, report, args.select, *extra)
            runs.append((label, wall, data))
    first_wall, first = runs[0][1], runs[0][2]
    out(f"modules: {', '.join(m.name for m in modules)}; {len(first['rules'])} rules; checks: {args.select or 'all'}; "
        "gradguard check --jobs 1, a fresh process per run")
    out("")
    out(f"{'run':32} {'wall (s)':>9} {'x run 1':>8} {'checker (s)':>12} {'x run 1':>8} {'cached':>7}  same report")
    out("-" * 92)
    for label, wall, data in runs:
        cached = sum(1 for r in data["rules"] if r.get("cached"))
        same = "yes" if _comparable(data) == _comparable(first) else "NO"
        out(f"{label:32} {wall:9.2f} {wall / first_wall:8.3f} {data['duration_s']:12.3f} "
            f"{data['duration_s'] / first['duration_s']:8.3f} {cached:>4}/{len(data['rules']):<3} {same}")
    ratio = runs[1][1] / first_wall
    out("")
    out(f"re-checking the unchanged modules: {ratio:.1%} of the first run's wall time "
        f"({runs[1][2]['duration_s'] / first['duration_s']:.1%} of the checker's time); "
        f"target < {TARGET:.0%}: {'MET' if ratio < TARGET else 'NOT MET'}")
    if args.results:
        write_section(args.results, "cache_speed", "Verdict cache (issue 14)", command_line("cache_speed.py", argv),
                      out.block())


if __name__ == "__main__":
    main()
