"""The Celery executor against the real Redis, with real worker processes (``gradguard worker``),
on the real PostgreSQL. Queue names are unique per test so parallel runs never share messages.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gradguard.service.app import create_app
from gradguard.service.models import Run

from service_support import (ADMIN, HANGS, SLEEPY_RULES, SMALL_RULES, STUCK_RULES, verdicts,  # type: ignore[import-not-found]
                             wait_for)

pytestmark = pytest.mark.slow
FINAL = ("passed", "failed", "error")


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    import redis

    name = f"ggtest-{uuid.uuid4().hex[:10]}-"
    yield name
    client = redis.Redis.from_url(redis_url)
    for key in list(client.scan_iter(match=f"*{name}*")):
        client.delete(key)


@contextmanager
def celery_worker(tmp_path: Path, env: dict[str, str], device: str) -> Iterator[subprocess.Popen]:
    log = tmp_path / f"worker-{device}-{uuid.uuid4().hex[:6]}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gradguard.service.cli", "worker", "--queue", device, "--concurrency", "1"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: b" ready." in log.read_bytes() or proc.poll() is not None, 60, f"the {device} worker to start")
        assert proc.poll() is None, log.read_text()
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


@pytest.fixture
def stack(tmp_path, make_settings, pg_url, redis_url, prefix):  # type: ignore[no-untyped-def]
    """(client, worker_env, app): an API on the Celery executor and the environment for its workers."""
    settings = make_settings(database_url=pg_url, executor="celery", broker_url=redis_url, queue_prefix=prefix,
                             max_retries=1, run_wall_s=60)
    env = {**os.environ, "GRADGUARD_DATABASE_URL": pg_url, "GRADGUARD_EXECUTOR": "celery",
           "GRADGUARD_BROKER_URL": redis_url, "GRADGUARD_QUEUE_PREFIX": prefix, "GRADGUARD_MAX_RETRIES": "1",
           "GRADGUARD_RUN_WALL_S": "60", "GRADGUARD_ADMIN_TOKEN": ADMIN}
    app = create_app(settings)
    with TestClient(app) as client:
        token = client.post("/api/v1/projects", json={"slug": "p"},
                            headers={"Authorization": f"Bearer {ADMIN}"}).json()["token"]
        client.headers["Authorization"] = f"Bearer {token}"
        yield client, env, app


def submit(client, source: str, **options) -> int:  # type: ignore[no-untyped-def]
    response = client.post("/api/v1/projects/p/runs", json={"files": {"rules.py": source}, **options})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def status(client, run_id: int, *wanted: str):  # type: ignore[no-untyped-def]
    run = client.get(f"/api/v1/runs/{run_id}").json()
    return run if run["status"] in wanted else None


def test_cpu_worker_runs_cpu_runs_and_never_picks_gpu_runs(stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client, env, app = stack
    gpu_run = submit(client, "x = 1\n", device="gpu")
    cpu_run = submit(client, SMALL_RULES, device="cpu", max_examples=5)
    with celery_worker(tmp_path, env, "cpu"):
        run = wait_for(lambda: status(client, cpu_run, *FINAL), 120, "the cpu run to finish")
        assert run["status"] == "failed" and run["sandbox_level"]
        assert client.get(f"/api/v1/runs/{cpu_run}/report").json()["summary"]["failed"] >= 1
        time.sleep(2)  # the idle cpu worker must still leave the gpu run alone
        assert status(client, gpu_run, "queued")
        assert app.state.executor.queue_lengths()["gpu"] == 1
        ready = client.get("/readyz").json()
        assert ready["queue"]["broker"] == "ok" and ready["status"] == "ready"
    with celery_worker(tmp_path, env, "gpu"):
        assert wait_for(lambda: status(client, gpu_run, *FINAL), 120, "a gpu worker to take the gpu run")


def test_a_run_that_kills_its_worker_is_retried_then_error_and_the_worker_goes_on(stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client, env, app = stack
    with celery_worker(tmp_path, env, "cpu"):
        run_id = submit(client, SLEEPY_RULES)
        for attempt in (1, 2):
            run = wait_for(lambda: status(client, run_id, "running"), 60, f"attempt {attempt} to start")
            assert run["attempts"] == attempt
            with app.state.sessionmaker() as session:
                holder = session.get(Run, run_id).worker
            os.kill(int(holder.rpartition(":")[2]), signal.SIGKILL)  # the pool process running the task
            wait_for(lambda seen=attempt: (r := status(client, run_id, "running", "error")) and (
                r["status"] == "error" or r["attempts"] > seen), 60, "the message to come back")
        run = wait_for(lambda: status(client, run_id, "error"), 60, "the run to end as error")
        assert run["attempts"] == 2 and "gave up after 1 retries" in run["error"]
        after = submit(client, "x = 1\n")
        assert wait_for(lambda: status(client, after, *FINAL), 120, "the worker to take the next run")


def test_a_starting_worker_requeues_runs_left_running_by_a_dead_worker(stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import socket

    from gradguard.service import lifecycle

    client, env, app = stack
    run_id = submit(client, "x = 1\n")
    with app.state.executor.app.connection_for_write() as conn:  # lose the message, as a broker crash would
        conn.default_channel.client.delete(env["GRADGUARD_QUEUE_PREFIX"] + "cpu")
    with app.state.sessionmaker() as session:  # a worker took it, then died without a trace in the broker
        assert lifecycle.claim_run(session, run_id=run_id, worker=f"{socket.gethostname()}:999999999",
                                   max_retries=1, lease_s=600)
    with celery_worker(tmp_path, env, "cpu"):
        run = wait_for(lambda: status(client, run_id, *FINAL), 120, "the starting worker to requeue and run it")
        assert run["attempts"] == 2


STREAMED_RULES = STUCK_RULES.format(stuck=HANGS)


def _verdicts(client, run_id: int) -> dict[str, tuple[str, str | None]]:  # type: ignore[no-untyped-def]
    return verdicts(client.get(f"/api/v1/runs/{run_id}/report").json())


def test_through_a_worker_a_hanging_rule_ends_at_its_own_limit_and_the_others_keep_their_verdicts(stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client, env, app = stack
    with celery_worker(tmp_path, env, "cpu"):
        run_id = submit(client, STREAMED_RULES, select=["GG1"], max_examples=3, rule_timeout_s=3)
        run = wait_for(lambda: status(client, run_id, *FINAL), 120, "the run to finish")
    assert run["status"] == "error", run  # a rule that errors makes the run an error, not a pass
    found = _verdicts(client, run_id)
    assert found["a_double_rrule"] == found["c_after_rrule"] == ("pass", None)
    assert found["b_stuck_rrule"][0] == "error" and "3 s per-rule time limit" in found["b_stuck_rrule"][1]


def test_through_a_worker_a_run_stopped_at_its_wall_limit_keeps_the_rules_it_finished(stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Each finished rule's result reaches the service as it finishes, through the Celery worker as through
    the local executor: the wall limit cuts the hanging rule (its own limit plus grace comes later) and the
    rule before it keeps its verdict."""
    client, env, app = stack
    with celery_worker(tmp_path, {**env, "GRADGUARD_RUN_WALL_S": "12"}, "cpu"):
        run_id = submit(client, STREAMED_RULES, select=["GG1"], max_examples=3, rule_timeout_s=11)
        run = wait_for(lambda: status(client, run_id, *FINAL), 120, "the run to end")
    assert run["status"] == "error" and run["error"] == "exceeded 12 s wall time", run
    found = _verdicts(client, run_id)
    assert found["a_double_rrule"] == ("pass", None)
    assert found["b_stuck_rrule"] == ("error", "not finished: the run exceeded 12 s wall time while this rule was being checked")
    assert found["c_after_rrule"][0] == "error" and "12 s wall time" in found["c_after_rrule"][1]
