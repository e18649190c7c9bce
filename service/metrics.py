"""Prometheus metrics, computed from the database at scrape time so they are right however many
API and worker processes (on however many machines) share it.

    gradguard_runs{status, device}               gauge: runs in each state
    gradguard_queue_depth{device}                gauge: queued runs waiting for a worker
    gradguard_check_duration_seconds{device}     histogram: sandbox time of finished runs
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, sessionmaker

from gradguard.service import crud
from gradguard.service.models import RUN_STATUSES, Run

__all__ = ["DurationBuckets", "DatabaseCollector", "make_registry", "render"]

DurationBuckets = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
DEVICES = ("cpu", "gpu")


class DatabaseCollector(Collector):
    def __init__(self, factory: sessionmaker[Session]) -> None:
        self.factory = factory

    def collect(self) -> Iterator[Metric]:
        with self.factory() as session:
            counts = crud.count_runs(session)
            columns = [func.sum(case((Run.duration_s <= b, 1), else_=0)) for b in DurationBuckets]
            rows = session.execute(
                select(Run.device, func.count(), func.coalesce(func.sum(Run.duration_s), 0.0), *columns)
                .where(Run.duration_s.is_not(None)).group_by(Run.device)).all()
        runs = GaugeMetricFamily("gradguard_runs", "Runs by status and device.", labels=["status", "device"])
        depth = GaugeMetricFamily("gradguard_queue_depth", "Queued runs waiting for a worker.", labels=["device"])
        for device in DEVICES:
            for status in RUN_STATUSES:
                runs.add_metric([status, device], counts.get((status, device), 0))
            depth.add_metric([device], counts.get(("queued", device), 0))
        hist = HistogramMetricFamily("gradguard_check_duration_seconds",
                                     "Time finished runs spent in the sandbox.", labels=["device"])
        for device, count, total, *cumulative in rows:
            buckets = [(str(b), int(c or 0)) for b, c in zip(DurationBuckets, cumulative, strict=True)] + [("+Inf", int(count))]
            hist.add_metric([device], buckets, float(total))
        yield runs
        yield depth
        yield hist


def make_registry(factory: sessionmaker[Session]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(factory))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
