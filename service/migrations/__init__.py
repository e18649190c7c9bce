"""Alembic migrations of the service database (see ``gradguard.service.migrate``)."""
