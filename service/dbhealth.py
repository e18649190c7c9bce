"""Is the database the one the service started with, there, and writable? And may the service start on it?

    identify(url, factory)            -> Identity     at start: the database's own id (and a SQLite file's inode)
    problem(url, factory, expected)   -> str | None   for /readyz: what is wrong now, in words
    prepare(settings)                                 at start: migrate, or refuse an empty database

A SQLite file that was deleted keeps answering through the connections already open to it, and a new
file at the same path is another database: so a SQLite database is checked by its path's inode as
well as by the id row (``database_identity``) its first migration wrote. A database that is up but
refuses writes (a read-only file, a PostgreSQL standby or ``default_transaction_read_only``) fails a
write that is rolled back. Messages name no host path.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from sqlalchemy import inspect, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from gradguard.service.config import Settings
from gradguard.service.db import get_engine, is_sqlite

__all__ = ["Identity", "identify", "problem", "prepare", "EmptyDatabase"]

log = logging.getLogger("gradguard.service")


class EmptyDatabase(RuntimeError):
    """The service was about to create a database it expected to exist."""


@dataclass(frozen=True)
class Identity:
    id: str | None
    inode: tuple[int, int] | None = None  # SQLite: (device, inode) of the file


def _sqlite_file(url: str) -> str | None:
    if not is_sqlite(url):
        return None
    name = make_url(url).database
    return None if name in (None, "", ":memory:") else name


def _inode(url: str) -> tuple[int, int] | None:
    path = _sqlite_file(url)
    if path is None:
        return None
    st = os.stat(path)
    return st.st_dev, st.st_ino


def identify(url: str, factory: sessionmaker[Session]) -> Identity:
    """The identity of the database at ``url`` now (raises if it cannot be read)."""
    inode = _inode(url)
    with factory() as session:
        return Identity(session.execute(text("SELECT id FROM database_identity")).scalar(), inode)


def problem(url: str, factory: sessionmaker[Session], expected: Identity | None) -> str | None:
    """What keeps the database from serving as the one the service started with, or None."""
    path = _sqlite_file(url)
    if path is not None:
        if not os.path.exists(path):
            return "missing: the SQLite database file is gone (open connections still see the deleted file)"
        if expected is not None and expected.inode is not None and _inode(url) != expected.inode:
            return "replaced: the SQLite database file is not the one the service started with"
    try:
        now = identify(url, factory)
    except Exception as exc:  # noqa: BLE001 - any failure is the answer
        return f"unreachable: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    if expected is not None and now.id != expected.id:
        return ("replaced: this is not the database the service started with (its identity differs); restart "
                "the service if the change is intended")
    try:
        with factory() as session:  # a write, rolled back: what a read-only database refuses
            session.execute(text("UPDATE database_identity SET id = id"))
            session.rollback()
    except Exception as exc:  # noqa: BLE001
        return f"read-only: a write was refused ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    return None


MARKER_SUFFIX = ".created"  # beside a SQLite file the service created: it existed, so it is expected


def _expected(settings: Settings) -> str | None:
    """Why an empty database must not be created here, or None when it may be."""
    if settings.create_database is True:
        return None
    if settings.create_database is False:
        return "GRADGUARD_CREATE_DATABASE=false"
    if settings.mode == "production":
        return "production mode creates no database; `gradguard migrate` does"
    path = _sqlite_file(settings.database_url)
    if path is not None and os.path.exists(path + MARKER_SUFFIX):
        return "this service created a database file here before, and it is gone"
    return None


def prepare(settings: Settings) -> None:
    """At start: bring the database to the newest schema (embedded mode), or refuse an empty database
    the service expected to exist: in production mode, with ``GRADGUARD_CREATE_DATABASE=false``, or a
    SQLite file this service created before (a ``<file>.created`` marker beside it) that is gone.
    ``GRADGUARD_CREATE_DATABASE=true`` (or ``gradguard migrate``) creates it. Raises :class:`EmptyDatabase`."""
    from gradguard.service.migrate import upgrade

    url = settings.database_url
    path = _sqlite_file(url)
    if path is not None and not os.path.exists(path):
        empty = True
    else:
        try:
            empty = "alembic_version" not in inspect(get_engine(url)).get_table_names()
        except OperationalError:
            if settings.mode != "production":
                raise
            log.error("the database is unreachable at start; /readyz says so until it answers")
            return
    refusal = _expected(settings) if empty else None
    if refusal:
        raise EmptyDatabase(
            f"the database has no gradguard schema, and this service expected an existing one ({refusal}). "
            "If it was lost, restore it; to start afresh, run `gradguard migrate` or set GRADGUARD_CREATE_DATABASE=true.")
    if not empty and settings.mode == "production" and not settings.create_database:
        return  # production schemas change through `gradguard migrate`, run once before the service starts
    if empty:
        log.info("creating a new, empty gradguard database (it had no schema)")
    upgrade(url)
    if path is not None:
        with open(path + MARKER_SUFFIX, "w") as marker:
            marker.write("gradguard created this database; if the database file goes, the service will not start "
                         "on a new empty one without GRADGUARD_CREATE_DATABASE=true.\n")
