"""Server time of the pages and badges for a project with 1,000 runs (target: under 100 ms each).

    python bench/web_pages.py [--runs 1000] [--rules 12] [--repeat 30] [--json results.json]

Builds a temporary SQLite database at the newest schema, checks one real rule module with the
checker (so reports, findings and reproducers are the real thing), then stores ``--runs`` finished
runs of it over commits (80 % on main, the rest over 10 branches; a third failing), each with its
report, rule results, findings, submitted file and branch head, as the workers would. Pages are
then requested in-process through the ASGI app (no network, executor off), so the time measured
is the server's: routing, queries, shaping and template rendering, read from the ``Server-Timing``
header the web layer sets (request in to response start). Reports p50, p95 and max, and the
in-process round trip's p50 for comparison.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RULE = """
def _scale{i}(x):
    return {i}.0 * x


@rrule(_scale{i}, arrays(shape=(3,)))
def scale{i}_rrule(x):
    def pullback(ybar):
        if ybar is None:
            return (None,)
        return ({tangent},)
    return _scale{i}(x), pullback
"""


def rule_module(rules: int) -> str:
    """``rules`` small rules; every fourth (and the last) returns one tangent too many (a GG103 finding)."""
    body = [RULE.format(i=i, tangent=f"{i}.0 * ybar, None" if i % 4 == 0 or i == rules else f"{i}.0 * ybar")
            for i in range(1, rules + 1)]
    return "import numpy as np\nfrom checker import arrays, rrule\n" + "\n".join(body)


def real_report(source: str) -> dict:
    from gradguard import checker

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.py"
        path.write_text(source)
        import os

        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            return json.loads(checker.check("rules.py", max_examples=5, seed=0).to_json())
        finally:
            os.chdir(cwd)


def populate(url: str, runs: int, report: dict, source: str) -> dict:
    from sqlalchemy import insert

    from gradguard.service.db import make_sessionmaker
    from gradguard.service.migrate import upgrade
    from gradguard.service.models import BranchHead, FindingRow, Project, ReportRow, RuleResultRow, Run, RunFile
    from gradguard.service.security import hash_token

    upgrade(url)
    factory = make_sessionmaker(url)
    passing = json.loads(json.dumps(report))
    for rule in passing["rules"]:
        rule["verdict"], rule["findings"] = "pass", []
    passing["summary"].update(passed=len(passing["rules"]), failed=0, findings=0, errors=0, by_check={}, verdict="pass")
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    branches = ["main"] * 8 + [f"feature/{k}" for k in range(10)]
    with factory() as session:
        project = Project(slug="bench", name="Bench project", public=True, default_branch="main",
                          token_hash=hash_token("ggp_bench"), token_prefix="ggp_bench")
        session.add(project)
        session.flush()
        run_rows, report_rows, rule_rows, finding_rows, file_rows, heads = [], [], [], [], [], {}
        for n in range(1, runs + 1):
            failing = n % 3 == 0
            rep = report if failing else passing
            branch = "main" if n % 5 else branches[8 + (n // 5) % 10]
            commit = hashlib.sha1(str(n).encode()).hexdigest()
            when = start + timedelta(minutes=10 * n)
            run_rows.append({"id": n, "project_id": project.id, "commit_sha": commit, "branch": branch,
                             "device": "cpu", "status": "failed" if failing else "passed", "attempts": 1, "seed": 0,
                             "created_at": when, "started_at": when, "finished_at": when + timedelta(seconds=4),
                             "duration_s": 3.5, "sandbox_level": "rlimits", "summary": rep["summary"]})
            report_rows.append({"run_id": n, "report": rep})
            file_rows.append({"run_id": n, "path": "rules.py", "content": source.encode()})
            for rule in rep["rules"]:
                rule_rows.append({"run_id": n, "name": rule["name"], "module": rule.get("module"),
                                  "source_file": rule.get("source_file"), "verdict": rule["verdict"],
                                  "duration_s": rule.get("duration_s", 0.0), "findings": len(rule["findings"])})
                for f in rule["findings"]:
                    finding_rows.append({"run_id": n, "rule": rule["name"], "check_id": f["check_id"],
                                         "severity": f["severity"], "title": f.get("title"), "message": f["message"],
                                         "location": f.get("location")})
            heads[branch] = {"project_id": project.id, "branch": branch, "run_id": n,
                             "status": "failed" if failing else "passed", "commit_sha": commit,
                             "finished_at": when + timedelta(seconds=4)}
        for model, rows in ((Run, run_rows), (ReportRow, report_rows), (RunFile, file_rows),
                            (RuleResultRow, rule_rows), (FindingRow, finding_rows), (BranchHead, list(heads.values()))):
            if rows:
                session.execute(insert(model), rows)
        session.commit()
    failing_run = max(r["id"] for r in run_rows if r["status"] == "failed")
    failing_rule = next(r["name"] for r in report["rules"] if r["verdict"] != "pass")
    return {"failing_run": failing_run, "rule": failing_rule, "rows": len(rule_rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rules", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from gradguard.service.config import Settings
    from gradguard.web.app import create_app

    source = rule_module(args.rules)
    t0 = time.perf_counter()
    report = real_report(source)
    print(f"checked {len(report['rules'])} rules for the stored report in {time.perf_counter() - t0:.1f} s "
          f"({report['summary']['findings']} findings)")
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.sqlite3'}"
        t0 = time.perf_counter()
        info = populate(url, args.runs, report, source)
        print(f"stored {args.runs} runs ({info['rows']} rule results) in {time.perf_counter() - t0:.1f} s")
        settings = Settings(database_url=url, admin_token="bench-admin-token-0123456789", local_workers=0,
                            read_rate_limit_per_minute=0)  # the benchmark reads far faster than a client may
        pages = {
            "projects list": "/",
            "project page": "/p/bench",
            "project page, branch": "/p/bench?branch=feature/3",
            "run page (findings)": f"/runs/{info['failing_run']}",
            "run page (passing)": f"/runs/{info['failing_run'] - 1}",
            "rule page": f"/p/bench/rules/{info['rule']}",
            "run status (poll)": f"/runs/{info['failing_run']}/status",
            "check catalogue": "/checks",
            "check page": "/checks/GG201",
            "badge svg": "/badge/bench.svg?branch=main",
            "badge json": "/badge/bench.json?branch=main",
        }
        results = {}
        with TestClient(create_app(settings, start_executor=False)) as client:
            for name, path in pages.items():
                assert client.get(path).status_code == 200, path  # warm: templates compiled, caches filled
                times, rounds = [], []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    answer = client.get(path)
                    rounds.append((time.perf_counter() - t0) * 1000)
                    assert answer.status_code == 200
                    times.append(float(answer.headers["server-timing"].split("dur=")[1]))
                times.sort()
                results[name] = {"p50_ms": round(statistics.median(times), 1),
                                 "p95_ms": round(times[int(0.95 * (len(times) - 1))], 1),
                                 "max_ms": round(times[-1], 1), "bytes": len(answer.content),
                                 "client_p50_ms": round(statistics.median(rounds), 1)}
    print(f"\nserver time per request, {args.runs} runs, {args.rules} rules per run, {args.repeat} requests each:\n")
    print(f"{'page':<24}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'KiB':>8}{'round trip p50':>16}")
    for name, r in results.items():
        flag = "" if r["p95_ms"] < 100 else "   over 100 ms"
        print(f"{name:<24}{r['p50_ms']:>9}{r['p95_ms']:>9}{r['max_ms']:>9}{r['bytes'] / 1024:>8.1f}"
              f"{r['client_p50_ms']:>16}{flag}")
    if args.json:
        args.json.write_text(json.dumps({"runs": args.runs, "rules": args.rules, "results": results}, indent=2))


if __name__ == "__main__":
    main()
