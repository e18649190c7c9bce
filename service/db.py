"""Engine and sessions. SQLite (the embedded default) gets WAL, foreign keys and a busy timeout so
several worker processes can share one file; PostgreSQL is used as is.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["safe_json_loads", "make_engine", "get_engine", "make_sessionmaker", "session_scope", "ping", "is_sqlite", "dispose_all"]

_ENGINES: dict[str, Engine] = {}
_LOCK = threading.Lock()


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def safe_json_loads(text: str | bytes) -> Any:
    """``json.loads`` for the JSON columns: a value nested too deeply to read, or not JSON at all
    (written by hand), reads as None instead of failing every page that touches its row."""
    try:
        value = json.loads(text)
    except (RecursionError, ValueError):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def make_engine(url: str, **kwargs: Any) -> Engine:
    """A new engine for ``url``; SQLite connections are tuned for concurrent processes."""
    kwargs.setdefault("json_deserializer", safe_json_loads)
    if is_sqlite(url):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    if "poolclass" not in kwargs:
        kwargs.update(pool_size=10, max_overflow=20)
    return create_engine(url, pool_pre_ping=True, **kwargs)


def get_engine(url: str) -> Engine:
    """The engine this process shares for ``url``."""
    with _LOCK:
        engine = _ENGINES.get(url)
        if engine is None:
            engine = _ENGINES[url] = make_engine(url)
        return engine


def dispose_all(close: bool = True) -> None:
    """Drop every pooled connection (``close=False`` in a forked child: leave the parent's sockets alone)."""
    with _LOCK:
        for engine in _ENGINES.values():
            engine.dispose(close=close)
        if close:
            _ENGINES.clear()


os.register_at_fork(after_in_child=lambda: dispose_all(close=False))


def make_sessionmaker(url: str) -> sessionmaker[Session]:
    """A session factory on this process's shared engine for ``url``."""
    return sessionmaker(bind=get_engine(url), expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def ping(factory: sessionmaker[Session]) -> None:
    """Raise if the database cannot answer ``SELECT 1``."""
    with factory() as session:
        session.execute(text("SELECT 1"))
