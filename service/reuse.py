"""Reusing a finished verdict: an identical bundle with identical settings is not checked again.

A submission's key is the sha256 of its files (paths and bytes), the options that change a verdict
(device, select, ignore, seed, examples, per-rule time limit), the service settings that do (the default
example count and the sandbox's limits) and the checker itself (:func:`gradguard.checker.cache.tool_fingerprint`: its
version, its code and the versions of NumPy, Hypothesis, JAX and PyTorch). When a run of the same project
with the same key has passed or failed, the new run takes its report, rule results and findings, ends
with the same status at once, and names the run it reused (``reused_from``). Runs that ended ``error``
(a time limit, a dead worker) are never reused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradguard.service.models import FindingRow, ReportRow, RuleResultRow, Run, utcnow

__all__ = ["bundle_key", "reuse_verdict"]

REUSABLE = ("passed", "failed")


def bundle_key(files: Mapping[str, bytes], options: Any, settings: Any) -> str:
    """The content hash of a submission: what its verdict depends on."""
    from gradguard.checker.cache import tool_fingerprint

    h = hashlib.sha256(b"gradguard.bundle/1\0" + tool_fingerprint().encode())
    for path in sorted(files):
        data = files[path]
        h.update(f"\0{path}\0{len(data)}\0".encode() + data)
    choices = {"device": options.device, "select": options.select, "ignore": options.ignore, "seed": options.seed,
               "max_examples": options.max_examples, "default_max_examples": settings.default_max_examples,
               "limits": [settings.run_wall_s, settings.run_cpu_s, settings.run_memory_mb],
               "rule_timeout_s": getattr(options, "rule_timeout_s", None) or settings.default_rule_timeout_s,
               "rule_memory_mb": settings.default_rule_memory_mb}
    h.update(json.dumps(choices, sort_keys=True).encode())
    return h.hexdigest()


def reuse_verdict(session: Session, *, run: Run) -> Run | None:
    """Give ``run`` the outcome of the latest finished run of its project with the same content hash;
    returns that run, or None (nothing to reuse: ``run`` stays queued). The caller commits."""
    if not run.content_hash:
        return None
    earlier = session.scalar(
        select(Run).where(Run.project_id == run.project_id, Run.content_hash == run.content_hash,
                          Run.status.in_(REUSABLE), Run.id != run.id)
        .order_by(Run.id.desc()).limit(1))
    report = session.get(ReportRow, earlier.id) if earlier is not None else None
    if earlier is None or report is None:
        return None
    now = utcnow()
    run.status, run.summary, run.sandbox_level, run.error = earlier.status, earlier.summary, earlier.sandbox_level, None
    run.started_at = run.finished_at = now
    run.duration_s, run.reused_from = 0.0, earlier.reused_from or earlier.id
    stored = dict(report.report)
    stored["rules"] = [{**rule, "cached": True} for rule in stored.get("rules", [])]
    session.add(ReportRow(run_id=run.id, report=stored))
    for row in session.scalars(select(RuleResultRow).where(RuleResultRow.run_id == earlier.id)).all():
        session.add(RuleResultRow(run_id=run.id, name=row.name, module=row.module, source_file=row.source_file,
                                  verdict=row.verdict, duration_s=row.duration_s, findings=row.findings))
    for row in session.scalars(select(FindingRow).where(FindingRow.run_id == earlier.id)).all():
        session.add(FindingRow(run_id=run.id, rule=row.rule, check_id=row.check_id, severity=row.severity,
                               title=row.title, message=row.message, location=row.location))
    session.flush()
    return earlier
