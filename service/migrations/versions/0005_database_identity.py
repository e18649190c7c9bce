"""database_identity: one random id per database, so the service can tell it is still talking to the
database it started with (GET /readyz)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table('database_identity',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.bulk_insert(table, [{'id': uuid.uuid4().hex}])


def downgrade() -> None:
    op.drop_table('database_identity')
