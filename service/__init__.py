"""gradguard's service layer: stores runs and verdicts and serves them (REST API, database,
executors, sandboxed workers). Sits between ``web`` (above) and ``checker`` (below).

Start with :func:`gradguard.service.app.create_app` and :class:`gradguard.service.config.Settings`.
"""

from __future__ import annotations

__all__: list[str] = []
