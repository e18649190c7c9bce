"""Run Alembic migrations from code: ``upgrade(url)`` brings a database to the newest schema."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

__all__ = ["alembic_config", "upgrade", "downgrade", "ensure_sqlite_dir"]

MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(url: str) -> Config:
    """An Alembic config for ``url`` that needs no ``alembic.ini``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def ensure_sqlite_dir(url: str) -> None:
    """Create the folder of a ``sqlite:///path`` database if it is missing."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and url[len(prefix):] not in ("", ":memory:"):
        Path(url[len(prefix):]).expanduser().parent.mkdir(parents=True, exist_ok=True)


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` up to ``revision``."""
    ensure_sqlite_dir(url)
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision``."""
    command.downgrade(alembic_config(url), revision)
