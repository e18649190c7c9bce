"""Alembic migrations of the service database (see ``service.migrate``)."""
