"""Service load benchmark, loopback only and bounded in time (about 3 minutes by default).

    python bench/service_load.py [--latency-runs 6] [--throughput-runs 8] [--read-seconds 10] [--clients 32]

Starts `gradguard serve` (local executor, SQLite in a temporary folder) on 127.0.0.1 and measures:

The load generator shares the machine with the server: on a small machine the client's own CPU
use caps requests per second, so the server's CPU time per request is printed too.

1. submission-to-verdict latency of one small rule (one worker, runs one after another; the time from
   POST to the first GET that shows a final status, so sandbox start and polling are included);
2. runs per minute with 1 and 2 worker processes (a batch submitted at once, until all are final);
3. GET /runs/{id}/report and GET /projects/{p}/latest under N concurrent clients (httpx async):
   requests per second, p50 and p99 latency.

Prints a table. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ADMIN = "bench-admin-token-0123456789abcdef"
FINAL = ("passed", "failed", "error")
RULE = '''\
import numpy as np
from gradguard import arrays, rrule


def scale(x):
    return 2.0 * x


@rrule(scale, arrays(shape=(3,)))
def scale_rrule(x):
    def pullback(ybar):
        return (None,) if ybar is None else (2.0 * ybar,)
    return scale(x), pullback
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux), to report server cost per request."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def server(workers: int, folder: Path) -> Iterator[tuple[str, int]]:
    """`gradguard serve` with ``workers`` local worker processes; yields its base URL and pid."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADGUARD_")}
    env.update(GRADGUARD_ADMIN_TOKEN=ADMIN, GRADGUARD_RATE_LIMIT_PER_MINUTE="0", GRADGUARD_READ_RATE_LIMIT_PER_MINUTE="0",
               GRADGUARD_DATABASE_URL=f"sqlite:///{folder / f'bench-{workers}.sqlite3'}")
    log = open(folder / f"serve-{workers}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-c", "from gradguard.checker.cli import main; main()", "serve", "--port", str(port),
                             "--workers", str(workers)], env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"gradguard serve did not start; see {log.name}")
            time.sleep(0.2)
        time.sleep(1.0)  # let the worker processes finish importing
        yield base, proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        log.close()


def project(client: httpx.Client, slug: str) -> dict[str, str]:
    response = client.post("/api/v1/projects", json={"slug": slug}, headers={"Authorization": f"Bearer {ADMIN}"})
    response.raise_for_status()
    return {"Authorization": f"Bearer {response.json()['token']}"}


_SEEDS = itertools.count()


def submit(client: httpx.Client, headers: dict[str, str], slug: str, max_examples: int | None) -> int:
    # A new seed each time: an identical bundle and settings would reuse a finished run's verdict.
    body = {"files": {"rule.py": RULE}, "branch": "main", "max_examples": max_examples, "seed": next(_SEEDS)}
    response = client.post(f"/api/v1/projects/{slug}/runs", json=body, headers=headers)
    response.raise_for_status()
    return response.json()["id"]


def wait_final(client: httpx.Client, run_id: int, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(f"/api/v1/runs/{run_id}").json()
        if run["status"] in FINAL:
            return run
        time.sleep(0.05)
    raise SystemExit(f"run {run_id} did not finish in {timeout} s")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def measure_latency(base: str, runs: int, max_examples: int | None) -> tuple[list[float], list[dict]]:
    with httpx.Client(base_url=base, timeout=30) as client:
        headers = project(client, "latency")
        latencies, finished = [], []
        for _ in range(runs):
            started = time.monotonic()
            run_id = submit(client, headers, "latency", max_examples)
            finished.append(wait_final(client, run_id))
            latencies.append(time.monotonic() - started)
    return latencies, finished


def measure_throughput(base: str, runs: int, max_examples: int | None, slug: str) -> tuple[float, list[dict]]:
    with httpx.Client(base_url=base, timeout=30) as client:
        headers = project(client, slug)
        started = time.monotonic()
        ids = [submit(client, headers, slug, max_examples) for _ in range(runs)]
        finished = [wait_final(client, run_id) for run_id in ids]
        elapsed = time.monotonic() - started
    return runs / elapsed * 60, finished


async def hammer(base: str, path: str, clients: int, seconds: float) -> tuple[float, list[float], int]:
    """``clients`` coroutines GET ``path`` in a loop for ``seconds``; (rps, latencies, errors)."""
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as client:
        stop = time.monotonic() + seconds

        async def one() -> None:
            nonlocal errors
            while time.monotonic() < stop:
                started = time.monotonic()
                response = await client.get(path)
                latencies.append(time.monotonic() - started)
                errors += response.status_code != 200

        started = time.monotonic()
        await asyncio.gather(*(one() for _ in range(clients)))
        elapsed = time.monotonic() - started
    return len(latencies) / elapsed, latencies, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency-runs", type=int, default=6)
    parser.add_argument("--throughput-runs", type=int, default=8)
    parser.add_argument("--read-seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--max-examples", type=int, default=None,
                        help="checker examples per rule (default: the checker's own default)")
    args = parser.parse_args()

    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="gradguard-bench-") as tmp:
        folder = Path(tmp)
        with server(1, folder) as (base, pid):
            latencies, runs = measure_latency(base, args.latency_runs, args.max_examples)
            sandbox = [r["duration_s"] for r in runs]
            rows.append(("submission -> verdict, p50 (1 worker)", f"{statistics.median(latencies):.2f} s"))
            rows.append(("submission -> verdict, min / max", f"{min(latencies):.2f} / {max(latencies):.2f} s"))
            rows.append(("  of which in the sandbox, p50", f"{statistics.median(sandbox):.2f} s"))
            rows.append(("  verdicts / sandbox level", f"{sorted({r['status'] for r in runs})} / {runs[0]['sandbox_level']}"))
            per_minute, _ = measure_throughput(base, args.throughput_runs, args.max_examples, "throughput")
            rows.append((f"runs per minute, 1 worker ({args.throughput_runs} runs)", f"{per_minute:.1f}"))
            run_id = runs[-1]["id"]
            for label, path in (("GET report", f"/api/v1/runs/{run_id}/report"),
                                ("GET latest verdict", "/api/v1/projects/latency/latest")):
                cpu_before = cpu_seconds(pid)
                rps, lat, errors = asyncio.run(hammer(base, path, args.clients, args.read_seconds))
                server_ms = 1000 * (cpu_seconds(pid) - cpu_before) / max(1, len(lat))
                rows.append((f"{label}, {args.clients} clients",
                             f"{rps:.0f} req/s, p50 {1000 * percentile(lat, 50):.1f} ms, "
                             f"p99 {1000 * percentile(lat, 99):.1f} ms, {errors} errors, "
                             f"server CPU {server_ms:.2f} ms/req"))
        with server(2, folder) as (base, _pid):
            per_minute, _ = measure_throughput(base, args.throughput_runs, args.max_examples, "throughput")
            rows.append((f"runs per minute, 2 workers ({args.throughput_runs} runs)", f"{per_minute:.1f}"))

    width = max(len(name) for name, _ in rows)
    load = os.getloadavg()[0]
    print(f"\ngradguard service load (loopback, local executor, SQLite, {os.cpu_count()} CPUs, "
          f"load average {load:.1f} at the end)")
    print("-" * (width + 40))
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
